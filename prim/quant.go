package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	register(&Quantize{}, &Dequantize{}, &PackMask{}, &ReLUBackwardMask{}, &RoundState{To: tensor.BFloat16}, &Round{To: tensor.BFloat16}, &AccumulateRounded{To: tensor.BFloat16}, &Offload{}, &Reload{})
}

// Storage formats for saved activations (package transform inserts these
// ops between the forward pass that produces a value and the backward pass
// that reads it; model code does not call them). None of them is
// differentiable: they hold a value, they do not compute one.

// QuantAxis is the channel axis of per-channel int8 quantization for a
// tensor of shape s: 1 for 4-D NCHW activations, the last axis otherwise
// (features of [N, C] and [B, T, C]); -1 (one scale for the whole tensor)
// for scalars and vectors.
func QuantAxis(s tensor.Shape) int {
	switch {
	case len(s) <= 1:
		return -1
	case len(s) == 4:
		return 1
	}
	return len(s) - 1
}

// QuantChannels returns the number of channels of s along axis and the
// number of contiguous elements per channel run (the product of the axes
// after it): element i belongs to channel (i / inner) % channels. Axis -1
// is one channel.
func QuantChannels(s tensor.Shape, axis int) (channels, inner int) {
	if axis < 0 {
		return 1, max(s.NumElements(), 1)
	}
	return s[axis], s[axis+1:].NumElements()
}

// Quantize is symmetric per-channel int8 quantization of a float32 tensor:
// scale[c] = max|x[c]|/127 and q = round-half-even(x/scale[c]) clamped to
// [-127, 127]. Outputs: q as uint8 holding the int8 two's-complement bits
// (same shape as x) and scale, float32 [channels]. A channel that is all
// zero gets scale 0; a channel holding an Inf or NaN gets a NaN scale, so it
// dequantizes to NaN rather than to plausible numbers. Axis is QuantAxis of
// the input's shape.
type Quantize struct{ Axis int }

func (o *Quantize) Name() string { return "quantize_per_channel_int8" }

func (o *Quantize) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

// Cost: it reads its input twice (per-channel maxima, then codes) and
// rounds in float64.
func (o *Quantize) Cost(in, out []trace.Meta) Cost {
	c := elementwiseCost(in, out)
	c.Bytes += float64(in[0].Bytes())
	c.Convert = 3
	return c
}

func (o *Quantize) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Quantize) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if in[0].DType != tensor.Float32 {
		return nil, fmt.Errorf("expected a float32 tensor, got %v", in[0].DType)
	}
	if o.Axis < -1 || o.Axis >= len(in[0].Shape) {
		return nil, fmt.Errorf("invalid channel axis %d for shape %v", o.Axis, in[0].Shape)
	}
	c, _ := QuantChannels(in[0].Shape, o.Axis)
	return []trace.Meta{{DType: tensor.Uint8, Shape: in[0].Shape.Clone()}, {DType: tensor.Float32, Shape: tensor.Shape{c}}}, nil
}

// Grad: a storage format has no gradient.
func (o *Quantize) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{nil}
}

// Dequantize is the inverse of Quantize: x = int8(q) * scale[c], float32.
// Inputs: q (uint8, int8 bits) and scale (float32 [channels]).
type Dequantize struct{ Axis int }

func (o *Dequantize) Name() string { return "dequantize_per_channel_int8" }

func (o *Dequantize) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Dequantize) Cost(in, out []trace.Meta) Cost {
	c := elementwiseCost(in, out)
	c.Convert = 1
	return c
}

func (o *Dequantize) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Dequantize) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if in[0].DType != tensor.Uint8 || in[1].DType != tensor.Float32 {
		return nil, fmt.Errorf("expected uint8 values and float32 scales, got %v and %v", in[0].DType, in[1].DType)
	}
	if o.Axis < -1 || o.Axis >= len(in[0].Shape) {
		return nil, fmt.Errorf("invalid channel axis %d for shape %v", o.Axis, in[0].Shape)
	}
	if c, _ := QuantChannels(in[0].Shape, o.Axis); !in[1].Shape.Equal(tensor.Shape{c}) {
		return nil, fmt.Errorf("scales have shape %v, want [%d]", in[1].Shape, c)
	}
	return metas1(tensor.Float32, in[0].Shape.Clone()), nil
}

// Grad: a storage format has no gradient.
func (o *Dequantize) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{nil, nil}
}

// QuantizeInt8 returns the int8 codes and per-channel scales of x
// (float32), channels on QuantAxis.
func QuantizeInt8(x *trace.Tensor) (q, scale *trace.Tensor) {
	outs := x.Graph().Apply(&Quantize{Axis: QuantAxis(x.Shape())}, x)
	return outs[0], outs[1]
}

// DequantizeInt8 is the float32 tensor that q and scale encode.
func DequantizeInt8(q, scale *trace.Tensor) *trace.Tensor {
	return Apply1(&Dequantize{Axis: QuantAxis(q.Shape())}, q, scale)
}

