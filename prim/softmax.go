package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/trace"
)

func init() {
	register(&SoftmaxOp{}, &SoftmaxOp{Log: true}, &SoftmaxBackward{}, &SoftmaxBackward{Log: true})
}

// SoftmaxOp is softmax (or, with Log, log_softmax) over one axis, computed in
// a single numerically stable pass per row (the row maximum is subtracted
// before exponentiating). Its backward reads only the output, so the input
// need not be kept alive for the backward pass.
type SoftmaxOp struct {
	Axis int // normalized (non-negative)
	Log  bool
}

func (o *SoftmaxOp) Name() string {
	if o.Log {
		return "log_softmax"
	}
	return "softmax"
}

func (o *SoftmaxOp) Traits() Traits {
	return Traits{Autocast: AutocastFP32, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *SoftmaxOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *SoftmaxOp) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *SoftmaxOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	if err := softmaxCheckAxis(o.Axis, len(in[0].Shape)); err != nil {
		return nil, err
	}
	return metas1(in[0].DType, in[0].Shape), nil
}

func (o *SoftmaxOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil}
	}
	return []*trace.Tensor{Apply1(&SoftmaxBackward{Axis: o.Axis, Log: o.Log}, gouts[0], n.Outputs[0])}
}

// softmaxCheckAxis accepts axis 0 of a scalar, as PyTorch does.
func softmaxCheckAxis(axis, rank int) error {
	if axis < 0 || axis >= max(rank, 1) {
		return fmt.Errorf("axis %d out of range for rank %d", axis, rank)
	}
	return nil
}

// SoftmaxBackward computes the input gradient of softmax / log_softmax from
// the output gradient (input 0) and the saved output y (input 1):
//
//	softmax:     gx = y * (gy - sum(gy*y))
//	log_softmax: gx = gy - exp(y) * sum(gy)
//
// with sums over Axis. PyTorch's _softmax_backward_data and
// _log_softmax_backward_data.
type SoftmaxBackward struct {
	Axis int
	Log  bool
}

func (o *SoftmaxBackward) Name() string {
	if o.Log {
		return "_log_softmax_backward_data"
	}
	return "_softmax_backward_data"
}

func (o *SoftmaxBackward) Traits() Traits {
	return Traits{Autocast: AutocastFP32, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *SoftmaxBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *SoftmaxBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *SoftmaxBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if err := sameDType(in); err != nil {
		return nil, err
	}
	if !in[0].Shape.Equal(in[1].Shape) {
		return nil, fmt.Errorf("gradient shape %v differs from output shape %v", in[0].Shape, in[1].Shape)
	}
	if err := softmaxCheckAxis(o.Axis, len(in[0].Shape)); err != nil {
		return nil, err
	}
	return metas1(in[0].DType, in[0].Shape), nil
}
