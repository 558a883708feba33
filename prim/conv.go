package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&Conv2dOp{}, &Conv2dBackwardInput{}, &Conv2dBackwardWeight{}) }

// ConvOpts are the attributes of a 2-D convolution, as
// torch.nn.functional.conv2d takes them ([0] is height, [1] is width). Zero
// values mean PyTorch's defaults: stride 1, padding 0, dilation 1, groups 1.
type ConvOpts struct {
	Stride   [2]int
	Padding  [2]int
	Dilation [2]int
	Groups   int
}

// Normalized returns o with zero strides, dilations and groups replaced by 1.
func (o ConvOpts) Normalized() ConvOpts {
	for i := range 2 {
		if o.Stride[i] == 0 {
			o.Stride[i] = 1
		}
		if o.Dilation[i] == 0 {
			o.Dilation[i] = 1
		}
	}
	if o.Groups == 0 {
		o.Groups = 1
	}
	return o
}

// Validate reports an option out of range (the functional API and
// ConvGeometry both check).
func (o ConvOpts) Validate() error {
	switch {
	case o.Stride[0] <= 0 || o.Stride[1] <= 0:
		return fmt.Errorf("stride should be greater than zero, got %v", o.Stride)
	case o.Padding[0] < 0 || o.Padding[1] < 0:
		return fmt.Errorf("negative padding is not supported, got %v", o.Padding)
	case o.Dilation[0] <= 0 || o.Dilation[1] <= 0:
		return fmt.Errorf("dilation should be greater than zero, got %v", o.Dilation)
	case o.Groups <= 0:
		return fmt.Errorf("non-positive groups is not supported, got %d", o.Groups)
	}
	return nil
}

// ConvGeom is everything a conv2d kernel needs to know about sizes: input
// [N, C, H, W], weight [K, C/Groups, KH, KW], output [N, K, OH, OW], strides
// SH, SW, paddings PH, PW and dilations DH, DW.
type ConvGeom struct {
	N, C, H, W             int
	K, KH, KW              int
	OH, OW                 int
	SH, SW, PH, PW, DH, DW int
	Groups                 int
}

// Pointwise reports a 1x1, stride-1, unpadded convolution: a plain matrix
// product per image, with no im2col.
func (g ConvGeom) Pointwise() bool {
	return g.KH == 1 && g.KW == 1 && g.SH == 1 && g.SW == 1 && g.PH == 0 && g.PW == 0
}

// ColRows is the number of rows of the im2col matrix of one image
// (C*KH*KW); it has OH*OW columns.
func (g ConvGeom) ColRows() int { return g.C * g.KH * g.KW }

// ConvGeometry validates the input shape x and weight shape w of a conv2d
// with options o (zero fields meaning defaults) and returns its geometry.
func ConvGeometry(x, w tensor.Shape, o ConvOpts) (ConvGeom, error) {
	o = o.Normalized()
	if err := o.Validate(); err != nil {
		return ConvGeom{}, err
	}
	if len(x) != 4 {
		return ConvGeom{}, fmt.Errorf("expected input with 4 dims [N, C, H, W], got %d dims %v", len(x), x)
	}
	if len(w) != 4 {
		return ConvGeom{}, fmt.Errorf("expected weight with 4 dims [out_channels, in_channels/groups, kH, kW], got %d dims %v", len(w), w)
	}
	g := ConvGeom{N: x[0], C: x[1], H: x[2], W: x[3], K: w[0], KH: w[2], KW: w[3],
		SH: o.Stride[0], SW: o.Stride[1], PH: o.Padding[0], PW: o.Padding[1],
		DH: o.Dilation[0], DW: o.Dilation[1], Groups: o.Groups}
	if g.KH <= 0 || g.KW <= 0 {
		return ConvGeom{}, fmt.Errorf("expected a positive kernel size, got weight %v", w)
	}
	if g.K%g.Groups != 0 {
		return ConvGeom{}, fmt.Errorf("expected weight out_channels %d to be divisible by groups %d", g.K, g.Groups)
	}
	if g.C != w[1]*g.Groups {
		return ConvGeom{}, fmt.Errorf("expected input channels %d to equal weight in_channels*groups = %d (weight %v, groups %d)", g.C, w[1]*g.Groups, w, g.Groups)
	}
	ph, pw := g.H+2*g.PH, g.W+2*g.PW
	kh, kw := g.DH*(g.KH-1)+1, g.DW*(g.KW-1)+1
	if ph < kh || pw < kw {
		return ConvGeom{}, fmt.Errorf("kernel size can't be greater than padded input size: padded input %dx%d, dilated kernel %dx%d", ph, pw, kh, kw)
	}
	g.OH = (ph-kh)/g.SH + 1
	g.OW = (pw-kw)/g.SW + 1
	return g, nil
}

