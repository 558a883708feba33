package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// lossReduction validates a reduction name; "" means "mean", PyTorch's
// default.
func lossReduction(g *trace.Graph, name string, in []*trace.Tensor, r Reduction) Reduction {
	switch r {
	case "":
		return ReductionMean
	case ReductionMean, ReductionSum, ReductionNone:
		return r
	}
	g.Errorf(name, in, "%q is not a valid value for reduction (want \"mean\", \"sum\" or \"none\")", r)
	return ""
}

// Class returns the class index c, set.
func Class(c int) ClassIndex { return prim.Class(c) }

// DefaultCrossEntropyOpts returns PyTorch's defaults: ignore_index=-100,
// label_smoothing=0.0, reduction="mean". It equals the zero value but for
// IgnoreIndex being set explicitly.
func DefaultCrossEntropyOpts() CrossEntropyOpts {
	return CrossEntropyOpts{IgnoreIndex: prim.Class(DefaultIgnoreIndex), Reduction: ReductionMean}
}

// CrossEntropy is torch.nn.functional.cross_entropy(logits, target,
// ignore_index=o.IgnoreIndex, reduction=o.Reduction,
// label_smoothing=o.LabelSmoothing) for class-index targets: logits
// [N, C, d1, ...] (or [C]) and int64 target [N, d1, ...] (or []). A target
// outside [0, C) that is not IgnoreIndex is a run-time error naming the value
// and C. See DefaultCrossEntropyOpts for PyTorch's defaults.
func CrossEntropy(logits, target *trace.Tensor, o CrossEntropyOpts) *trace.Tensor {
	g := logits.Graph()
	in := []*trace.Tensor{logits, target}
	red := lossReduction(g, "cross_entropy", in, o.Reduction)
	if !(o.LabelSmoothing >= 0 && o.LabelSmoothing <= 1) {
		g.Errorf("cross_entropy", in, "label_smoothing must be between 0.0 and 1.0, got %v", o.LabelSmoothing)
	}
	return g.Apply(&prim.CrossEntropyOp{IgnoreIndex: int64(o.IgnoreIndex.Or(DefaultIgnoreIndex)), LabelSmoothing: o.LabelSmoothing, Reduction: red}, logits, target)[0]
}

func pointwiseLoss(k prim.PointwiseLossKind, x, target *trace.Tensor, reduction Reduction) *trace.Tensor {
	red := lossReduction(x.Graph(), (&prim.PointwiseLoss{Kind: k}).Name(), []*trace.Tensor{x, target}, reduction)
	return prim.Apply1(&prim.PointwiseLoss{Kind: k, Reduction: red}, x, target)
}

// MSELoss is torch.nn.functional.mse_loss(x, target, reduction=reduction)
// ("" means "mean"); x and target have the same shape.
func MSELoss(x, target *trace.Tensor, reduction Reduction) *trace.Tensor {
	return pointwiseLoss(prim.MSEKind, x, target, reduction)
}

// L1Loss is torch.nn.functional.l1_loss(x, target, reduction=reduction)
// ("" means "mean"); x and target have the same shape.
func L1Loss(x, target *trace.Tensor, reduction Reduction) *trace.Tensor {
	return pointwiseLoss(prim.L1Kind, x, target, reduction)
}
