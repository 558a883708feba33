package device

import (
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
