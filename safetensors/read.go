package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/headroom-ml/headroom/internal/elide"
	"github.com/headroom-ml/headroom/tensor"
)

// MaxHeaderSize is the largest header length accepted, the reference
// implementation's limit. It bounds what a corrupt length prefix can make
// us allocate before anything else has been checked.
const MaxHeaderSize = 100_000_000

// MaxDims is the most dimensions a shape may have: NumPy's limit, far
// beyond any model's. It bounds what a shape array in the header can cost
// to parse, whatever its length.
const MaxDims = 64

// maxOffsets bounds how much of a data_offsets array is parsed; it must be
// two numbers, and a longer one is refused after this many.
const maxOffsets = 16

// metadataKey is the reserved header key for the string-to-string map.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor of a file without reading its data, which
// is enough for planning memory on the meta device.
type TensorInfo struct {
	Name  string
	DType tensor.DType
	Shape tensor.Shape
	// Begin and End are the data_offsets: the tensor's bytes lie at
	// [Begin, End) of the data buffer, which starts at File.DataOffset.
	Begin, End int64
}

// File is a validated safetensors file. Tensor data is read on demand from
// the underlying reader, so opening a large checkpoint costs only its
// header. Its methods are safe for concurrent use if the reader's ReadAt is
// (an *os.File's is).
type File struct {
	// Name is the path or name used in error messages.
	Name string
	// Metadata is the header's "__metadata__" map, nil if absent.
	Metadata map[string]string
	// DataOffset is where the data buffer starts in the file: 8 plus the
	// header length.
	DataOffset int64

	infos  []TensorInfo // in file order: by Begin, then End, then Name
	index  map[string]int
	r      io.ReaderAt
	closer io.Closer
}

// Open reads and validates the header of the file at path, keeping the file
// open to read tensors on demand. Call Close when done.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := Read(fh, st.Size(), path)
	if err != nil {
		fh.Close()
		return nil, err
	}
	f.closer = fh
	return f, nil
}

// ReadFile reads the whole file at path into memory and validates it. The
// result needs no Close; prefer Open for files too large to hold twice.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return Decode(data, path)
}

// Decode validates a safetensors file held in data; name is used in error
// messages. Tensors are copied out of data, which the caller may reuse
// afterwards only if it no longer reads tensors from the File.
func Decode(data []byte, name string) (*File, error) {
	return Read(bytes.NewReader(data), int64(len(data)), name)
}

// Load reads every tensor of the file at path.
func Load(path string) (map[string]*tensor.Tensor, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make(map[string]*tensor.Tensor, len(f.infos))
	for _, info := range f.infos {
		t, err := f.Tensor(info.Name)
		if err != nil {
			return nil, err
		}
		out[info.Name] = t
	}
	return out, nil
}

// Read validates the safetensors file of the given size readable through r;
// name is used in error messages. Tensors are read from r on demand.
func Read(r io.ReaderAt, size int64, name string) (*File, error) {
	ferr := func(tensorName string, off int64, sentinel error, format string, args ...any) error {
		return &FormatError{File: name, Tensor: tensorName, Offset: off, Reason: fmt.Sprintf(format, args...), Err: sentinel}
	}
	if size < 8 {
		return nil, ferr("", 0, ErrTruncated, "file is %d bytes, too short for the 8-byte header length", size)
	}
	var prefix [8]byte
	if err := readFull(r, prefix[:], 0); err != nil {
		return nil, ioError(name, err)
	}
	n := binary.LittleEndian.Uint64(prefix[:])
	if n > MaxHeaderSize {
		return nil, ferr("", 0, ErrHeaderTooLarge, "header length %d exceeds the limit of %d bytes", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, ferr("", 0, ErrTruncated, "header length %d runs past the end of the %d-byte file", n, size)
	}
	hdr := make([]byte, n)
	if err := readFull(r, hdr, 8); err != nil {
		return nil, ioError(name, err)
	}
	f := &File{Name: name, DataOffset: 8 + int64(n), r: r}
	if err := f.parseHeader(hdr, size-f.DataOffset); err != nil {
		return nil, err
	}
	return f, nil
}

// readFull reads len(p) bytes at off. A short read means the file shrank
// since its size was taken.
func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func ioError(name string, err error) error {
	return fmt.Errorf("safetensors: %s: %w", name, err)
}

// Close closes the file opened by Open; it is a no-op for other Files.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	c := f.closer
	f.closer = nil
	return c.Close()
}

