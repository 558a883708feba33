package pickle

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
)

type category string
type bytesize int64

func TestRoundTrip(t *testing.T) {
	shared := []any{"s"}
	cases := []struct {
		name string
		in   any // what is encoded
		want any // what decoding gives back
	}{
		{"nil", nil, nil},
		{"bools", []any{true, false}, []any{true, false}},
		{"ints", []any{0, int8(-8), int16(-300), int32(70000), int64(-1 << 40), uint(7), uint8(255), uint16(65535), uint32(1 << 31), uint64(math.MaxUint64)},
			[]any{int64(0), int64(-8), int64(-300), int64(70000), int64(-1 << 40), int64(7), int64(255), int64(65535), int64(1 << 31), pow2(64, 1, -1)}},
		{"int64 limits", []any{int64(math.MinInt64), int64(math.MaxInt64)}, []any{int64(math.MinInt64), int64(math.MaxInt64)}},
		{"big ints", []any{big.NewInt(5), pow2(200, -1, 3), *pow2(70, 1, 0), (*big.Int)(nil)}, []any{int64(5), pow2(200, -1, 3), pow2(70, 1, 0), nil}},
		{"floats", []any{1.5, float32(0.25), math.Inf(-1), math.NaN(), math.Copysign(0, -1)}, []any{1.5, 0.25, math.Inf(-1), math.NaN(), math.Copysign(0, -1)}},
		{"strings", []any{"", "héllo", strings.Repeat("é", 70000)}, []any{"", "héllo", strings.Repeat("é", 70000)}},
		{"bytes", []any{[]byte{}, []byte{0}, bytes.Repeat([]byte{1, 2}, 40000)}, []any{[]byte{}, []byte{0}, bytes.Repeat([]byte{1, 2}, 40000)}},
		{"tuples", Tuple{Tuple{}, Tuple{1}, Tuple{1, 2, 3, 4, 5}}, Tuple{Tuple{}, Tuple{int64(1)}, Tuple{int64(1), int64(2), int64(3), int64(4), int64(5)}}},
		{"dict in order", DictOf("z", 1, "a", 2, Tuple{1, "k"}, nil), DictOf("z", int64(1), "a", int64(2), Tuple{int64(1), "k"}, nil)},
		{"map sorted", map[string]any{"b": 1, "a": map[string]any{"y": "z"}, "c": []any{}}, DictOf("a", DictOf("y", "z"), "b", int64(1), "c", []any{})},
		{"int-keyed map sorted", map[int]string{3: "c", -1: "a", 2: "b"}, DictOf(int64(-1), "a", int64(2), "b", int64(3), "c")},
		{"named kinds", map[category]bytesize{"activation": 512, "parameter": 1 << 20}, DictOf("activation", int64(512), "parameter", int64(1<<20))},
		{"typed slices", []any{[]string{"a", "b"}, []int64{1, 2}, [2]float64{0.5, 1}, []Tuple{{1}}}, []any{[]any{"a", "b"}, []any{int64(1), int64(2)}, []any{0.5, 1.0}, []any{Tuple{int64(1)}}}},
		{"nil containers", []any{[]any(nil), map[string]any(nil), (*Dict)(nil), []byte(nil), Tuple(nil), (*Set)(nil), []string(nil)}, []any{nil, nil, nil, nil, nil, nil, nil}},
		{"sets", []any{NewSet(1, "a", Tuple{2}), NewFrozenSet(), NewSet()}, []any{NewSet(int64(1), "a", Tuple{int64(2)}), NewFrozenSet(), NewSet()}},
		{"sharing", []any{shared, shared}, []any{[]any{"s"}, []any{"s"}}},
		{"long list", make([]any, 2345), func() any {
			l := make([]any, 2345)
			return l
		}()},
		{"big dict", func() any {
			d := NewDict()
			for i := range 1234 {
				d.Set(i, i*i)
			}
			return d
		}(), func() any {
			d := NewDict()
			for i := range 1234 {
				d.Set(int64(i), int64(i*i))
			}
			return d
		}()},
	}
	for _, c := range cases {
		for proto := 2; proto <= 5; proto++ {
			data, err := Marshal(c.in, proto)
			if err != nil {
				t.Errorf("%s protocol %d: %v", c.name, proto, err)
				continue
			}
			if data[0] != opPROTO || int(data[1]) != proto || data[len(data)-1] != opSTOP {
				t.Errorf("%s protocol %d: header/trailer %q...%q", c.name, proto, data[:2], data[len(data)-1:])
			}
			got, err := Unmarshal(data, nil)
			if err != nil {
				t.Errorf("%s protocol %d: decoding: %v", c.name, proto, err)
				continue
			}
			if d := diff(c.want, got); d != "" {
				t.Errorf("%s protocol %d: %s", c.name, proto, d)
			}
		}
	}
}

