package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// MatMulT is a matrix product with optional transposes of the operands.
func MatMulT(a, b *trace.Tensor, transA, transB bool) *trace.Tensor {
	return prim.Apply1(&prim.MatMul{TransA: transA, TransB: transB}, a, b)
}

// Mm is torch.matmul for operands of rank >= 2.
func Mm(a, b *trace.Tensor) *trace.Tensor { return MatMulT(a, b, false, false) }

// Linear is torch.nn.functional.linear: x @ w^T + b, w of shape [out, in];
// b may be nil.
func Linear(x, w, b *trace.Tensor) *trace.Tensor {
	if len(w.Shape()) != 2 {
		x.Graph().Errorf("linear", []*trace.Tensor{x, w}, "weight must be 2-D [out_features, in_features]")
	}
	if x.Dim(-1) != w.Dim(1) {
		x.Graph().Errorf("linear", []*trace.Tensor{x, w}, "input has %d features, weight expects %d (mat1 and mat2 shapes cannot be multiplied)", x.Dim(-1), w.Dim(1))
	}
	xs := x.Shape()
	x2 := x
	if len(xs) != 2 {
		x2 = prim.Reshape(x, tensor.Shape{-1, xs[len(xs)-1]})
	}
	y := MatMulT(x2, w, false, true)
	if b != nil {
		y = prim.Add(y, b)
	}
	if len(xs) != 2 {
		out := append(xs[:len(xs)-1].Clone(), w.Dim(0))
		y = prim.Reshape(y, out)
	}
	return y
}