// Names returns the tensor names in file order (by data offset).
func (f *File) Names() []string {
	names := make([]string, len(f.infos))
	for i, info := range f.infos {
		names[i] = info.Name
	}
	return names
}

// Len is the number of tensors.
func (f *File) Len() int { return len(f.infos) }

// Info describes the named tensor without reading its data.
func (f *File) Info(name string) (TensorInfo, error) {
	i, ok := f.index[name]
	if !ok {
		return TensorInfo{}, &FormatError{File: f.Name, Tensor: name, Offset: -1, Reason: "no such tensor in the file", Err: ErrNotFound}
	}
	info := f.infos[i]
	info.Shape = info.Shape.Clone()
	return info, nil
}

// Tensor reads the named tensor into a new host tensor.
func (f *File) Tensor(name string) (*tensor.Tensor, error) {
	info, err := f.Info(name)
	if err != nil {
		return nil, err
	}
	t := tensor.New(info.DType, info.Shape)
	off := f.DataOffset + info.Begin
	if err := readFull(f.r, t.Data, off); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &FormatError{File: f.Name, Tensor: name, Offset: off, Reason: "file ended while reading the tensor's data (was it truncated after opening?)", Err: ErrTruncated}
		}
		return nil, fmt.Errorf("safetensors: %s: tensor %q: %w", f.Name, name, err)
	}
	if info.DType == tensor.Bool {
		// PyTorch treats any byte other than 0 and 1 in a bool tensor as
		// undefined behaviour; refuse it instead of passing it on.
		for i, b := range t.Data {
			if b > 1 {
				return nil, &FormatError{File: f.Name, Tensor: name, Offset: off + int64(i), Reason: fmt.Sprintf("bool element %d has byte value %d (want 0 or 1)", i, b), Err: ErrData}
			}
		}
	}
	if !hostLittleEndian {
		swapElements(t.Data, info.DType.Size())
	}
	return t, nil
}

