package testkit_test

import (
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Tests compare against values recorded from the copies testkit replaced,
// so Batch must draw exactly as they did: every input element in order
// (normal for float32, Intn(bound) for int64), then every target element.
func TestBatchDrawsInOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		x, y trace.Meta
	}{
		{"image-class", trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{3, 2}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{3}}},
		{"tokens", trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{2, 4}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{2, 4}}},
		{"regression", trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{2, 3}}, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{2, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const bound = 7
			x, y := testkit.Batch(rand.New(rand.NewSource(3)), tc.x, tc.y, bound)
			want := rand.New(rand.NewSource(3))
			for _, tt := range []*tensor.Tensor{x, y} {
				switch tt.DType {
				case tensor.Float32:
					for i, v := range tt.F32() {
						if w := float32(want.NormFloat64()); v != w {
							t.Fatalf("element %d = %v, want %v", i, v, w)
						}
					}
				case tensor.Int64:
					for i, v := range tt.I64() {
						if w := int64(want.Intn(bound)); v != w {
							t.Fatalf("element %d = %v, want %v", i, v, w)
						}
					}
				}
			}
			if !x.Shape.Equal(tc.x.Shape) || !y.Shape.Equal(tc.y.Shape) {
				t.Errorf("shapes %v, %v; want %v, %v", x.Shape, y.Shape, tc.x.Shape, tc.y.Shape)
			}
		})
	}
}

// Classification is Batch of float32 inputs and one int64 class per example.
func TestClassification(t *testing.T) {
	x, y := testkit.Classification(rand.New(rand.NewSource(4)), tensor.Shape{5, 3}, 4)
	wx, wy := testkit.Batch(rand.New(rand.NewSource(4)),
		trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{5, 3}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{5}}, 4)
	if x.DType != tensor.Float32 || y.DType != tensor.Int64 || !y.Shape.Equal(tensor.Shape{5}) {
		t.Fatalf("got %v %v and %v %v", x.DType, x.Shape, y.DType, y.Shape)
	}
	for i, v := range y.I64() {
		if v != wy.I64()[i] || v < 0 || v >= 4 {
			t.Errorf("class %d = %d, want %d below 4", i, v, wy.I64()[i])
		}
	}
	for i, v := range x.F32() {
		if v != wx.F32()[i] {
			t.Errorf("input %d = %v, want %v", i, v, wx.F32()[i])
		}
	}
}
