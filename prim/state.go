package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&Accumulate{}, &Accumulate{Add: true}) }

// Accumulate writes input 1 into the state tensor input 0: a copy, or an
// addition when Add (gradient accumulation across micro-batches). It is
// PyTorch's AccumulateGrad: the gradient's arena bytes die right after it.
type Accumulate struct{ Add bool }

func (o *Accumulate) Name() string {
	if o.Add {
		return "accumulate_grad"
	}
	return "copy_"
}

func (o *Accumulate) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeNever, Kernel: KernelRequired}
}

func (o *Accumulate) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *Accumulate) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Accumulate) Effect() {}

func (o *Accumulate) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if !in[0].Shape.Equal(in[1].Shape) || in[0].DType != in[1].DType {
		return nil, fmt.Errorf("destination %v and value %v differ", in[0], in[1])
	}
	return nil, nil
}

// AccumulateInto records dst (+)= src for a state tensor dst.
func AccumulateInto(dst, src *trace.Tensor, add bool) {
	if dst.Node.Kind != trace.KindState {
		dst.Graph().Errorf("accumulate", []*trace.Tensor{dst, src}, "destination must be a state tensor")
	}
	dst.Graph().Apply(&Accumulate{Add: add}, dst, src)
}
