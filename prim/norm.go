package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	register(&BatchNormOp{}, &BatchNormBackward{}, &RunningStatsUpdate{}, &RunningStatsUpdate{Var: true}, &Increment{}, &LayerNormOp{}, &LayerNormBackward{}, &GroupNormOp{}, &GroupNormBackward{})
}

// Normalization layers: batch_norm, layer_norm and group_norm. Each is one
// fused forward op that also returns the small statistics its backward needs
// (mean and inverse standard deviation, as PyTorch's native_* ops do) and one
// fused backward op. Batch norm's running statistics are updated in place by
// side-effect ops (RunningStatsUpdate, Increment) on state tensors.

// normChannels splits a [N, C, *] shape into N, C and the product of the
// trailing (spatial) dimensions.
func normChannels(s tensor.Shape) (n, c, spatial int) {
	spatial = 1
	for _, d := range s[2:] {
		spatial *= d
	}
	return s[0], s[1], spatial
}

// normCheckParam checks an optional per-feature parameter (weight, bias or
// running statistic) against the expected shape and dtype.
func normCheckParam(what string, m trace.Meta, dt tensor.DType, shape tensor.Shape) error {
	if m.DType != dt {
		return fmt.Errorf("%s is %v, input is %v", what, m.DType, dt)
	}
	if !m.Shape.Equal(shape) {
		return fmt.Errorf("%s has shape %v, expected %v", what, m.Shape, shape)
	}
	return nil
}

// normGradInputs maps a fused backward op's outputs (gx, [gweight], [gbias])
// onto the forward node's inputs (x, [weight], [bias], ...).
func normGradInputs(n *trace.Node, outs []*trace.Tensor, hasWeight, hasBias bool) []*trace.Tensor {
	res := make([]*trace.Tensor, len(n.Inputs))
	res[0] = outs[0]
	i, k := 1, 1
	if hasWeight {
		res[i] = outs[k]
		i, k = i+1, k+1
	}
	if hasBias {
		res[i] = outs[k]
	}
	return res
}

// normBackwardMetas are the outputs of a fused norm backward op: the input
// gradient, then the weight and bias gradients when present.
func normBackwardMetas(x trace.Meta, param tensor.Shape, hasWeight, hasBias bool) []trace.Meta {
	out := []trace.Meta{x}
	if hasWeight {
		out = append(out, trace.Meta{DType: x.DType, Shape: param.Clone()})
	}
	if hasBias {
		out = append(out, trace.Meta{DType: x.DType, Shape: param.Clone()})
	}
	return out
}

// normMixedInput checks a normalization's input x and returns the meta the
// op computes in: x's own, or with mixed (x read as bfloat16) float32's.
func normMixedInput(x trace.Meta, mixed bool) (trace.Meta, error) {
	if !mixed {
		return x, wantFloat(x)
	}
	if x.DType != tensor.BFloat16 {
		return x, fmt.Errorf("mixed: expected a bfloat16 input, got %v", x.DType)
	}
	return trace.Meta{DType: tensor.Float32, Shape: x.Shape}, nil
}

// normNoStatGrads rejects gradients flowing into the saved statistics
// outputs, which the fused backward ops do not propagate.
func normNoStatGrads(n *trace.Node, gouts []*trace.Tensor) {
	for i := 1; i < len(gouts); i++ {
		if gouts[i] != nil {
			n.Inputs[0].Graph().Errorf(n.Op.Name()+" backward", n.Inputs,
				"gradient through the saved statistics (output %d) is not supported", i)
		}
	}
}

// ---------------------------------------------------------------- batch norm

// BatchNormOp is batch normalization over [N, C, *] input (torch's
// native_batch_norm). Inputs: x, then weight [C] if HasWeight, bias [C] if
// HasBias, then, in evaluation mode only, running_mean [C] and running_var
// [C]. Outputs: y (like x), mean [C] and invstd [C] — the batch statistics
// (biased variance) in training mode, the running mean and
// 1/sqrt(running_var+eps) in evaluation mode — which the backward reads.
// With Mixed, x is a bfloat16 tensor read in place of its float32 copy
// (transform.ReadLow under bf16 autocast) and everything else is float32:
// the same results, without the copy.
type BatchNormOp struct {
	Training  bool
	Eps       float64
	HasWeight bool
	HasBias   bool
	Mixed     bool
}

func (o *BatchNormOp) Name() string { return "batch_norm" }

func (o *BatchNormOp) Traits() Traits {
	return Traits{Autocast: AutocastFirstInput, Fusion: FuseProducer, Stats: StatsAfterFirst, Recompute: RecomputeCheap, Kernel: KernelRequired}
}

