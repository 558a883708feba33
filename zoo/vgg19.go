package zoo

import (
	"fmt"
	"strconv"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// vgg19Layers is torchvision's configuration "E" (VGG19): output channels
// of each 3x3 convolution, 0 for a 2x2 max pool.
var vgg19Layers = []int{64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0}

// VGG19Conv54 is the index in VGG19's features of conv5_4, the layer
// ESRGAN's perceptual loss reads (before its ReLU).
const VGG19Conv54 = 34

// ImageNet's channel statistics, torchvision's and BasicSR's input
// normalization for VGG features.
var (
	ImageNetMean = [3]float64{0.485, 0.456, 0.406}
	ImageNetStd  = [3]float64{0.229, 0.224, 0.225}
)

// VGG19Features is torchvision's vgg19().features: sixteen 3x3
// convolutions with bias (padding 1), each followed by a ReLU, and five
// 2x2 max pools, numbered as torchvision's nn.Sequential numbers them, so
// the state_dict keys are features.{i}.weight and features.{i}.bias (i =
// 0, 2, 5, 7, 10, ..., 34; 20,024,384 parameters). Its classifier is not
// built: a full vgg19 state_dict loads non-strictly.
type VGG19Features struct {
	nn.Module
	Convs map[int]*nn.Conv2d // by index in features
}

// NewVGG19Features registers the convolutions under b.Sub("features").
func NewVGG19Features(b nn.Builder) *VGG19Features {
	fb := b.Sub("features")
	m := &VGG19Features{Module: nn.NewModule(fb), Convs: map[int]*nn.Conv2d{}}
	in, idx := 3, 0
	for _, c := range vgg19Layers {
		if c == 0 {
			idx++
			continue
		}
		m.Convs[idx] = nn.NewConv2d(fb.Sub(strconv.Itoa(idx)), in, c, 3, op.ConvOpts{Padding: [2]int{1, 1}}, true)
		in = c
		idx += 2 // the convolution and its ReLU
	}
	return m
}

// ForwardTo runs features[0..last] on x [N, 3, H, W]: the output of
// layer last (a convolution's output is before its ReLU, as BasicSR's
// VGGFeatureExtractor gives "conv5_4").
func (m *VGG19Features) ForwardTo(x *trace.Tensor, last int) *trace.Tensor {
	idx := 0
	for _, c := range vgg19Layers {
		if idx > last {
			break
		}
		if c == 0 {
			x = op.MaxPool2d(x, op.PoolOpts{Kernel: [2]int{2, 2}, Stride: [2]int{2, 2}})
			idx++
			continue
		}
		x = m.Convs[idx].Forward(x)
		if idx+1 <= last {
			x = op.ReLU(x)
		}
		idx += 2
	}
	if idx <= last {
		x.Graph().Errorf("vgg19", []*trace.Tensor{x}, "layer %d is past the last layer of features (%d)", last, idx-1)
	}
	return x
}

// Forward runs the whole of features.
func (m *VGG19Features) Forward(x *trace.Tensor) *trace.Tensor {
	return m.ForwardTo(x, 2*16+5-1)
}

// NormalizeImageNet is (x - mean) / std per channel, x [N, 3, H, W] in
// [0, 1] (BasicSR's use_input_norm).
func NormalizeImageNet(x *trace.Tensor) *trace.Tensor {
	if s := x.Shape(); len(s) != 4 || s[1] != 3 {
		x.Graph().Errorf("normalize", []*trace.Tensor{x}, "expected [N, 3, H, W]")
	}
	g := x.Graph()
	stat := func(v [3]float64) *trace.Tensor {
		var cs []*trace.Tensor
		for _, c := range v {
			cs = append(cs, op.Full(g, x.DType(), tensor.Shape{1, 1, 1, 1}, float64(float32(c))))
		}
		return op.Cat(1, cs...)
	}
	return op.Div(op.Sub(x, stat(ImageNetMean)), stat(ImageNetStd))
}

// VGG19ParamNames lists the state_dict keys of VGG19Features in order.
func VGG19ParamNames() []string {
	var out []string
	idx := 0
	for _, c := range vgg19Layers {
		if c == 0 {
			idx++
			continue
		}
		out = append(out, fmt.Sprintf("features.%d.weight", idx), fmt.Sprintf("features.%d.bias", idx))
		idx += 2
	}
	return out
}

// VGG19Extractor is BasicSR's VGGFeatureExtractor for one layer of vgg19
// with use_input_norm (and no range_norm): ImageNet normalization, then
// features up to Layer. Its parameters are torchvision's features.*.
type VGG19Extractor struct {
	*VGG19Features
	Layer int
}

// NewVGG19Extractor registers vgg19's features under b; Forward gives
// layer's output (VGG19Conv54 for ESRGAN's perceptual loss).
func NewVGG19Extractor(b nn.Builder, layer int) *VGG19Extractor {
	return &VGG19Extractor{VGG19Features: NewVGG19Features(b), Layer: layer}
}

// Forward maps images [N, 3, H, W] in [0, 1] to the layer's features.
func (m *VGG19Extractor) Forward(x *trace.Tensor) *trace.Tensor {
	return m.ForwardTo(m.Scope(x, func() *trace.Tensor { return NormalizeImageNet(x) }), m.Layer)
}
