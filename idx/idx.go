// Package idx reads and writes the IDX format, the container used by MNIST,
// Fashion-MNIST and their relatives.
//
// An IDX file is a 4-byte magic number (two zero bytes, a type code and the
// number of dimensions), one big-endian uint32 per dimension, and then the
// elements in row-major order, big-endian. Files compressed with gzip, as
// they are usually distributed, are decompressed transparently.
//
// The decoder treats its input as untrusted: every malformation ends in a
// *FormatError naming the file, the byte offset and what is wrong, and a
// header declaring an absurd size never causes a matching allocation.
package idx

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Type is an IDX element type, identified by the third byte of the magic.
type Type byte

// The element types defined by the format. All multi-byte types are stored
// big-endian.
const (
	Uint8   Type = 0x08 // unsigned byte
	Int8    Type = 0x09 // signed byte
	Int16   Type = 0x0B // short
	Int32   Type = 0x0C // int
	Float32 Type = 0x0D // float
	Float64 Type = 0x0E // double
)

// Size is the number of bytes of one element, or 0 for an unknown type.
func (t Type) Size() int {
	switch t {
	case Uint8, Int8:
		return 1
	case Int16:
		return 2
	case Int32, Float32:
		return 4
	case Float64:
		return 8
	}
	return 0
}

// String names the type as the format's documentation does.
func (t Type) String() string {
	switch t {
	case Uint8:
		return "ubyte"
	case Int8:
		return "byte"
	case Int16:
		return "short"
	case Int32:
		return "int"
	case Float32:
		return "float"
	case Float64:
		return "double"
	}
	return fmt.Sprintf("type(0x%02X)", byte(t))
}

// Limits on what the decoder accepts. Real IDX files have one to four
// dimensions and at most a few GiB of data; anything beyond these is far more
// likely a corrupt or hostile header than a dataset.
const (
	// MaxDims is the largest number of dimensions accepted.
	MaxDims = 16
	// MaxDataBytes is the largest data section accepted when the size of the
	// input is not known in advance (a gzip stream, a pipe). When it is known,
	// the declared size is checked against it instead.
	MaxDataBytes int64 = 1 << 32
	// MaxGzipRatio bounds the data of a gzip file whose compressed size is
	// known: at most MaxGzipRatio times that size (and at least
	// MinGzipData). MNIST's and Fashion-MNIST's files expand 2 to 5 times;
	// deflate can expand 1032 times, so that a 4 MB file of zeros would
	// otherwise declare and fill 4 GiB.
	MaxGzipRatio = 64
	MinGzipData  = 64 << 20
)

// File is a decoded IDX file.
type File struct {
	// Name identifies the file in error messages (usually its path).
	Name string
	// Type is the element type.
	Type Type
	// Dims are the dimensions, outermost first.
	Dims []int
	// Data holds the elements exactly as stored: row-major, big-endian.
	// Keeping the raw bytes costs nothing for ubyte files (the common case)
	// and lets callers convert only what they need.
	Data []byte
}

// NumElements is the product of the dimensions. A zero dimension makes it
// zero even when the product of the others would overflow, as it may in a
// valid (empty) file.
func (f *File) NumElements() int {
	if slices.Contains(f.Dims, 0) {
		return 0
	}
	n := 1
	for _, d := range f.Dims {
		n *= d
	}
	return n
}

// Float64s returns the elements converted to float64, which represents every
// IDX type exactly.
func (f *File) Float64s() []float64 {
	n := len(f.Data) / max(f.Type.Size(), 1)
	out := make([]float64, n)
	d := f.Data
	switch f.Type {
	case Uint8:
		for i := range out {
			out[i] = float64(d[i])
		}
	case Int8:
		for i := range out {
			out[i] = float64(int8(d[i]))
		}
	case Int16:
		for i := range out {
			out[i] = float64(int16(binary.BigEndian.Uint16(d[2*i:])))
		}
	case Int32:
		for i := range out {
			out[i] = float64(int32(binary.BigEndian.Uint32(d[4*i:])))
		}
	case Float32:
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.BigEndian.Uint32(d[4*i:])))
		}
	case Float64:
		for i := range out {
			out[i] = math.Float64frombits(binary.BigEndian.Uint64(d[8*i:]))
		}
	}
	return out
}

// Float32s returns the elements converted to float32. Int32 values beyond
// 2^24 and float64 values are rounded.
func (f *File) Float32s() []float32 {
	if f.Type == Float32 {
		// Direct, so that NaN payloads and exact bits survive.
		out := make([]float32, len(f.Data)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.BigEndian.Uint32(f.Data[4*i:]))
		}
		return out
	}
	src := f.Float64s()
	out := make([]float32, len(src))
	for i, v := range src {
		out[i] = float32(v)
	}
	return out
}

// Int64s returns the elements of an integer-typed file as int64. Float files
// are refused rather than truncated, since a silent truncation of labels
// stored as floats would corrupt them.
func (f *File) Int64s() ([]int64, error) {
	if f.Type == Float32 || f.Type == Float64 {
		return nil, fmt.Errorf("idx: %s: Int64s of %v data", f.Name, f.Type)
	}
	src := f.Float64s() // exact for all integer types
	out := make([]int64, len(src))
	for i, v := range src {
		out[i] = int64(v)
	}
	return out, nil
}
