package prim

import (
	"fmt"
	"strconv"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	register(&CrossEntropyOp{}, &CrossEntropyBackward{}, &PointwiseLoss{Kind: MSEKind}, &PointwiseLoss{Kind: L1Kind}, &PointwiseLossBackward{Kind: MSEKind}, &PointwiseLossBackward{Kind: L1Kind})
}

// lossOutShape is the shape of a loss: a scalar unless the reduction is "none".
func lossOutShape(reduction Reduction, elem tensor.Shape) tensor.Shape {
	if reduction == ReductionNone {
		return elem.Clone()
	}
	return tensor.Shape{}
}

// CrossEntropyOpts are the options of CrossEntropy, PyTorch's keyword
// arguments of torch.nn.functional.cross_entropy (without class weights).
//
// The zero value is PyTorch's defaults (ignore_index=-100,
// label_smoothing=0, reduction="mean"): an unset IgnoreIndex is -100, so
// CrossEntropyOpts{LabelSmoothing: 0.1} ignores no real class. Set
// IgnoreIndex with Class, e.g. IgnoreIndex: op.Class(0).
type CrossEntropyOpts struct {
	IgnoreIndex    ClassIndex
	LabelSmoothing float64   // in [0, 1]
	Reduction      Reduction // "mean" (or ""), "sum", "none"
}

// DefaultIgnoreIndex is PyTorch's ignore_index default, the class an unset
// CrossEntropyOpts.IgnoreIndex stands for.
const DefaultIgnoreIndex = -100

// ClassIndex is an optional class index. The zero value is unset: an
// option of this type then means its documented default, never class 0.
type ClassIndex struct {
	i   int
	set bool
}

// Class returns the class index c, set.
func Class(c int) ClassIndex { return ClassIndex{i: c, set: true} }

// Get returns the index and whether it was set.
func (c ClassIndex) Get() (int, bool) { return c.i, c.set }

// Or returns the index, or def when unset.
func (c ClassIndex) Or(def int) int {
	if c.set {
		return c.i
	}
	return def
}

func (c ClassIndex) String() string {
	if !c.set {
		return "unset"
	}
	return strconv.Itoa(c.i)
}

// MarshalJSON writes the index, or null when unset.
func (c ClassIndex) MarshalJSON() ([]byte, error) {
	if !c.set {
		return []byte("null"), nil
	}
	return []byte(strconv.Itoa(c.i)), nil
}

// UnmarshalJSON reads an index, or null for unset.
func (c *ClassIndex) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*c = ClassIndex{}
		return nil
	}
	i, err := strconv.Atoi(string(b))
	if err != nil {
		return fmt.Errorf("op: class index %s: not an integer", b)
	}
	*c = Class(i)
	return nil
}

// CrossEntropyOp is log_softmax over the class axis followed by the negative
// log-likelihood of the target class, fused, with PyTorch 1.13's label
// smoothing. Inputs: logits [N, C, d1...] (or [C]) and int64 targets
// [N, d1...] (or []). Outputs: the loss (a scalar, or [N, d1...] for "none")
// and the logsumexp of every row's logits ([N, d1...]), which is all the
// backward needs besides the logits: it never materializes the [N, C, ...]
// log-probabilities, so the forward holds no second logits-sized buffer.
//
// Per position i with target t_i not ignored, with ls = LabelSmoothing:
//
//	loss_i = (1-ls) * -logp[i, t_i] + ls/C * -sum_c logp[i, c]
//
// and loss_i = 0 for ignored positions. "mean" divides the sum by the number
// of non-ignored positions (NaN when there are none, as PyTorch).
type CrossEntropyOp struct {
	IgnoreIndex    int64
	LabelSmoothing float64
	Reduction      Reduction // "mean", "sum" or "none"
}

func (o *CrossEntropyOp) Name() string { return "cross_entropy" }

func (o *CrossEntropyOp) Traits() Traits {
	return Traits{Autocast: AutocastFP32, Fusion: FuseNone, Stats: StatsAfterFirst, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *CrossEntropyOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *CrossEntropyOp) InPlaceInputs(in []trace.Meta) []int { return nil }

// ceShapes checks logits and target shapes and returns the per-position
// shape (the target's).
func ceShapes(logits, target trace.Meta) (tensor.Shape, error) {
	if err := wantFloat(logits); err != nil {
		return nil, err
	}
	if target.DType != tensor.Int64 {
		return nil, fmt.Errorf("expected int64 class indices as target, got %v", target.DType)
	}
	ls, ts := logits.Shape, target.Shape
	if len(ls) == 0 {
		return nil, fmt.Errorf("logits must have a class axis: [C], [N, C] or [N, C, d1, ...]")
	}
	want := tensor.Shape{}
	if len(ls) >= 2 {
		want = append(tensor.Shape{ls[0]}, ls[2:]...)
	}
	if !ts.Equal(want) {
		return nil, fmt.Errorf("target shape %v does not match logits %v (expected target %v)", ts, ls, want)
	}
	return want, nil
}

func (o *CrossEntropyOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	pos, err := ceShapes(in[0], in[1])
	if err != nil {
		return nil, err
	}
	dt := in[0].DType
	return []trace.Meta{{DType: dt, Shape: lossOutShape(o.Reduction, pos)}, {DType: dt, Shape: pos}}, nil
}

func (o *CrossEntropyOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil, nil}
	}
	b := &CrossEntropyBackward{IgnoreIndex: o.IgnoreIndex, LabelSmoothing: o.LabelSmoothing, Reduction: o.Reduction}
	gx := Apply1(b, gouts[0], n.Inputs[0], n.Inputs[1], n.Outputs[1])
	return []*trace.Tensor{gx, nil}
}

