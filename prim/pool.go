package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	register(&MaxPool2dOp{}, &MaxPool2dBackward{}, &AvgPool2dOp{}, &AvgPool2dBackward{}, &AdaptiveAvgPool2dOp{}, &AdaptiveAvgPool2dBackward{})
}

// PoolGeom is everything a 2-D pooling kernel needs to know about sizes:
// input [N, C, H, W], output [N, C, OH, OW], window KH x KW, strides SH, SW,
// paddings PH, PW and dilations DH, DW.
type PoolGeom struct {
	N, C, H, W, OH, OW     int
	KH, KW                 int
	SH, SW, PH, PW, DH, DW int
}

// poolOutSize is PyTorch's pooling_output_shape.
func poolOutSize(in, k, s, p, d int, ceil bool) int {
	num := in + 2*p - d*(k-1) - 1
	if ceil {
		num += s - 1
	}
	out := poolFloorDiv(num, s) + 1
	// In ceil mode the last window must start inside the (left-padded) input.
	if ceil && (out-1)*s >= in+p {
		out--
	}
	return out
}

func poolFloorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// poolGeometry is PyTorch's pool2d_shape_check.
func poolGeometry(x tensor.Shape, k, s, p, d [2]int, ceil bool) (PoolGeom, error) {
	if len(x) != 4 {
		return PoolGeom{}, fmt.Errorf("expected input with 4 dims [N, C, H, W], got %d dims %v", len(x), x)
	}
	switch {
	case k[0] <= 0 || k[1] <= 0:
		return PoolGeom{}, fmt.Errorf("kernel size should be greater than zero, got %v", k)
	case s[0] <= 0 || s[1] <= 0:
		return PoolGeom{}, fmt.Errorf("stride should be greater than zero, got %v", s)
	case d[0] <= 0 || d[1] <= 0:
		return PoolGeom{}, fmt.Errorf("dilation should be greater than zero, got %v", d)
	case p[0] < 0 || p[1] < 0:
		return PoolGeom{}, fmt.Errorf("padding should be non-negative, got %v", p)
	case p[0] > k[0]/2 || p[1] > k[1]/2:
		return PoolGeom{}, fmt.Errorf("pad should be smaller than or equal to half of kernel size, got padding %v for kernel %v", p, k)
	case x[2] <= 0 || x[3] <= 0:
		return PoolGeom{}, fmt.Errorf("expected input with non-zero spatial size, got %v", x)
	}
	g := PoolGeom{N: x[0], C: x[1], H: x[2], W: x[3], KH: k[0], KW: k[1],
		SH: s[0], SW: s[1], PH: p[0], PW: p[1], DH: d[0], DW: d[1]}
	g.OH = poolOutSize(g.H, g.KH, g.SH, g.PH, g.DH, ceil)
	g.OW = poolOutSize(g.W, g.KW, g.SW, g.PW, g.DW, ceil)
	if g.OH < 1 || g.OW < 1 {
		return PoolGeom{}, fmt.Errorf("given input size %dx%dx%d, calculated output size %dx%dx%d: output size is too small", g.C, g.H, g.W, g.C, g.OH, g.OW)
	}
	return g, nil
}

// PoolOpts are the attributes of torch.nn.functional.max_pool2d and
// avg_pool2d ([0] is height, [1] is width). Zero values mean PyTorch's
// defaults: Stride the kernel size (stride=None), Padding 0, Dilation 1.
// Dilation is max pooling's only; ExcludePad and DivisorOverride are
// average pooling's only. The zero value of ExcludePad is PyTorch's default
// count_include_pad=True; set it for count_include_pad=False.
// DivisorOverride, when positive, divides every window's sum instead of its
// size.
type PoolOpts struct {
	Kernel          [2]int
	Stride          [2]int
	Padding         [2]int
	Dilation        [2]int
	CeilMode        bool
	ExcludePad      bool
	DivisorOverride int
}

// Normalized returns o with PyTorch's defaults in place of zero fields.
func (o PoolOpts) Normalized() PoolOpts {
	for i := range 2 {
		if o.Stride[i] == 0 {
			o.Stride[i] = o.Kernel[i]
		}
		if o.Dilation[i] == 0 {
			o.Dilation[i] = 1
		}
	}
	return o
}