// parseHeader decodes and validates the JSON header; bufLen is the size of
// the data buffer that follows it.
func (f *File) parseHeader(hdr []byte, bufLen int64) error {
	// at converts an offset within the header to one within the file.
	at := func(o int64) int64 { return 8 + o }
	ferr := func(tensorName string, off int64, sentinel error, format string, args ...any) error {
		return &FormatError{File: f.Name, Tensor: tensorName, Offset: off, Reason: fmt.Sprintf(format, args...), Err: sentinel}
	}
	if !utf8.Valid(hdr) {
		bad := 0
		for bad < len(hdr) {
			r, size := utf8.DecodeRune(hdr[bad:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			bad += size
		}
		return ferr("", at(int64(bad)), ErrHeader, "header is not valid UTF-8")
	}
	// The reference implementation insists on '{' first, so that a file
	// that merely happens to parse (a bare string, a number) is refused.
	if len(hdr) == 0 || hdr[0] != '{' {
		return ferr("", at(0), ErrHeader, "header does not start with '{'")
	}

	f.index = map[string]int{}
	sawMetadata := false
	// entry takes one member of the header object: its key, the offset of
	// its value in hdr and the value's text.
	entry := func(key string, valOff int64, raw []byte) error {
		entryOff := at(valOff)
		if key == metadataKey {
			if sawMetadata {
				return ferr("", entryOff, ErrHeader, "%q appears twice", metadataKey)
			}
			var err error
			if f.Metadata, err = parseMetadata(raw); err != nil {
				return ferr("", entryOff, ErrHeader, "%s: %v", metadataKey, err)
			}
			sawMetadata = true
			return nil
		}
		if _, dup := f.index[key]; dup {
			return ferr(key, entryOff, ErrHeader, "name appears twice in the header")
		}
		info, perr := parseEntry(key, raw, bufLen)
		if perr != nil {
			perr.File, perr.Offset = f.Name, entryOff
			return perr
		}
		f.index[key] = len(f.infos)
		if len(f.infos) == cap(f.infos) {
			// Double, rather than append's 1.25 for large slices: a
			// header of a million entries then costs twice their size
			// in all, not five times.
			f.infos = slices.Grow(f.infos, max(len(f.infos), 16))
		}
		f.infos = append(f.infos, info)
		return nil
	}
	if json.Valid(hdr) && !decoderOnly {
		// The common case, read in place: encoding/json's Decoder would
		// copy the header into its buffer and each entry out of it, so
		// that a header of one huge entry cost several times its size.
		err := members(hdr, func(key string, valOff int, raw []byte) error {
			return entry(key, int64(valOff), raw)
		})
		if err != nil {
			return err
		}
	} else if err := f.parseInvalid(hdr, entry); err != nil {
		return err
	}

	// The tensors must tile the data buffer exactly: no gaps, no overlaps,
	// nothing after the last one. Overlaps would let two tensors alias and
	// gaps usually mean offsets were computed wrongly by the writer.
	slices.SortStableFunc(f.infos, func(a, b TensorInfo) int {
		if c := cmp.Compare(a.Begin, b.Begin); c != 0 {
			return c
		}
		if c := cmp.Compare(a.End, b.End); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var end int64
	prev := ""
	for i, info := range f.infos {
		f.index[info.Name] = i
		switch {
		case info.Begin > end:
			return ferr(info.Name, f.DataOffset+end, ErrOffsets, "data bytes [%d, %d) before this tensor belong to no tensor", end, info.Begin)
		case info.Begin < end:
			return ferr(info.Name, f.DataOffset+info.Begin, ErrOffsets, "data_offsets [%d, %d] overlap tensor %q, which ends at %d", info.Begin, info.End, prev, end)
		}
		end, prev = info.End, info.Name
	}
	if end != bufLen {
		return ferr("", f.DataOffset+end, ErrOffsets, "data bytes [%d, %d) after the last tensor belong to no tensor", end, bufLen)
	}
	return nil
}

// decoderOnly makes every header go through parseInvalid, for the tests
// that check both readers agree.
var decoderOnly = false

// parseInvalid reads a header that is not valid JSON with encoding/json's
// Decoder, so that what is wrong is reported where it is, after whatever
// is wrong with the entries before it; entry takes each member read.
func (f *File) parseInvalid(hdr []byte, entry func(key string, valOff int64, raw []byte) error) error {
	at := func(o int64) int64 { return 8 + o }
	ferr := func(tensorName string, off int64, sentinel error, format string, args ...any) error {
		return &FormatError{File: f.Name, Tensor: tensorName, Offset: off, Reason: fmt.Sprintf(format, args...), Err: sentinel}
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	syntax := func(err error) error {
		off := dec.InputOffset()
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = se.Offset
		}
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			return ferr("", at(off), ErrHeader, "header JSON ends early")
		}
		return ferr("", at(off), ErrHeader, "header is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != nil { // the '{' checked above
		return syntax(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntax(err)
		}
		key, ok := tok.(string)
		if !ok {
			return ferr("", at(dec.InputOffset()), ErrHeader, "header object key is not a string")
		}
		// Point errors about this entry at its value, past the ':'.
		valOff := dec.InputOffset()
		for valOff < int64(len(hdr)) && bytes.IndexByte([]byte(" \t\r\n:"), hdr[valOff]) >= 0 {
			valOff++
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return syntax(err)
		}
		if err := entry(key, valOff, raw); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return syntax(err)
	}
	// Only the writer's space padding may follow the object.
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return syntax(err)
		}
		return ferr("", at(dec.InputOffset()), ErrHeader, "unexpected %v after the header object", tok)
	}

	return nil
}

// members calls fn with each member of the JSON object obj, which must be
// valid JSON: its key, the offset of its value in obj and the value's text,
// a slice of obj (not a copy).
func members(obj []byte, fn func(key string, valOff int, raw []byte) error) error {
	i := skipSpace(obj, 0) + 1 // '{'
	for {
		i = skipSpace(obj, i)
		if obj[i] == '}' {
			return nil
		}
		ks := i
		i = skipString(obj, i)
		key, err := jsonString(obj[ks:i])
		if err != nil {
			return err
		}
		i = skipSpace(obj, i) + 1 // ':'
		i = skipSpace(obj, i)
		vs := i
		i = skipValue(obj, i)
		if err := fn(key, vs, obj[vs:i]); err != nil {
			return err
		}
		i = skipSpace(obj, i)
		if obj[i] == ',' {
			i++
		}
	}
}

// jsonString decodes a JSON string token.
func jsonString(raw []byte) (string, error) {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the end of the string token at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the end of the (valid) JSON value at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) && bytes.IndexByte([]byte(",}] \t\r\n"), b[i]) < 0 {
		i++
	}
	return i
}

func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	if string(raw) == "null" {
		// What a writer given metadata=None may emit; equivalent to absent.
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		var s string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, fmt.Errorf("value of %q is %s, not a string", elide.Clip(k), clip(v))
		}
		out[k] = s
	}
	return out, nil
}

