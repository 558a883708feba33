package pickle

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"unicode/utf8"
)

// Default limits, used where Options leaves a field zero.
const (
	DefaultMaxDepth    = 1000    // Python's default recursion limit
	DefaultMaxElements = 1 << 27 // values pushed, memo entries and marks
	DefaultMaxBytes    = 1 << 31 // string, bytes and long-int payload bytes
	DefaultMaxStack    = 1 << 20 // values on the stack at once
	DefaultMaxMemory   = 1 << 33 // estimated bytes the decoded values hold
)

// maxTextIntDigits is the longest decimal integer INT and LONG accept, as
// Python (3.11+) limits int-from-string conversion to 4300 digits.
const maxTextIntDigits = 4300

// Options controls what a Decoder accepts. The zero value (or a nil
// *Options) decodes plain values only, with the default limits.
type Options struct {
	// Allow lists the classes and functions a pickle may name with
	// GLOBAL, STACK_GLOBAL or INST, keyed "module.name" (for example
	// "collections.OrderedDict"), and the Constructor that stands in for
	// calling each. Names are Python 3's: in protocols 0 to 2 the modules
	// __builtin__ and copy_reg are read as builtins and copyreg. A name found in neither Allow nor the built-in
	// plain-value constructors (builtins.set, builtins.frozenset,
	// builtins.bytes, builtins.bytearray, _codecs.encode, which protocols
	// 0 to 3 use to spell sets and bytes) is rejected with an *Error
	// wrapping ErrNotAllowed and a *ClassError, at the offset of the
	// opcode that names it, before anything uses it. Allow takes
	// precedence over the built-ins.
	Allow map[string]Constructor

	// PersistentLoad resolves the persistent ids of PERSID (a str) and
	// BINPERSID (any value). Without it, persistent ids are an error
	// (ErrUnsupported).
	PersistentLoad func(pid any) (any, error)

	// Buffers are the out-of-band buffers of protocol 5, consumed in order
	// by NEXT_BUFFER (and returned as they are, not copied). Without them
	// NEXT_BUFFER is an error.
	Buffers [][]byte

	// MaxDepth bounds the nesting of containers in the result (and of
	// tuples used as keys); default DefaultMaxDepth, at most 100000.
	MaxDepth int
	// MaxElements bounds the number of values pushed on the stack, memo
	// entries and marks: in effect the number of values created. Default
	// DefaultMaxElements.
	MaxElements int64
	// MaxStack bounds the values on the stack at once: what lies between
	// a MARK and the opcode that consumes it, or what is pushed and never
	// consumed. Python's pickler appends and sets items in batches of
	// 1000, so only a tuple (or a protocol 0 LIST or DICT) of more values
	// needs a larger stack; a flood of pushes fails at the limit instead
	// of growing the stack with the input. Default DefaultMaxStack.
	MaxStack int
	// MaxBytes bounds the total size of str, bytes and long-int payloads
	// and of text arguments, plus the work of hashing dict keys and set
	// items (each key costs its size each time it is stored). Default
	// DefaultMaxBytes.
	MaxBytes int64
	// MaxMemory bounds the estimated memory the decoded values hold, in
	// bytes: each value created (a boxed number, a string's header, a
	// container) and each slot a list, tuple, dict, dict index or set
	// grows to. Values and slots are what a pickle makes cheaply: an
	// APPENDS of one-byte Nones makes 16 bytes of slot per input byte, a
	// dict of distinct int keys over 100 bytes per 6-byte entry, so
	// neither MaxElements nor MaxBytes bounds them. Default
	// DefaultMaxMemory.
	MaxMemory int64

	// Replace, when set, is offered each dict that holds the str key
	// ReplaceKey (or one of ReplaceKeys) as it is appended to a list
	// (APPEND, APPENDS), finished
	// (its lists are []any), and may return a replacement for it, which
	// the list holds instead. It lets a caller turn the many small dicts
	// of a long list into its own compact values as they are read, so
	// that the generic form of each lives only until its list is
	// appended to. A replaced dict no longer lives in the memo (nor do
	// the dicts and lists it directly holds): a later GET of one fails
	// with ErrMemo, and the caller may decode again without Replace.
	//
	// With Refs, nothing is released: what the pickle reads back stays in
	// the memo, and the rest was never kept; a replaced dict that nothing
	// else holds is reused for a later dict, so Replace must not keep the
	// *Dict it is given (nor its Items) when it replaces it.
	Replace     func(d *Dict) (any, bool)
	ReplaceKey  string
	ReplaceKeys []string

	// Refs, when set, is the result of ScanMemo on the same pickle: the
	// Decoder keeps only the memo slots the pickle reads back, so that
	// values stored in the memo and never read again (every container
	// Python's pickler writes) are not held until the end. Decoding a
	// different pickle with it fails with ErrMemo where a slot that was
	// not kept is read.
	Refs *MemoRefs
}

