package pickle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
)

// diff returns "" when a and b are the same decoded value, or where and how
// they differ. Floats compare by bits (NaN equals NaN, -0 differs from 0),
// dicts in order, sets as sets.
func diff(a, b any) string { return diffAt("$", a, b) }

func diffAt(path string, a, b any) string {
	switch x := a.(type) {
	case nil:
		if b != nil {
			return fmt.Sprintf("%s: nil vs %T %v", path, b, b)
		}
		return ""
	case bool, int64, string:
		if a != b {
			return fmt.Sprintf("%s: %T %v vs %T %v", path, a, clipAny(a), b, clipAny(b))
		}
		return ""
	case *big.Int:
		y, ok := b.(*big.Int)
		if !ok || x.Cmp(y) != 0 {
			return fmt.Sprintf("%s: big %v vs %T %v", path, x, b, b)
		}
		return ""
	case float64:
		y, ok := b.(float64)
		if !ok || (math.Float64bits(x) != math.Float64bits(y) && !(math.IsNaN(x) && math.IsNaN(y))) {
			return fmt.Sprintf("%s: float %v vs %T %v", path, x, b, b)
		}
		return ""
	case []byte:
		y, ok := b.([]byte)
		if !ok || !bytes.Equal(x, y) {
			return fmt.Sprintf("%s: bytes %q vs %T %v", path, clipAny(string(x)), b, clipAny(b))
		}
		return ""
	case []any:
		y, ok := b.([]any)
		if !ok {
			return fmt.Sprintf("%s: list vs %T", path, b)
		}
		return diffSeq(path, x, y)
	case Tuple:
		y, ok := b.(Tuple)
		if !ok {
			return fmt.Sprintf("%s: tuple vs %T", path, b)
		}
		return diffSeq(path, x, y)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok {
			return fmt.Sprintf("%s: dict vs %T", path, b)
		}
		if x.Len() != y.Len() {
			return fmt.Sprintf("%s: dict of %d items vs %d", path, x.Len(), y.Len())
		}
		for i, it := range x.Items() {
			jt := y.Items()[i]
			p := path + "[" + keyString(it.Key) + "]"
			if d := diffAt(p+"(key)", it.Key, jt.Key); d != "" {
				return d
			}
			if d := diffAt(p, it.Value, jt.Value); d != "" {
				return d
			}
		}
		return ""
	case *Set:
		y, ok := b.(*Set)
		if !ok || x.Frozen != y.Frozen || x.Len() != y.Len() {
			return fmt.Sprintf("%s: %s of %d vs %s of %d", path, TypeName(a), x.Len(), TypeName(b), y.Len())
		}
		for _, e := range x.Items() {
			if !y.Has(e) {
				return fmt.Sprintf("%s: item %v missing", path, e)
			}
		}
		return ""
	case *Object:
		y, ok := b.(*Object)
		if !ok || x.Class != y.Class {
			return fmt.Sprintf("%s: object %s vs %T", path, x.Class, b)
		}
		if d := diffSeq(path+".args", x.Args, y.Args); d != "" {
			return d
		}
		return diffAt(path+".state", x.State, y.State)
	case *Class:
		y, ok := b.(*Class)
		if !ok || x.String() != y.String() {
			return fmt.Sprintf("%s: class %s vs %T %v", path, x, b, b)
		}
		return ""
	}
	return fmt.Sprintf("%s: cannot compare %T", path, a)
}

func diffSeq(path string, x, y []any) string {
	if len(x) != len(y) {
		return fmt.Sprintf("%s: length %d vs %d", path, len(x), len(y))
	}
	for i := range x {
		if d := diffAt(path+"["+strconv.Itoa(i)+"]", x[i], y[i]); d != "" {
			return d
		}
	}
	return ""
}

func keyString(k any) string {
	if s, ok := k.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(k)
}

func clipAny(v any) any {
	if s, ok := v.(string); ok && len(s) > 60 {
		return s[:60] + "..."
	}
	return v
}

// disasm returns the opcodes of a well-formed pickle, in order, up to and
// including STOP. It trusts the data; tests use it on pickles that decode.
func disasm(data []byte) ([]byte, error) {
	ops, _, err := disasmAt(data)
	return ops, err
}

// disasmAt is disasm that also returns each opcode's offset.
func disasmAt(data []byte) (ops []byte, offsets []int, err error) {
	for i := 0; i < len(data); {
		op := data[i]
		info := opTable[op]
		if info.name == "" {
			return ops, offsets, fmt.Errorf("offset %d: unknown opcode 0x%02x", i, op)
		}
		ops = append(ops, op)
		offsets = append(offsets, i)
		i++
		need := func(n int) error {
			if i+n > len(data) {
				return fmt.Errorf("offset %d: %s truncated", i, info.name)
			}
			i += n
			return nil
		}
		switch info.arg {
		case argU1:
			err = need(1)
		case argU2:
			err = need(2)
		case argU4:
			err = need(4)
		case argU8:
			err = need(8)
		case argLine, argLine2:
			lines := 1
			if info.arg == argLine2 {
				lines = 2
			}
			for ; lines > 0; lines-- {
				j := bytes.IndexByte(data[i:], '\n')
				if j < 0 {
					return ops, offsets, fmt.Errorf("offset %d: %s: no newline", i, info.name)
				}
				i += j + 1
			}
		case argLen1:
			if err = need(1); err == nil {
				err = need(int(data[i-1]))
			}
		case argLen4:
			if err = need(4); err == nil {
				err = need(int(binary.LittleEndian.Uint32(data[i-4:])))
			}
		case argLen8:
			if err = need(8); err == nil {
				err = need(int(binary.LittleEndian.Uint64(data[i-8:])))
			}
		}
		if err != nil {
			return ops, offsets, err
		}
		if op == opSTOP {
			return ops, offsets, nil
		}
	}
	return ops, offsets, fmt.Errorf("no STOP")
}

func bigInt(s string) *big.Int {
	b, ok := new(big.Int).SetString(s, 0)
	if !ok {
		panic(s)
	}
	return b
}

// pow2 returns sign * 2^n (+ add).
func pow2(n uint, sign int64, add int64) *big.Int {
	b := new(big.Int).Lsh(big.NewInt(1), n)
	b.Mul(b, big.NewInt(sign))
	return b.Add(b, big.NewInt(add))
}
