package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&MaskedFillOp{}) }

// MaskedFillOp is torch.Tensor.masked_fill(mask, value): the input where
// the mask is false, Value where it is true. Inputs: x (floating) and a
// bool mask whose shape is x's or a suffix of it (a [T, T] causal mask for
// [B, H, T, T] scores), repeated over x's leading axes.
type MaskedFillOp struct{ Value float64 }

func (o *MaskedFillOp) Name() string { return "masked_fill" }

func (o *MaskedFillOp) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeCheap, Kernel: KernelRequired}
}

func (o *MaskedFillOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

// InPlaceInputs: element i of x is read before element i of the output
// is written, and never after.
func (o *MaskedFillOp) InPlaceInputs(in []trace.Meta) []int { return []int{0} }

func (o *MaskedFillOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	if in[1].DType != tensor.Bool {
		return nil, fmt.Errorf("expected a bool mask, got %v", in[1].DType)
	}
	xs, ms := in[0].Shape, in[1].Shape
	if len(ms) > len(xs) || !xs[len(xs)-len(ms):].Equal(ms) {
		return nil, fmt.Errorf("mask shape %v is not input shape %v or a suffix of it", ms, xs)
	}
	return metas1(in[0].DType, xs), nil
}

// Grad: the gradient passes where the mask is false and is 0 where the
// value was filled in, the same op with value 0.
func (o *MaskedFillOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil, nil}
	}
	return []*trace.Tensor{Apply1(&MaskedFillOp{}, gouts[0], n.Inputs[1]), nil}
}