// Limits of Unmarshal, whose input length is known, where Options leaves
// them zero: proportional to the input, so that a small pickle cannot make
// a large result. Each opcode byte creates at most one value, so
// ElementsPerByte values per byte (plus a floor for short inputs) is never
// short for a pickle whose values are really there; what it refuses is
// expansion: memo slots skipped over by a PUT, walks of shared values.
// Payloads cannot exceed the input; the bytes budget also pays for hashing
// dict keys, which a key shared through the memo makes cost its length per
// 2-byte reference, hence the larger factor.
const (
	ElementsPerByte = 1
	MinElements     = 1 << 16
	BytesPerByte    = 16
	MinBytes        = 1 << 20
	MemoryPerByte   = 64
	MinMemory       = 16 << 20
)

// Unmarshal decodes one pickle from data. Bytes after the STOP opcode are
// ignored, as Python's pickle.loads does. Limits that opts leaves zero are
// proportional to len(data) (ElementsPerByte, BytesPerByte, MemoryPerByte),
// capped by the Default ones.
func Unmarshal(data []byte, opts *Options) (any, error) {
	return UnmarshalReader(bytes.NewReader(data), int64(len(data)), opts)
}

// UnmarshalReader is Unmarshal of the size bytes r holds, read as a
// stream: a large file need not be in memory whole while it is decoded.
func UnmarshalReader(r io.Reader, size int64, opts *Options) (any, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	capBytes := cmp.Or(max(o.MaxBytes, 0), DefaultMaxBytes)
	n := size
	if o.MaxElements <= 0 {
		o.MaxElements = min(DefaultMaxElements, ElementsPerByte*n+MinElements)
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = min(DefaultMaxBytes, BytesPerByte*n+MinBytes)
	}
	if o.MaxMemory <= 0 {
		o.MaxMemory = min(DefaultMaxMemory, MemoryPerByte*n+MinMemory)
	}
	d := NewDecoder(io.LimitReader(r, size), &o)
	d.size, d.capBytes = n, capBytes
	v, err := d.Decode()
	if err == io.EOF {
		return nil, &Error{Offset: 0, Msg: "empty input", Err: ErrTruncated}
	}
	return v, err
}

// Decoder reads successive pickles from a stream.
type Decoder struct {
	r    *bufio.Reader
	opts Options
	pos  int64 // offset of the next byte in the stream
	size int64 // length of the input when known (Unmarshal), else 0
	// capBytes is the MaxBytes the caller asked for (or the default):
	// a length within it but past the end of a known input is reported
	// as truncation, not as exceeding the proportional budget.
	capBytes int64

	// state of the pickle being decoded
	start    int64 // offset of the current opcode
	op       byte  // current opcode
	stack    []any
	marks    []int
	memo     []any          // dense part of the memo; hole marks an empty slot
	sparse   map[uint64]any // slots far beyond the dense part
	memoLen  int            // number of filled slots (MEMOIZE's index)
	proto    int
	frameEnd int64 // end of the current frame; <= pos when not in one
	elements int64 // remaining budgets
	bytes    int64
	memory   int64
	keys     keyer
	nextBuf  int
	classes  map[string]*Class
	// small receives short payloads; strs interns short strings, which
	// a snapshot repeats by the million (keys, actions, file names)
	small [maxInterned]byte
	strs  map[string]string
	// spares are dicts Replace replaced that nothing else holds, reused
	// by later EMPTY_DICTs (with their items' arrays): the entries of a
	// history, appended a batch at a time, then cost no allocation for
	// their dicts after the first batch. dup: DUP was seen, so a value
	// may be held twice outside the memo, and none is reused.
	spares []*Dict
	dup    bool
}