func (o *BatchNormOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *BatchNormOp) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *BatchNormOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	want := 1
	if o.HasWeight {
		want++
	}
	if o.HasBias {
		want++
	}
	if !o.Training {
		want += 2
	}
	if err := wantInputs(in, want); err != nil {
		return nil, err
	}
	x, err := normMixedInput(in[0], o.Mixed)
	if err != nil {
		return nil, err
	}
	if len(x.Shape) < 2 {
		return nil, fmt.Errorf("expected input of at least 2 dimensions [N, C, *], got %d-D", len(x.Shape))
	}
	n, c, s := normChannels(x.Shape)
	if o.Training && n*s <= 1 {
		return nil, fmt.Errorf("expected more than 1 value per channel when training, got input size %v", x.Shape)
	}
	cs := tensor.Shape{c}
	k := 1
	for _, p := range []struct {
		has  bool
		what string
	}{{o.HasWeight, "weight"}, {o.HasBias, "bias"}, {!o.Training, "running_mean"}, {!o.Training, "running_var"}} {
		if !p.has {
			continue
		}
		if err := normCheckParam(p.what, in[k], x.DType, cs); err != nil {
			return nil, err
		}
		k++
	}
	return []trace.Meta{x, {DType: x.DType, Shape: cs}, {DType: x.DType, Shape: cs.Clone()}}, nil
}

func (o *BatchNormOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	normNoStatGrads(n, gouts)
	gy := gouts[0]
	if gy == nil {
		return nil
	}
	x := n.Inputs[0]
	ins := []*trace.Tensor{gy, x, n.Outputs[1], n.Outputs[2]}
	if o.HasWeight {
		ins = append(ins, n.Inputs[1])
	}
	outs := x.Graph().Apply(&BatchNormBackward{Training: o.Training, HasWeight: o.HasWeight, HasBias: o.HasBias, Mixed: o.Mixed}, ins...)
	// Running statistics (evaluation mode) get no gradient, as in PyTorch.
	return normGradInputs(n, outs, o.HasWeight, o.HasBias)
}

// BatchNormBackward is batch norm's fused backward. Inputs: gy, x, mean [C],
// invstd [C] (BatchNormOp's outputs 1 and 2), then weight [C] if HasWeight.
// Outputs: gx, then gweight [C] if HasWeight and gbias [C] if HasBias.
// With Mixed, x is bfloat16 (as BatchNormOp's Mixed), the rest float32.
type BatchNormBackward struct {
	Training  bool
	HasWeight bool
	HasBias   bool
	Mixed     bool
}

func (o *BatchNormBackward) Name() string { return "batch_norm_backward" }

func (o *BatchNormBackward) Traits() Traits {
	return Traits{Autocast: AutocastFirstInput, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *BatchNormBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *BatchNormBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *BatchNormBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	want := 4
	if o.HasWeight {
		want++
	}
	if err := wantInputs(in, want); err != nil {
		return nil, err
	}
	ins := in
	if o.Mixed {
		x, err := normMixedInput(in[1], true)
		if err != nil {
			return nil, err
		}
		ins = append([]trace.Meta{in[0], x}, in[2:]...)
	}
	if err := sameDType(ins); err != nil {
		return nil, err
	}
	x := ins[1]
	if len(x.Shape) < 2 || !in[0].Shape.Equal(x.Shape) {
		return nil, fmt.Errorf("gradient %v and input %v must be the same [N, C, *] shape", in[0].Shape, x.Shape)
	}
	cs := tensor.Shape{x.Shape[1]}
	for i := 2; i < want; i++ {
		if !in[i].Shape.Equal(cs) {
			return nil, fmt.Errorf("input %d has shape %v, expected %v", i, in[i].Shape, cs)
		}
	}
	return normBackwardMetas(x, cs, o.HasWeight, o.HasBias), nil
}

// RunningStatsUpdate updates a running statistic in place (input 0, a state
// tensor [C]) from a batch statistic (input 1, [C]), as PyTorch does:
//
//	running = (1-Momentum)*running + Momentum*batch
//
// For the mean, input 1 is the batch mean. For the variance (Var), input 1
// is the batch's saved invstd = 1/sqrt(var+Eps), from which the kernel
// recovers the biased variance and applies Bessel's correction
// Count/(Count-1) (Count: values per channel, N*H*W), so the running
// variance is updated with the unbiased batch variance like PyTorch's.
type RunningStatsUpdate struct {
	Momentum float64
	Var      bool
	Eps      float64
	Count    int
}

func (o *RunningStatsUpdate) Name() string {
	if o.Var {
		return "running_var_update_"
	}
	return "running_mean_update_"
}

func (o *RunningStatsUpdate) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeNever, Kernel: KernelRequired}
}

func (o *RunningStatsUpdate) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *RunningStatsUpdate) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *RunningStatsUpdate) Effect() {}

