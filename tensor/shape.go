package tensor

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Shape is a list of dimension sizes, outermost first. A scalar has an empty
// shape.
type Shape []int

// NumElements is the product of the dimensions (1 for a scalar).
func (s Shape) NumElements() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// MaxBytes is the largest tensor, in bytes, that a shape may describe:
// 256 TiB, more than any device holds, yet small enough that the byte
// counts of tens of thousands of such tensors still add up inside an
// int64, so that planners summing them cannot overflow either.
const MaxBytes int64 = 1 << 48

// ErrSize is matched by errors.Is for every *SizeError.
var ErrSize = errors.New("impossible tensor size")

// SizeError says why a shape describes no tensor that can exist: a
// negative dimension, or more than MaxBytes of elements of its type.
type SizeError struct {
	Shape Shape
	DType DType
	Why   string
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("impossible tensor size: %v%v %s", e.DType, e.Shape, e.Why)
}

// Is lets errors.Is(err, ErrSize) match.
func (e *SizeError) Is(target error) bool { return target == ErrSize }

// Check reports whether s describes a tensor of dt that can exist: every
// dimension non-negative, and at most MaxBytes in all. Products are checked
// step by step, so no multiplication overflows on the way; NumElements and
// Bytes of a checked shape are exact.
func (s Shape) Check(dt DType) error {
	size := int64(max(dt.Size(), 1))
	for i, d := range s {
		if d < 0 {
			return &SizeError{Shape: s, DType: dt, Why: fmt.Sprintf("(dimension %d is negative)", i)}
		}
	}
	if slices.Contains(s, 0) {
		return nil
	}
	n := size
	for _, d := range s {
		if n > MaxBytes/int64(d) {
			return &SizeError{Shape: s, DType: dt, Why: "(more than 256 TiB, the largest tensor accepted)"}
		}
		n *= int64(d)
	}
	return nil
}

// Rank is the number of dimensions.
func (s Shape) Rank() int { return len(s) }

// Equal reports whether two shapes are identical.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy that does not share memory with s.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// String formats like PyTorch's torch.Size: [2, 3, 4].
func (s Shape) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(d))
	}
	b.WriteByte(']')
	return b.String()
}

// Strides returns contiguous (row-major) strides in elements.
func (s Shape) Strides() []int {
	st := make([]int, len(s))
	acc := 1
	for i := len(s) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= s[i]
	}
	return st
}

// Axis resolves a possibly negative axis, as PyTorch's dim arguments. A
// scalar accepts -1 and 0 (PyTorch wraps scalars as if they had one axis).
func (s Shape) Axis(a int) (int, error) {
	r := max(len(s), 1)
	b := a
	if b < 0 {
		b += r
	}
	if b < 0 || b >= r {
		return 0, fmt.Errorf("dimension out of range (expected to be in range of [%d, %d], but got %d)", -r, r-1, a)
	}
	return b, nil
}

// Broadcast returns the shape two operands broadcast to under NumPy/PyTorch
// rules: align trailing dimensions; each pair must be equal or contain a 1.
func Broadcast(a, b Shape) (Shape, error) {
	n := max(len(a), len(b))
	out := make(Shape, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db:
			out[i] = da
		case da == 1:
			out[i] = db
		case db == 1:
			out[i] = da
		default:
			return nil, fmt.Errorf("shapes %v and %v are not broadcastable (dimension %d: %d vs %d)", a, b, i, da, db)
		}
	}
	return out, nil
}