// TestEncodeExact checks a few encodings against the bytes Python's
// pickle.dumps gives (as printed by /usr/bin/python3, Python 3.11).
func TestEncodeExact(t *testing.T) {
	cases := []struct {
		v     any
		proto int
		want  string
	}{
		{int64(2147483648), 2, "\x80\x02\x8a\x05\x00\x00\x00\x80\x00."},
		{int64(-1), 4, "\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00J\xff\xff\xff\xff."},
		{int64(255), 4, "\x80\x04K\xff."},
		{pow2(70, 1, 0), 2, "\x80\x02\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@."},
		{[]byte{}, 2, "\x80\x02c__builtin__\nbytes\nq\x00)Rq\x01."},
		{[]byte("ab\xff"), 2, "\x80\x02c_codecs\nencode\nq\x00X\x04\x00\x00\x00ab\xc3\xbfq\x01X\x06\x00\x00\x00latin1q\x02\x86q\x03Rq\x04."},
		{[]byte("ab\xff"), 3, "\x80\x03C\x03ab\xffq\x00."},
		{NewSet(int64(1), int64(2)), 2, "\x80\x02c__builtin__\nset\nq\x00]q\x01(K\x01K\x02e\x85q\x02Rq\x03."},
		{NewFrozenSet(int64(3)), 3, "\x80\x03cbuiltins\nfrozenset\nq\x00]q\x01K\x03a\x85q\x02Rq\x03."},
		{NewSet(), 4, "\x80\x04\x8f\x94."},
		{NewFrozenSet(int64(3)), 4, "\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00(K\x03\x91\x94."},
		{NewSet(int64(1), int64(2)), 5, "\x80\x05\x95\t\x00\x00\x00\x00\x00\x00\x00\x8f\x94(K\x01K\x02\x90."},
	}
	for _, c := range cases {
		got, err := Marshal(c.v, c.proto)
		if err != nil {
			t.Errorf("%v protocol %d: %v", c.v, c.proto, err)
		} else if string(got) != c.want {
			t.Errorf("%v protocol %d:\n got %q\nwant %q", c.v, c.proto, got, c.want)
		}
	}
}

