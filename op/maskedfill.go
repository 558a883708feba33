package op

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

// MaskedFill is x.masked_fill(mask, value): value where the bool mask is
// true, x elsewhere. The mask has x's shape or a suffix of it (repeated
// over the leading axes).
func MaskedFill(x, mask *trace.Tensor, value float64) *trace.Tensor {
	return Apply1(&MaskedFillOp{Value: value}, x, mask)
}

// Arange is torch.arange(n, dtype=dt) as a constant of graph g: 0, 1, ...,
// n-1.
func Arange(g *trace.Graph, dt tensor.DType, n int) *trace.Tensor {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(i)
	}
	return g.Const(tensor.FromFloat64(tensor.Shape{n}, v).Convert(dt))
}

// TrilMask is torch.ones(rows, cols, dtype=bool).tril(diagonal) as a
// constant of graph g: true where column j <= row i + diagonal.
func TrilMask(g *trace.Graph, rows, cols, diagonal int) *trace.Tensor {
	return g.Const(triMask(rows, cols, func(i, j int) bool { return j <= i+diagonal }))
}

// TriuMask is torch.ones(rows, cols, dtype=bool).triu(diagonal) as a
// constant of graph g: true where column j >= row i + diagonal.
// TriuMask(g, t, t, 1) is the causal mask: the future positions.
func TriuMask(g *trace.Graph, rows, cols, diagonal int) *trace.Tensor {
	return g.Const(triMask(rows, cols, func(i, j int) bool { return j >= i+diagonal }))
}

func triMask(rows, cols int, on func(i, j int) bool) *tensor.Tensor {
	t := tensor.New(tensor.Bool, tensor.Shape{rows, cols})
	for i := range rows {
		for j := range cols {
			if on(i, j) {
				t.Data[i*cols+j] = 1
			}
		}
	}
	return t
}

// Tril is torch.tril(x, diagonal) over x's last two axes: the elements
// above the diagonal set to 0.
func Tril(x *trace.Tensor, diagonal int) *trace.Tensor {
	s := x.Shape()
	if len(s) < 2 {
		x.Graph().Errorf("tril", []*trace.Tensor{x}, "input must have at least 2 dimensions, got %v", s)
		return nil
	}
	return MaskedFill(x, TriuMask(x.Graph(), s[len(s)-2], s[len(s)-1], diagonal+1), 0)
}
