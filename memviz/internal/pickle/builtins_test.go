package pickle

import (
	"math"
	"strings"
	"testing"
)

func TestBuiltinConstructors(t *testing.T) {
	d := NewDecoder(strings.NewReader(""), &Options{MaxBytes: 100})
	d.reset()
	ints := &list{items: []any{int64(104), int64(105)}}
	cases := []struct {
		name string
		args []any
		want any
		err  string
	}{
		{"builtins.bytes", nil, []byte{}, ""},
		{"builtins.bytes", []any{[]byte("ab")}, []byte("ab"), ""},
		{"builtins.bytes", []any{int64(3)}, []byte{0, 0, 0}, ""},
		{"builtins.bytes", []any{int64(-1)}, nil, "negative count"},
		{"builtins.bytes", []any{int64(1000)}, nil, "exceed the remaining budget"},
		{"builtins.bytes", []any{ints}, []byte("hi"), ""},
		{"builtins.bytes", []any{Tuple{int64(256)}}, nil, "not an int in range(0, 256)"},
		{"builtins.bytearray", []any{"h\u00e9", "latin-1"}, []byte("h\xe9"), ""},
		{"builtins.bytearray", []any{"h\u00e9", "utf_8", "strict"}, []byte("h\u00e9"), ""},
		{"builtins.bytearray", []any{"h\u00e9", "ascii"}, nil, "cannot be encoded in one byte"},
		{"builtins.bytearray", []any{"x", "latin1", "ignore"}, nil, `error handler ignore is not supported`},
		{"builtins.bytearray", []any{1, 2, 3, 4}, nil, "at most 3 arguments"},
		{"_codecs.encode", []any{"\u20ac"}, []byte("\u20ac"), ""},
		{"_codecs.encode", []any{"\u20ac", "latin1"}, nil, "cannot be encoded"},
		{"_codecs.encode", []any{int64(1), "latin1"}, nil, "want a str and an encoding, got int and str"},
		{"_codecs.encode", nil, nil, "takes 1 to 3 arguments"},
		{"builtins.set", []any{Tuple{int64(1), int64(1)}}, NewSet(int64(1)), ""},
		{"builtins.set", []any{NewFrozenSet(int64(2))}, NewSet(int64(2)), ""},
		{"builtins.set", []any{[]any{int64(3)}}, NewSet(int64(3)), ""},
		{"builtins.set", []any{1, 2}, nil, "at most 1 argument"},
		{"builtins.frozenset", []any{&list{items: []any{[]any{}}}}, nil, "unhashable type: 'list'"},
	}
	for _, c := range cases {
		got, err := builtinConstructors[c.name](d, c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s%v: error %v, want %q", c.name, c.args, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s%v: %v", c.name, c.args, err)
		} else if dd := diff(c.want, got); dd != "" {
			t.Errorf("%s%v: %s", c.name, c.args, dd)
		}
	}
}

func TestOrderedDictConstructor(t *testing.T) {
	v, err := OrderedDict([]any{[]any{Tuple{"b", int64(1)}, Tuple{"a", int64(2)}, Tuple{Tuple{int64(1)}, nil}}})
	if err != nil {
		t.Fatal(err)
	}
	if dd := diff(DictOf("b", int64(1), "a", int64(2), Tuple{int64(1)}, nil), v); dd != "" {
		t.Error(dd)
	}
	for _, args := range [][]any{{int64(1)}, {[]any{int64(1)}}, {[]any{Tuple{[]any{}, int64(1)}}}, {1, 2}} {
		if _, err := OrderedDict(args); err == nil {
			t.Errorf("OrderedDict(%v) succeeded", args)
		}
	}
}

func TestKeyEquality(t *testing.T) {
	same := [][]any{
		{int64(1), true, 1.0, pow2(0, 1, 0), uint8(1)},
		{int64(0), false, 0.0, math.Copysign(0, -1)},
		{pow2(80, 1, 0), math.Ldexp(1, 80)},
		{uint64(math.MaxUint64), pow2(64, 1, -1)},
		{math.NaN(), -math.NaN()},
		{Tuple{int64(1), "a"}, Tuple{true, category("a")}},
		{NewFrozenSet(int64(1), int64(2)), NewFrozenSet(2.0, true)},
		{[]byte("a")},
		{"a"},
		{nil},
		{math.Inf(1)},
		{0.5, float32(0.5)},
		{&Class{Module: "m", Name: "C"}},
	}
	var k keyer
	hashes := make([]any, len(same))
	for i, group := range same {
		for j, v := range group {
			h, err := k.hash(v)
			if err != nil {
				t.Fatalf("hash(%v): %v", v, err)
			}
			if j == 0 {
				hashes[i] = h
			} else if h != hashes[i] {
				t.Errorf("hash(%v) != hash(%v)", v, group[0])
			}
		}
	}
	for i := range hashes {
		for j := range i {
			if hashes[i] == hashes[j] {
				t.Errorf("hash(%v) == hash(%v)", same[i][0], same[j][0])
			}
		}
	}
	if _, err := k.hash(NewSet()); err == nil {
		t.Error("a set is hashable")
	}
	if _, err := k.hash(struct{}{}); err == nil {
		t.Error("a struct is hashable")
	}
	// many items: the index takes over
	s := NewSet()
	for i := range 50 {
		s.Add(i % 20)
	}
	if s.Len() != 20 || !s.Has(int64(19)) || s.Has(20) {
		t.Errorf("set of %d", s.Len())
	}
}