// maxSpares is more than the batch of Python's pickler (1000 appends).
const maxSpares = 2048

// maxInterned is the longest string interned, and maxStrs the most
// strings the table holds (a pickle of distinct strings stops adding).
const (
	maxInterned = 256
	maxStrs     = 1 << 16
)

// hole marks an empty dense memo slot.
type hole struct{}

// released marks a memo slot whose value Options.Replace replaced.
type released struct{}

// list is a list while it is being built: a pointer, so that the memo, the
// stack and containers share it as Python's objects are shared. Decode
// turns every list into a []any before returning.
type list struct {
	items  []any
	memoAt uint64 // 1 + the memo slot it was first stored in; 0 for none
}

// NewDecoder returns a Decoder reading from r with the given options (nil
// for the defaults). It buffers r, so it may read past the end of a
// pickle; decode consecutive pickles with the same Decoder.
func NewDecoder(r io.Reader, opts *Options) *Decoder {
	d := &Decoder{r: bufio.NewReaderSize(r, 64<<10)}
	if opts != nil {
		d.opts = *opts
	}
	if d.opts.MaxDepth <= 0 {
		d.opts.MaxDepth = DefaultMaxDepth
	}
	if d.opts.MaxDepth > 100000 {
		d.opts.MaxDepth = 100000
	}
	if d.opts.MaxElements <= 0 {
		d.opts.MaxElements = DefaultMaxElements
	}
	if d.opts.MaxStack <= 0 {
		d.opts.MaxStack = DefaultMaxStack
	}
	if d.opts.MaxBytes <= 0 {
		d.opts.MaxBytes = DefaultMaxBytes
	}
	if d.opts.MaxMemory <= 0 {
		d.opts.MaxMemory = DefaultMaxMemory
	}
	return d
}

// Decode reads the next pickle and returns its value: nil (None), bool,
// int64 (or *big.Int outside the int64 range), float64, string, []byte
// (bytes and bytearray), []any (list), Tuple, *Dict, *Set, or what an
// allowed Constructor returned. It returns io.EOF, unwrapped, when the
// stream ends before the first byte of a pickle; every other error is an
// *Error. Decoding never runs anything but the Constructors of Options.
func (d *Decoder) Decode() (v any, err error) {
	d.reset()
	if _, err := d.r.Peek(1); err == io.EOF {
		return nil, io.EOF
	}
	v, err = d.run()
	d.stack, d.marks, d.memo, d.sparse, d.keys.cache, d.strs = nil, nil, nil, nil, nil, nil
	return v, err
}

func (d *Decoder) reset() {
	d.stack = d.stack[:0]
	d.marks = d.marks[:0]
	d.memo = nil
	d.sparse = nil
	d.memoLen = 0
	d.proto = 0
	d.frameEnd = 0
	d.elements = d.opts.MaxElements
	d.bytes = d.opts.MaxBytes
	d.memory = d.opts.MaxMemory
	d.keys = keyer{maxDepth: d.opts.MaxDepth, budget: &d.bytes}
	d.nextBuf = 0
	d.classes = nil
	d.strs = nil
	d.spares, d.dup = nil, false
}

// ---------------------------------------------------------------------------
// errors

func (d *Decoder) opName() string {
	if n := opTable[d.op].name; n != "" {
		return n
	}
	return fmt.Sprintf("opcode 0x%02x", d.op)
}

// fail returns an *Error at the current opcode, its message prefixed with
// the opcode's name.
func (d *Decoder) fail(kind error, format string, args ...any) error {
	return &Error{Offset: d.start, Op: d.opName(), Msg: d.opName() + ": " + fmt.Sprintf(format, args...), Err: kind}
}

// truncated is the error of a read that came short by want bytes; err is
// the reader's error, reported when it is not the end of the data.
func (d *Decoder) truncated(want int64, err error) error {
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		e := d.fail(ErrTruncated, "reading at offset %d: %v", d.pos, err).(*Error)
		e.Cause = err
		return e
	}
	return d.fail(ErrTruncated, "data ends at offset %d, %d bytes short", d.pos, want)
}