// Conv2dOp is a 2-D convolution (cross-correlation, as PyTorch) of input 0
// [N, C, H, W] with weight input 1 [K, C/groups, kH, kW], plus the optional
// bias input 2 [K]. Opts is normalized (no zero fields). With Mixed, as
// MatMul's, each input may be float32, bfloat16 or float16 and the output
// is float32, accumulated in float32 from the inputs' exact float32 values
// (transform.ReadLow makes such convolutions read 16-bit operands in
// place); the same holds for the two backward ops.
type Conv2dOp struct {
	Opts  ConvOpts
	Mixed bool
}

func (o *Conv2dOp) Name() string { return "conv2d" }

func (o *Conv2dOp) Traits() Traits {
	return Traits{Autocast: AutocastLow, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Conv2dOp) Cost(in, out []trace.Meta) Cost {
	w := in[1].Shape
	return Cost{Flops: 2 * numel(out[0]) * float64(w[1]*w[2]*w[3]), Bytes: ioBytes(in, out)}
}

func (o *Conv2dOp) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Conv2dOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if len(in) != 2 && len(in) != 3 {
		return nil, fmt.Errorf("expected 2 or 3 inputs (input, weight, bias), got %d", len(in))
	}
	out, err := convDType(in, o.Mixed)
	if err != nil {
		return nil, err
	}
	g, err := ConvGeometry(in[0].Shape, in[1].Shape, o.Opts)
	if err != nil {
		return nil, err
	}
	if len(in) == 3 && !in[2].Shape.Equal(tensor.Shape{g.K}) {
		return nil, fmt.Errorf("expected bias of shape [%d], got %v", g.K, in[2].Shape)
	}
	return metas1(out, tensor.Shape{g.N, g.K, g.OH, g.OW}), nil
}

func (o *Conv2dOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	gy, x, w := gouts[0], n.Inputs[0], n.Inputs[1]
	gs := []*trace.Tensor{
		Apply1(&Conv2dBackwardInput{Opts: o.Opts, InputShape: x.Shape().Clone()}, gy, w),
		Apply1(&Conv2dBackwardWeight{Opts: o.Opts, WeightShape: w.Shape().Clone()}, gy, x),
	}
	if len(n.Inputs) == 3 {
		gs = append(gs, Sum(gy, false, 0, 2, 3))
	}
	return gs
}

// Conv2dBackwardInput is the gradient of a conv2d with respect to its input:
// from the output gradient (input 0) and the weight (input 1), a tensor of
// InputShape. It is a transposed convolution.
type Conv2dBackwardInput struct {
	Opts       ConvOpts
	InputShape tensor.Shape
	Mixed      bool
}

func (o *Conv2dBackwardInput) Name() string { return "conv2d_backward_input" }

