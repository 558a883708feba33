package tensor_test

import (
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/tensor"
)

func TestBroadcast(t *testing.T) {
	tests := []struct {
		a, b tensor.Shape
		want tensor.Shape
		err  string // substring of the error; "" when it must succeed
	}{
		{tensor.Shape{2, 3}, tensor.Shape{2, 3}, tensor.Shape{2, 3}, ""},
		{tensor.Shape{}, tensor.Shape{}, tensor.Shape{}, ""},
		{tensor.Shape{}, tensor.Shape{4, 5}, tensor.Shape{4, 5}, ""},
		{tensor.Shape{4, 5}, tensor.Shape{}, tensor.Shape{4, 5}, ""},
		{tensor.Shape{3}, tensor.Shape{2, 3}, tensor.Shape{2, 3}, ""},
		{tensor.Shape{2, 1}, tensor.Shape{1, 3}, tensor.Shape{2, 3}, ""},
		{tensor.Shape{5, 1, 4, 1}, tensor.Shape{3, 1, 6}, tensor.Shape{5, 3, 4, 6}, ""},
		{tensor.Shape{1}, tensor.Shape{1}, tensor.Shape{1}, ""},
		{tensor.Shape{1, 1}, tensor.Shape{7}, tensor.Shape{1, 7}, ""},
		// Zero-size dimensions broadcast against 1 like any other size.
		{tensor.Shape{0}, tensor.Shape{1}, tensor.Shape{0}, ""},
		{tensor.Shape{1, 3}, tensor.Shape{0, 1}, tensor.Shape{0, 3}, ""},
		{tensor.Shape{0}, tensor.Shape{3}, nil, "dimension 0: 0 vs 3"},
		{tensor.Shape{2, 3}, tensor.Shape{3, 3}, nil, "shapes [2, 3] and [3, 3] are not broadcastable (dimension 0: 2 vs 3)"},
		{tensor.Shape{4}, tensor.Shape{2, 3}, nil, "dimension 1: 4 vs 3"},
		{tensor.Shape{8, 4, 3}, tensor.Shape{2, 1}, nil, "dimension 1: 4 vs 2"},
	}
	for _, tc := range tests {
		for _, swap := range []bool{false, true} {
			a, b := tc.a, tc.b
			if swap {
				a, b = b, a // broadcasting is symmetric
			}
			aIn, bIn := a.Clone(), b.Clone()
			got, err := tensor.Broadcast(a, b)
			if !a.Equal(aIn) || !b.Equal(bIn) {
				t.Errorf("Broadcast(%v, %v) modified its arguments", aIn, bIn)
			}
			if tc.err != "" {
				if err == nil {
					t.Errorf("Broadcast(%v, %v) = %v, want an error", a, b, got)
				} else if !swap && !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Broadcast(%v, %v) error %q does not contain %q", a, b, err, tc.err)
				}
				continue
			}
			if err != nil || !got.Equal(tc.want) {
				t.Errorf("Broadcast(%v, %v) = %v, %v; want %v", a, b, got, err, tc.want)
			}
		}
	}
}

func TestAxis(t *testing.T) {
	tests := []struct {
		shape tensor.Shape
		axis  int
		want  int
		err   string
	}{
		{tensor.Shape{2, 3, 4}, 0, 0, ""},
		{tensor.Shape{2, 3, 4}, 2, 2, ""},
		{tensor.Shape{2, 3, 4}, -1, 2, ""},
		{tensor.Shape{2, 3, 4}, -3, 0, ""},
		{tensor.Shape{2, 3, 4}, 3, 0, "expected to be in range of [-3, 2], but got 3"},
		{tensor.Shape{2, 3, 4}, -4, 0, "expected to be in range of [-3, 2]"},
		{tensor.Shape{5}, -1, 0, ""},
		{tensor.Shape{5}, 1, 0, "[-1, 0], but got 1"},
		// PyTorch lets a scalar be reduced over dim 0 as if it had rank 1.
		{tensor.Shape{}, 0, 0, ""},
		{tensor.Shape{}, 1, 0, "dimension out of range"},
	}
	for _, tc := range tests {
		got, err := tc.shape.Axis(tc.axis)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v.Axis(%d) = %d, %v; want error containing %q", tc.shape, tc.axis, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v.Axis(%d) = %d, %v; want %d", tc.shape, tc.axis, got, err, tc.want)
		}
	}
}

// PyTorch behaviour that Axis does not match yet; checked against torch 1.13:
//
//	torch.tensor(1.).sum(-1)  -> works (dim -1 of a scalar is 0)
//	torch.ones(2, 3).sum(-3)  -> "Dimension out of range (expected to be in
//	                              range of [-2, 1], but got -3)"
//	torch.tensor(1.).sum(1)   -> "... in range of [-1, 0], but got 1)"
func TestAxisPyTorchParity(t *testing.T) {
	if got, err := (tensor.Shape{}).Axis(-1); err != nil || got != 0 {
		t.Errorf("scalar Axis(-1) = %d, %v; want 0", got, err)
	}
	if _, err := (tensor.Shape{2, 3}).Axis(-3); err == nil || !strings.Contains(err.Error(), "[-2, 1], but got -3") {
		t.Errorf("Axis(-3) error = %v, want it to name -3", err)
	}
	if _, err := (tensor.Shape{}).Axis(1); err == nil || !strings.Contains(err.Error(), "[-1, 0], but got 1") {
		t.Errorf("scalar Axis(1) error = %v, want range [-1, 0]", err)
	}
}

func TestShapeBasics(t *testing.T) {
	tests := []struct {
		s       tensor.Shape
		n       int
		strides []int
		str     string
	}{
		{tensor.Shape{}, 1, []int{}, "[]"},
		{tensor.Shape{0}, 0, []int{1}, "[0]"},
		{tensor.Shape{7}, 7, []int{1}, "[7]"},
		{tensor.Shape{2, 3, 4}, 24, []int{12, 4, 1}, "[2, 3, 4]"},
		{tensor.Shape{3, 0, 2}, 0, []int{0, 2, 1}, "[3, 0, 2]"},
	}
	for _, tc := range tests {
		if got := tc.s.NumElements(); got != tc.n {
			t.Errorf("%v.NumElements() = %d, want %d", tc.s, got, tc.n)
		}
		if got := tc.s.Rank(); got != len(tc.s) {
			t.Errorf("%v.Rank() = %d", tc.s, got)
		}
		if got := tc.s.Strides(); len(got) != len(tc.strides) || !tensor.Shape(got).Equal(tensor.Shape(tc.strides)) {
			t.Errorf("%v.Strides() = %v, want %v", tc.s, got, tc.strides)
		}
		if got := tc.s.String(); got != tc.str {
			t.Errorf("String() = %q, want %q", got, tc.str)
		}
		c := tc.s.Clone()
		if !c.Equal(tc.s) {
			t.Errorf("%v.Clone() = %v", tc.s, c)
		}
		if len(c) > 0 {
			c[0]++
			if c.Equal(tc.s) {
				t.Errorf("%v.Clone() shares memory", tc.s)
			}
		}
	}
	if (tensor.Shape{2, 3}).Equal(tensor.Shape{2, 3, 1}) || (tensor.Shape{2, 3}).Equal(tensor.Shape{3, 2}) {
		t.Error("Equal accepts different shapes")
	}
}
