package pickle

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"testing/iotest"
)

// recordAllow allows the classes the opcode tests use, each recorded as an
// *Object.
var recordAllow = map[string]Constructor{
	"mod.Cls":     Record("mod.Cls"),
	"pkg.sub.Obj": Record("pkg.sub.Obj"),
}

type decodeCase struct {
	name string
	in   string
	want any
	opts *Options
}

func decodeCases() []decodeCase {
	sharedList := []any{}
	withState := &Object{Class: "mod.Cls", Args: []any{int64(1)}, State: DictOf("a", int64(2))}
	return []decodeCase{
		// constants and protocol
		{"NONE", "N.", nil, nil},
		{"NEWTRUE", "\x88.", true, nil},
		{"NEWFALSE", "\x89.", false, nil},
		{"PROTO 2", "\x80\x02N.", nil, nil},
		{"PROTO 5", "\x80\x05\x88.", true, nil},

		// integers
		{"INT", "I42\n.", int64(42), nil},
		{"INT negative", "I-7\n.", int64(-7), nil},
		{"INT True", "I01\n.", true, nil},
		{"INT False", "I00\n.", false, nil},
		{"INT big", "I99999999999999999999\n.", bigInt("99999999999999999999"), nil},
		{"LONG", "L123L\n.", int64(123), nil},
		{"LONG big", "L-18446744073709551616L\n.", pow2(64, -1, 0), nil},
		{"BININT", "J\xff\xff\xff\xff.", int64(-1), nil},
		{"BININT max", "J\xff\xff\xff\x7f.", int64(math.MaxInt32), nil},
		{"BININT1", "K\xff.", int64(255), nil},
		{"BININT2", "M\x00\x01.", int64(256), nil},
		{"LONG1 zero", "\x8a\x00.", int64(0), nil},
		{"LONG1 -1", "\x8a\x01\xff.", int64(-1), nil},
		{"LONG1 2^31", "\x8a\x05\x00\x00\x00\x80\x00.", int64(1 << 31), nil},
		{"LONG1 min int64", "\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80.", int64(math.MinInt64), nil},
		{"LONG1 2^64", "\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.", pow2(64, 1, 0), nil},
		{"LONG1 -2^64-1", "\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\xfe.", pow2(64, -1, -1), nil},
		{"LONG4", "\x8b\x01\x00\x00\x00\x7f.", int64(127), nil},

		// floats
		{"FLOAT", "F1.5\n.", 1.5, nil},
		{"FLOAT inf", "Finf\n.", math.Inf(1), nil},
		{"FLOAT overflow", "F1e999\n.", math.Inf(1), nil},
		{"FLOAT nan", "Fnan\n.", math.NaN(), nil},
		{"BINFLOAT", "G?\xf8\x00\x00\x00\x00\x00\x00.", 1.5, nil},
		{"BINFLOAT -0", "G\x80\x00\x00\x00\x00\x00\x00\x00.", math.Copysign(0, -1), nil},

		// strings
		{"STRING", "S'abc'\n.", "abc", nil},
		{"STRING escapes", `S"a\x41\n\101\'\\q"` + "\n.", "aA\nA'\\q", nil},
		{"BINSTRING", "T\x03\x00\x00\x00abc.", "abc", nil},
		{"SHORT_BINSTRING", "U\x03abc.", "abc", nil},
		{"UNICODE", "Vh\\u00e9llo\n.", "héllo", nil},
		{"UNICODE astral", "V\\U0001f389\n.", "🎉", nil},
		{"UNICODE latin-1 byte", "V\xe9\n.", "é", nil},
		{"UNICODE even backslashes", "V\\\\u0041\n.", `\\u0041`, nil},
		{"UNICODE surrogate", "V\\ud800\n.", "\xed\xa0\x80", nil},
		{"BINUNICODE", "X\x02\x00\x00\x00hi.", "hi", nil},
		{"BINUNICODE surrogatepass", "X\x03\x00\x00\x00\xed\xa0\x80.", "\xed\xa0\x80", nil},
		{"SHORT_BINUNICODE", "\x8c\x03\xe6\x97\xa5.", "日", nil},
		{"BINUNICODE8", "\x8d\x02\x00\x00\x00\x00\x00\x00\x00hi.", "hi", nil},

		// bytes
		{"BINBYTES", "B\x02\x00\x00\x00\x00\xff.", []byte{0, 0xff}, nil},
		{"SHORT_BINBYTES", "C\x01a.", []byte("a"), nil},
		{"BINBYTES8", "\x8e\x01\x00\x00\x00\x00\x00\x00\x00z.", []byte("z"), nil},
		{"BYTEARRAY8", "\x96\x02\x00\x00\x00\x00\x00\x00\x00ab.", []byte("ab"), nil},
		{"NEXT_BUFFER", "\x97\x98.", []byte("out of band"), &Options{Buffers: [][]byte{[]byte("out of band")}}},

		// tuples
		{"EMPTY_TUPLE", ").", Tuple{}, nil},
		{"TUPLE", "(K\x01K\x02K\x03K\x04t.", Tuple{int64(1), int64(2), int64(3), int64(4)}, nil},
		{"TUPLE1", "K\x01\x85.", Tuple{int64(1)}, nil},
		{"TUPLE2", "K\x01K\x02\x86.", Tuple{int64(1), int64(2)}, nil},
		{"TUPLE3", "K\x01K\x02K\x03\x87.", Tuple{int64(1), int64(2), int64(3)}, nil},

		// lists
		{"EMPTY_LIST", "].", []any{}, nil},
		{"LIST", "(K\x01K\x02l.", []any{int64(1), int64(2)}, nil},
		{"APPEND", "]K\x01a.", []any{int64(1)}, nil},
		{"APPENDS", "](K\x01K\x02e.", []any{int64(1), int64(2)}, nil},
		{"APPENDS empty", "](e.", []any{}, nil},

		// dicts
		{"EMPTY_DICT", "}.", NewDict(), nil},
		{"DICT", "(\x8c\x01aK\x01\x8c\x01bK\x02d.", DictOf("a", int64(1), "b", int64(2)), nil},
		{"SETITEM", "}\x8c\x01aK\x01s.", DictOf("a", int64(1)), nil},
		{"SETITEMS", "}(K\x01\x8c\x01x)K\x02u.", DictOf(int64(1), "x", Tuple{}, int64(2)), nil},
		{"SETITEM same key", "}K\x01\x8c\x01as\x88\x8c\x01bs.", DictOf(int64(1), "b"), nil},

		// sets
		{"EMPTY_SET", "\x8f.", NewSet(), nil},
		{"ADDITEMS", "\x8f(K\x01K\x02K\x01\x90.", NewSet(int64(1), int64(2)), nil},
		{"FROZENSET", "(K\x01\x8c\x01a\x91.", NewFrozenSet(int64(1), "a"), nil},

		// stack manipulation
		{"POP", "K\x01K\x020.", int64(1), nil},
		{"POP of a mark", "K\x01(0.", int64(1), nil},
		{"POP_MARK", "K\x01(K\x02K\x031.", int64(1), nil},
		{"DUP", "K\x012\x86.", Tuple{int64(1), int64(1)}, nil},
		{"MARK", "(K\x01t.", Tuple{int64(1)}, nil},

		// memo
		{"PUT GET", "K\x05p0\n0g0\n.", int64(5), nil},
		{"BINPUT BINGET", "K\x05q\x000h\x00.", int64(5), nil},
		{"LONG_BINPUT LONG_BINGET", "K\x05r\x00\x00\x01\x000j\x00\x00\x01\x00.", int64(5), nil},
		{"MEMOIZE", "\x80\x04K\x05\x94K\x06\x94h\x00h\x01\x86.", Tuple{int64(5), int64(6)}, nil},
		{"memo shares", "]\x94h\x00\x86.", Tuple{sharedList, sharedList}, nil},
		{"PUT overwrite", "K\x01q\x00K\x02q\x00h\x00.", int64(2), nil},

		// framing
		{"FRAME", "\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00K\x05.", int64(5), nil},
		{"FRAME then more", "\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00K\x05\x95\x01\x00\x00\x00\x00\x00\x00\x00.", int64(5), nil},

		// built-in plain-value constructors (protocols 0 to 3)
		{"set via REDUCE", "\x80\x02c__builtin__\nset\nq\x00]q\x01(K\x01K\x02e\x85q\x02Rq\x03.", NewSet(int64(1), int64(2)), nil},
		{"frozenset via REDUCE", "\x80\x03cbuiltins\nfrozenset\n]K\x03a\x85R.", NewFrozenSet(int64(3)), nil},
		{"bytes via _codecs.encode", "\x80\x02c_codecs\nencode\nq\x00X\x04\x00\x00\x00ab\xc3\xbfq\x01X\x06\x00\x00\x00latin1q\x02\x86q\x03Rq\x04.", []byte("ab\xff"), nil},
		{"empty bytes via REDUCE", "\x80\x02c__builtin__\nbytes\nq\x00)Rq\x01.", []byte{}, nil},
		{"bytearray via REDUCE", "\x80\x03cbuiltins\nbytearray\nq\x00C\x03ab\xffq\x01\x85q\x02Rq\x03.", []byte("ab\xff"), nil},

		// allowed classes
		{"GLOBAL", "cmod\nCls\n.", &Class{Module: "mod", Name: "Cls"}, &Options{Allow: recordAllow}},
		{"REDUCE", "cmod\nCls\nK\x01\x85R.", &Object{Class: "mod.Cls", Args: []any{int64(1)}}, &Options{Allow: recordAllow}},
		{"STACK_GLOBAL", "\x80\x04\x8c\x07pkg.sub\x8c\x03Obj\x93)R.", &Object{Class: "pkg.sub.Obj", Args: []any{}}, &Options{Allow: recordAllow}},
		{"NEWOBJ", "cmod\nCls\nK\x01\x85\x81.", &Object{Class: "mod.Cls", Args: []any{int64(1)}}, &Options{Allow: recordAllow}},
		{"NEWOBJ_EX", "cmod\nCls\nK\x01\x85}\x92.", &Object{Class: "mod.Cls", Args: []any{int64(1)}}, &Options{Allow: recordAllow}},
		{"BUILD", "cmod\nCls\nK\x01\x85R}\x8c\x01aK\x02sb.", withState, &Options{Allow: recordAllow}},
		{"INST", "(K\x01imod\nCls\n.", &Object{Class: "mod.Cls", Args: []any{int64(1)}}, &Options{Allow: recordAllow}},
		{"OBJ", "(cmod\nCls\nK\x01o.", &Object{Class: "mod.Cls", Args: []any{int64(1)}}, &Options{Allow: recordAllow}},
		{"REDUCE args finished", "cmod\nCls\n]K\x01a\x85R.", &Object{Class: "mod.Cls", Args: []any{[]any{int64(1)}}}, &Options{Allow: recordAllow}},
		{"OrderedDict", "\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00aq\x02K\x01X\x01\x00\x00\x00bq\x03K\x02u.", DictOf("a", int64(1), "b", int64(2)), &Options{Allow: map[string]Constructor{"collections.OrderedDict": OrderedDict}}},

		// persistent ids
		{"PERSID", "Pkey1\n.", DictOf("pid", "key1"), &Options{PersistentLoad: func(pid any) (any, error) { return DictOf("pid", pid), nil }}},
		{"BINPERSID", "\x8c\x03abcK\x07\x86Q.", DictOf("pid", Tuple{"abc", int64(7)}), &Options{PersistentLoad: func(pid any) (any, error) { return DictOf("pid", pid), nil }}},
	}
}