// PackMask stores, one bit per element, where a float tensor is positive
// (or NaN): what ReLU's backward tests its saved output for. Output: uint8
// [ceil(n/8)], bit k of byte b for element 8b+k, padding bits 0 (the layout
// of DropoutOp's mask).
//
// With Strict, a NaN's bit is clear: LeakyReLU's backward (slope >= 0)
// passes the gradient unscaled only where its output is > 0, and scales it
// elsewhere, NaN included.
type PackMask struct {
	Strict bool
}

func (o *PackMask) Name() string {
	if o.Strict {
		return "leaky_relu_mask_pack"
	}
	return "relu_mask_pack"
}

func (o *PackMask) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

// Cost: memory-bound, as an elementwise op (the cpu kernel compares 8
// lanes at once and stores their signs as a byte; its portable loop has
// no branch per element, about 1.3 ns an element a thread).
func (o *PackMask) Cost(in, out []trace.Meta) Cost {
	return elementwiseCost(in, out)
}

func (o *PackMask) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *PackMask) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	return metas1(tensor.Uint8, DropoutMaskShape(in[0].Shape)), nil
}

// Grad: a mask has no gradient.
func (o *PackMask) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{nil}
}

// ReLUBackwardMask is ReLU's backward from the output gradient (input 0)
// and a PackMask of the ReLU output (input 1): gx = gy where the bit is set,
// +0 elsewhere, exactly what UnaryBackward{ReLUKind} computes from the
// float output.
//
// With Leaky it is LeakyReLU's backward (slope Slope >= 0) from a Strict
// PackMask of its output: gx = gy·1 where the bit is set, gy·Slope
// elsewhere, exactly what UnaryBackward{LeakyReLUKind} computes from the
// float output.
type ReLUBackwardMask struct {
	Leaky bool
	Slope float64
}

func (o *ReLUBackwardMask) Name() string {
	if o.Leaky {
		return "leaky_relu_backward_mask"
	}
	return "relu_backward_mask"
}

func (o *ReLUBackwardMask) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

// Cost: memory-bound, as PackMask's.
func (o *ReLUBackwardMask) Cost(in, out []trace.Meta) Cost {
	return elementwiseCost(in, out)
}

// InPlaceInputs: the incoming gradient (each element is read before the
// same element of the output is written).
func (o *ReLUBackwardMask) InPlaceInputs(in []trace.Meta) []int { return []int{0} }

func (o *ReLUBackwardMask) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	if in[1].DType != tensor.Uint8 || !in[1].Shape.Equal(DropoutMaskShape(in[0].Shape)) {
		return nil, fmt.Errorf("mask %v does not fit gradient %v (want uint8%v)", in[1], in[0].Shape, DropoutMaskShape(in[0].Shape))
	}
	return metas1(in[0].DType, in[0].Shape.Clone()), nil
}

// Grad: the mask gets none; gx is linear in gy.
func (o *ReLUBackwardMask) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{Apply1(&ReLUBackwardMask{Leaky: o.Leaky, Slope: o.Slope}, gouts[0], n.Inputs[1]), nil}
}

// ReLUMask returns the bit mask of x > 0 (or NaN).
func ReLUMask(x *trace.Tensor) *trace.Tensor { return Apply1(&PackMask{}, x) }

// LeakyReLUMask returns the bit mask of x > 0 (NaN clear), what
// LeakyReLU's backward tests its output for.
func LeakyReLUMask(x *trace.Tensor) *trace.Tensor { return Apply1(&PackMask{Strict: true}, x) }

// RoundState rounds a float32 state tensor (input 0: parameters or buffers)
// in place to the nearest value of dtype To (bfloat16 or float16,
// round-to-nearest-even), keeping it float32. It emulates weights stored in
// a 16-bit type ("bf16-true"): run at the start of each step, it rounds
// whatever the optimizer wrote in the previous one.
type RoundState struct{ To tensor.DType }

func (o *RoundState) Name() string { return "round_" + o.To.String() + "_" }

func (o *RoundState) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeNever, Kernel: KernelRequired}
}

func (o *RoundState) Cost(in, out []trace.Meta) Cost {
	c := elementwiseCost(in, out)
	c.Convert, c.Format = 1, o.To
	return c
}

func (o *RoundState) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *RoundState) Effect() {}

func (o *RoundState) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if in[0].DType != tensor.Float32 {
		return nil, fmt.Errorf("expected a float32 state, got %v", in[0].DType)
	}
	if o.To != tensor.BFloat16 && o.To != tensor.Float16 {
		return nil, fmt.Errorf("can round to bfloat16 or float16, not %v", o.To)
	}
	return nil, nil
}

