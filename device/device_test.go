package device

import (
	"errors"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"2GiB", 2 << 30, false},
		{"512MiB", 512 << 20, false},
		{"1.5G", 3 << 29, false},
		{"3GB", 3e9, false},
		{"1000", 1000, false},
		{"12 KiB", 12 << 10, false},
		{"lots", 0, true},
		{"-1MiB", 0, true},
	} {
		got, err := ParseBytes(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d (error %v)", c.in, got, err, c.want, c.bad)
		}
	}
}

func TestNewDevice(t *testing.T) {
	d, err := New("cpu:mem=1MiB")
	if err != nil || d.Alloc.Capacity() != 1<<20 || !d.HasData() {
		t.Fatalf("cpu:mem=1MiB: %v %v", d, err)
	}
	if d, err := New("meta"); err != nil || d.HasData() {
		t.Fatalf("meta: %v %v", d, err)
	}
	for _, bad := range []string{"tpu", "cpu:mem=x", "cpu:foo=1"} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}

func TestAllocatorStatsAndOOM(t *testing.T) {
	d, _ := New("cpu:mem=64KiB")
	a := d.Alloc
	b1, err := a.Allocate(1000, Tag{Category: Parameter, Module: "fc", Op: "fc.weight"})
	if err != nil {
		t.Fatal(err)
	}
	if len(b1.Data) != 1000 {
		t.Fatalf("data length %d", len(b1.Data))
	}
	b1.Data[999] = 7 // the memory is really there
	b2, err := a.Allocate(5000, Tag{Category: Gradient})
	if err != nil {
		t.Fatal(err)
	}
	s := a.Stats()
	if s.AllocatedBytes.Current != 1024+5120 || s.ByCategory[Parameter] != 1024 || s.ByCategory[Gradient] != 5120 {
		t.Fatalf("stats %+v", s)
	}
	if s.ReservedBytes.Current != 4096+8192 {
		t.Fatalf("reserved %d", s.ReservedBytes.Current)
	}
	_, err = a.Allocate(60<<10, Tag{Category: Activation, Module: "layer1", Op: "conv2d"})
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("want out of memory, got %v", err)
	}
	if oom.Requested != 60<<10 || oom.Capacity != 64<<10 || !strings.Contains(err.Error(), "layer1 conv2d") {
		t.Fatalf("bad OOM error: %v", err)
	}
	if a.Stats().NumOOMs != 1 {
		t.Fatal("OOM not counted")
	}
	a.Free(b1)
	a.Free(b2)
	s = a.Stats()
	if s.AllocatedBytes.Current != 0 || s.ReservedBytes.Current != 0 || s.AllocatedBytes.Peak != 6144 {
		t.Fatalf("after free: %+v", s)
	}
}
