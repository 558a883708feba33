package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&MatMul{}) }

// MatMul is a batched matrix product over the last two axes, with the batch
// axes broadcast. TransA/TransB use the transpose of an operand without
// materializing it, which the backward pass relies on.
//
// With Mixed, each operand may be float32, bfloat16 or float16, and the
// product is float32, accumulated in float32 from the operands' exact
// float32 values: a low-precision kernel reading 16-bit operands in place.
// Its value is that of the product of the operands cast to float32 first,
// bit for bit (transform.ApplyPrecision relies on it to drop those casts).
type MatMul struct {
	TransA, TransB bool
	Mixed          bool
}

func (o *MatMul) Name() string { return "matmul" }

func (o *MatMul) Traits() Traits {
	return Traits{Autocast: AutocastLow, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *MatMul) Cost(in, out []trace.Meta) Cost {
	_, m, k, n, err := o.Dims(in[0].Shape, in[1].Shape)
	if err != nil {
		return Cost{Bytes: ioBytes(in, out)}
	}
	return Cost{Flops: 2 * float64(m*k*n) * numel(out[0]) / float64(m*n), Bytes: ioBytes(in, out)}
}

func (o *MatMul) InPlaceInputs(in []trace.Meta) []int { return nil }

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
	out := in[0].DType
	if o.Mixed {
		for _, m := range in {
			if m.DType != tensor.Float32 && m.DType != tensor.BFloat16 && m.DType != tensor.Float16 {
				return nil, fmt.Errorf("mixed operands must be float32, bfloat16 or float16, got %v", m.DType)
			}
		}
		out = tensor.Float32
	} else {
		if err := sameDType(in); err != nil {
			return nil, err
		}
		if err := wantFloat(in[0]); err != nil {
			return nil, err
		}
	}
	batch, m, _, n, err := o.Dims(in[0].Shape, in[1].Shape)
	if err != nil {
		return nil, err
	}
	return metas1(out, append(batch.Clone(), m, n)), nil
}

func (o *MatMul) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	gy, a, b := gouts[0], n.Inputs[0], n.Inputs[1]
	var ga, gb *trace.Tensor
	// C = op(A) op(B). dop(A) = G op(B)^T, dop(B) = op(A)^T G.
	mixed := o.Mixed
	if !o.TransA {
		ga = Apply1(&MatMul{TransA: false, TransB: !o.TransB, Mixed: mixed}, gy, b)
	} else {
		ga = Apply1(&MatMul{TransA: o.TransB, TransB: true, Mixed: mixed}, b, gy)
	}
	if !o.TransB {
		gb = Apply1(&MatMul{TransA: !o.TransA, TransB: false, Mixed: mixed}, a, gy)
	} else {
		gb = Apply1(&MatMul{TransA: true, TransB: o.TransA, Mixed: mixed}, gy, a)
	}
	// A 16-bit operand's gradient has its type (as the cast's would).
	return []*trace.Tensor{To(SumTo(ga, a.Shape()), a.DType()), To(SumTo(gb, b.Shape()), b.DType())}
}