func (o *RunningStatsUpdate) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	if !in[0].Shape.Equal(in[1].Shape) || in[0].DType != in[1].DType {
		return nil, fmt.Errorf("running statistic %v and batch statistic %v differ", in[0], in[1])
	}
	return nil, nil
}

// Increment adds 1 in place to an int64 state tensor (input 0): batch norm's
// num_batches_tracked.
type Increment struct{}

func (o *Increment) Name() string { return "increment_" }

func (o *Increment) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeNever, Kernel: KernelRequired}
}

func (o *Increment) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *Increment) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Increment) Effect() {}

func (o *Increment) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if in[0].DType != tensor.Int64 {
		return nil, fmt.Errorf("expected an int64 counter, got %v", in[0].DType)
	}
	return nil, nil
}

// ---------------------------------------------------------------- layer norm

// LayerNormOp normalizes over the last Dims dimensions (torch's
// native_layer_norm). Inputs: x, then weight if HasWeight and bias if
// HasBias, both shaped like x's last Dims dimensions. Outputs: y (like x),
// mean and rstd, shaped like x with the last Dims dimensions set to 1.
type LayerNormOp struct {
	Dims      int
	Eps       float64
	HasWeight bool
	HasBias   bool
}

func (o *LayerNormOp) Name() string { return "layer_norm" }

func (o *LayerNormOp) Traits() Traits {
	return Traits{Autocast: AutocastFP32, Fusion: FuseProducer, Stats: StatsAfterFirst, Recompute: RecomputeCheap, Kernel: KernelRequired}
}

func (o *LayerNormOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *LayerNormOp) InPlaceInputs(in []trace.Meta) []int { return nil }

// normLayerStatShape is x's shape with the normalized dimensions set to 1.
func normLayerStatShape(s tensor.Shape, dims int) tensor.Shape {
	out := s.Clone()
	for i := len(s) - dims; i < len(s); i++ {
		out[i] = 1
	}
	return out
}

func (o *LayerNormOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	return normInfer(in, o.HasWeight, o.HasBias, o.shapes)
}

// shapes checks x and returns the shapes of the weight and bias and of the
// statistics.
func (o *LayerNormOp) shapes(x trace.Meta) (param, stat tensor.Shape, err error) {
	if o.Dims < 1 || o.Dims > len(x.Shape) {
		return nil, nil, fmt.Errorf("cannot normalize over the last %d dimensions of a %d-D input", o.Dims, len(x.Shape))
	}
	return x.Shape[len(x.Shape)-o.Dims:], normLayerStatShape(x.Shape, o.Dims), nil
}

// normInfer is the shape rule of layer and group norm: x, then weight and
// bias if present, shaped by shapes; outputs y (like x), mean and rstd.
func normInfer(in []trace.Meta, hasWeight, hasBias bool, shapes func(trace.Meta) (param, stat tensor.Shape, err error)) ([]trace.Meta, error) {
	want := 1
	if hasWeight {
		want++
	}
	if hasBias {
		want++
	}
	if err := wantInputs(in, want); err != nil {
		return nil, err
	}
	x := in[0]
	if err := wantFloat(x); err != nil {
		return nil, err
	}
	ps, st, err := shapes(x)
	if err != nil {
		return nil, err
	}
	for k := 1; k < want; k++ {
		what := "weight"
		if k == 2 || !hasWeight {
			what = "bias"
		}
		if err := normCheckParam(what, in[k], x.DType, ps); err != nil {
			return nil, err
		}
	}
	return []trace.Meta{x, {DType: x.DType, Shape: st}, {DType: x.DType, Shape: st.Clone()}}, nil
}

// normBackwardInfer is the shape rule of layer and group norm's backward:
// gy, x, mean, rstd, then weight if present.
func normBackwardInfer(in []trace.Meta, hasWeight, hasBias bool, shapes func(trace.Meta) (param, stat tensor.Shape, err error)) ([]trace.Meta, error) {
	want := 4
	if hasWeight {
		want++
	}
	if err := wantInputs(in, want); err != nil {
		return nil, err
	}
	if err := sameDType(in); err != nil {
		return nil, err
	}
	x := in[1]
	if !in[0].Shape.Equal(x.Shape) {
		return nil, fmt.Errorf("gradient %v and input %v differ", in[0].Shape, x.Shape)
	}
	ps, st, err := shapes(x)
	if err != nil {
		return nil, err
	}
	for i := 2; i < 4; i++ {
		if !in[i].Shape.Equal(st) {
			return nil, fmt.Errorf("statistic %d has shape %v, expected %v", i, in[i].Shape, st)
		}
	}
	if hasWeight && !in[4].Shape.Equal(ps) {
		return nil, fmt.Errorf("weight has shape %v, expected %v", in[4].Shape, ps)
	}
	return normBackwardMetas(x, ps, hasWeight, hasBias), nil
}

