package pickle

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
)

// Pickler constants shared with CPython's pickle.py, which this encoder
// follows opcode for opcode so that its output equals pickle.dumps'.
const (
	batchSize       = 1000     // items per APPENDS, SETITEMS, ADDITEMS
	frameSizeTarget = 64 << 10 // a frame is committed once this full
	frameSizeMin    = 4        // smaller frames get no FRAME header
)

// Marshal returns the pickle of v in the given protocol (2 to 5). See
// Encoder.Encode for the values it accepts.
func Marshal(v any, protocol int) ([]byte, error) {
	var b bytes.Buffer
	if err := NewEncoder(&b, protocol).Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Encoder writes pickles to a stream.
type Encoder struct {
	w     io.Writer
	proto int
	// MaxDepth bounds the nesting of containers (a Go value that contains
	// itself through tuples alone would otherwise recurse forever).
	// Default DefaultMaxDepth.
	MaxDepth int
}

// NewEncoder returns an Encoder writing protocol (2 to 5) pickles to w.
// Protocol 4 is what PyTorch's memory_viz page reads (it reads 2 to 4);
// protocol 2 is what Python 2 reads.
func NewEncoder(w io.Writer, protocol int) *Encoder {
	return &Encoder{w: w, proto: protocol}
}

// Encode writes one complete pickle of v, with a fresh memo, exactly as
// Python's pickle.dumps(v, protocol) would write the same Python value:
//
//	nil, and nil slices, maps and pointers   None
//	bool                                     bool
//	int, int8 … int64, uint … uint64,
//	  *big.Int, big.Int                      int
//	float64, float32                         float
//	string                                   str (must be UTF-8)
//	[]byte                                   bytes
//	Tuple                                    tuple
//	[]any and other slices and arrays        list
//	*Dict                                    dict, in its order
//	map[string]any and other maps with
//	  string or integer keys                 dict, keys sorted
//	*Set                                     set or frozenset
//
// as well as named types of these kinds. Equal strings are written once and
// shared through the memo (Python shares identical objects, and the
// difference cannot be observed); a slice, *Dict, map or *Set that occurs
// twice is written once and occurs twice in Python too, as the same object.
// *Class and *Object are never written: this package writes data, not code.
func (e *Encoder) Encode(v any) error {
	if e.proto < 2 || e.proto > HighestProtocol {
		return &EncodeError{Path: "$", Msg: fmt.Sprintf("protocol %d is not supported (only 2 to %d)", e.proto, HighestProtocol), Err: ErrUnsupported}
	}
	s := &encState{
		proto:    e.proto,
		out:      bufio.NewWriterSize(e.w, 64<<10),
		maxDepth: cmp.Or(e.MaxDepth, DefaultMaxDepth),
		memo:     map[memoKey]int{},
		strs:     map[string]int{},
	}
	s.out.Write([]byte{opPROTO, byte(e.proto)})
	if e.proto >= 4 {
		s.framing = true
	}
	if err := s.save(v); err != nil {
		if pe, ok := err.(*EncodeError); ok {
			pe.Path = "$" + pe.Path
		}
		return err
	}
	s.write(opSTOP)
	if s.framing {
		s.commitFrame(true)
	}
	return s.out.Flush()
}

// memoKey identifies a Go value that Python would see as one object.
type memoKey struct {
	kind byte // 'l' list, 't' tuple, 'b' bytes, 'd' dict, 'm' map, 's' set, 'g' global, 'B' short bytes by value
	p    any  // pointer to the first element, the *Dict or *Set, the map's address, or a value
	n    int  // length, for slices
}

type encState struct {
	proto    int
	out      *bufio.Writer
	framing  bool
	frame    []byte
	memo     map[memoKey]int
	strs     map[string]int
	memoLen  int
	depth    int
	maxDepth int
	scratch  [9]byte
}

func (s *encState) write(p ...byte) {
	if s.framing {
		s.frame = append(s.frame, p...)
	} else {
		s.out.Write(p)
	}
}

func (s *encState) writeString(str string) {
	if s.framing {
		s.frame = append(s.frame, str...)
	} else {
		s.out.WriteString(str)
	}
}

// commitFrame ends the current frame once it holds frameSizeTarget bytes
// (or always, with force), as Python's _Framer.commit_frame does.
func (s *encState) commitFrame(force bool) {
	if !s.framing || (len(s.frame) < frameSizeTarget && !force) {
		return
	}
	if len(s.frame) >= frameSizeMin {
		var h [9]byte
		h[0] = opFRAME
		binary.LittleEndian.PutUint64(h[1:], uint64(len(s.frame)))
		s.out.Write(h[:])
	}
	s.out.Write(s.frame)
	s.frame = s.frame[:0]
}

// writeLarge writes an opcode header and a large payload outside any
// frame, as Python's _Framer.write_large_bytes does.
func (s *encState) writeLarge(header []byte, payload string) {
	if s.framing {
		s.commitFrame(true)
	}
	s.out.Write(header)
	s.out.WriteString(payload)
}

func (s *encState) put() {
	idx := s.memoLen
	s.memoLen++
	switch {
	case s.proto >= 4:
		s.write(opMEMOIZE)
	case idx < 256:
		s.write(opBINPUT, byte(idx))
	default:
		s.scratch[0] = opLONG_BINPUT
		binary.LittleEndian.PutUint32(s.scratch[1:], uint32(idx))
		s.write(s.scratch[:5]...)
	}
}

func (s *encState) memoize(k memoKey) {
	s.memo[k] = s.memoLen
	s.put()
}

func (s *encState) get(idx int) {
	if idx < 256 {
		s.write(opBINGET, byte(idx))
		return
	}
	s.scratch[0] = opLONG_BINGET
	binary.LittleEndian.PutUint32(s.scratch[1:], uint32(idx))
	s.write(s.scratch[:5]...)
}

// fromMemo writes a GET if k was written before.
func (s *encState) fromMemo(k memoKey) bool {
	if idx, ok := s.memo[k]; ok {
		s.get(idx)
		return true
	}
	return false
}

func errAt(err error, seg string) error {
	if pe, ok := err.(*EncodeError); ok {
		pe.Path = seg + pe.Path
	}
	return err
}

func unsupported(format string, args ...any) error {
	return &EncodeError{Msg: fmt.Sprintf(format, args...), Err: ErrUnsupported}
}

// save writes v, as Pickler.save does.
func (s *encState) save(v any) error {
	s.commitFrame(false)
	switch x := v.(type) {
	case nil:
		s.write(opNONE)
	case bool:
		if x {
			s.write(opNEWTRUE)
		} else {
			s.write(opNEWFALSE)
		}
	case int:
		s.saveInt(int64(x))
	case int8:
		s.saveInt(int64(x))
	case int16:
		s.saveInt(int64(x))
	case int32:
		s.saveInt(int64(x))
	case int64:
		s.saveInt(x)
	case uint:
		s.saveUint(uint64(x))
	case uint8:
		s.saveInt(int64(x))
	case uint16:
		s.saveInt(int64(x))
	case uint32:
		s.saveInt(int64(x))
	case uint64:
		s.saveUint(x)
	case *big.Int:
		if x == nil {
			s.write(opNONE)
		} else {
			s.saveBig(x)
		}
	case big.Int:
		s.saveBig(&x)
	case float64:
		s.saveFloat(x)
	case float32:
		s.saveFloat(float64(x))
	case string:
		return s.saveStr(x, true)
	case []byte:
		if x == nil {
			s.write(opNONE)
			return nil
		}
		return s.saveBytes(x)
	case Tuple:
		if x == nil {
			s.write(opNONE)
			return nil
		}
		return s.saveTuple(x)
	case []any:
		if x == nil {
			s.write(opNONE)
			return nil
		}
		return s.saveList(sliceKey('l', x), len(x), func(i int) any { return x[i] })
	case *Dict:
		if x == nil {
			s.write(opNONE)
			return nil
		}
		return s.saveDict(memoKey{kind: 'd', p: x}, x.Len(), func(i int) (any, any) { return x.items[i].Key, x.items[i].Value })
	case Dict:
		return s.save(&x)
	case map[string]any:
		if x == nil {
			s.write(opNONE)
			return nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return s.saveDict(memoKey{kind: 'm', p: reflect.ValueOf(x).Pointer()}, len(keys), func(i int) (any, any) { return keys[i], x[keys[i]] })
	case *Set:
		if x == nil {
			s.write(opNONE)
			return nil
		}
		return s.saveSet(x)
	case *Class, *Object:
		return unsupported("cannot pickle a %T: this package writes data, never classes", v)
	default:
		return s.saveReflect(reflect.ValueOf(v))
	}
	return nil
}

// sliceKey identifies a slice by its first element's address and length.
// A slice without capacity has no address of its own (all of them share
// one), so it gets a key no other value has.
func sliceKey[T any](kind byte, x []T) memoKey {
	if cap(x) == 0 {
		return memoKey{kind: kind, p: new(byte)}
	}
	return memoKey{kind: kind, p: &x[:1][0], n: len(x)}
}

func (s *encState) saveReflect(r reflect.Value) error {
	switch r.Kind() {
	case reflect.Bool:
		return s.save(r.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		s.saveInt(r.Int())
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		s.saveUint(r.Uint())
		return nil
	case reflect.Float32, reflect.Float64:
		s.saveFloat(r.Float())
		return nil
	case reflect.String:
		return s.saveStr(r.String(), true)
	case reflect.Slice:
		if r.IsNil() {
			s.write(opNONE)
			return nil
		}
		if r.Type().Elem().Kind() == reflect.Uint8 {
			return s.saveBytes(r.Bytes())
		}
		var k memoKey
		if r.Cap() == 0 {
			k = memoKey{kind: 'l', p: new(byte)}
		} else {
			k = memoKey{kind: 'l', p: r.Slice(0, 1).Index(0).Addr().Interface(), n: r.Len()}
		}
		return s.saveList(k, r.Len(), func(i int) any { return r.Index(i).Interface() })
	case reflect.Array:
		return s.saveList(memoKey{kind: 'l', p: new(byte)}, r.Len(), func(i int) any { return r.Index(i).Interface() })
	case reflect.Map:
		if r.IsNil() {
			s.write(opNONE)
			return nil
		}
		keys := r.MapKeys()
		switch r.Type().Key().Kind() {
		case reflect.String:
			slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(a.String(), b.String()) })
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(a.Int(), b.Int()) })
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(a.Uint(), b.Uint()) })
		default:
			return unsupported("cannot pickle a %s: map keys must be strings or integers", r.Type())
		}
		return s.saveDict(memoKey{kind: 'm', p: r.Pointer()}, len(keys), func(i int) (any, any) {
			return keys[i].Interface(), r.MapIndex(keys[i]).Interface()
		})
	case reflect.Pointer, reflect.Interface:
		if r.IsNil() {
			s.write(opNONE)
			return nil
		}
	case reflect.Invalid:
		s.write(opNONE)
		return nil
	}
	return unsupported("cannot pickle a %s", r.Type())
}

