package dataset

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Example is one decoded sample, in buffers the caller owns and reuses.
//
// Sources fill an Example by reslicing its slices within their capacity, so
// a worker that keeps one Example allocates only while the buffers grow to
// the largest sample; after that, Get allocates nothing.
//
// Layout:
//   - X holds float features: an image as CHW float32 scaled to [0,1] (what
//     torchvision's ToTensor gives), a table row as its feature columns.
//   - Tokens holds integer inputs instead of X for token sources: the
//     context window x = tokens[i : i+T].
//   - Y holds the target: one class for classification, or the T next
//     tokens y = tokens[i+1 : i+T+1] for language modelling.
//   - Shape is the shape of X (or of Tokens) for this sample: [C, H, W] for
//     an image, [F] for a table row, [T] for a token window.
type Example struct {
	Shape  []int
	X      []float32
	Tokens []int64
	Y      []int64

	raw []byte // read buffer for encoded bytes (an image file), reused
}

// setShape records the shape without allocating once Shape has capacity.
func (e *Example) setShape(dims ...int) {
	e.Shape = append(e.Shape[:0], dims...)
}

// growX returns e.X resliced (or grown) to n elements.
func (e *Example) growX(n int) []float32 {
	e.X = grow(e.X, n)
	return e.X
}

// grow reslices s to n elements, allocating only when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// MapSource is map-style data: a known number of samples, read by index in
// any order. Get must be safe to call from several goroutines at once (each
// with its own Example).
type MapSource interface {
	Len() int
	// Get decodes sample i into ex, reusing ex's buffers.
	Get(i int, ex *Example) error
}

// Namer is implemented by map sources whose samples are files, so that
// errors the loader finds (a sample of the wrong shape) can name the file.
type Namer interface {
	Name(i int) string
}

// Record is one raw sample read from a stream, before decoding: the members
// of one WebDataset key, for instance. Its buffers are reused: a stream
// overwrites them on the next Next into the same Record.
type Record struct {
	// Source names the file the record came from (a shard path), for errors.
	Source string
	// Key is the sample's key (the member names' common basename).
	Key string
	// Parts holds the record's fields in the order read (extension without
	// the dot, lower case; content) in its first len(Fields()) entries, and
	// spare buffers after them: read them through Fields and Field, fill
	// them through Reset and AddPart.
	Parts []Part
	n     int // parts in use; Parts[n:] keep their buffers for reuse
}

// Part is one field of a Record.
type Part struct {
	Ext  string
	Data []byte
}

// Fields returns the parts in use.
func (r *Record) Fields() []Part { return r.Parts[:r.n] }

// Field returns the data of the part with extension ext, if present.
func (r *Record) Field(ext string) ([]byte, bool) {
	for _, p := range r.Parts[:r.n] {
		if p.Ext == ext {
			return p.Data, true
		}
	}
	return nil, false
}

// Bytes is the total size of the record's fields.
func (r *Record) Bytes() int {
	n := 0
	for _, p := range r.Parts[:r.n] {
		n += len(p.Data)
	}
	return n
}

// Reset empties the record for a new sample, keeping its buffers. A
// Stream calls it, then AddPart for each field.
func (r *Record) Reset(source, key string) {
	r.Source, r.Key, r.n = source, key, 0
}

// AddPart appends a field and returns its buffer, size bytes long, for the
// caller to fill; it reuses an earlier record's buffer where one is left.
func (r *Record) AddPart(ext string, size int) []byte {
	if r.n == len(r.Parts) {
		r.Parts = append(r.Parts, Part{})
	}
	p := &r.Parts[r.n]
	r.n++
	p.Ext = ext
	p.Data = grow(p.Data, size)
	return p.Data
}

// Stream reads the records of one pass over a streaming source, in order.
type Stream interface {
	// Next reads the next record into r. It returns io.EOF after the last
	// one, and ctx's error once ctx is done.
	Next(ctx context.Context, r *Record) error
	// Close releases the stream's files. It may be called while Next is
	// blocked in a read, to unblock it (a FIFO, a slow disk), and more
	// than once.
	Close() error
}