func TestDecodeOpcodes(t *testing.T) {
	for _, c := range decodeCases() {
		t.Run(c.name, func(t *testing.T) {
			got, err := Unmarshal([]byte(c.in), c.opts)
			if err != nil {
				t.Fatalf("Unmarshal(%q): %v", c.in, err)
			}
			if d := diff(c.want, got); d != "" {
				t.Errorf("Unmarshal(%q): %s", c.in, d)
			}
		})
	}
}

func TestDecodeSharing(t *testing.T) {
	// ]\x94 h\x00 h\x00 \x87: a tuple holding one list three times.
	v, err := Unmarshal([]byte("\x80\x04]\x94K\x01ah\x00h\x00\x87."), nil)
	if err != nil {
		t.Fatal(err)
	}
	tup := v.(Tuple)
	a, b := tup[0].([]any), tup[2].([]any)
	if &a[0] != &b[0] {
		t.Error("memo GET gave a copy, not the same list")
	}
	// distinct empty lists stay distinct, so that they are not merged when
	// pickled again
	v, err = Unmarshal([]byte("]]\x86."), nil)
	if err != nil {
		t.Fatal(err)
	}
	tup = v.(Tuple)
	e1, e2 := tup[0].([]any), tup[1].([]any)
	if &e1[:1][0] == &e2[:1][0] {
		t.Error("two empty lists share a backing array")
	}
}