// ---------------------------------------------------------------------------
// reading

// enter checks that reading n more bytes does not run past the end of the
// current frame, as Python's unpickler checks.
func (d *Decoder) enter(n int64) error {
	if d.frameEnd > d.pos && n > d.frameEnd-d.pos {
		return d.fail(ErrSyntax, "the opcode runs past the end of its frame at offset %d", d.frameEnd)
	}
	return nil
}

func (d *Decoder) readByte() (byte, error) {
	if err := d.enter(1); err != nil {
		return 0, err
	}
	b, err := d.r.ReadByte()
	if err != nil {
		return 0, d.truncated(1, err)
	}
	d.pos++
	return b, nil
}

// readFixed reads n (at most 8) bytes into a small buffer.
func (d *Decoder) readFixed(buf []byte) error {
	if err := d.enter(int64(len(buf))); err != nil {
		return err
	}
	k, err := io.ReadFull(d.r, buf)
	d.pos += int64(k)
	if err != nil {
		return d.truncated(int64(len(buf)-k), err)
	}
	return nil
}

func (d *Decoder) readU16() (uint16, error) {
	var b [2]byte
	err := d.readFixed(b[:])
	return binary.LittleEndian.Uint16(b[:]), err
}

func (d *Decoder) readU32() (uint32, error) {
	var b [4]byte
	err := d.readFixed(b[:])
	return binary.LittleEndian.Uint32(b[:]), err
}

func (d *Decoder) readU64() (uint64, error) {
	var b [8]byte
	err := d.readFixed(b[:])
	return binary.LittleEndian.Uint64(b[:]), err
}

// readPayload reads n bytes of string, bytes or long-int data, charged to
// the bytes budget. Large payloads are read in pieces, so a length field
// larger than the data costs no more memory than the data.
func (d *Decoder) readPayload(n uint64) ([]byte, error) {
	if d.size > 0 && n > uint64(d.size-d.pos) && n <= uint64(d.capBytes) {
		// Past the end of a known input: the data is truncated, whatever
		// the budget would say.
		return nil, d.fail(ErrTruncated, "data ends at offset %d, %d bytes short", d.size, n-uint64(d.size-d.pos))
	}
	if d.bytes < 0 || n > uint64(d.bytes) {
		return nil, d.fail(ErrLimit, "%d bytes of data exceed the remaining budget of %d (Options.MaxBytes)", n, d.bytes)
	}
	if err := d.enter(int64(n)); err != nil {
		return nil, err
	}
	d.bytes -= int64(n)
	if n <= uint64(len(d.small)) {
		// read into the Decoder's buffer: pushUnicode interns short
		// strings from it, and other callers copy what they keep
		buf := d.small[:n]
		k, err := io.ReadFull(d.r, buf)
		d.pos += int64(k)
		if err != nil {
			return nil, d.truncated(int64(n)-int64(k), err)
		}
		return buf, nil
	}
	if n <= 64<<10 {
		buf := make([]byte, n)
		k, err := io.ReadFull(d.r, buf)
		d.pos += int64(k)
		if err != nil {
			return nil, d.truncated(int64(n)-int64(k), err)
		}
		return buf, nil
	}
	var b bytes.Buffer
	k, err := io.CopyN(&b, d.r, int64(n))
	d.pos += k
	if err != nil {
		return nil, d.truncated(int64(n)-k, err)
	}
	return b.Bytes(), nil
}

// readLine reads a text argument up to '\n' and returns it without the
// newline.
func (d *Decoder) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := d.r.ReadSlice('\n')
		if int64(len(chunk)) > d.bytes {
			return nil, d.fail(ErrLimit, "text argument longer than the remaining budget of %d bytes (Options.MaxBytes)", d.bytes)
		}
		d.bytes -= int64(len(chunk))
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if d.frameEnd > d.pos && int64(len(line)) > d.frameEnd-d.pos {
			return nil, d.fail(ErrSyntax, "the opcode runs past the end of its frame at offset %d", d.frameEnd)
		}
		d.pos += int64(len(line))
		if err != nil {
			if err != io.EOF {
				return nil, d.truncated(1, err)
			}
			return nil, d.fail(ErrTruncated, "data ends at offset %d inside a text argument (no newline)", d.pos)
		}
		return line[:len(line)-1], nil
	}
}