// MaxPool2dOp is max pooling over [N, C, H, W]. Output 0 holds the maxima,
// output 1 (int64) the index of each maximum within its input plane
// (ih*W + iw), as PyTorch's max_pool2d_with_indices.
type MaxPool2dOp struct{ Opts PoolOpts }

func (o *MaxPool2dOp) Name() string { return "max_pool2d" }

func (o *MaxPool2dOp) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *MaxPool2dOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *MaxPool2dOp) InPlaceInputs(in []trace.Meta) []int { return nil }

// Geom validates the input shape and returns the pooling geometry.
func (o *MaxPool2dOp) Geom(x tensor.Shape) (PoolGeom, error) {
	p := o.Opts.Normalized()
	if p.ExcludePad || p.DivisorOverride != 0 {
		return PoolGeom{}, fmt.Errorf("count_include_pad and divisor_override are avg_pool2d options, not max_pool2d's")
	}
	return poolGeometry(x, p.Kernel, p.Stride, p.Padding, p.Dilation, p.CeilMode)
}

func (o *MaxPool2dOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	g, err := o.Geom(in[0].Shape)
	if err != nil {
		return nil, err
	}
	s := tensor.Shape{g.N, g.C, g.OH, g.OW}
	return []trace.Meta{{DType: in[0].DType, Shape: s}, {DType: tensor.Int64, Shape: s.Clone()}}, nil
}

// Grad routes the gradient through the saved indices; the input is not kept.
func (o *MaxPool2dOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil}
	}
	x := n.Inputs[0]
	return []*trace.Tensor{Apply1(&MaxPool2dBackward{InputShape: x.Shape().Clone()}, gouts[0], n.Outputs[1])}
}

// MaxPool2dBackward scatters the output gradient (input 0) to the positions
// named by the int64 indices (input 1), summing collisions, into a zero
// tensor of InputShape.
type MaxPool2dBackward struct{ InputShape tensor.Shape }

func (o *MaxPool2dBackward) Name() string { return "max_pool2d_backward" }

func (o *MaxPool2dBackward) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *MaxPool2dBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *MaxPool2dBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *MaxPool2dBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	if in[1].DType != tensor.Int64 {
		return nil, fmt.Errorf("expected int64 indices, got %v", in[1].DType)
	}
	if !in[0].Shape.Equal(in[1].Shape) || len(in[0].Shape) != 4 || len(o.InputShape) != 4 ||
		in[0].Shape[0] != o.InputShape[0] || in[0].Shape[1] != o.InputShape[1] {
		return nil, fmt.Errorf("gradient %v and indices %v do not match input shape %v", in[0].Shape, in[1].Shape, o.InputShape)
	}
	return metas1(in[0].DType, o.InputShape.Clone()), nil
}

func avgGeom(x tensor.Shape, o PoolOpts) (PoolGeom, error) {
	p := o.Normalized()
	if p.DivisorOverride < 0 {
		return PoolGeom{}, fmt.Errorf("divisor must be positive, got %d", p.DivisorOverride)
	}
	if p.Dilation != [2]int{1, 1} {
		return PoolGeom{}, fmt.Errorf("avg_pool2d has no dilation, got %v", p.Dilation)
	}
	return poolGeometry(x, p.Kernel, p.Stride, p.Padding, [2]int{1, 1}, p.CeilMode)
}

// AvgPool2dOp is average pooling over [N, C, H, W].
type AvgPool2dOp struct{ Opts PoolOpts }

func (o *AvgPool2dOp) Name() string { return "avg_pool2d" }

func (o *AvgPool2dOp) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *AvgPool2dOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *AvgPool2dOp) InPlaceInputs(in []trace.Meta) []int { return nil }

// Geom validates the input shape and returns the pooling geometry.
func (o *AvgPool2dOp) Geom(x tensor.Shape) (PoolGeom, error) { return avgGeom(x, o.Opts) }

func (o *AvgPool2dOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	g, err := o.Geom(in[0].Shape)
	if err != nil {
		return nil, err
	}
	return metas1(in[0].DType, tensor.Shape{g.N, g.C, g.OH, g.OW}), nil
}

func (o *AvgPool2dOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{Apply1(&AvgPool2dBackward{Opts: o.Opts, InputShape: n.Inputs[0].Shape().Clone()}, gouts[0])}
}

