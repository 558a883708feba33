package pickle

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
)

// Tuple is a Python tuple. It is a distinct type so that tuples and lists
// survive a round trip.
type Tuple []any

// Item is one key/value pair of a Dict.
type Item struct {
	Key, Value any
	hash       any // the key's hash (see keyer); nil for a str key, its own hash
}

// smallDict is the size up to which Dict and Set look keys up by scanning
// rather than through a map, which keeps the many small dicts of a memory
// snapshot cheap: an entry of headroom's history has up to 13 keys, and
// with an index each cost about 2 KB decoded for 100 bytes of pickle, so a
// long run's file exceeded the decoder's memory bound (16 bytes a byte).
const smallDict = 16

// Dict is a Python dict: key/value pairs in insertion order, with lookup by
// key. Keys follow Python's rules: str, int, float, bool, None, bytes,
// tuples of those and frozensets; 1, 1.0 and True are the same key. Use
// NewDict or DictOf to make one; the zero value is not ready for Set. The
// read methods accept a nil *Dict as empty.
type Dict struct {
	items []Item
	index map[any]int // hash -> position, once len(items) > smallDict
	// 1 + the memo slot it was first stored in while decoding; 0 for none
	memoAt uint64
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{} }

// DictOf returns a dict of the given keys and values, alternating:
// DictOf("action", "alloc", "size", 512). It panics if kv has odd length or
// a key is unhashable, as a Go map literal with such a key would not
// compile.
func DictOf(kv ...any) *Dict {
	if len(kv)%2 != 0 {
		panic("pickle.DictOf: odd number of arguments")
	}
	d := &Dict{items: make([]Item, 0, len(kv)/2)}
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

// Len returns the number of items.
func (d *Dict) Len() int {
	if d == nil {
		return 0
	}
	return len(d.items)
}

// Items returns the items in insertion order. The slice is the dict's own:
// values may be changed through it, keys must not.
func (d *Dict) Items() []Item {
	if d == nil {
		return nil
	}
	return d.items
}

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []any {
	keys := make([]any, d.Len())
	for i, it := range d.Items() {
		keys[i] = it.Key
	}
	return keys
}

// Get returns the value stored under key.
func (d *Dict) Get(key any) (any, bool) {
	i := d.find(key)
	if i < 0 {
		return nil, false
	}
	return d.items[i].Value, true
}

// Has reports whether key is present.
func (d *Dict) Has(key any) bool { return d.find(key) >= 0 }

// hasStr is Has of a str key, without boxing it (Replace asks it of every
// dict appended to a list).
func (d *Dict) hasStr(s string) bool {
	if d.index != nil {
		return d.lookup(s, nil) >= 0
	}
	for i := range d.items {
		if d.items[i].hash == nil {
			if k, ok := d.items[i].Key.(string); ok && k == s {
				return true
			}
		}
	}
	return false
}

// Set stores value under key, keeping the position (and the key object) of
// an existing equal key, as Python does. A key of a named string type is
// stored as a plain string. Set panics if the key is unhashable (a list,
// dict or set), as a Go map does for an unhashable key.
func (d *Dict) Set(key, value any) {
	h, err := new(keyer).hash(key)
	if err != nil {
		panic("pickle.Dict.Set: " + err.Error())
	}
	if s, ok := h.(string); ok {
		d.set(s, value, nil)
		return
	}
	d.set(key, value, h)
}

// set stores value under key, whose hash is h (nil for a str key).
func (d *Dict) set(key, value, h any) {
	if i := d.lookup(key, h); i >= 0 {
		d.items[i].Value = value
		return
	}
	d.items = append(d.items, Item{Key: key, Value: value, hash: h})
	n := len(d.items)
	if d.index != nil {
		d.index[d.items[n-1].fullHash()] = n - 1
	} else if n > smallDict {
		d.index = make(map[any]int, 2*n)
		for i := range d.items {
			d.index[d.items[i].fullHash()] = i
		}
	}
}

func (it *Item) fullHash() any {
	if it.hash == nil {
		return it.Key
	}
	return it.hash
}

func (d *Dict) find(key any) int {
	if d == nil {
		return -1
	}
	h, err := new(keyer).hash(key)
	if err != nil {
		return -1
	}
	if s, ok := h.(string); ok {
		return d.lookup(s, nil)
	}
	return d.lookup(key, h)
}

// lookup finds the position of key, whose hash is h (nil for a str key),
// or returns -1.
func (d *Dict) lookup(key, h any) int {
	if d.index != nil {
		if h == nil {
			h = key
		}
		if i, ok := d.index[h]; ok {
			return i
		}
		return -1
	}
	if h == nil {
		s := key.(string)
		for i := range d.items {
			if d.items[i].hash == nil && d.items[i].Key.(string) == s {
				return i
			}
		}
		return -1
	}
	for i := range d.items {
		if d.items[i].hash == h {
			return i
		}
	}
	return -1
}

// GetString returns the str stored under key.
func (d *Dict) GetString(key string) (string, error) {
	v, err := d.field(key)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fieldType(key, "str", v)
	}
	return s, nil
}

// GetInt returns the int stored under key; a bool or an int outside the
// int64 range is an error.
func (d *Dict) GetInt(key string) (int64, error) {
	v, err := d.field(key)
	if err != nil {
		return 0, err
	}
	i, ok := v.(int64)
	if !ok {
		return 0, fieldType(key, "int", v)
	}
	return i, nil
}