type decodeErrorCase struct {
	name   string
	in     string
	opts   *Options
	err    error
	offset int64
	msg    string
}

func decodeErrorCases() []decodeErrorCase {
	return []decodeErrorCase{
		{"empty", "", nil, ErrTruncated, 0, "empty input"},
		{"no STOP", "K\x01", nil, ErrTruncated, 2, "without a STOP"},
		{"truncated argument", "K", nil, ErrTruncated, 0, "BININT1: data ends"},
		{"truncated BINUNICODE", "X\x05\x00\x00\x00ab", nil, ErrTruncated, 0, "BINUNICODE: data ends at offset 7, 3 bytes short"},
		{"huge length, little data", "X\xff\xff\xff\x7fab", nil, ErrTruncated, 0, "BINUNICODE"},
		{"huge length over budget", "\x8d\xff\xff\xff\xff\xff\xff\x00\x00", nil, ErrLimit, 0, "exceed the remaining budget"},
		{"length over MaxBytes", "X\x10\x00\x00\x00", &Options{MaxBytes: 8}, ErrLimit, 0, "16 bytes of data exceed"},
		{"line without newline", "I12", nil, ErrTruncated, 0, "no newline"},
		{"unknown opcode", "\xff", nil, ErrOpcode, 0, "opcode 0xff: unknown opcode"},
		{"protocol 6", "\x80\x06N.", nil, ErrOpcode, 0, "unsupported pickle protocol 6"},
		{"STOP on empty stack", ".", nil, ErrStack, 0, "STOP: needs 1 items on the stack, found 0"},
		{"STOP above a mark", "K\x01(.", nil, ErrStack, 3, "above the mark"},
		{"APPEND underflow", "a.", nil, ErrStack, 0, "APPEND"},
		{"APPEND to an int", "K\x01K\x02a.", nil, ErrType, 4, "APPEND: appends to a list, not a int"},
		{"APPENDS without mark", "]e.", nil, ErrStack, 1, "no MARK"},
		{"TUPLE without mark", "K\x01t.", nil, ErrStack, 2, "TUPLE: no MARK"},
		{"TUPLE2 underflow", "K\x01\x86.", nil, ErrStack, 2, "needs 2 items"},
		{"TUPLE2 across a mark", "K\x01(K\x02\x86.", nil, ErrStack, 5, "above the mark"},
		{"DICT odd", "(K\x01K\x02K\x03d.", nil, ErrStack, 7, "odd number of items"},
		{"SETITEMS on a list", "](K\x01K\x02u.", nil, ErrType, 6, "sets items of a dict, not a list"},
		{"SETITEMS on a dict's APPENDS", "}(K\x01\x8c\x01xK\x02Ne.", nil, ErrType, 10, "appends to a list, not a dict"},
		{"unhashable key", "}]K\x01s.", nil, ErrType, 4, "unhashable type: 'list'"},
		{"unhashable set item", "\x8f(}\x90.", nil, ErrType, 3, "unhashable type: 'dict'"},
		{"ADDITEMS to a frozenset", "(\x91(K\x01\x90.", nil, ErrType, 5, "adds to a set, not a frozenset"},
		{"GET never set", "h\x07.", nil, ErrMemo, 0, "memo slot 7 was never set"},
		{"LONG_BINGET never set", "K\x01q\x00j\x00\x00\x01\x00.", nil, ErrMemo, 4, "memo slot 65536 was never set"},
		{"PUT on empty stack", "q\x00.", nil, ErrMemo, 0, "nothing on the stack"},
		{"PUT across a mark", "K\x01(q\x00.", nil, ErrMemo, 3, "nothing on the stack"},
		{"negative PUT", "K\x01p-1\n.", nil, ErrSyntax, 2, "negative memo index"},
		{"bad INT", "Iabc\n.", nil, ErrSyntax, 0, `"abc" is not an integer`},
		{"INT too long", "I" + strings.Repeat("9", 5000) + "\n.", nil, ErrLimit, 0, "5000 digits exceeds the limit of 4300"},
		{"bad FLOAT", "Fx\n.", nil, ErrSyntax, 0, "is not a float"},
		{"unquoted STRING", "Sabc\n.", nil, ErrSyntax, 0, "must be quoted"},
		{"bad \\x escape", "S'\\x4'\n.", nil, ErrSyntax, 0, `invalid \x escape`},
		{"trailing backslash", "S'\\'\n.", nil, ErrSyntax, 0, "trailing \\ in string"},
		{"bad \\u escape", "V\\u12\n.", nil, ErrSyntax, 0, `truncated \uXXXX`},
		{"BINSTRING negative", "T\xff\xff\xff\xff.", nil, ErrSyntax, 0, "negative byte count -1"},
		{"LONG4 negative", "\x8b\xff\xff\xff\xff.", nil, ErrSyntax, 0, "negative byte count"},
		{"invalid UTF-8", "X\x02\x00\x00\x00a\xff.", nil, ErrSyntax, 0, "not valid UTF-8 (byte 1 of 2)"},
		{"frame overrun", "\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00M\x01\x00.", nil, ErrSyntax, 11, "runs past the end of its frame at offset 13"},
		{"frame in frame", "\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00\x95\x00\x00\x00\x00\x00\x00\x00\x00.", nil, ErrSyntax, 11, "new frame begins"},
		{"READONLY_BUFFER of an int", "K\x01\x98.", nil, ErrType, 2, "applies to a buffer"},
		{"NEXT_BUFFER without buffers", "\x97.", nil, ErrUnsupported, 0, "out-of-band buffer 0"},
		{"PERSID without callback", "Pabc\n.", nil, ErrUnsupported, 0, "PersistentLoad is nil"},
		{"BINPERSID without callback", "K\x01Q.", nil, ErrUnsupported, 2, "persistent id (int)"},
		{"EXT1", "\x82\x01.", nil, ErrUnsupported, 0, "extension code 1"},
		{"EXT2", "\x83\x01\x00.", nil, ErrUnsupported, 0, "extension code 1"},
		{"EXT4", "\x84\x01\x00\x00\x00.", nil, ErrUnsupported, 0, "extension code 1"},
		{"REDUCE of None", "N)R.", nil, ErrType, 2, "REDUCE: cannot call a NoneType"},
		{"REDUCE args not a tuple", "cmod\nCls\n]R.", &Options{Allow: recordAllow}, ErrType, 10, "must be a tuple, got list"},
		{"NEWOBJ of an int", "K\x01)\x81.", nil, ErrType, 3, "cannot instantiate a int"},
		{"NEWOBJ_EX with kwargs", "cmod\nCls\n)}\x8c\x01kK\x01s\x92.", &Options{Allow: recordAllow}, ErrUnsupported, 17, "keyword arguments for mod.Cls"},
		{"OBJ without class", "(o.", nil, ErrStack, 1, "needs a class"},
		{"BUILD on a dict", "}}\x8c\x01aK\x01sb.", nil, ErrUnsupported, 8, "cannot set the state of a dict"},
		{"STACK_GLOBAL of ints", "K\x01K\x02\x93.", nil, ErrType, 4, "must be str"},
		{"set of a dict", "cbuiltins\nset\n}\x85R.", nil, ErrType, 16, "builtins.set: argument is a dict"},
		{"bytes of a float", "cbuiltins\nbytes\nG?\xf0\x00\x00\x00\x00\x00\x00\x85R.", nil, ErrType, 26, "cannot make bytes from a float"},
		{"encode with a codec", "c_codecs\nencode\n\x8c\x01a\x8c\x04rot1\x86R.", nil, ErrType, 26, `encoding "rot1" is not supported`},
		{"too deep", strings.Repeat("]", 1001) + strings.Repeat("a", 1000) + ".", nil, ErrLimit, 2001, "nested deeper than 1000"},
		{"too deep (option)", "]]]aa.", &Options{MaxDepth: 2}, ErrLimit, 5, "nested deeper than 2"},
		// (C, ((((C,),),),)) with C = (((L,),),): C is first walked at depth 1
		{"too deep through sharing", "]\x94\x85\x85\x85\x94h\x01\x85\x85\x85\x85\x86.", &Options{MaxDepth: 6}, ErrLimit, 13, "nested deeper than 6"},
		{"key too deep", "}" + "N" + strings.Repeat("\x85", 20) + "Ns.", &Options{MaxDepth: 10}, ErrLimit, 23, "key nested deeper than 10"},
		{"recursive list", "]\x94h\x00a.", nil, ErrRecursive, 5, "a list contains itself"},
		{"recursive dict via tuple", "}\x94\x8c\x01kh\x00\x85s.", nil, ErrRecursive, 9, "contains itself"},
		{"too many elements", strings.Repeat("N", 20) + ".", &Options{MaxElements: 10}, ErrLimit, 10, "more than 10 values"},
		{"too many marks", strings.Repeat("(", 20) + ".", &Options{MaxElements: 10}, ErrLimit, 10, "more than 10 values"},
		{"memo hole flood", "K\x01r\xa0\x0f\x00\x00.", &Options{MaxElements: 100}, ErrLimit, 2, "more than 100 values"},
		{"sparse memo", "K\x01r\x00\x00\x00\x01h\x00.", nil, ErrMemo, 7, "memo slot 0 was never set"},
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range decodeErrorCases() {
		t.Run(c.name, func(t *testing.T) {
			v, err := Unmarshal([]byte(c.in), c.opts)
			if err == nil {
				t.Fatalf("Unmarshal(%q) = %v, want an error", clipAny(c.in), v)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is a %T, not *Error", err, err)
			}
			if !errors.Is(err, c.err) {
				t.Errorf("error %q does not wrap %v", err, c.err)
			}
			if pe.Offset != c.offset {
				t.Errorf("error %q at offset %d, want %d", err, pe.Offset, c.offset)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say %q", err, c.msg)
			}
		})
	}
}

// TestOpcodeCoverage checks that the tables above exercise every opcode of
// protocols 0 to 5.
func TestOpcodeCoverage(t *testing.T) {
	seen := map[byte]bool{}
	for _, c := range decodeCases() {
		if ops, err := disasm([]byte(c.in)); err == nil {
			for _, op := range ops {
				seen[op] = true
			}
		}
	}
	for _, c := range decodeErrorCases() {
		if len(c.in) > 0 {
			seen[c.in[0]] = true
		}
		if ops, err := disasm([]byte(c.in)); err == nil || len(ops) > 0 {
			for _, op := range ops {
				seen[op] = true
			}
		}
	}
	for op, info := range opTable {
		if info.name != "" && !seen[byte(op)] {
			t.Errorf("no test decodes %s (0x%02x)", info.name, op)
		}
	}
}

func TestDecoderStream(t *testing.T) {
	var buf bytes.Buffer
	for _, v := range []any{int64(1), "two", []any{int64(3)}} {
		b, err := Marshal(v, 4)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
	}
	d := NewDecoder(&buf, nil)
	var got []any
	for {
		v, err := d.Decode()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if dd := diff([]any{int64(1), "two", []any{int64(3)}}, got); dd != "" {
		t.Error(dd)
	}
	// an error's offset counts from the start of the stream
	d = NewDecoder(strings.NewReader("N.K\x01a."), nil)
	if _, err := d.Decode(); err != nil {
		t.Fatal(err)
	}
	_, err := d.Decode()
	var pe *Error
	if !errors.As(err, &pe) || pe.Offset != 4 {
		t.Errorf("second pickle's error %v, want one at offset 4", err)
	}
}

func TestUnmarshalIgnoresTrailingData(t *testing.T) {
	v, err := Unmarshal([]byte("K\x07.garbage"), nil)
	if err != nil || v != int64(7) {
		t.Errorf("got %v, %v", v, err)
	}
}

func TestConstructorErrors(t *testing.T) {
	boom := errors.New("boom")
	opts := &Options{Allow: map[string]Constructor{"mod.Bad": func([]any) (any, error) { return nil, boom }}}
	_, err := Unmarshal([]byte("cmod\nBad\n)R."), opts)
	if !errors.Is(err, ErrConstructor) || !errors.Is(err, boom) {
		t.Fatalf("error %v should wrap ErrConstructor and the constructor's error", err)
	}
	if want := "pickle: offset 10: REDUCE: mod.Bad: boom"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	opts = &Options{PersistentLoad: func(any) (any, error) { return nil, boom }}
	if _, err := Unmarshal([]byte("Px\n."), opts); !errors.Is(err, boom) {
		t.Errorf("PersistentLoad error lost: %v", err)
	}
}

type stateful struct{ state any }

func (s *stateful) SetState(st any) error {
	if _, ok := st.(string); !ok {
		return errors.New("want a str state")
	}
	s.state = st
	return nil
}

func TestSetStater(t *testing.T) {
	opts := &Options{Allow: map[string]Constructor{"mod.S": func([]any) (any, error) { return &stateful{}, nil }}}
	v, err := Unmarshal([]byte("cmod\nS\n)R\x8c\x02hib."), opts)
	if err != nil {
		t.Fatal(err)
	}
	if s := v.(*stateful); s.state != "hi" {
		t.Errorf("state %v", s.state)
	}
	if _, err := Unmarshal([]byte("cmod\nS\n)RK\x01b."), opts); !errors.Is(err, ErrConstructor) {
		t.Errorf("SetState error: %v", err)
	}
}

func TestAllowOverridesBuiltins(t *testing.T) {
	called := false
	opts := &Options{Allow: map[string]Constructor{"builtins.set": func(args []any) (any, error) {
		called = true
		return "mine", nil
	}}}
	v, err := Unmarshal([]byte("\x80\x03cbuiltins\nset\n)R."), opts)
	if err != nil || v != "mine" || !called {
		t.Errorf("got %v, %v (called %v)", v, err, called)
	}
}

func TestReadErrorsAreReported(t *testing.T) {
	boom := errors.New("disk gone")
	r := io.MultiReader(strings.NewReader("X\x05\x00\x00\x00ab"), iotest.ErrReader(boom))
	_, err := NewDecoder(r, nil).Decode()
	if !errors.Is(err, boom) || !errors.Is(err, ErrTruncated) {
		t.Errorf("error %v should wrap the reader's error and ErrTruncated", err)
	}
	r = io.MultiReader(strings.NewReader("]"), iotest.ErrReader(boom))
	if _, err = NewDecoder(r, nil).Decode(); !errors.Is(err, boom) {
		t.Errorf("error %v should wrap the reader's error", err)
	}
}