// saveInt is Pickler.save_long for a value in the int64 range.
func (s *encState) saveInt(i int64) {
	switch {
	case i >= 0 && i <= 0xff:
		s.write(opBININT1, byte(i))
	case i >= 0 && i <= 0xffff:
		s.write(opBININT2, byte(i), byte(i>>8))
	case i >= math.MinInt32 && i <= math.MaxInt32:
		s.scratch[0] = opBININT
		binary.LittleEndian.PutUint32(s.scratch[1:], uint32(int32(i)))
		s.write(s.scratch[:5]...)
	default:
		s.saveLong(encodeLong(big.NewInt(i)))
	}
}

func (s *encState) saveUint(u uint64) {
	if u <= math.MaxInt64 {
		s.saveInt(int64(u))
		return
	}
	s.saveLong(encodeLong(new(big.Int).SetUint64(u)))
}

func (s *encState) saveBig(x *big.Int) {
	if x.IsInt64() {
		s.saveInt(x.Int64())
		return
	}
	s.saveLong(encodeLong(x))
}

func (s *encState) saveLong(b []byte) {
	if len(b) < 256 {
		s.write(opLONG1, byte(len(b)))
	} else {
		s.scratch[0] = opLONG4
		binary.LittleEndian.PutUint32(s.scratch[1:], uint32(len(b)))
		s.write(s.scratch[:5]...)
	}
	s.write(b...)
}

