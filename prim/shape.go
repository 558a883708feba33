package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	register(&ReshapeOp{}, &Permute{}, &Fill{}, &Cast{To: tensor.Float32}, &Cast{To: tensor.BFloat16}, &Cast{To: tensor.Float16})
}

// ReshapeOp gives the same bytes a new shape. It is an alias, not a copy.
type ReshapeOp struct{ Shape tensor.Shape }

func (o *ReshapeOp) Name() string { return "reshape" }

// Traits: an alias, run by no kernel.
func (o *ReshapeOp) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelNone}
}

func (o *ReshapeOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *ReshapeOp) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *ReshapeOp) AliasOf() int { return 0 }

func (o *ReshapeOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if in[0].Shape.NumElements() != o.Shape.NumElements() {
		return nil, fmt.Errorf("shape %v is invalid for input of size %d", o.Shape, in[0].Shape.NumElements())
	}
	return metas1(in[0].DType, o.Shape), nil
}

func (o *ReshapeOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{Reshape(gouts[0], n.Inputs[0].Shape())}
}

// Reshape returns x with a new shape; one dimension may be -1 (inferred).
func Reshape(x *trace.Tensor, shape tensor.Shape) *trace.Tensor {
	s := shape.Clone()
	infer, known := -1, 1
	for i, d := range s {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 0:
			x.Graph().Errorf("reshape", []*trace.Tensor{x}, "invalid shape %v", shape)
		default:
			known *= d
		}
	}
	if infer >= 0 {
		if known == 0 || x.Shape().NumElements()%known != 0 {
			x.Graph().Errorf("reshape", []*trace.Tensor{x}, "shape %v is invalid for input of size %d", shape, x.Shape().NumElements())
		}
		s[infer] = x.Shape().NumElements() / known
	}
	if s.Equal(x.Shape()) {
		return x
	}
	return Apply1(&ReshapeOp{Shape: s}, x)
}

// Permute reorders axes: output axis i is input axis Perm[i]. It copies.
type Permute struct{ Perm []int }

func (o *Permute) Name() string { return "permute" }

func (o *Permute) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Permute) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *Permute) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Permute) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	s := in[0].Shape
	if len(o.Perm) != len(s) {
		return nil, fmt.Errorf("permutation %v has %d axes, input has %d", o.Perm, len(o.Perm), len(s))
	}
	seen := make([]bool, len(s))
	out := make(tensor.Shape, len(s))
	for i, p := range o.Perm {
		if p < 0 || p >= len(s) || seen[p] {
			return nil, fmt.Errorf("invalid permutation %v", o.Perm)
		}
		seen[p] = true
		out[i] = s[p]
	}
	return metas1(in[0].DType, out), nil
}

func (o *Permute) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	inv := make([]int, len(o.Perm))
	for i, p := range o.Perm {
		inv[p] = i
	}
	return []*trace.Tensor{PermuteAxes(gouts[0], inv...)}
}

// PermuteAxes is torch.permute.
func PermuteAxes(x *trace.Tensor, perm ...int) *trace.Tensor {
	perm = append([]int(nil), perm...)
	identity := true
	for i := range perm {
		if perm[i] < 0 {
			perm[i] += len(x.Shape())
		}
		if perm[i] != i {
			identity = false
		}
	}
	if identity && len(perm) == len(x.Shape()) {
		return x
	}
	return Apply1(&Permute{Perm: perm}, x)
}

// Fill produces a tensor of one value; it has no inputs.
type Fill struct {
	Meta  trace.Meta
	Value float64
}

func (o *Fill) Name() string { return "full" }

func (o *Fill) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Fill) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *Fill) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Fill) Infer(in []trace.Meta) ([]trace.Meta, error) {
	return []trace.Meta{o.Meta}, nil
}

func (o *Fill) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor { return nil }

// Full returns a tensor of shape filled with v, in graph g.
func Full(g *trace.Graph, dt tensor.DType, shape tensor.Shape, v float64) *trace.Tensor {
	return g.Apply1(&Fill{Meta: trace.Meta{DType: dt, Shape: shape.Clone()}, Value: v})
}

// FullLike returns a tensor like x filled with v.
func FullLike(x *trace.Tensor, v float64) *trace.Tensor {
	return Full(x.Graph(), x.DType(), x.Shape(), v)
}

// Cast converts to another dtype (round-to-nearest-even for half types).
type Cast struct{ To tensor.DType }

func (o *Cast) Name() string { return "to_" + o.To.String() }

func (o *Cast) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Cast) Cost(in, out []trace.Meta) Cost {
	c := elementwiseCost(in, out)
	switch low := func(d tensor.DType) bool { return d == tensor.BFloat16 || d == tensor.Float16 }; {
	case low(o.To):
		c.Convert, c.Format = 1, o.To
	case o.To == tensor.Float32 && low(in[0].DType):
		c.Convert, c.Format = 0.6, in[0].DType // widening is cheaper than rounding
	}
	return c
}

func (o *Cast) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Cast) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	return metas1(o.To, in[0].Shape), nil
}

func (o *Cast) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if !n.Inputs[0].DType().IsFloat() {
		return []*trace.Tensor{nil}
	}
	return []*trace.Tensor{To(gouts[0], n.Inputs[0].DType())}
}

// To converts x to dtype dt (x itself if it already is).
func To(x *trace.Tensor, dt tensor.DType) *trace.Tensor {
	if x.DType() == dt {
		return x
	}
	return Apply1(&Cast{To: dt}, x)
}
