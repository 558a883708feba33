package pickle

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// builtinConstructors are the classes every Decoder accepts: the ones
// protocols 0 to 3 use to spell sets, frozensets, bytes and bytearrays.
// Each builds a plain value from plain arguments and nothing else.
var builtinConstructors = map[string]func(d *Decoder, args []any) (any, error){
	"builtins.set":       func(d *Decoder, args []any) (any, error) { return newSet(d, args, false) },
	"builtins.frozenset": func(d *Decoder, args []any) (any, error) { return newSet(d, args, true) },
	"builtins.bytes":     newBytes,
	"builtins.bytearray": newBytes,
	"_codecs.encode":     codecsEncode,
}

// iterable returns the items of a list, tuple or set argument.
func iterable(v any) ([]any, bool) {
	switch x := v.(type) {
	case *list:
		return x.items, true
	case []any:
		return x, true
	case Tuple:
		return x, true
	case *Set:
		return x.items, true
	}
	return nil, false
}

// newSet is set(iterable) and frozenset(iterable).
func newSet(d *Decoder, args []any, frozen bool) (any, error) {
	s := &Set{Frozen: frozen}
	switch len(args) {
	case 0:
		return s, nil
	case 1:
		items, ok := iterable(args[0])
		if !ok {
			return nil, fmt.Errorf("argument is a %s, want a list, tuple or set", TypeName(args[0]))
		}
		if err := d.addItems(s, items); err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("takes at most 1 argument, got %d", len(args))
}

// newBytes is bytes(...) and bytearray(...): of nothing, of bytes, of a
// list of ints, of a size (zeros), or of a str and an encoding.
func newBytes(d *Decoder, args []any) (any, error) {
	switch len(args) {
	case 0:
		return []byte{}, nil
	case 1:
		switch x := args[0].(type) {
		case []byte:
			return append([]byte{}, x...), nil
		case int64:
			if x < 0 {
				return nil, fmt.Errorf("negative count %d", x)
			}
			if x > d.bytes {
				return nil, fmt.Errorf("%d bytes exceed the remaining budget of %d (Options.MaxBytes)", x, d.bytes)
			}
			d.bytes -= x
			return make([]byte, x), nil
		}
		items, ok := iterable(args[0])
		if !ok {
			return nil, fmt.Errorf("cannot make bytes from a %s", TypeName(args[0]))
		}
		b := make([]byte, len(items))
		for i, it := range items {
			n, ok := it.(int64)
			if !ok || n < 0 || n > 255 {
				return nil, fmt.Errorf("item %d is not an int in range(0, 256)", i)
			}
			b[i] = byte(n)
		}
		return b, nil
	case 2, 3:
		return encodeArgs(args)
	}
	return nil, fmt.Errorf("takes at most 3 arguments, got %d", len(args))
}

// codecsEncode is _codecs.encode(str, encoding[, errors]), which protocols
// 0 to 2 use for bytes (with "latin1").
func codecsEncode(d *Decoder, args []any) (any, error) {
	if len(args) == 1 {
		args = []any{args[0], "utf-8"}
	}
	if len(args) != 2 && len(args) != 3 {
		return nil, fmt.Errorf("takes 1 to 3 arguments, got %d", len(args))
	}
	return encodeArgs(args)
}

// encodeArgs encodes args[0] (a str) with the encoding args[1] and the
// error handler args[2] ("strict" only).
func encodeArgs(args []any) (any, error) {
	s, ok1 := args[0].(string)
	enc, ok2 := args[1].(string)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("want a str and an encoding, got %s and %s", TypeName(args[0]), TypeName(args[1]))
	}
	if len(args) == 3 {
		if e, ok := args[2].(string); !ok || e != "strict" {
			return nil, fmt.Errorf("error handler %v is not supported (only \"strict\")", args[2])
		}
	}
	switch strings.ReplaceAll(strings.ToLower(enc), "_", "-") {
	case "latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1":
		return encodeLatin1(s, 0xFF)
	case "ascii", "us-ascii":
		return encodeLatin1(s, 0x7F)
	case "utf-8", "utf8", "u8":
		if invalidUTF8([]byte(s)) >= 0 {
			return nil, fmt.Errorf("string is not valid UTF-8")
		}
		return []byte(s), nil
	}
	return nil, fmt.Errorf("encoding %q is not supported", enc)
}

// encodeLatin1 encodes s one byte per character, each at most limit.
func encodeLatin1(s string, limit rune) ([]byte, error) {
	b := make([]byte, 0, len(s))
	for i, r := range s {
		if r > limit || r == utf8.RuneError {
			return nil, fmt.Errorf("character at byte %d of the string cannot be encoded in one byte", i)
		}
		b = append(b, byte(r))
	}
	return b, nil
}