// parseEntry validates one tensor's header entry. The returned error lacks
// File and Offset, which the caller fills in.
func parseEntry(name string, raw json.RawMessage, bufLen int64) (TensorInfo, *FormatError) {
	bad := func(sentinel error, format string, args ...any) (TensorInfo, *FormatError) {
		return TensorInfo{}, &FormatError{Tensor: name, Reason: fmt.Sprintf(format, args...), Err: sentinel}
	}
	if raw[0] != '{' {
		return bad(ErrHeader, "entry is %s, not a JSON object", clip(raw))
	}
	// Exact key lookup: encoding/json's struct decoding would also accept
	// "DType" or "Shape", which no other reader does. Unknown keys are
	// ignored, as the reference implementation ignores them.
	// Read in place (raw is valid JSON, from either reader of the header);
	// a repeated key's last value wins, as with encoding/json's maps.
	var rawDType, rawShape, rawOffsets json.RawMessage
	if err := members(raw, func(key string, _ int, val []byte) error {
		switch key {
		case "dtype":
			rawDType = val
		case "shape":
			rawShape = val
		case "data_offsets":
			rawOffsets = val
		}
		return nil
	}); err != nil {
		return bad(ErrHeader, "entry: %v", err)
	}
	info := TensorInfo{Name: name}

	if rawDType == nil {
		return bad(ErrHeader, `entry has no "dtype"`)
	}
	if rawDType[0] != '"' {
		return bad(ErrHeader, "dtype is %s, not a string", clip(rawDType))
	}
	code, err := jsonString(rawDType)
	if err != nil {
		return bad(ErrHeader, "dtype %s: %v", clip(rawDType), err)
	}
	dt, ok := parseCode(code)
	switch {
	case !ok && unsupported[code]:
		return bad(ErrDType, "dtype %q is not supported by headroom (supported: %s)", code, supportedCodes)
	case !ok:
		return bad(ErrDType, "unknown dtype %q (supported: %s)", elide.Clip(code), supportedCodes)
	}
	info.DType = dt

	if rawShape == nil {
		return bad(ErrHeader, `entry has no "shape"`)
	}
	dims, err := intArray(rawShape, MaxDims)
	if errors.Is(err, errTooLong) {
		return bad(ErrShape, "shape %s has more than %d dimensions", clip(rawShape), MaxDims)
	}
	if err != nil {
		return bad(ErrShape, "shape %s: %v", clip(rawShape), err)
	}
	info.Shape = make(tensor.Shape, len(dims))
	// Count elements with overflow checks: a crafted shape must not wrap
	// around to a small size that happens to match the data_offsets.
	elems, zero := uint64(1), false
	for i, d := range dims {
		if d > math.MaxInt {
			return bad(ErrShape, "shape %s: dimension %d is too large", clip(rawShape), i)
		}
		info.Shape[i] = int(d)
		if d == 0 {
			zero = true
			continue
		}
		hi, lo := bits.Mul64(elems, d)
		if hi != 0 || lo > math.MaxInt {
			return bad(ErrShape, "shape %s has more elements than fit in an int", clip(rawShape))
		}
		elems = lo
	}
	if zero {
		elems = 0
	}

	if rawOffsets == nil {
		return bad(ErrHeader, `entry has no "data_offsets"`)
	}
	offs, err := intArray(rawOffsets, maxOffsets)
	if err != nil && !errors.Is(err, errTooLong) {
		return bad(ErrOffsets, "data_offsets %s: %v", clip(rawOffsets), err)
	}
	if err != nil || len(offs) != 2 {
		return bad(ErrOffsets, "data_offsets %s has %s numbers, want [begin, end]", clip(rawOffsets), count(len(offs), err))
	}
	if offs[0] > offs[1] {
		return bad(ErrOffsets, "data_offsets [%d, %d] end before they begin", offs[0], offs[1])
	}
	if offs[1] > uint64(bufLen) {
		return bad(ErrTruncated, "data_offsets [%d, %d] run past the end of the %d-byte data buffer", offs[0], offs[1], bufLen)
	}
	info.Begin, info.End = int64(offs[0]), int64(offs[1])

	hi, want := bits.Mul64(elems, uint64(dt.Size()))
	if hi != 0 {
		return bad(ErrSize, "shape %v of %s needs more than 2^64 bytes", info.Shape, code)
	}
	if want != offs[1]-offs[0] {
		return bad(ErrSize, "data_offsets [%d, %d] hold %d bytes, but shape %v of %s needs %d", offs[0], offs[1], offs[1]-offs[0], info.Shape, code, want)
	}
	return info, nil
}