// StreamSource is streaming data: records read in one pass, in order, and
// decoded separately so that decoding can run in parallel workers while one
// goroutine reads.
type StreamSource interface {
	// Open starts a pass over the data for the given epoch.
	Open(ctx context.Context, epoch int) (Stream, error)
	// Decode decodes a record into ex. Safe to call from several goroutines
	// at once, each with its own Example.
	Decode(r *Record, ex *Example) error
}

// SampleError reports a sample that cannot be read or decoded: a corrupt
// image, a cell that is not a number, a truncated file. It names where the
// problem is as precisely as the format allows; fields that do not apply
// are zero (Offset -1).
//
// Only SampleErrors can be skipped (Config.SkipBad): I/O errors and
// cancellation always stop the loader.
type SampleError struct {
	File   string // the file: an image, a table, a token file, a shard
	Member string // a member of an archive, if any
	Row    int    // 1-based line of a table, if any
	Column int    // 1-based column of a table, if any
	Offset int64  // byte offset in File, or -1
	Index  int    // the sample's index in its source, or -1
	Err    error
}

func (e *SampleError) Error() string {
	var b strings.Builder
	b.WriteString("dataset: ")
	b.WriteString(e.File)
	if e.Member != "" {
		fmt.Fprintf(&b, ": member %s", e.Member)
	}
	if e.Row > 0 {
		fmt.Fprintf(&b, ": row %d", e.Row)
	}
	if e.Column > 0 {
		fmt.Fprintf(&b, ": column %d", e.Column)
	}
	if e.Offset >= 0 {
		fmt.Fprintf(&b, ": offset %d", e.Offset)
	}
	if e.Index >= 0 && e.Row == 0 && e.Member == "" {
		fmt.Fprintf(&b, ": sample %d", e.Index)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *SampleError) Unwrap() error { return e.Err }

// sampleErr makes a SampleError with the fields that do not apply unset.
func sampleErr(file string, err error) *SampleError {
	return &SampleError{File: file, Offset: -1, Index: -1, Err: err}
}

// Sentinels that SampleError.Err wraps, for errors.Is.
var (
	// ErrShape: a sample's shape differs from the loader's.
	ErrShape = errors.New("sample shape differs from the batch's")
	// ErrTruncated: a file ends in the middle of a sample.
	ErrTruncated = errors.New("truncated")
	// ErrNotNumber: a table cell is not a number.
	ErrNotNumber = errors.New("not a number")
	// ErrLabel: a label is missing or not a class.
	ErrLabel = errors.New("bad label")
	// ErrTooLarge: a record exceeds the loader's per-record byte bound.
	ErrTooLarge = errors.New("record larger than MaxRecordBytes")
)

// Resident is implemented by sources that hold memory of their own, apart
// from the loader's buffers: a table or IDX file read into memory, the
// bound on a token file's mapped pages. The loader's Memory counts it
// (Memory.Source), so that it is planned with the rest.
type Resident interface {
	ResidentBytes() int64
}

// SampleBound is the largest sample a source holds, for the memory plan.
type SampleBound struct {
	// Shape is the decoded shape ([C H W]) of the sample with the most
	// elements; nil when unknown.
	Shape []int
	// Bytes is the largest encoded sample a worker reads into memory (an
	// image file's size); 0 when unknown.
	Bytes int64
}

// Bounder is implemented by sources whose samples differ in size (images
// of mixed sizes): the loader plans its workers' decode scratch for the
// largest sample rather than for the first one it reads, which would leave
// a larger image's buffers outside the plan.
type Bounder interface {
	SampleBound() (SampleBound, error)
}

// ResidentBytes is the table's features and labels.
func (t *Table) ResidentBytes() int64 { return 4*int64(len(t.Features)) + 8*int64(len(t.Labels)) }

// ResidentBytes is the two files' bytes and the converted labels.
func (s *IDX) ResidentBytes() int64 {
	return int64(len(s.Samples.Data)) + int64(len(s.Labels.Data)) + 8*int64(len(s.labels))
}

// ResidentBytes is the list of files: their paths and labels.
func (f *ImageFolder) ResidentBytes() int64 {
	n := int64(len(f.Paths)) * (16 + 8) // string headers and labels
	for _, p := range f.Paths {
		n += int64(len(p))
	}
	return n
}