// AvgPool2dBackward spreads the output gradient (input 0) evenly over each
// window, into a tensor of InputShape.
type AvgPool2dBackward struct {
	Opts       PoolOpts
	InputShape tensor.Shape
}

func (o *AvgPool2dBackward) Name() string { return "avg_pool2d_backward" }

func (o *AvgPool2dBackward) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *AvgPool2dBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *AvgPool2dBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

// Geom returns the geometry of the forward pooling.
func (o *AvgPool2dBackward) Geom() (PoolGeom, error) { return avgGeom(o.InputShape, o.Opts) }

func (o *AvgPool2dBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	g, err := o.Geom()
	if err != nil {
		return nil, err
	}
	if want := (tensor.Shape{g.N, g.C, g.OH, g.OW}); !in[0].Shape.Equal(want) {
		return nil, fmt.Errorf("output gradient has shape %v, want %v", in[0].Shape, want)
	}
	return metas1(in[0].DType, o.InputShape.Clone()), nil
}

// Grad: the backward is linear and its adjoint is the forward pooling.
func (o *AvgPool2dBackward) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{Apply1(&AvgPool2dOp{Opts: o.Opts}, gouts[0])}
}

// AdaptiveAvgPool2dOp averages [N, C, H, W] into [N, C, Size[0], Size[1]]
// with PyTorch's bins: output i covers input [floor(i*in/out),
// ceil((i+1)*in/out)).
type AdaptiveAvgPool2dOp struct{ Size [2]int }

func (o *AdaptiveAvgPool2dOp) Name() string { return "adaptive_avg_pool2d" }

func (o *AdaptiveAvgPool2dOp) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *AdaptiveAvgPool2dOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *AdaptiveAvgPool2dOp) InPlaceInputs(in []trace.Meta) []int { return nil }

func adaptiveCheck(x tensor.Shape, size [2]int) error {
	if len(x) != 4 {
		return fmt.Errorf("expected input with 4 dims [N, C, H, W], got %d dims %v", len(x), x)
	}
	if x[1] <= 0 || x[2] <= 0 || x[3] <= 0 {
		return fmt.Errorf("expected input to have non-zero size for non-batch dimensions, got %v", x)
	}
	if size[0] <= 0 || size[1] <= 0 {
		return fmt.Errorf("output size must be positive, got %v", size)
	}
	return nil
}

func (o *AdaptiveAvgPool2dOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	x := in[0].Shape
	if err := adaptiveCheck(x, o.Size); err != nil {
		return nil, err
	}
	return metas1(in[0].DType, tensor.Shape{x[0], x[1], o.Size[0], o.Size[1]}), nil
}

func (o *AdaptiveAvgPool2dOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{Apply1(&AdaptiveAvgPool2dBackward{InputShape: n.Inputs[0].Shape().Clone()}, gouts[0])}
}

// AdaptiveAvgPool2dBackward spreads the output gradient (input 0) evenly
// over each bin, into a tensor of InputShape.
type AdaptiveAvgPool2dBackward struct{ InputShape tensor.Shape }

func (o *AdaptiveAvgPool2dBackward) Name() string { return "adaptive_avg_pool2d_backward" }

func (o *AdaptiveAvgPool2dBackward) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *AdaptiveAvgPool2dBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *AdaptiveAvgPool2dBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *AdaptiveAvgPool2dBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	gy, x := in[0].Shape, o.InputShape
	if len(gy) != 4 {
		return nil, fmt.Errorf("expected output gradient with 4 dims, got %v", gy)
	}
	if err := adaptiveCheck(x, [2]int{gy[2], gy[3]}); err != nil {
		return nil, err
	}
	if gy[0] != x[0] || gy[1] != x[1] {
		return nil, fmt.Errorf("output gradient %v does not match input shape %v", gy, x)
	}
	return metas1(in[0].DType, x.Clone()), nil
}

// Grad: the backward is linear and its adjoint is the forward pooling.
func (o *AdaptiveAvgPool2dBackward) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	s := n.Inputs[0].Shape()
	return []*trace.Tensor{Apply1(&AdaptiveAvgPool2dOp{Size: [2]int{s[2], s[3]}}, gouts[0])}
}