// ---------------------------------------------------------------------------
// stack

func (d *Decoder) push(v any) error {
	if err := d.spend(created(v)); err != nil {
		return err
	}
	return d.pushShared(v)
}

// pushShared pushes a value that already exists (a memo entry, a
// duplicate): it costs a value but no new memory.
func (d *Decoder) pushShared(v any) error {
	d.elements--
	if d.elements < 0 {
		return d.fail(ErrLimit, "more than %d values (Options.MaxElements)", d.opts.MaxElements)
	}
	if len(d.stack) >= d.opts.MaxStack {
		return d.fail(ErrLimit, "more than %d values on the stack at once (Options.MaxStack)", d.opts.MaxStack)
	}
	d.stack = append(d.stack, v)
	return nil
}

// fence is the bottom of the part of the stack above the last mark.
func (d *Decoder) fence() int {
	if n := len(d.marks); n > 0 {
		return d.marks[n-1]
	}
	return 0
}

func (d *Decoder) underflow(want int) error {
	have := len(d.stack) - d.fence()
	where := "on the stack"
	if len(d.marks) > 0 {
		where = "above the mark"
	}
	return d.fail(ErrStack, "needs %d items %s, found %d", want, where, have)
}

func (d *Decoder) pop() (any, error) {
	if len(d.stack) <= d.fence() {
		return nil, d.underflow(1)
	}
	v := d.stack[len(d.stack)-1]
	d.stack[len(d.stack)-1] = nil
	d.stack = d.stack[:len(d.stack)-1]
	return v, nil
}

func (d *Decoder) top() (any, error) {
	if len(d.stack) <= d.fence() {
		return nil, d.underflow(1)
	}
	return d.stack[len(d.stack)-1], nil
}

