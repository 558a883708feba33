package op

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// MatMul is a batched matrix product over the last two axes, with the batch
// axes broadcast. TransA/TransB use the transpose of an operand without
// materializing it, which the backward pass relies on.
type MatMul struct{ TransA, TransB bool }

func (o *MatMul) Name() string { return "matmul" }

// Dims returns the batch shape and m, k, n of a product with these inputs.
func (o *MatMul) Dims(a, b tensor.Shape) (batch tensor.Shape, m, k, n int, err error) {
	if len(a) < 2 || len(b) < 2 {
		return nil, 0, 0, 0, fmt.Errorf("operands must have at least 2 dimensions")
	}
	m, k = a[len(a)-2], a[len(a)-1]
	if o.TransA {
		m, k = k, m
	}
	k2, n := b[len(b)-2], b[len(b)-1]
	if o.TransB {
		k2, n = n, k2
	}
	if k != k2 {
		return nil, 0, 0, 0, fmt.Errorf("inner dimensions differ: %d vs %d", k, k2)
	}
	batch, err = tensor.Broadcast(a[:len(a)-2], b[:len(b)-2])
	return batch, m, k, n, err
}

func (o *MatMul) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if err := sameDType(in); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	batch, m, _, n, err := o.Dims(in[0].Shape, in[1].Shape)
	if err != nil {
		return nil, err
	}
	return metas1(in[0].DType, append(batch.Clone(), m, n)), nil
}

func (o *MatMul) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	gy, a, b := gouts[0], n.Inputs[0], n.Inputs[1]
	var ga, gb *trace.Tensor
	// C = op(A) op(B). dop(A) = G op(B)^T, dop(B) = op(A)^T G.
	if !o.TransA {
		ga = Apply1(&MatMul{TransA: false, TransB: !o.TransB}, gy, b)
	} else {
		ga = Apply1(&MatMul{TransA: o.TransB, TransB: true}, b, gy)
	}
	if !o.TransB {
		gb = Apply1(&MatMul{TransA: !o.TransA, TransB: false}, a, gy)
	} else {
		gb = Apply1(&MatMul{TransA: true, TransB: o.TransA}, gy, a)
	}
	return []*trace.Tensor{SumTo(ga, a.Shape()), SumTo(gb, b.Shape())}
}

// MatMulT is a matrix product with optional transposes of the operands.
func MatMulT(a, b *trace.Tensor, transA, transB bool) *trace.Tensor {
	return Apply1(&MatMul{TransA: transA, TransB: transB}, a, b)
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
		x2 = Reshape(x, tensor.Shape{-1, xs[len(xs)-1]})
	}
	y := MatMulT(x2, w, false, true)
	if b != nil {
		y = Add(y, b)
	}
	if len(xs) != 2 {
		out := append(xs[:len(xs)-1].Clone(), w.Dim(0))
		y = Reshape(y, out)
	}
	return y
}