// normGrad applies the fused backward op bw of a layer or group norm node n
// (inputs gy, x, mean, rstd, weight).
func normGrad(n *trace.Node, gouts []*trace.Tensor, bw trace.Op, hasWeight, hasBias bool) []*trace.Tensor {
	normNoStatGrads(n, gouts)
	gy := gouts[0]
	if gy == nil {
		return nil
	}
	x := n.Inputs[0]
	ins := []*trace.Tensor{gy, x, n.Outputs[1], n.Outputs[2]}
	if hasWeight {
		ins = append(ins, n.Inputs[1])
	}
	return normGradInputs(n, x.Graph().Apply(bw, ins...), hasWeight, hasBias)
}

func (o *LayerNormOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return normGrad(n, gouts, &LayerNormBackward{Dims: o.Dims, HasWeight: o.HasWeight, HasBias: o.HasBias}, o.HasWeight, o.HasBias)
}

// LayerNormBackward is layer norm's fused backward. Inputs: gy, x, mean,
// rstd (LayerNormOp's outputs 1 and 2), then weight if HasWeight. Outputs:
// gx, then gweight if HasWeight and gbias if HasBias.
type LayerNormBackward struct {
	Dims      int
	HasWeight bool
	HasBias   bool
}

func (o *LayerNormBackward) Name() string { return "layer_norm_backward" }

// Traits: output 0 is the gradient of the input (input 1).
func (o *LayerNormBackward) Traits() Traits {
	return Traits{Autocast: AutocastFP32, GradOf: 1, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *LayerNormBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *LayerNormBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *LayerNormBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	return normBackwardInfer(in, o.HasWeight, o.HasBias, (&LayerNormOp{Dims: o.Dims}).shapes)
}

// ---------------------------------------------------------------- group norm

// GroupNormOp is group normalization of [N, C, *] input over Groups groups of
// C/Groups channels (torch's native_group_norm). Inputs: x, then weight [C]
// if HasWeight and bias [C] if HasBias. Outputs: y (like x), mean [N, Groups]
// and rstd [N, Groups].
type GroupNormOp struct {
	Groups    int
	Eps       float64
	HasWeight bool
	HasBias   bool
}

func (o *GroupNormOp) Name() string { return "group_norm" }

func (o *GroupNormOp) Traits() Traits {
	return Traits{Autocast: AutocastFP32, Fusion: FuseProducer, Stats: StatsAfterFirst, Recompute: RecomputeCheap, Kernel: KernelRequired}
}

func (o *GroupNormOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *GroupNormOp) InPlaceInputs(in []trace.Meta) []int { return nil }

func normCheckGroups(x trace.Meta, groups int) error {
	if len(x.Shape) < 2 {
		return fmt.Errorf("expected input of at least 2 dimensions [N, C, *], got %d-D", len(x.Shape))
	}
	if groups < 1 || x.Shape[1]%groups != 0 {
		return fmt.Errorf("expected the number of channels (%d) to be divisible by num_groups (%d)", x.Shape[1], groups)
	}
	return nil
}

func (o *GroupNormOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	return normInfer(in, o.HasWeight, o.HasBias, o.shapes)
}

// shapes checks x and returns the shapes of the weight and bias and of the
// statistics.
func (o *GroupNormOp) shapes(x trace.Meta) (param, stat tensor.Shape, err error) {
	if err := normCheckGroups(x, o.Groups); err != nil {
		return nil, nil, err
	}
	return tensor.Shape{x.Shape[1]}, tensor.Shape{x.Shape[0], o.Groups}, nil
}

func (o *GroupNormOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return normGrad(n, gouts, &GroupNormBackward{Groups: o.Groups, HasWeight: o.HasWeight, HasBias: o.HasBias}, o.HasWeight, o.HasBias)
}

// GroupNormBackward is group norm's fused backward. Inputs: gy, x, mean
// [N, G], rstd [N, G], then weight [C] if HasWeight. Outputs: gx, then
// gweight [C] if HasWeight and gbias [C] if HasBias.
type GroupNormBackward struct {
	Groups    int
	HasWeight bool
	HasBias   bool
}

func (o *GroupNormBackward) Name() string { return "group_norm_backward" }

// Traits: output 0 is the gradient of the input (input 1).
func (o *GroupNormBackward) Traits() Traits {
	return Traits{Autocast: AutocastFP32, GradOf: 1, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *GroupNormBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *GroupNormBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *GroupNormBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	return normBackwardInfer(in, o.HasWeight, o.HasBias, (&GroupNormOp{Groups: o.Groups}).shapes)
}
