package tensor_test

import (
	"errors"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/tensor"
)

func TestShapeCheck(t *testing.T) {
	for _, c := range []struct {
		s  tensor.Shape
		dt tensor.DType
		ok bool
	}{
		{tensor.Shape{}, tensor.Float32, true},
		{tensor.Shape{2, 3}, tensor.Float64, true},
		{tensor.Shape{0, math.MaxInt, math.MaxInt}, tensor.Float32, true}, // empty: no bytes at all
		{tensor.Shape{1 << 46}, tensor.Float32, true},                     // exactly MaxBytes
		{tensor.Shape{1<<46 + 1}, tensor.Float32, false},
		{tensor.Shape{1 << 60, 1, 28, 28}, tensor.Float32, false}, // wrapped to 0 features before
		{tensor.Shape{math.MaxInt, 256}, tensor.Float32, false},
		{tensor.Shape{1 << 32, 1 << 32}, tensor.Uint8, false}, // 2^64 wraps to 0
		{tensor.Shape{-1}, tensor.Float32, false},
		{tensor.Shape{2, -3, 0}, tensor.Float32, false},
	} {
		err := c.s.Check(c.dt)
		if (err == nil) != c.ok {
			t.Errorf("%v%v.Check = %v, want ok %v", c.dt, c.s, err, c.ok)
		}
		if err != nil && !errors.Is(err, tensor.ErrSize) {
			t.Errorf("%v%v: %v does not match ErrSize", c.dt, c.s, err)
		}
	}
}

// New refuses a shape whose byte count overflows instead of allocating a
// buffer of the wrapped size.
func TestNewRefusesOverflow(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("tensor.New of 2^64 bytes did not panic")
		} else if err, ok := r.(error); !ok || !errors.Is(err, tensor.ErrSize) {
			t.Fatalf("panic %v, want a *SizeError", r)
		}
	}()
	x := tensor.New(tensor.Uint8, tensor.Shape{1 << 32, 1 << 32})
	t.Fatalf("got a tensor of %d bytes", len(x.Data))
}

// A view never reaches past Data, whatever Shape says.
func TestViewChecksData(t *testing.T) {
	for name, x := range map[string]*tensor.Tensor{
		"grown":    {DType: tensor.Float32, Shape: tensor.Shape{3}, Data: make([]byte, 8)},
		"wrapped":  {DType: tensor.Float32, Shape: tensor.Shape{1 << 32, 1 << 32}, Data: make([]byte, 8)}, // product wraps to 0
		"negative": {DType: tensor.Float32, Shape: tensor.Shape{-1, -4}, Data: make([]byte, 16)},
		"bf16":     {DType: tensor.BFloat16, Shape: tensor.Shape{5}, Data: make([]byte, 8)},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: viewed %v in %d bytes", name, x.Shape, len(x.Data))
				}
			}()
			if x.DType == tensor.BFloat16 {
				x.U16()
			} else {
				x.F32()
			}
		}()
	}
}