// GetFloat returns the float (or int, converted) stored under key.
func (d *Dict) GetFloat(key string) (float64, error) {
	v, err := d.field(key)
	if err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	}
	return 0, fieldType(key, "float", v)
}

// GetBool returns the bool stored under key.
func (d *Dict) GetBool(key string) (bool, error) {
	v, err := d.field(key)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fieldType(key, "bool", v)
	}
	return b, nil
}

// GetList returns the list stored under key.
func (d *Dict) GetList(key string) ([]any, error) {
	v, err := d.field(key)
	if err != nil {
		return nil, err
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fieldType(key, "list", v)
	}
	return l, nil
}

// GetTuple returns the tuple stored under key.
func (d *Dict) GetTuple(key string) (Tuple, error) {
	v, err := d.field(key)
	if err != nil {
		return nil, err
	}
	t, ok := v.(Tuple)
	if !ok {
		return nil, fieldType(key, "tuple", v)
	}
	return t, nil
}

// GetDict returns the dict stored under key.
func (d *Dict) GetDict(key string) (*Dict, error) {
	v, err := d.field(key)
	if err != nil {
		return nil, err
	}
	m, ok := v.(*Dict)
	if !ok {
		return nil, fieldType(key, "dict", v)
	}
	return m, nil
}

func (d *Dict) field(key string) (any, error) {
	v, ok := d.Get(key)
	if !ok {
		return nil, &FieldError{Key: key, Err: ErrMissingKey}
	}
	return v, nil
}

func fieldType(key, want string, got any) error {
	return &FieldError{Key: key, Want: want, Got: TypeName(got), Err: ErrType}
}

// ErrMissingKey is what a Dict's typed getters return (wrapped in a
// *FieldError) for an absent key.
var ErrMissingKey = errors.New("missing key")

// FieldError is the error of a Dict's typed getter.
type FieldError struct {
	Key       string
	Want, Got string // Python type names; empty when the key is missing
	Err       error  // ErrMissingKey or ErrType
}

func (e *FieldError) Error() string {
	if e.Err == ErrMissingKey {
		return "pickle: key " + strconv.Quote(e.Key) + " missing"
	}
	return "pickle: key " + strconv.Quote(e.Key) + ": want " + e.Want + ", got " + e.Got
}

// Unwrap returns ErrMissingKey or ErrType.
func (e *FieldError) Unwrap() error { return e.Err }

// Set is a Python set, or a frozenset when Frozen is set. Items keep the
// order in which they were added.
type Set struct {
	Frozen bool
	items  []any
	hashes []any
	index  map[any]struct{}
}

// NewSet returns a set of the given items. It panics on an unhashable item.
func NewSet(items ...any) *Set {
	s := &Set{}
	for _, v := range items {
		s.Add(v)
	}
	return s
}

// NewFrozenSet returns a frozenset of the given items. It panics on an
// unhashable item.
func NewFrozenSet(items ...any) *Set {
	s := NewSet(items...)
	s.Frozen = true
	return s
}

// Len returns the number of items.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.items)
}

// Items returns the items in the order they were added; do not modify it.
func (s *Set) Items() []any {
	if s == nil {
		return nil
	}
	return s.items
}

// Has reports whether v is in the set.
func (s *Set) Has(v any) bool {
	if s == nil {
		return false
	}
	h, err := new(keyer).hash(v)
	return err == nil && s.has(h)
}

// Add adds v. It panics if v is unhashable.
func (s *Set) Add(v any) {
	h, err := new(keyer).hash(v)
	if err != nil {
		panic("pickle.Set.Add: " + err.Error())
	}
	s.add(v, h)
}

func (s *Set) has(h any) bool {
	if s.index != nil {
		_, ok := s.index[h]
		return ok
	}
	for _, x := range s.hashes {
		if x == h {
			return true
		}
	}
	return false
}

func (s *Set) add(v, h any) {
	if s.has(h) {
		return
	}
	s.items = append(s.items, v)
	s.hashes = append(s.hashes, h)
	if s.index != nil {
		s.index[h] = struct{}{}
	} else if len(s.items) > smallDict {
		s.index = make(map[any]struct{}, 2*len(s.items))
		for _, x := range s.hashes {
			s.index[x] = struct{}{}
		}
	}
}

// Class is a class (or function) named by GLOBAL, STACK_GLOBAL or INST that
// Options allowed. It is what a pickle of a class itself decodes to; as the
// callable of REDUCE, NEWOBJ, OBJ or INST it runs the Constructor that
// Options gave for it.
type Class struct {
	Module, Name string
	new          Constructor
	builtin      func(d *Decoder, args []any) (any, error)
}

// String returns "module.name".
func (c *Class) String() string { return c.Module + "." + c.Name }

// Object is what the Constructor Record returns: the record of an
// instantiation that ran nothing. BUILD stores its state argument in State.
type Object struct {
	Class string // "module.name"
	Args  []any  // the arguments of REDUCE, NEWOBJ, OBJ or INST
	State any    // the argument of BUILD, or nil
}

// TypeName returns the Python type name of a decoded value ("str", "int",
// "list", "dict", "NoneType"), for error messages.
func TypeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case []any, *list:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *Set:
		if x.Frozen {
			return "frozenset"
		}
		return "set"
	case *Class:
		return "type"
	case *Object:
		return x.Class
	}
	return fmt.Sprintf("%T", v)
}
