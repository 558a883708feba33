package safetensors

import (
	"errors"
	"strconv"
	"strings"

	"github.com/headroom-ml/headroom/internal/elide"
)

// Sentinel errors. Every error that describes a bad file or a tensor that
// cannot be written is a *FormatError wrapping exactly one of these, so
// callers can branch with errors.Is and still print a message that says
// which file, which tensor, what is wrong and where.
var (
	// ErrTruncated: the file ends before the header or a tensor's data does.
	ErrTruncated = errors.New("truncated")
	// ErrHeaderTooLarge: the header length exceeds MaxHeaderSize.
	ErrHeaderTooLarge = errors.New("header too large")
	// ErrHeader: the header is not UTF-8, not a JSON object, or an entry
	// lacks a field or has one of the wrong type.
	ErrHeader = errors.New("invalid header")
	// ErrDType: a dtype is unknown or not supported by headroom.
	ErrDType = errors.New("bad dtype")
	// ErrShape: a dimension is negative or not an integer, or the element
	// count overflows.
	ErrShape = errors.New("bad shape")
	// ErrOffsets: data_offsets are malformed, overlap, or leave bytes of the
	// data buffer that belong to no tensor.
	ErrOffsets = errors.New("bad data_offsets")
	// ErrSize: a tensor's byte size disagrees with its shape and dtype.
	ErrSize = errors.New("size mismatch")
	// ErrData: element bytes that are invalid for their dtype (a bool that
	// is neither 0 nor 1).
	ErrData = errors.New("invalid data")
	// ErrNotFound: the file holds no tensor of the requested name.
	ErrNotFound = errors.New("tensor not found")
)

// FormatError describes what is wrong with a safetensors file (when reading)
// or with a tensor that cannot be stored in one (when writing).
type FormatError struct {
	File   string // path or name given by the caller; may be empty
	Tensor string // tensor name, or "" when the problem is not about one tensor
	Offset int64  // byte offset in the file where the problem is, or -1
	Reason string // what is wrong, with the numbers involved
	Err    error  // one of the sentinels above
}

func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("safetensors: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Tensor != "" {
		b.WriteString("tensor ")
		// A name is the header's to choose: at most a line of it.
		b.WriteString(strconv.Quote(elide.Clip(e.Tensor)))
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	if e.Offset >= 0 {
		b.WriteString(" (at byte ")
		b.WriteString(strconv.FormatInt(e.Offset, 10))
		b.WriteByte(')')
	}
	return b.String()
}

// Unwrap returns the sentinel, so errors.Is(err, ErrSize) works.
func (e *FormatError) Unwrap() error { return e.Err }