// encodeLong is pickle.encode_long: x in little-endian two's complement,
// in the fewest bytes Python uses.
func encodeLong(x *big.Int) []byte {
	if x.Sign() == 0 {
		return nil
	}
	n := x.BitLen()/8 + 1
	v := new(big.Int).Set(x)
	if x.Sign() < 0 {
		v.Add(v, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	be := v.FillBytes(make([]byte, n))
	b := make([]byte, n)
	for i, c := range be {
		b[n-1-i] = c
	}
	if x.Sign() < 0 && n > 1 && b[n-1] == 0xff && b[n-2]&0x80 != 0 {
		b = b[:n-1]
	}
	return b
}

func (s *encState) saveFloat(f float64) {
	s.scratch[0] = opBINFLOAT
	binary.BigEndian.PutUint64(s.scratch[1:], math.Float64bits(f))
	s.write(s.scratch[:9]...)
}

// saveStr is Pickler.save_str. Shared strings are shared by value; a
// string the pickler makes up (the Latin-1 text of bytes in protocol 2) is
// not, as in Python, where it is a new object, unless it is one character
// long, as CPython then uses its cached one-character strings.
func (s *encState) saveStr(str string, shared bool) error {
	if shared {
		if idx, ok := s.strs[str]; ok {
			s.get(idx)
			return nil
		}
	}
	if i := invalidUTF8([]byte(str)); i >= 0 {
		return &EncodeError{Msg: fmt.Sprintf("string is not valid UTF-8 (byte %d of %d)", i, len(str)), Err: ErrType}
	}
	n := len(str)
	switch {
	case n <= 0xff && s.proto >= 4:
		s.write(opSHORT_BINUNICODE, byte(n))
		s.writeString(str)
	case uint64(n) > math.MaxUint32 && s.proto >= 4:
		var h [9]byte
		h[0] = opBINUNICODE8
		binary.LittleEndian.PutUint64(h[1:], uint64(n))
		s.writeLarge(h[:], str)
	case uint64(n) > math.MaxUint32:
		return &EncodeError{Msg: fmt.Sprintf("string of %d bytes needs protocol 4", n), Err: ErrUnsupported}
	case n >= frameSizeTarget:
		var h [5]byte
		h[0] = opBINUNICODE
		binary.LittleEndian.PutUint32(h[1:], uint32(n))
		s.writeLarge(h[:], str)
	default:
		s.scratch[0] = opBINUNICODE
		binary.LittleEndian.PutUint32(s.scratch[1:], uint32(n))
		s.write(s.scratch[:5]...)
		s.writeString(str)
	}
	if shared {
		s.strs[str] = s.memoLen
	}
	s.put()
	return nil
}

// saveBytes is Pickler.save_bytes. Empty and one-byte bytes are shared by
// value, as CPython caches those objects.
func (s *encState) saveBytes(b []byte) error {
	var k memoKey
	if len(b) <= 1 {
		k = memoKey{kind: 'B', p: string(b)}
	} else {
		k = memoKey{kind: 'b', p: &b[0], n: len(b)}
	}
	if s.fromMemo(k) {
		return nil
	}
	if s.proto < 3 {
		if len(b) == 0 {
			s.saveGlobal("builtins", "bytes")
			s.commitFrame(false)
			s.write(opEMPTY_TUPLE)
		} else {
			// _codecs.encode(str(b, "latin1"), "latin1")
			s.saveGlobal("_codecs", "encode")
			text := make([]rune, len(b))
			for i, c := range b {
				text[i] = rune(c)
			}
			s.commitFrame(false)
			if err := s.saveStr(string(text), len(b) == 1); err != nil {
				return err
			}
			s.commitFrame(false)
			if err := s.saveStr("latin1", true); err != nil {
				return err
			}
			s.write(opTUPLE2)
			s.put()
		}
		s.write(opREDUCE)
		s.memoize(k)
		return nil
	}
	n := len(b)
	switch {
	case n <= 0xff:
		s.write(opSHORT_BINBYTES, byte(n))
		s.write(b...)
	case uint64(n) > math.MaxUint32 && s.proto >= 4:
		var h [9]byte
		h[0] = opBINBYTES8
		binary.LittleEndian.PutUint64(h[1:], uint64(n))
		s.writeLarge(h[:], string(b))
	case uint64(n) > math.MaxUint32:
		return &EncodeError{Msg: fmt.Sprintf("bytes of length %d need protocol 4", n), Err: ErrUnsupported}
	case n >= frameSizeTarget:
		var h [5]byte
		h[0] = opBINBYTES
		binary.LittleEndian.PutUint32(h[1:], uint32(n))
		s.writeLarge(h[:], string(b))
	default:
		s.scratch[0] = opBINBYTES
		binary.LittleEndian.PutUint32(s.scratch[1:], uint32(n))
		s.write(s.scratch[:5]...)
		s.write(b...)
	}
	s.memoize(k)
	return nil
}

// saveGlobal is Pickler.save_global for the few built-ins this encoder
// names (in protocols 2 and 3 only): set, frozenset, bytes and
// _codecs.encode.
func (s *encState) saveGlobal(module, name string) {
	s.commitFrame(false)
	k := memoKey{kind: 'g', p: module + "." + name}
	if s.fromMemo(k) {
		return
	}
	if s.proto >= 4 {
		s.saveStr(module, true)
		s.saveStr(name, true)
		s.write(opSTACK_GLOBAL)
	} else {
		if s.proto < 3 && module == "builtins" {
			module = "__builtin__" // fix_imports
		}
		s.write(opGLOBAL)
		s.writeString(module + "\n" + name + "\n")
	}
	s.memoize(k)
}

func (s *encState) enter() error {
	s.depth++
	if s.depth > s.maxDepth {
		return &EncodeError{Msg: fmt.Sprintf("containers nested deeper than %d (a value that contains itself?)", s.maxDepth), Err: ErrLimit}
	}
	return nil
}

// saveTuple is Pickler.save_tuple, including its handling of a tuple that
// was memoized while its elements were written (a recursive tuple).
func (s *encState) saveTuple(t Tuple) error {
	if len(t) == 0 {
		s.write(opEMPTY_TUPLE)
		return nil
	}
	k := memoKey{kind: 't', p: &t[0], n: len(t)}
	if s.fromMemo(k) {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer func() { s.depth-- }()
	n := len(t)
	if n > 3 {
		s.write(opMARK)
	}
	for i, e := range t {
		if err := s.save(e); err != nil {
			return errAt(err, "["+strconv.Itoa(i)+"]")
		}
	}
	if idx, ok := s.memo[k]; ok {
		if n > 3 {
			s.write(opPOP_MARK)
		} else {
			for range n {
				s.write(opPOP)
			}
		}
		s.get(idx)
		return nil
	}
	if n > 3 {
		s.write(opTUPLE)
	} else {
		s.write(opTUPLE1 + byte(n-1))
	}
	s.memoize(k)
	return nil
}

// saveList is Pickler.save_list and _batch_appends.
func (s *encState) saveList(k memoKey, n int, at func(int) any) error {
	if s.fromMemo(k) {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer func() { s.depth-- }()
	s.write(opEMPTY_LIST)
	s.memoize(k)
	return s.batch(n, opAPPENDS, opAPPEND, func(i int) error {
		if err := s.save(at(i)); err != nil {
			return errAt(err, "["+strconv.Itoa(i)+"]")
		}
		return nil
	})
}

// batch writes n items in batches of batchSize: MARK items many, or one
// item and one.
func (s *encState) batch(n int, many, one byte, item func(int) error) error {
	for start := 0; ; start += batchSize {
		m := min(n-start, batchSize)
		if m > 1 {
			s.write(opMARK)
		}
		for i := start; i < start+m; i++ {
			if err := item(i); err != nil {
				return err
			}
		}
		switch {
		case m > 1:
			s.write(many)
		case m == 1:
			s.write(one)
		}
		if m < batchSize {
			return nil
		}
	}
}

// saveDict is Pickler.save_dict and _batch_setitems.
func (s *encState) saveDict(k memoKey, n int, at func(int) (any, any)) error {
	if s.fromMemo(k) {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer func() { s.depth-- }()
	s.write(opEMPTY_DICT)
	s.memoize(k)
	return s.batch(n, opSETITEMS, opSETITEM, func(i int) error {
		key, value := at(i)
		if err := s.save(key); err != nil {
			return errAt(err, fmt.Sprintf("[key %d]", i))
		}
		if err := s.save(value); err != nil {
			return errAt(err, "["+keyText(key)+"]")
		}
		return nil
	})
}

func keyText(k any) string {
	if s, ok := k.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(k)
}

// saveSet is Pickler.save_set and save_frozenset.
func (s *encState) saveSet(x *Set) error {
	k := memoKey{kind: 's', p: x}
	if s.fromMemo(k) {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer func() { s.depth-- }()
	item := func(i int) error {
		if err := s.save(x.items[i]); err != nil {
			return errAt(err, "[item "+strconv.Itoa(i)+"]")
		}
		return nil
	}
	if s.proto < 4 {
		// set(list) and frozenset(list), through REDUCE
		name := "set"
		if x.Frozen {
			name = "frozenset"
		}
		s.saveGlobal("builtins", name)
		s.commitFrame(false)
		s.write(opEMPTY_LIST)
		s.put()
		if err := s.batch(len(x.items), opAPPENDS, opAPPEND, item); err != nil {
			return err
		}
		s.write(opTUPLE1)
		s.put()
		s.write(opREDUCE)
		s.memoize(k)
		return nil
	}
	if x.Frozen {
		s.write(opMARK)
		for i := range x.items {
			if err := item(i); err != nil {
				return err
			}
		}
		if idx, ok := s.memo[k]; ok {
			s.write(opPOP_MARK)
			s.get(idx)
			return nil
		}
		s.write(opFROZENSET)
		s.memoize(k)
		return nil
	}
	s.write(opEMPTY_SET)
	s.memoize(k)
	n := len(x.items)
	for start := 0; ; start += batchSize {
		m := min(n-start, batchSize)
		if m > 0 {
			s.write(opMARK)
			for i := start; i < start+m; i++ {
				if err := item(i); err != nil {
					return err
				}
			}
			s.write(opADDITEMS)
		}
		if m < batchSize {
			return nil
		}
	}
}
