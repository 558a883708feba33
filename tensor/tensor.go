package tensor

import (
	"fmt"
	"math"
	"unsafe"
)

// Tensor is a dense, contiguous host tensor: weights, inputs, reference values.
// Data always holds Shape.NumElements()*DType.Size() bytes and is 8-byte
// aligned, so it may be viewed as any element type.
type Tensor struct {
	DType DType
	Shape Shape
	Data  []byte
}

// alignedBytes returns n zeroed bytes backed by uint64s (8-byte aligned).
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// New returns a zero tensor. A shape that fails Shape.Check panics with its
// *SizeError: an overflowing product would otherwise allocate a wrong,
// possibly tiny, buffer.
func New(dt DType, shape Shape) *Tensor {
	if err := shape.Check(dt); err != nil {
		panic(err)
	}
	return &Tensor{DType: dt, Shape: shape.Clone(), Data: alignedBytes(shape.NumElements() * dt.Size())}
}

// FromFloat32 copies v into a new float32 tensor; len(v) must match shape.
func FromFloat32(shape Shape, v []float32) *Tensor {
	if len(v) != shape.NumElements() {
		panic(fmt.Sprintf("tensor.FromFloat32: %d values for shape %v", len(v), shape))
	}
	t := New(Float32, shape)
	copy(t.F32(), v)
	return t
}

// FromFloat64 copies v into a new float64 tensor.
func FromFloat64(shape Shape, v []float64) *Tensor {
	if len(v) != shape.NumElements() {
		panic(fmt.Sprintf("tensor.FromFloat64: %d values for shape %v", len(v), shape))
	}
	t := New(Float64, shape)
	copy(t.F64(), v)
	return t
}

// FromInt64 copies v into a new int64 tensor.
func FromInt64(shape Shape, v []int64) *Tensor {
	if len(v) != shape.NumElements() {
		panic(fmt.Sprintf("tensor.FromInt64: %d values for shape %v", len(v), shape))
	}
	t := New(Int64, shape)
	copy(t.I64(), v)
	return t
}

func view[T any](t *Tensor, want DType) []T {
	if t.DType != want {
		panic(fmt.Sprintf("tensor: %v tensor viewed as %v", t.DType, want))
	}
	n := t.elements(int(unsafe.Sizeof(*new(T))))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&t.Data[0])), n)
}

// elements is the number of elements of size bytes that Shape describes,
// after checking that Data holds them: Shape and Data are public fields, and
// a view past the end of Data would read and write memory that is not the
// tensor's.
func (t *Tensor) elements(size int) int {
	n := t.Shape.NumElements()
	if n < 0 || n > len(t.Data)/size || t.Shape.Check(t.DType) != nil {
		panic(fmt.Sprintf("tensor: shape %v of %v does not fit its %d bytes of data", t.Shape, t.DType, len(t.Data)))
	}
	return n
}

// F32 views a float32 tensor's data (no copy).
func (t *Tensor) F32() []float32 { return view[float32](t, Float32) }

// F64 views a float64 tensor's data.
func (t *Tensor) F64() []float64 { return view[float64](t, Float64) }

// I64 views an int64 tensor's data.
func (t *Tensor) I64() []int64 { return view[int64](t, Int64) }

// I32 views an int32 tensor's data.
func (t *Tensor) I32() []int32 { return view[int32](t, Int32) }

// U16 views a float16 or bfloat16 tensor's raw bits.
func (t *Tensor) U16() []uint16 {
	if t.DType != Float16 && t.DType != BFloat16 {
		panic(fmt.Sprintf("tensor: %v tensor viewed as 16-bit float", t.DType))
	}
	n := t.elements(2)
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&t.Data[0])), n)
}

// Bytes is the size of the data in bytes.
func (t *Tensor) Bytes() int { return len(t.Data) }

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	c := New(t.DType, t.Shape)
	copy(c.Data, t.Data)
	return c
}

// Float64s returns the values converted to float64 (a copy), for any dtype.
func (t *Tensor) Float64s() []float64 {
	n := t.Shape.NumElements()
	out := make([]float64, n)
	switch t.DType {
	case Float32:
		for i, v := range t.F32() {
			out[i] = float64(v)
		}
	case Float64:
		copy(out, t.F64())
	case Float16:
		for i, v := range t.U16() {
			out[i] = float64(Float16ToFloat32(v))
		}
	case BFloat16:
		for i, v := range t.U16() {
			out[i] = float64(BFloat16ToFloat32(v))
		}
	case Int32:
		for i, v := range t.I32() {
			out[i] = float64(v)
		}
	case Int64:
		for i, v := range t.I64() {
			out[i] = float64(v)
		}
	case Uint8, Bool:
		for i := range out {
			out[i] = float64(t.Data[i])
		}
	default:
		panic("tensor: Float64s of invalid dtype")
	}
	return out
}

// Convert returns t converted to dtype dt (round-to-nearest-even for the
// half types; truncation toward zero for integer targets).
func (t *Tensor) Convert(dt DType) *Tensor {
	if dt == t.DType {
		return t.Clone()
	}
	src := t.Float64s()
	out := New(dt, t.Shape)
	switch dt {
	case Float32:
		d := out.F32()
		for i, v := range src {
			d[i] = float32(v)
		}
	case Float64:
		copy(out.F64(), src)
	case Float16:
		d := out.U16()
		for i, v := range src {
			d[i] = Float32ToFloat16(float32(v))
		}
	case BFloat16:
		d := out.U16()
		for i, v := range src {
			d[i] = Float32ToBFloat16(float32(v))
		}
	case Int32:
		d := out.I32()
		for i, v := range src {
			d[i] = int32(v)
		}
	case Int64:
		d := out.I64()
		for i, v := range src {
			d[i] = int64(v)
		}
	case Uint8:
		for i, v := range src {
			out.Data[i] = uint8(v)
		}
	case Bool:
		for i, v := range src {
			if v != 0 && !math.IsNaN(v) || math.IsNaN(v) {
				out.Data[i] = 1
			}
		}
	}
	return out
}
