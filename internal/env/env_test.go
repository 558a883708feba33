package env

import (
	"errors"
	"testing"
)

func TestInt(t *testing.T) {
	const name = "HEADROOM_TEST_INT"
	for _, c := range []struct {
		val  string
		want int
		bad  bool
	}{
		{"", 7, false}, {"3", 3, false}, {" 12 ", 12, false}, {"0", 7, true}, {"-2", 7, true}, {"four", 7, true},
	} {
		t.Setenv(name, c.val)
		got, err := Int(name, 7, 1)
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("%q: %d, %v; want %d, error %v", c.val, got, err, c.want, c.bad)
		}
		if c.bad && !errors.Is(err, ErrValue) {
			t.Errorf("%q: %v does not match ErrValue", c.val, err)
		}
	}
}

func TestBool(t *testing.T) {
	const name = "HEADROOM_TEST_BOOL"
	for _, c := range []struct {
		val      string
		def, got bool
		bad      bool
	}{
		{"", true, true, false}, {"", false, false, false},
		{"0", true, false, false}, {"off", true, false, false}, {"FALSE", true, false, false},
		{"1", false, true, false}, {"on", false, true, false},
		{"maybe", true, true, true},
	} {
		t.Setenv(name, c.val)
		got, err := Bool(name, c.def)
		if got != c.got || (err != nil) != c.bad {
			t.Errorf("%q (default %v): %v, %v; want %v, error %v", c.val, c.def, got, err, c.got, c.bad)
		}
	}
}

func TestKnobsListed(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Knobs {
		if k.Doc == "" || seen[k.Name] {
			t.Errorf("knob %s: empty doc or listed twice", k.Name)
		}
		seen[k.Name] = true
	}
	for _, n := range []string{NumThreads, Fuse, SGEMMKernel, Winograd, BF16Native, FashionMNIST} {
		if !seen[n] {
			t.Errorf("%s is not in Knobs", n)
		}
	}
}