// errTooLong is intArray's error for an array longer than its limit.
var errTooLong = errors.New("too many elements")

// count says how many numbers an array held, or that it held more than
// intArray read.
func count(n int, err error) string {
	if errors.Is(err, errTooLong) {
		return fmt.Sprintf("more than %d", n)
	}
	return strconv.Itoa(n)
}

// intArray parses a JSON array of at most max non-negative integers.
// Numbers are checked by their text, so 2.0, 1e3 and "2" are refused rather
// than coerced. The array is read an element at a time and reading stops
// past max, so a crafted array of fifty million elements costs no more than
// one of max; an array longer than max returns its first max elements and
// errTooLong.
func intArray(raw json.RawMessage, max int) ([]uint64, error) {
	if raw[0] != '[' {
		return nil, errors.New("not a JSON array")
	}
	// raw is valid JSON (see parseEntry), so its elements are found by
	// skipping values, with no decoder and no copies.
	var out []uint64
	i := skipSpace(raw, 1)
	for n := 0; raw[i] != ']'; n++ {
		if n == max {
			return out, errTooLong
		}
		start := i
		i = skipValue(raw, i)
		e := raw[start:i]
		i = skipSpace(raw, i)
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		s := string(bytes.TrimSpace(e))
		if len(s) > 0 && s[0] == '-' && isDigits(s[1:]) {
			return nil, fmt.Errorf("element %d is negative (%s)", n, clip([]byte(s)))
		}
		if !isDigits(s) {
			return nil, fmt.Errorf("element %d is %s, not a non-negative integer", n, clip([]byte(s)))
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("element %d (%s) is too large", n, clip([]byte(s)))
		}
		out = append(out, v)
	}
	return out, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// clip shortens JSON quoted in an error message, so a corrupt header cannot
// produce a megabyte-long error.
func clip(b []byte) string {
	const max = 64
	if len(b) <= max {
		return string(b)
	}
	// Cut on a rune boundary.
	n := max
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "..."
}