func TestEncodeSharing(t *testing.T) {
	l := []any{int64(1)}
	d := DictOf("k", l)
	data, err := Marshal([]any{l, l, d, d, "str", "str"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	ops, _ := disasm(data)
	gets := bytes.Count(ops, []byte{opBINGET})
	if gets != 4 {
		t.Errorf("%d BINGETs, want 4 (list, dict, str, and the list inside the dict)", gets)
	}
	v, err := Unmarshal(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := v.([]any)
	if &got[0].([]any)[0] != &got[1].([]any)[0] || got[2].(*Dict) != got[3].(*Dict) {
		t.Error("sharing lost")
	}
	// distinct empty lists are distinct objects for Python
	data, _ = Marshal([]any{[]any{}, []any{}, make([]any, 0, 4)}, 4)
	if ops, _ := disasm(data); bytes.Contains(ops, []byte{opBINGET}) {
		t.Errorf("empty lists shared: %q", data)
	}
}

func TestEncodeErrors(t *testing.T) {
	selfTuple := Tuple{nil}
	selfTuple[0] = selfTuple
	cases := []struct {
		name  string
		v     any
		proto int
		err   error
		msg   string
	}{
		{"protocol 1", 1, 1, ErrUnsupported, "pickle: encode $: protocol 1 is not supported (only 2 to 5)"},
		{"protocol 6", 1, 6, ErrUnsupported, "protocol 6"},
		{"chan", make(chan int), 4, ErrUnsupported, "pickle: encode $: cannot pickle a chan int"},
		{"nested func", DictOf("a", []any{1, func() {}}), 4, ErrUnsupported, `pickle: encode $["a"][1]: cannot pickle a func()`},
		{"struct", map[string]any{"s": struct{}{}}, 2, ErrUnsupported, `$["s"]: cannot pickle a struct {}`},
		{"bad map key", map[float64]int{1: 1}, 4, ErrUnsupported, "map keys must be strings or integers"},
		{"invalid UTF-8", []any{"ok", "\xff"}, 4, ErrType, "$[1]: string is not valid UTF-8 (byte 0 of 1)"},
		{"object", &Object{Class: "os.system"}, 4, ErrUnsupported, "writes data, never classes"},
		{"class", []any{&Class{Module: "os", Name: "system"}}, 4, ErrUnsupported, "$[0]: cannot pickle a *pickle.Class"},
		{"tuple containing itself", selfTuple, 4, ErrLimit, "nested deeper than 1000"},
		{"set item", NewSet(1, Tuple{1, "\xfe"}), 4, ErrType, "$[item 1][1]: string is not valid UTF-8"},
	}
	for _, c := range cases {
		_, err := Marshal(c.v, c.proto)
		var ee *EncodeError
		if !errors.As(err, &ee) || !errors.Is(err, c.err) {
			t.Errorf("%s: error %v, want an *EncodeError wrapping %v", c.name, err, c.err)
			continue
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %q does not say %q", c.name, err, c.msg)
		}
	}
}

// TestEncodeRecursiveList: a list that contains itself is written as
// Python writes it (Python can load it); this package's decoder refuses it.
func TestEncodeRecursiveList(t *testing.T) {
	l := make([]any, 1)
	l[0] = l
	data, err := Marshal(l, 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := "\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00]\x94h\x00a."; string(data) != want { // Python 3.11
		t.Errorf("got %q, want %q", data, want)
	}
	if _, err := Unmarshal(data, nil); !errors.Is(err, ErrRecursive) {
		t.Errorf("decoding: %v, want ErrRecursive", err)
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestEncoderStream(t *testing.T) {
	var buf bytes.Buffer
	e := NewEncoder(&buf, 4)
	for _, v := range []any{"a", "a", int64(3)} {
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	// each pickle has its own memo: the second "a" is written in full
	if want := "\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00\x8c\x01a\x94.\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00\x8c\x01a\x94.\x80\x04K\x03."; buf.String() != want {
		t.Errorf("got %q", buf.String())
	}
	big := strings.Repeat("x", 200000)
	if err := NewEncoder(&failingWriter{n: 1000}, 4).Encode(big); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("write error lost: %v", err)
	}
}

func TestDictAndSetAPI(t *testing.T) {
	d := DictOf("a", 1, int64(2), "two", 3.0, "three", Tuple{1, "x"}, "tuple", NewFrozenSet(1, 2), "fs")
	for _, c := range []struct {
		key  any
		want any
	}{
		{"a", 1}, {2, "two"}, {true, nil}, {int64(3), "three"}, {3, "three"}, {2.0, "two"},
		{Tuple{int64(1), "x"}, "tuple"}, {Tuple{1.0, "x"}, "tuple"}, {NewFrozenSet(int64(2), int64(1)), "fs"},
		{category("a"), 1}, {"missing", nil}, {[]any{}, nil},
	} {
		got, ok := d.Get(c.key)
		if (c.want == nil) == ok || got != c.want {
			t.Errorf("Get(%v) = %v, %v; want %v", c.key, got, ok, c.want)
		}
	}
	d.Set(1.0, "one")
	d.Set(category("b"), "b")
	if d.Len() != 7 {
		t.Errorf("Len = %d, want 7 (1.0 replaces nothing, 'b' is new)", d.Len())
	}
	if v, _ := d.Get(true); v != "one" {
		t.Errorf("True -> %v, want one (1.0 == True)", v)
	}
	if k := d.Keys()[6]; k != "b" {
		t.Errorf("named string key stored as %T", k)
	}
	// many keys: the index takes over, order stays
	big := NewDict()
	for i := range 100 {
		big.Set(Tuple{i % 10, i}, i)
	}
	for i := range 100 {
		if v, ok := big.Get(Tuple{int64(i % 10), int64(i)}); !ok || v != i {
			t.Fatalf("Get(%d) = %v, %v", i, v, ok)
		}
	}
	if big.Keys()[42].(Tuple)[1] != 42 {
		t.Error("order lost")
	}

	func() {
		defer func() {
			if recover() == nil {
				t.Error("Set with a list key did not panic")
			}
		}()
		d.Set([]any{1}, 1)
	}()

	m := DictOf("s", "x", "i", int64(1), "b", true, "f", 0.5, "l", []any{}, "t", Tuple{}, "d", NewDict(), "big", pow2(80, 1, 0))
	if s, err := m.GetString("s"); s != "x" || err != nil {
		t.Error(s, err)
	}
	if f, err := m.GetFloat("i"); f != 1 || err != nil {
		t.Error(f, err)
	}
	_, err := m.GetInt("b")
	var fe *FieldError
	if !errors.As(err, &fe) || !errors.Is(err, ErrType) || err.Error() != `pickle: key "b": want int, got bool` {
		t.Errorf("GetInt(bool): %v", err)
	}
	if _, err := m.GetInt("big"); err == nil || err.Error() != `pickle: key "big": want int, got int` {
		t.Errorf("GetInt(big): %v", err)
	}
	if _, err := m.GetList("nope"); !errors.Is(err, ErrMissingKey) || err.Error() != `pickle: key "nope" missing` {
		t.Errorf("GetList(missing): %v", err)
	}
	if _, err := m.GetDict("l"); err == nil || err.Error() != `pickle: key "l": want dict, got list` {
		t.Errorf("GetDict(list): %v", err)
	}
	for _, f := range []func() error{
		func() error { _, err := m.GetBool("b"); return err },
		func() error { _, err := m.GetList("l"); return err },
		func() error { _, err := m.GetTuple("t"); return err },
		func() error { _, err := m.GetDict("d"); return err },
	} {
		if err := f(); err != nil {
			t.Error(err)
		}
	}
	var nilDict *Dict
	if nilDict.Len() != 0 || nilDict.Has("a") || nilDict.Items() != nil {
		t.Error("nil *Dict is not empty")
	}

	s := NewSet(1, int64(1), 1.0, true, "a", Tuple{})
	if s.Len() != 3 || !s.Has(Tuple{}) || s.Has("b") {
		t.Errorf("set %v", s.Items())
	}
	for _, tn := range []struct {
		v    any
		want string
	}{{nil, "NoneType"}, {int64(1), "int"}, {pow2(99, 1, 0), "int"}, {[]byte{}, "bytes"}, {NewFrozenSet(), "frozenset"},
		{&Object{Class: "m.C"}, "m.C"}, {&Class{Module: "m", Name: "C"}, "type"}, {1, "int"}} {
		if got := TypeName(tn.v); got != tn.want {
			t.Errorf("TypeName(%T) = %s, want %s", tn.v, got, tn.want)
		}
	}
}
