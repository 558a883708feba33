package prim

import (
	"fmt"
	"math"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&DropoutOp{}, &DropoutBackward{}) }

// DropoutOp zeroes each element of x with probability P and scales the kept
// ones by 1/(1-P). Which elements are kept is a pure function of (Seed,
// element index) — see DropoutStream — so running the op again (for
// rematerialization, or on another device) reproduces the same mask.
// Outputs: y (like x) and the mask, bit-packed: uint8 [ceil(n/8)], bit k of
// byte b set when element 8b+k is kept; padding bits are 0.
//
// An optional input 1, an int64 tensor of one element (a step counter fed
// per step or held in state), is mixed into the seed (DropoutStepSeed), so
// one compiled program draws a new mask each step.
type DropoutOp struct {
	P    float64
	Seed uint64
}

func (o *DropoutOp) Name() string { return "dropout" }

func (o *DropoutOp) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeCheap, Kernel: KernelRequired}
}

func (o *DropoutOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *DropoutOp) InPlaceInputs(in []trace.Meta) []int { return nil }

// DropoutMaskShape is the shape of the bit-packed mask of a tensor of shape s.
func DropoutMaskShape(s tensor.Shape) tensor.Shape {
	return tensor.Shape{(s.NumElements() + 7) / 8}
}

func (o *DropoutOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if len(in) == 2 {
		if in[1].DType != tensor.Int64 || in[1].Shape.NumElements() != 1 {
			return nil, fmt.Errorf("step must be an int64 tensor of one element, got %v", in[1])
		}
	} else if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	if !(o.P >= 0 && o.P <= 1) {
		return nil, fmt.Errorf("dropout probability has to be between 0 and 1, but got %v", o.P)
	}
	return []trace.Meta{in[0], {DType: tensor.Uint8, Shape: DropoutMaskShape(in[0].Shape)}}, nil
}

func (o *DropoutOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return nil
	}
	gx := Apply1(&DropoutBackward{P: o.P}, gouts[0], n.Outputs[1])
	if len(n.Inputs) == 2 {
		return []*trace.Tensor{gx, nil}
	}
	return []*trace.Tensor{gx}
}

// DropoutScale is the factor kept elements are multiplied by: 1/(1-p), and 0
// for p = 1 (everything is dropped).
func DropoutScale(p float64) float64 {
	if p >= 1 {
		return 0
	}
	return 1 / (1 - p)
}

// DropoutBackward is gx = gy * mask / (1-P) from the output gradient
// (input 0) and DropoutOp's bit-packed mask (input 1).
type DropoutBackward struct{ P float64 }

func (o *DropoutBackward) Name() string { return "dropout_backward" }

func (o *DropoutBackward) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *DropoutBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *DropoutBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *DropoutBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	if in[1].DType != tensor.Uint8 || !in[1].Shape.Equal(DropoutMaskShape(in[0].Shape)) {
		return nil, fmt.Errorf("mask %v does not fit gradient %v (want uint8%v)", in[1], in[0].Shape, DropoutMaskShape(in[0].Shape))
	}
	return metas1(in[0].DType, in[0].Shape), nil
}

// DropoutStream is the counter-based random stream of a dropout seed: Bits(i)
// is a pure function of the seed and i (the SplitMix64 sequence started at a
// seed-derived state), so any element's decision can be recomputed alone.
type DropoutStream uint64

// NewDropoutStream returns the stream of seed.
func NewDropoutStream(seed uint64) DropoutStream {
	return DropoutStream(splitMix64(seed ^ 0x6a09e667f3bcc909))
}

const dropoutGolden = 0x9e3779b97f4a7c15

func splitMix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// DropoutStepSeed is the seed DropoutOp uses when given a step value.
func DropoutStepSeed(seed uint64, step int64) uint64 {
	return seed ^ splitMix64(uint64(step)+0xbb67ae8584caa73b)
}

// Bits returns the 64 random bits of element i.
func (s DropoutStream) Bits(i uint64) uint64 {
	return splitMix64(uint64(s) + (i+1)*dropoutGolden)
}

// DropoutThreshold is the cut for probability p: an element is dropped when
// its Bits are below it. For p >= 1 every element is dropped regardless.
func DropoutThreshold(p float64) uint64 {
	switch {
	case !(p > 0):
		return 0
	case p >= 1:
		return math.MaxUint64
	}
	return uint64(math.Ldexp(p, 64))
}

// Keep reports whether element i is kept at drop probability p.
func (s DropoutStream) Keep(i uint64, p float64) bool {
	return p < 1 && s.Bits(i) >= DropoutThreshold(p)
}
