package op

import (
	"math"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// normAffine appends the optional weight and bias to ins.
func normAffine(ins []*trace.Tensor, weight, bias *trace.Tensor) []*trace.Tensor {
	if weight != nil {
		ins = append(ins, weight)
	}
	if bias != nil {
		ins = append(ins, bias)
	}
	return ins
}

func normCheckEps(g *trace.Graph, name string, ins []*trace.Tensor, eps float64) {
	if !(eps >= 0) || math.IsInf(eps, 0) {
		g.Errorf(name, ins, "eps must be a finite non-negative number, got %v", eps)
	}
}

// IncrementCounter records counter += 1 for an int64 state tensor, such as
// batch norm's num_batches_tracked (shape [], int64), so that checkpoints
// match PyTorch's state_dict. A BatchNorm module calls it once per training
// step.
func IncrementCounter(counter *trace.Tensor) {
	if counter.Node.Kind != trace.KindState {
		counter.Graph().Errorf("increment_", []*trace.Tensor{counter}, "counter must be a state tensor")
	}
	counter.Graph().Apply(&prim.Increment{}, counter)
}

// BatchNorm is torch.nn.functional.batch_norm over [N, C, *] input (NC, NCL,
// NCHW, NCDHW). weight and bias ([C]) may be nil (affine=False).
//
// In training mode x is normalized with the batch mean and biased variance;
// when runningMean and runningVar are given (state tensors [C], e.g. from
// g.State(name, "buffer", ...)) they are updated in place:
// running_mean = (1-momentum)*running_mean + momentum*mean and
// running_var likewise with the unbiased batch variance. With both nil
// (track_running_stats=False) nothing is updated. num_batches_tracked is
// not touched here: call IncrementCounter.
//
// In evaluation mode x is normalized with runningMean and runningVar (which
// must be given; they need not be state tensors) and nothing is updated.
func BatchNorm(x, weight, bias, runningMean, runningVar *trace.Tensor, training bool, momentum, eps float64) *trace.Tensor {
	g := x.Graph()
	all := normAffine([]*trace.Tensor{x}, weight, bias)
	if runningMean != nil {
		all = append(all, runningMean)
	}
	if runningVar != nil {
		all = append(all, runningVar)
	}
	if (runningMean == nil) != (runningVar == nil) {
		g.Errorf("batch_norm", all, "running_mean and running_var must both be given or both be nil")
	}
	normCheckEps(g, "batch_norm", all, eps)
	if !training && runningMean == nil {
		g.Errorf("batch_norm", all, "running_mean and running_var must be given in evaluation mode")
	}
	update := training && runningMean != nil
	if update {
		if math.IsNaN(momentum) || math.IsInf(momentum, 0) {
			g.Errorf("batch_norm", all, "momentum must be finite, got %v", momentum)
		}
		if runningMean.Node.Kind != trace.KindState || runningVar.Node.Kind != trace.KindState {
			g.Errorf("batch_norm", all, "running_mean and running_var must be state tensors to be updated in training mode")
		}
	}
	ins := normAffine([]*trace.Tensor{x}, weight, bias)
	if !training {
		ins = append(ins, runningMean, runningVar)
	}
	outs := g.Apply(&prim.BatchNormOp{Training: training, Eps: eps, HasWeight: weight != nil, HasBias: bias != nil}, ins...)
	if update {
		n, _, s := normChannels(x.Shape())
		g.Apply(&prim.RunningStatsUpdate{Momentum: momentum, Count: n * s}, runningMean, outs[1])
		g.Apply(&prim.RunningStatsUpdate{Momentum: momentum, Var: true, Eps: eps, Count: n * s}, runningVar, outs[2])
	}
	return outs[0]
}

// LayerNorm is torch.nn.functional.layer_norm: x is normalized over its last
// len(normalizedShape) dimensions, which must equal normalizedShape (biased
// variance, eps inside the square root). weight and bias, shaped
// normalizedShape, may be nil.
func LayerNorm(x *trace.Tensor, normalizedShape tensor.Shape, weight, bias *trace.Tensor, eps float64) *trace.Tensor {
	g := x.Graph()
	ins := normAffine([]*trace.Tensor{x}, weight, bias)
	normCheckEps(g, "layer_norm", ins, eps)
	k := len(normalizedShape)
	xs := x.Shape()
	if k == 0 {
		g.Errorf("layer_norm", ins, "normalized_shape must have at least one dimension")
	}
	if k > len(xs) || !xs[len(xs)-k:].Equal(normalizedShape) {
		g.Errorf("layer_norm", ins, "given normalized_shape=%v, expected input with shape [*, %s], but got input of size %v",
			normalizedShape, normalizedShape.String()[1:len(normalizedShape.String())-1], xs)
	}
	return g.Apply(&prim.LayerNormOp{Dims: k, Eps: eps, HasWeight: weight != nil, HasBias: bias != nil}, ins...)[0]
}

// GroupNorm is torch.nn.functional.group_norm: [N, C, *] input, C divisible
// by numGroups, each sample's groups of C/numGroups channels normalized
// together (biased variance), then scaled and shifted per channel by weight
// and bias ([C], may be nil).
func GroupNorm(x *trace.Tensor, numGroups int, weight, bias *trace.Tensor, eps float64) *trace.Tensor {
	g := x.Graph()
	ins := normAffine([]*trace.Tensor{x}, weight, bias)
	normCheckEps(g, "group_norm", ins, eps)
	if err := normCheckGroups(x.Meta, numGroups); err != nil {
		g.Errorf("group_norm", ins, "%v", err)
	}
	return g.Apply(&prim.GroupNormOp{Groups: numGroups, Eps: eps, HasWeight: weight != nil, HasBias: bias != nil}, ins...)[0]
}
