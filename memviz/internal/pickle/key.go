package pickle

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	"math/big"
	"reflect"
	"slices"
)

// Hashes make dict keys and set items equal exactly when Python's == says
// so. A str is its own hash; every other hashable value maps to a
// comparable value of one of these types. Tuples and frozensets hash to a
// SHA-256 digest of their items' hashes, so a hash has bounded size however
// large or deeply shared the key is.
type (
	intKey    int64    // int, bool, and integral floats in the int64 range
	bigKey    string   // other ints and integral floats: hexadecimal
	floatKey  uint64   // other floats: their bits (NaN canonical)
	bytesKey  string   // bytes
	noneKey   struct{} // None
	tupleKey  [32]byte // tuple
	frozenKey [32]byte // frozenset
	classKey  string   // a class, by "module.name"
)

// keyer hashes keys for one decode (or one Dict or Set call).
type keyer struct {
	maxDepth int         // 0 means DefaultMaxDepth
	budget   *int64      // bytes of hashing work still allowed; nil: no limit
	cache    map[any]any // tuple (by its first element's address) or *Set -> hash
	buf      []byte      // scratch for serialising an item
	digest   hash.Hash   // scratch SHA-256
	stack    [][]byte    // scratch for frozenset items
}

var (
	errUnhashable = errors.New("unhashable")
	errKeyDepth   = errors.New("key nested too deeply")
	errKeyBudget  = errors.New("key hashing budget exhausted")
)

// charge counts n bytes of hashing work.
func (k *keyer) charge(n int) error {
	if k.budget == nil {
		return nil
	}
	*k.budget -= int64(n)
	if *k.budget < 0 {
		return errKeyBudget
	}
	return nil
}

// hash returns v's hash.
func (k *keyer) hash(v any) (any, error) {
	return k.hashAt(v, 0)
}

func (k *keyer) hashAt(v any, depth int) (any, error) {
	switch x := v.(type) {
	case nil:
		return noneKey{}, nil
	case bool:
		if x {
			return intKey(1), nil
		}
		return intKey(0), nil
	case int64:
		return intKey(x), nil
	case *big.Int:
		if x.IsInt64() {
			return intKey(x.Int64()), nil
		}
		return bigKey(x.Text(16)), k.charge(x.BitLen() / 4)
	case float64:
		return floatHash(x), nil
	case string:
		return x, k.charge(len(x))
	case []byte:
		return bytesKey(x), k.charge(len(x))
	case Tuple:
		return k.tuple(x, depth)
	case *Set:
		if !x.Frozen {
			return nil, fmt.Errorf("%w type: 'set'", errUnhashable)
		}
		return k.frozen(x, depth)
	case *Class:
		return classKey(x.String()), nil
	case []any, *list, *Dict, *Object:
		return nil, fmt.Errorf("%w type: '%s'", errUnhashable, TypeName(v))
	}
	// named Go types of the plain kinds, for callers' convenience
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.String:
		return r.String(), nil
	case reflect.Bool:
		return k.hashAt(r.Bool(), depth)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return intKey(r.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if u := r.Uint(); u <= math.MaxInt64 {
			return intKey(u), nil
		}
		return bigKey(new(big.Int).SetUint64(r.Uint()).Text(16)), nil
	case reflect.Float32, reflect.Float64:
		return floatHash(r.Float()), nil
	}
	return nil, fmt.Errorf("%w type: '%s'", errUnhashable, TypeName(v))
}

// floatHash makes 2.0 equal to 2 and -0.0 to 0, as Python does.
func floatHash(f float64) any {
	switch {
	case math.IsNaN(f):
		return floatKey(0x7ff8000000000001)
	case math.IsInf(f, 0):
		return floatKey(math.Float64bits(f))
	case f == math.Trunc(f):
		if f >= -(1<<63) && f < 1<<63 {
			return intKey(int64(f))
		}
		i, _ := big.NewFloat(f).Int(nil)
		return bigKey(i.Text(16))
	}
	return floatKey(math.Float64bits(f))
}

// serial appends an injective serialisation of hash h to b.
func serial(b []byte, h any) []byte {
	put := func(tag byte, s string) []byte {
		b = append(b, tag)
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
		return append(b, s...)
	}
	switch x := h.(type) {
	case string:
		return put('s', x)
	case intKey:
		return binary.LittleEndian.AppendUint64(append(b, 'i'), uint64(x))
	case floatKey:
		return binary.LittleEndian.AppendUint64(append(b, 'f'), uint64(x))
	case bigKey:
		return put('x', string(x))
	case bytesKey:
		return put('b', string(x))
	case classKey:
		return put('c', string(x))
	case noneKey:
		return append(b, 'N')
	case tupleKey:
		return append(append(b, 't'), x[:]...)
	case frozenKey:
		return append(append(b, 'z'), x[:]...)
	}
	panic(fmt.Sprintf("pickle: no serialisation for hash %T", h))
}

func (k *keyer) enter(depth int) error {
	limit := k.maxDepth
	if limit == 0 {
		limit = DefaultMaxDepth
	}
	if depth >= limit {
		return errKeyDepth
	}
	return nil
}

func (k *keyer) tuple(t Tuple, depth int) (any, error) {
	if len(t) > 0 && k.cache != nil {
		if h, ok := k.cache[&t[0]]; ok {
			return h, nil
		}
	}
	if err := k.enter(depth); err != nil {
		return nil, err
	}
	if k.cache == nil {
		k.cache = map[any]any{} // also makes a shared sub-tuple cost once
	}
	hs := make([]any, len(t))
	for i, e := range t {
		h, err := k.hashAt(e, depth+1)
		if err != nil {
			return nil, err
		}
		hs[i] = h
	}
	if k.digest == nil {
		k.digest = sha256.New()
	}
	k.digest.Reset()
	for _, h := range hs {
		k.buf = serial(k.buf[:0], h)
		if err := k.charge(len(k.buf)); err != nil {
			return nil, err
		}
		k.digest.Write(k.buf)
	}
	var key tupleKey
	k.digest.Sum(key[:0])
	if len(t) > 0 {
		k.cache[&t[0]] = key
	}
	return key, nil
}

func (k *keyer) frozen(s *Set, depth int) (any, error) {
	if k.cache != nil {
		if h, ok := k.cache[s]; ok {
			return h, nil
		}
	}
	if err := k.enter(depth); err != nil {
		return nil, err
	}
	if k.cache == nil {
		k.cache = map[any]any{}
	}
	// the items' own hashes were computed when they were added
	items := make([][]byte, len(s.hashes))
	for i, h := range s.hashes {
		b := serial(nil, h)
		if err := k.charge(len(b)); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		items[i] = sum[:]
	}
	slices.SortFunc(items, bytes.Compare)
	if k.digest == nil {
		k.digest = sha256.New()
	}
	k.digest.Reset()
	for _, it := range items {
		k.digest.Write(it)
	}
	var key frozenKey
	k.digest.Sum(key[:0])
	k.cache[s] = key
	return key, nil
}
