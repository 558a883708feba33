package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&SliceOp{}, &SliceBackward{}, &CatOp{}, &SplitOp{}, &SplitAdd{}, &CatWiden{}) }

// SliceOp copies x[..., Start:End:Step, ...] along Axis (aten::slice, but a
// copy, not a view). Its attributes are normalized: 0 <= Start <= End <=
// size of Axis, Step >= 1.
type SliceOp struct{ Axis, Start, End, Step int }

func (o *SliceOp) Name() string { return "slice" }

func (o *SliceOp) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *SliceOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *SliceOp) InPlaceInputs(in []trace.Meta) []int { return nil }

// sliceLen is the number of indices in [start, end) with the given step.
func sliceLen(start, end, step int) int {
	if end <= start {
		return 0
	}
	return (end - start + step - 1) / step
}

// sliceShape checks o against shape s and returns the sliced shape.
func (o *SliceOp) sliceShape(s tensor.Shape) (tensor.Shape, error) {
	if o.Axis < 0 || o.Axis >= len(s) {
		return nil, fmt.Errorf("axis %d out of range for rank %d", o.Axis, len(s))
	}
	if o.Step < 1 {
		return nil, fmt.Errorf("slice step must be positive, got %d", o.Step)
	}
	if o.Start < 0 || o.End < o.Start || o.End > s[o.Axis] {
		return nil, fmt.Errorf("slice [%d:%d] out of range for axis %d of size %d", o.Start, o.End, o.Axis, s[o.Axis])
	}
	out := s.Clone()
	out[o.Axis] = sliceLen(o.Start, o.End, o.Step)
	return out, nil
}

func (o *SliceOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	s, err := o.sliceShape(in[0].Shape)
	if err != nil {
		return nil, err
	}
	return metas1(in[0].DType, s), nil
}

func (o *SliceOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil}
	}
	b := &SliceBackward{Axis: o.Axis, Start: o.Start, End: o.End, Step: o.Step, Shape: n.Inputs[0].Shape().Clone()}
	return []*trace.Tensor{Apply1(b, gouts[0])}
}

// SliceBackward scatters its input into zeros of Shape at the positions a
// SliceOp with the same attributes reads (aten::slice_backward).
type SliceBackward struct {
	Axis, Start, End, Step int
	Shape                  tensor.Shape // the sliced tensor's shape
}

func (o *SliceBackward) Name() string { return "slice_backward" }

func (o *SliceBackward) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *SliceBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *SliceBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *SliceBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	f := SliceOp{Axis: o.Axis, Start: o.Start, End: o.End, Step: o.Step}
	s, err := f.sliceShape(o.Shape)
	if err != nil {
		return nil, err
	}
	if !in[0].Shape.Equal(s) {
		return nil, fmt.Errorf("gradient shape %v, want %v", in[0].Shape, s)
	}
	return metas1(in[0].DType, o.Shape), nil
}

func (o *SliceBackward) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil}
	}
	return []*trace.Tensor{Apply1(&SliceOp{Axis: o.Axis, Start: o.Start, End: o.End, Step: o.Step}, gouts[0])}
}

func sliceAxisArg(x *trace.Tensor, name string, axis int) int {
	a, err := x.Shape().Axis(axis)
	if err != nil || len(x.Shape()) == 0 {
		if err == nil {
			err = fmt.Errorf("cannot slice a scalar")
		}
		x.Graph().Errorf(name, []*trace.Tensor{x}, "%v", err)
	}
	return a
}

// CatOp concatenates its inputs along Axis (torch.cat).
type CatOp struct{ Axis int }

func (o *CatOp) Name() string { return "cat" }

func (o *CatOp) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *CatOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *CatOp) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *CatOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("expected a non-empty list of tensors")
	}
	if err := sameDType(in); err != nil {
		return nil, err
	}
	s0 := in[0].Shape
	if o.Axis < 0 || o.Axis >= len(s0) {
		return nil, fmt.Errorf("axis %d out of range for rank %d", o.Axis, len(s0))
	}
	out := s0.Clone()
	for i, m := range in[1:] {
		s := m.Shape
		if len(s) != len(s0) {
			return nil, fmt.Errorf("tensors must have the same rank: tensor 0 has %d dimensions, tensor %d has %d", len(s0), i+1, len(s))
		}
		for d := range s {
			if d != o.Axis && s[d] != s0[d] {
				return nil, fmt.Errorf("sizes of tensors must match except in dimension %d: expected size %d but got size %d for tensor %d in dimension %d", o.Axis, s0[d], s[d], i+1, d)
			}
		}
		out[o.Axis] += s[o.Axis]
	}
	return metas1(in[0].DType, out), nil
}

func (o *CatOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return make([]*trace.Tensor, len(n.Inputs))
	}
	sizes := make([]int, len(n.Inputs))
	for i, x := range n.Inputs {
		sizes[i] = x.Shape()[o.Axis]
	}
	return gouts[0].Graph().Apply(&SplitOp{Axis: o.Axis, Sizes: sizes}, gouts[0])
}