// popMark removes the last mark and returns (a copy of) the items above it.
func (d *Decoder) popMark() ([]any, error) {
	if len(d.marks) == 0 {
		return nil, d.fail(ErrStack, "no MARK on the stack")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := make([]any, len(d.stack)-m)
	copy(items, d.stack[m:])
	clear(d.stack[m:])
	d.stack = d.stack[:m]
	return items, nil
}

// popMarkView is popMark without the copy: the items stay in the stack's
// array, valid until the next push. For opcodes that only read them.
func (d *Decoder) popMarkView() ([]any, error) {
	if len(d.marks) == 0 {
		return nil, d.fail(ErrStack, "no MARK on the stack")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := d.stack[m:]
	d.stack = d.stack[:m]
	return items, nil
}

// popView pops n items without copying them (see popMarkView).
func (d *Decoder) popView(n int) []any {
	items := d.stack[len(d.stack)-n:]
	d.stack = d.stack[:len(d.stack)-n]
	return items
}

// ---------------------------------------------------------------------------
// memo

func (d *Decoder) memoGet(slot uint64) error {
	i := slot // where it is kept
	if refs := d.opts.Refs; refs != nil {
		if !refs.Has(i) {
			return d.fail(ErrMemo, "memo slot %d was not kept: the pickle is not the one Options.Refs was made from", slot)
		}
		i = refs.index(i)
	}
	var v any
	ok := false
	if i < uint64(len(d.memo)) {
		v = d.memo[i]
		_, isHole := v.(hole)
		ok = !isHole
	} else if d.sparse != nil {
		v, ok = d.sparse[i]
	}
	if !ok {
		return d.fail(ErrMemo, "memo slot %d was never set", slot)
	}
	if _, gone := v.(released); gone {
		return d.fail(ErrMemo, "memo slot %d holds a value replaced as it was read (Options.Replace)", slot)
	}
	return d.pushShared(v)
}

func (d *Decoder) memoPut(i uint64) error {
	if len(d.stack) <= d.fence() {
		return d.fail(ErrMemo, "nothing on the stack to store in memo slot %d", i)
	}
	v := d.stack[len(d.stack)-1]
	if refs := d.opts.Refs; refs != nil {
		if !refs.Has(i) {
			// never read back: counted (MEMOIZE's index), not kept. The
			// scan found no slot stored twice, so this one is new.
			d.memoLen++
			return d.charge(1)
		}
		i = refs.index(i)
	}
	switch x := v.(type) {
	case *Dict:
		if x.memoAt == 0 {
			x.memoAt = i + 1
		}
	case *list:
		if x.memoAt == 0 {
			x.memoAt = i + 1
		}
	}
	switch {
	case i < uint64(len(d.memo)):
		if _, isHole := d.memo[i].(hole); isHole {
			d.memoLen++
			if err := d.charge(1); err != nil {
				return err
			}
		}
		d.memo[i] = v
		return nil
	case i < uint64(len(d.memo))+4096:
		n := int(i) - len(d.memo)
		if err := d.charge(int64(n + 1)); err != nil {
			return err
		}
		for range n {
			d.memo = append(d.memo, hole{})
		}
		d.memo = append(d.memo, v)
		d.memoLen++
		return nil
	}
	if d.sparse == nil {
		d.sparse = map[uint64]any{}
	}
	if _, ok := d.sparse[i]; !ok {
		if err := d.charge(1); err != nil {
			return err
		}
		d.memoLen++
	}
	d.sparse[i] = v
	return nil
}

// Estimated sizes, in bytes, of what decoding allocates (64-bit Go).
const (
	slotSize = 16 // an interface: a list, tuple or set slot, a memo slot
	itemSize = 48 // a dict Item
	// a dict or set index entry with its boxed hash; a map's tables
	// double as it grows, and the ones it outgrew count too
	indexSize = 112
)

// created is the memory a newly created value holds, apart from slots
// charged as its container grows.
func created(v any) int64 {
	switch x := v.(type) {
	case nil, bool:
		return 0
	case int64, float64:
		return 8
	case string:
		return 16 + int64(len(x))
	case []byte:
		return 24 + int64(len(x))
	case *big.Int:
		return 40 + int64(len(x.Bits()))*8
	case Tuple:
		return 24 + slotSize*int64(len(x))
	case *list:
		return 32 + slotSize*int64(cap(x.items))
	case *Dict:
		return 40 + itemSize*int64(cap(x.items)) + indexSize*int64(len(x.index))
	case *Set:
		return 88 + 2*slotSize*int64(cap(x.items)) + indexSize*int64(len(x.index))
	}
	return 64
}

// spend charges n bytes of memory (Options.MaxMemory).
func (d *Decoder) spend(n int64) error {
	d.memory -= n
	if d.memory < 0 {
		return d.fail(ErrLimit, "the decoded values would hold more than %d bytes (Options.MaxMemory)", d.opts.MaxMemory)
	}
	return nil
}

func (d *Decoder) charge(n int64) error {
	d.elements -= n
	if d.elements < 0 {
		return d.fail(ErrLimit, "more than %d values (Options.MaxElements)", d.opts.MaxElements)
	}
	return nil
}

// clip shortens text quoted in error messages.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// invalidUTF8 returns the offset of the first byte that is not UTF-8, or
// -1. Encoded surrogates (ED A0..BF xx) are accepted, as Python decodes
// pickled strings with errors="surrogatepass".
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			if i+2 < len(b) && b[i] == 0xED && b[i+1] >= 0xA0 && b[i+1] <= 0xBF && b[i+2] >= 0x80 && b[i+2] <= 0xBF {
				i += 3
				continue
			}
			return i
		}
		i += n
	}
	return -1
}

// release frees the memo slot of a value Options.Replace replaced, and
// those of the dicts and lists it directly holds, so that its generic form
// can be collected.
func (d *Decoder) release(v any, deep bool) {
	var at uint64
	switch x := v.(type) {
	case *Dict:
		at = x.memoAt
		if deep {
			for _, it := range x.items {
				d.release(it.Value, false)
			}
		}
	case *list:
		at = x.memoAt
		if deep {
			for _, e := range x.items {
				d.release(e, false)
			}
		}
	default:
		return
	}
	if at == 0 {
		return
	}
	i := at - 1
	if i < uint64(len(d.memo)) {
		if d.memo[i] == v {
			d.memo[i] = released{}
		}
	} else if w, ok := d.sparse[i]; ok && w == v {
		d.sparse[i] = released{}
	}
}
