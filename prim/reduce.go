package prim

import (
	"fmt"
	"sort"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	register(&Reduce{Kind: SumKind}, &Reduce{Kind: MeanKind}, &Reduce{Kind: AmaxKind}, &AmaxBackward{}, &Expand{})
}

// ReduceKind selects a reduction.
type ReduceKind uint8

const (
	SumKind ReduceKind = iota
	MeanKind
	AmaxKind
)

var reduceNames = [...]string{"sum", "mean", "amax"}

// Reduce reduces over Axes (all axes when empty), keeping them as size-1
// dimensions when KeepDim.
type Reduce struct {
	Kind    ReduceKind
	Axes    []int // normalized, sorted, unique
	KeepDim bool
}

func (o *Reduce) Name() string { return reduceNames[o.Kind] }

func (o *Reduce) Traits() Traits {
	return Traits{Autocast: AutocastFP32Forward, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Reduce) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *Reduce) InPlaceInputs(in []trace.Meta) []int { return nil }

// reduced reports, per input axis, whether it is reduced.
func (o *Reduce) reduced(rank int) []bool {
	r := make([]bool, rank)
	if len(o.Axes) == 0 {
		for i := range r {
			r[i] = true
		}
	}
	for _, a := range o.Axes {
		r[a] = true
	}
	return r
}

func (o *Reduce) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	for _, a := range o.Axes {
		if a < 0 || a >= len(in[0].Shape) {
			return nil, fmt.Errorf("axis %d out of range for rank %d", a, len(in[0].Shape))
		}
	}
	if o.Kind == AmaxKind {
		// Like torch.amax; a sum is 0 and a mean NaN over nothing.
		for a, red := range o.reduced(len(in[0].Shape)) {
			if red && in[0].Shape[a] == 0 {
				return nil, fmt.Errorf("amax over an empty axis %d", a)
			}
		}
	}
	return metas1(in[0].DType, o.outShape(in[0].Shape)), nil
}

func (o *Reduce) outShape(s tensor.Shape) tensor.Shape {
	red := o.reduced(len(s))
	out := tensor.Shape{}
	for i, d := range s {
		switch {
		case !red[i]:
			out = append(out, d)
		case o.KeepDim:
			out = append(out, 1)
		}
	}
	return out
}

// KeepShape is the output shape with reduced axes kept as 1.
func (o *Reduce) KeepShape(s tensor.Shape) tensor.Shape {
	red := o.reduced(len(s))
	out := s.Clone()
	for i := range out {
		if red[i] {
			out[i] = 1
		}
	}
	return out
}

func (o *Reduce) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	x := n.Inputs[0]
	keep := o.KeepShape(x.Shape())
	gy := Reshape(gouts[0], keep)
	switch o.Kind {
	case SumKind:
		return []*trace.Tensor{BroadcastTo(gy, x.Shape())}
	case MeanKind:
		cnt := x.Shape().NumElements() / max(1, keep.NumElements())
		return []*trace.Tensor{BroadcastTo(Scale(gy, 1/float64(cnt)), x.Shape())}
	default: // amax: ties share the gradient evenly, as torch.amax
		y := Reshape(n.Outputs[0], keep)
		return []*trace.Tensor{Apply1(&AmaxBackward{Axes: o.Axes}, gy, x, y)}
	}
}

// AmaxBackward routes gy (keep-dim shape) to the maximal elements of x.
type AmaxBackward struct{ Axes []int }

func (o *AmaxBackward) Name() string { return "amax_backward" }

func (o *AmaxBackward) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *AmaxBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *AmaxBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *AmaxBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	return metas1(in[1].DType, in[1].Shape), nil
}

func normAxes(x *trace.Tensor, name string, axes []int) []int {
	seen := map[int]bool{}
	out := []int{}
	for _, a := range axes {
		b, err := x.Shape().Axis(a)
		if err != nil {
			x.Graph().Errorf(name, []*trace.Tensor{x}, "%v", err)
		}
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	sort.Ints(out)
	return out
}

func reduce(k ReduceKind, x *trace.Tensor, keepDim bool, axes []int) *trace.Tensor {
	return Apply1(&Reduce{Kind: k, Axes: normAxes(x, reduceNames[k], axes), KeepDim: keepDim}, x)
}

// Sum over axes (all when none are given).
func Sum(x *trace.Tensor, keepDim bool, axes ...int) *trace.Tensor {
	return reduce(SumKind, x, keepDim, axes)
}

// SumTo sums x down to shape, undoing a broadcast (the gradient of one).
func SumTo(x *trace.Tensor, shape tensor.Shape) *trace.Tensor {
	xs := x.Shape()
	if xs.Equal(shape) {
		return x
	}
	lead := len(xs) - len(shape)
	if lead < 0 {
		x.Graph().Errorf("sum_to", []*trace.Tensor{x}, "cannot sum to larger rank %v", shape)
	}
	var axes []int
	for i := range xs {
		if i < lead || shape[i-lead] == 1 && xs[i] != 1 {
			axes = append(axes, i)
		}
	}
	s := x
	if len(axes) > 0 {
		s = Apply1(&Reduce{Kind: SumKind, Axes: axes, KeepDim: true}, x)
	}
	return Reshape(s, shape)
}

// Expand materializes a broadcast of input 0 to Shape.
type Expand struct{ Shape tensor.Shape }

func (o *Expand) Name() string { return "expand" }

func (o *Expand) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Expand) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *Expand) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Expand) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	s, err := tensor.Broadcast(in[0].Shape, o.Shape)
	if err != nil || !s.Equal(o.Shape) {
		return nil, fmt.Errorf("cannot expand %v to %v", in[0].Shape, o.Shape)
	}
	return metas1(in[0].DType, o.Shape), nil
}

func (o *Expand) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{SumTo(gouts[0], n.Inputs[0].Shape())}
}

// BroadcastTo expands x to shape (a copy; x itself when already that shape).
func BroadcastTo(x *trace.Tensor, shape tensor.Shape) *trace.Tensor {
	if x.Shape().Equal(shape) {
		return x
	}
	return Apply1(&Expand{Shape: shape.Clone()}, x)
}