func (o *Conv2dBackwardInput) Traits() Traits {
	return Traits{Autocast: AutocastLow, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Conv2dBackwardInput) Cost(in, out []trace.Meta) Cost {
	w := in[1].Shape
	return Cost{Flops: 2 * numel(in[0]) * float64(w[1]*w[2]*w[3]), Bytes: ioBytes(in, out)}
}

func (o *Conv2dBackwardInput) InPlaceInputs(in []trace.Meta) []int { return nil }

// Geom is the geometry of the forward convolution.
func (o *Conv2dBackwardInput) Geom(w tensor.Shape) (ConvGeom, error) {
	return ConvGeometry(o.InputShape, w, o.Opts)
}

func (o *Conv2dBackwardInput) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	out, err := convDType(in, o.Mixed)
	if err != nil {
		return nil, err
	}
	g, err := o.Geom(in[1].Shape)
	if err != nil {
		return nil, err
	}
	if want := (tensor.Shape{g.N, g.K, g.OH, g.OW}); !in[0].Shape.Equal(want) {
		return nil, fmt.Errorf("output gradient has shape %v, want %v", in[0].Shape, want)
	}
	return metas1(out, o.InputShape.Clone()), nil
}

// Grad makes conv2d twice differentiable: gx is linear in gy and in w.
func (o *Conv2dBackwardInput) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	ggx, gy, w := gouts[0], n.Inputs[0], n.Inputs[1]
	return []*trace.Tensor{
		Apply1(&Conv2dOp{Opts: o.Opts}, ggx, w),
		Apply1(&Conv2dBackwardWeight{Opts: o.Opts, WeightShape: w.Shape().Clone()}, gy, ggx),
	}
}

// Conv2dBackwardWeight is the gradient of a conv2d with respect to its
// weight: from the output gradient (input 0) and the input (input 1), a
// tensor of WeightShape.
type Conv2dBackwardWeight struct {
	Opts        ConvOpts
	WeightShape tensor.Shape
	Mixed       bool
}

func (o *Conv2dBackwardWeight) Name() string { return "conv2d_backward_weight" }

func (o *Conv2dBackwardWeight) Traits() Traits {
	return Traits{Autocast: AutocastLow, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Conv2dBackwardWeight) Cost(in, out []trace.Meta) Cost {
	w := out[0].Shape
	return Cost{Flops: 2 * numel(in[0]) * float64(w[1]*w[2]*w[3]), Bytes: ioBytes(in, out)}
}

func (o *Conv2dBackwardWeight) InPlaceInputs(in []trace.Meta) []int { return nil }

// Geom is the geometry of the forward convolution.
func (o *Conv2dBackwardWeight) Geom(x tensor.Shape) (ConvGeom, error) {
	return ConvGeometry(x, o.WeightShape, o.Opts)
}

func (o *Conv2dBackwardWeight) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	out, err := convDType(in, o.Mixed)
	if err != nil {
		return nil, err
	}
	g, err := o.Geom(in[1].Shape)
	if err != nil {
		return nil, err
	}
	if want := (tensor.Shape{g.N, g.K, g.OH, g.OW}); !in[0].Shape.Equal(want) {
		return nil, fmt.Errorf("output gradient has shape %v, want %v", in[0].Shape, want)
	}
	return metas1(out, o.WeightShape.Clone()), nil
}

// Grad makes conv2d twice differentiable: gw is linear in gy and in x.
func (o *Conv2dBackwardWeight) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	ggw, gy, x := gouts[0], n.Inputs[0], n.Inputs[1]
	return []*trace.Tensor{
		Apply1(&Conv2dOp{Opts: o.Opts}, x, ggw),
		Apply1(&Conv2dBackwardInput{Opts: o.Opts, InputShape: x.Shape().Clone()}, gy, ggw),
	}
}

// convDType is the output dtype of a convolution op with inputs in: their
// common floating type, or float32 for a mixed op (inputs float32,
// bfloat16 or float16).
func convDType(in []trace.Meta, mixed bool) (tensor.DType, error) {
	if mixed {
		for _, m := range in {
			if m.DType != tensor.Float32 && m.DType != tensor.BFloat16 && m.DType != tensor.Float16 {
				return tensor.Invalid, fmt.Errorf("mixed operands must be float32, bfloat16 or float16, got %v", m.DType)
			}
		}
		return tensor.Float32, nil
	}
	if err := sameDType(in); err != nil {
		return tensor.Invalid, err
	}
	if err := wantFloat(in[0]); err != nil {
		return tensor.Invalid, err
	}
	return in[0].DType, nil
}