// RoundStateInPlace records the in-place rounding of state tensor s.
func RoundStateInPlace(s *trace.Tensor, to tensor.DType) {
	if s.Node.Kind != trace.KindState {
		s.Graph().Errorf("round_", []*trace.Tensor{s}, "destination must be a state tensor")
	}
	s.Graph().Apply(&RoundState{To: to}, s)
}

// Round rounds a float32 tensor to the nearest value of dtype To (bfloat16
// or float16, round-to-nearest-even) and keeps it float32: a cast there and
// back in one node, with no 16-bit intermediate. Mixed precision emulation
// uses it for parameters, whose float32 masters stay untouched. Its
// gradient is the identity (a straight-through estimator).
type Round struct{ To tensor.DType }

func (o *Round) Name() string { return "round_to_" + o.To.String() }

func (o *Round) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Round) Cost(in, out []trace.Meta) Cost {
	c := elementwiseCost(in, out)
	c.Convert, c.Format = 1, o.To
	return c
}

// InPlaceInputs: a value rounded where it dies (a gradient leaving the
// step rounded) is rounded in its own bytes; a parameter, never an arena
// value, keeps its master (plan.Make overwrites activations only).
func (o *Round) InPlaceInputs(in []trace.Meta) []int { return []int{0} }

func (o *Round) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if in[0].DType != tensor.Float32 {
		return nil, fmt.Errorf("expected a float32 tensor, got %v", in[0].DType)
	}
	if o.To != tensor.BFloat16 && o.To != tensor.Float16 {
		return nil, fmt.Errorf("can round to bfloat16 or float16, not %v", o.To)
	}
	return metas1(tensor.Float32, in[0].Shape.Clone()), nil
}

func (o *Round) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{gouts[0]}
}

// AccumulateRounded is Accumulate of a gradient rounded to dtype To: the
// state input 0 gets round(input 1), or += round(input 1) with Add. It is
// how a low-precision gradient reaches a float32 master weight's gradient
// (the upcast of a bf16 .grad) without a rounded copy in the arena.
type AccumulateRounded struct {
	To  tensor.DType
	Add bool
}

func (o *AccumulateRounded) Name() string {
	if o.Add {
		return "accumulate_grad_" + o.To.String()
	}
	return "copy_" + o.To.String() + "_"
}

func (o *AccumulateRounded) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeNever, Kernel: KernelRequired}
}

func (o *AccumulateRounded) Cost(in, out []trace.Meta) Cost {
	c := elementwiseCost(in, out)
	c.Convert, c.Format = 1, o.To
	return c
}

func (o *AccumulateRounded) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *AccumulateRounded) Effect() {}

func (o *AccumulateRounded) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if !in[0].Shape.Equal(in[1].Shape) || in[0].DType != in[1].DType || in[0].DType != tensor.Float32 {
		return nil, fmt.Errorf("destination %v and value %v differ or are not float32", in[0], in[1])
	}
	if o.To != tensor.BFloat16 && o.To != tensor.Float16 {
		return nil, fmt.Errorf("can round to bfloat16 or float16, not %v", o.To)
	}
	return nil, nil
}

// HostStore keeps offloaded tensors outside the device: Put copies data
// out under key, Take copies it back into dst and forgets it. A run binds
// one (exec.Options.Host); graphs hold none.
type HostStore interface {
	Put(key any, data []byte) error
	Take(key any, dst []byte) error
}

// Offload moves its input's bytes to the host store of the run (a host
// pool outside the device budget), under the op as key. Its output is a
// one-byte token that Reload reads, so that the schedule keeps the pair in
// order; the input's arena buffer dies here. The blank field keeps the
// struct from being zero-sized: every &Offload{} then has an address of
// its own, which is its key in the store.
type Offload struct{ _ byte }

func (o *Offload) Name() string { return "offload" }

func (o *Offload) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelNone}
}

// Cost: the copy to the host.
func (o *Offload) Cost(in, out []trace.Meta) Cost { return Cost{HostBytes: float64(in[0].Bytes())} }

func (o *Offload) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Offload) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	return metas1(tensor.Uint8, tensor.Shape{1}), nil
}

// Grad: moving bytes has no gradient.
func (o *Offload) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{nil}
}

// Reload brings back the tensor From offloaded (input: From's token);
// Meta is its dtype and shape.
type Reload struct {
	From *Offload
	Meta trace.Meta
}

func (o *Reload) Name() string { return "reload" }

func (o *Reload) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelNone}
}

// Cost: the copy from the host.
func (o *Reload) Cost(in, out []trace.Meta) Cost { return Cost{HostBytes: float64(out[0].Bytes())} }

func (o *Reload) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Reload) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if o.From == nil || in[0].DType != tensor.Uint8 || !in[0].Shape.Equal(tensor.Shape{1}) {
		return nil, fmt.Errorf("expected the token of an offload, got %v", in[0])
	}
	return []trace.Meta{{DType: o.Meta.DType, Shape: o.Meta.Shape.Clone()}}, nil
}

// Grad: moving bytes has no gradient.
func (o *Reload) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{nil}
}