// Cat is torch.cat(xs, dim=axis): the tensors must agree on every axis but
// axis. Its backward splits the gradient in one pass.
func Cat(axis int, xs ...*trace.Tensor) *trace.Tensor {
	if len(xs) == 0 {
		panic(&trace.ShapeError{Op: "cat", Err: fmt.Errorf("expected a non-empty list of tensors")})
	}
	a := sliceAxisArg(xs[0], "cat", axis)
	if len(xs) == 1 {
		return xs[0]
	}
	return xs[0].Graph().Apply1(&CatOp{Axis: a}, xs...)
}

// SplitOp cuts its input along Axis into consecutive pieces of Sizes (which
// sum to the axis size), one output each (aten::split_with_sizes, copies).
// Its backward concatenates the pieces' gradients, zeros for pieces that got
// none, so splitting q, k and v from one projection costs one gradient
// buffer, not three scattered ones and their sum.
type SplitOp struct {
	Axis  int
	Sizes []int
}

func (o *SplitOp) Name() string { return "split_with_sizes" }

func (o *SplitOp) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *SplitOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *SplitOp) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *SplitOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	s := in[0].Shape
	if o.Axis < 0 || o.Axis >= len(s) {
		return nil, fmt.Errorf("axis %d out of range for rank %d", o.Axis, len(s))
	}
	total := 0
	out := make([]trace.Meta, len(o.Sizes))
	for i, k := range o.Sizes {
		if k < 0 {
			return nil, fmt.Errorf("split sizes must be non-negative, got %v", o.Sizes)
		}
		total += k
		ps := s.Clone()
		ps[o.Axis] = k
		out[i] = trace.Meta{DType: in[0].DType, Shape: ps}
	}
	if total != s[o.Axis] {
		return nil, fmt.Errorf("split sizes %v sum to %d, but axis %d has size %d", o.Sizes, total, o.Axis, s[o.Axis])
	}
	return out, nil
}

func (o *SplitOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	parts := make([]*trace.Tensor, len(gouts))
	some := false
	for i, g := range gouts {
		if g != nil {
			some = true
			parts[i] = g
		} else {
			parts[i] = FullLike(n.Outputs[i], 0)
		}
	}
	if !some {
		return []*trace.Tensor{nil}
	}
	return []*trace.Tensor{Cat(o.Axis, parts...)}
}

// SplitAdd is a SplitOp whose pieces are added, where Acc says, to further
// inputs: output i is piece i, or Acc[i] == AccBefore: input + piece, or
// AccAfter: piece + input (the order of the add it replaces, so that the
// sums are its bits, NaN payloads included), the inputs after the first
// taken in piece order. transform.Fuse makes it from a split whose pieces
// only gradient sums read (autodiff's accumulation of a concatenation's
// gradient into each input's), so the pieces are never written on their
// own; it has no gradient.
type SplitAdd struct {
	Axis  int
	Sizes []int
	Acc   []AccOrder
}

// AccOrder says whether and on which side SplitAdd adds a piece to an input.
type AccOrder uint8

const (
	AccNone   AccOrder = iota // the piece as it is
	AccBefore                 // input + piece
	AccAfter                  // piece + input
)

func (o *SplitAdd) Name() string { return "split_with_sizes+add" }

func (o *SplitAdd) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *SplitAdd) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *SplitAdd) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *SplitAdd) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("expected the tensor to split")
	}
	if len(o.Acc) != len(o.Sizes) {
		return nil, fmt.Errorf("%d accumulation orders for %d pieces", len(o.Acc), len(o.Sizes))
	}
	out, err := (&SplitOp{Axis: o.Axis, Sizes: o.Sizes}).Infer(in[:1])
	if err != nil {
		return nil, err
	}
	k := 1
	for i, a := range o.Acc {
		if a == AccNone {
			continue
		}
		if a > AccAfter {
			return nil, fmt.Errorf("piece %d: accumulation order %d", i, a)
		}
		if k >= len(in) {
			return nil, fmt.Errorf("piece %d has no input to add", i)
		}
		if in[k].DType != out[i].DType || !in[k].Shape.Equal(out[i].Shape) {
			return nil, fmt.Errorf("piece %d is %v, its addend %v", i, out[i], in[k])
		}
		k++
	}
	if k != len(in) {
		return nil, fmt.Errorf("%d inputs, %d used", len(in), k)
	}
	if !out[0].DType.IsFloat() && k > 1 {
		return nil, fmt.Errorf("adds of %v", out[0].DType)
	}
	return out, nil
}

// CatWiden is a CatOp of 16-bit (bfloat16 or float16) tensors that also
// returns the concatenation widened to float32 (exact): output 0 is the
// 16-bit concatenation, output 1 its float32 copy, written in one pass
// over the inputs. transform.ReadLow makes it where autocast concatenates
// low-precision values and a float32 op reads the result; it has no
// gradient.
type CatWiden struct{ Axis int }

func (o *CatWiden) Name() string { return "cat+to_float32" }

func (o *CatWiden) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *CatWiden) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *CatWiden) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *CatWiden) Infer(in []trace.Meta) ([]trace.Meta, error) {
	out, err := (&CatOp{Axis: o.Axis}).Infer(in)
	if err != nil {
		return nil, err
	}
	if d := out[0].DType; d != tensor.BFloat16 && d != tensor.Float16 {
		return nil, fmt.Errorf("widening %v", d)
	}
	return []trace.Meta{out[0], {DType: tensor.Float32, Shape: out[0].Shape.Clone()}}, nil
}