// CrossEntropyBackward is the fused backward of CrossEntropyOp. Inputs: the
// loss gradient, the logits, the targets and the saved logsumexp. Output: the
// logits gradient, w_i * (softmax[i, c] - (1-ls)*[c == t_i] - ls/C), with w_i
// the loss gradient of position i (divided by the non-ignored count for
// "mean") and 0 at ignored positions.
type CrossEntropyBackward struct {
	IgnoreIndex    int64
	LabelSmoothing float64
	Reduction      Reduction
}

func (o *CrossEntropyBackward) Name() string { return "cross_entropy_backward" }

// Traits: output 0 is the gradient of the logits (input 1).
func (o *CrossEntropyBackward) Traits() Traits {
	return Traits{Autocast: AutocastFP32, GradOf: 1, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *CrossEntropyBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *CrossEntropyBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *CrossEntropyBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 4); err != nil {
		return nil, err
	}
	pos, err := ceShapes(in[1], in[2])
	if err != nil {
		return nil, err
	}
	if in[0].DType != in[1].DType || in[3].DType != in[1].DType {
		return nil, fmt.Errorf("dtype mismatch among gradient %v, logits %v and logsumexp %v", in[0].DType, in[1].DType, in[3].DType)
	}
	if want := lossOutShape(o.Reduction, pos); !in[0].Shape.Equal(want) {
		return nil, fmt.Errorf("loss gradient shape %v, want %v", in[0].Shape, want)
	}
	if !in[3].Shape.Equal(pos) {
		return nil, fmt.Errorf("logsumexp shape %v, want %v", in[3].Shape, pos)
	}
	return metas1(in[1].DType, in[1].Shape), nil
}

// PointwiseLossKind selects a pointwise regression loss.
type PointwiseLossKind uint8

const (
	MSEKind PointwiseLossKind = iota // (x - y)^2
	L1Kind                           // |x - y|
)

var pointwiseLossNames = [...]string{"mse_loss", "l1_loss"}

// PointwiseLoss is mse_loss or l1_loss of input 0 against target input 1
// (same shape and dtype), reduced by Reduction, fused in one pass.
type PointwiseLoss struct {
	Kind      PointwiseLossKind
	Reduction Reduction
}

func (o *PointwiseLoss) Name() string { return pointwiseLossNames[o.Kind] }

func (o *PointwiseLoss) Traits() Traits {
	return Traits{Autocast: AutocastFP32, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *PointwiseLoss) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *PointwiseLoss) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *PointwiseLoss) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if err := sameDType(in); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	if !in[0].Shape.Equal(in[1].Shape) {
		return nil, fmt.Errorf("input shape %v and target shape %v differ", in[0].Shape, in[1].Shape)
	}
	return metas1(in[0].DType, lossOutShape(o.Reduction, in[0].Shape)), nil
}

func (o *PointwiseLoss) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil, nil}
	}
	gx := Apply1(&PointwiseLossBackward{Kind: o.Kind, Reduction: o.Reduction}, gouts[0], n.Inputs[0], n.Inputs[1])
	var gt *trace.Tensor
	if n.Inputs[1].DType().IsFloat() {
		gt = Neg(gx)
	}
	return []*trace.Tensor{gx, gt}
}

// PointwiseLossBackward computes the input gradient of a PointwiseLoss from
// the loss gradient, the input and the target: 2(x-y)*w for mse,
// sign(x-y)*w for l1, with w the loss gradient (divided by the element count
// for "mean"). The target's gradient is its negation.
type PointwiseLossBackward struct {
	Kind      PointwiseLossKind
	Reduction Reduction
}

func (o *PointwiseLossBackward) Name() string { return pointwiseLossNames[o.Kind] + "_backward" }

// Traits: output 0 is the gradient of the prediction (input 1).
func (o *PointwiseLossBackward) Traits() Traits {
	return Traits{Autocast: AutocastFP32, GradOf: 1, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *PointwiseLossBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *PointwiseLossBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *PointwiseLossBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 3); err != nil {
		return nil, err
	}
	if err := sameDType(in); err != nil {
		return nil, err
	}
	if !in[1].Shape.Equal(in[2].Shape) {
		return nil, fmt.Errorf("input shape %v and target shape %v differ", in[1].Shape, in[2].Shape)
	}
	if want := lossOutShape(o.Reduction, in[1].Shape); !in[0].Shape.Equal(want) {
		return nil, fmt.Errorf("loss gradient shape %v, want %v", in[0].Shape, want)
	}
	return metas1(in[1].DType, in[1].Shape), nil
}
