package zoo

import (
	"fmt"
	"math"
	"strconv"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// BlockKind selects a ResNet's residual block.
type BlockKind uint8

const (
	// Basic is torchvision's BasicBlock: two 3x3 convolutions (expansion 1).
	Basic BlockKind = iota
	// Bottleneck is torchvision's Bottleneck (ResNet v1.5: the stride is on
	// the 3x3 convolution): 1x1, 3x3, 1x1 with expansion 4.
	Bottleneck
)

func (k BlockKind) expansion() int {
	if k == Bottleneck {
		return 4
	}
	return 1
}

// ResNetConfig describes a torchvision ResNet: the block kind, the number
// of blocks in each of the four stages, and the classifier width.
type ResNetConfig struct {
	Block      BlockKind
	Layers     [4]int
	NumClasses int
}

// ResNet is torchvision.models.resnet.ResNet (groups 1, width 64, no
// dilation, zero_init_residual False), with torchvision's parameter names
// (conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, ..., fc) and
// initialization (Kaiming normal, fan_out, for convolutions; batch norms
// 1 and 0; PyTorch's default for fc).
type ResNet struct {
	nn.Module
	Config  ResNetConfig
	Conv1   *nn.Conv2d
	BN1     *nn.BatchNorm
	MaxPool *nn.MaxPool2d
	Stages  [4][]*ResBlock
	AvgPool *nn.AdaptiveAvgPool2d
	FC      *nn.Linear
}

// ResBlock is a BasicBlock or a Bottleneck. Conv3 and BN3 are nil for a
// BasicBlock; DownsampleConv and DownsampleBN (downsample.0 and .1) are nil
// when the shortcut is the identity.
type ResBlock struct {
	nn.Module
	Kind                BlockKind
	Conv1, Conv2, Conv3 *nn.Conv2d
	BN1, BN2, BN3       *nn.BatchNorm
	DownsampleConv      *nn.Conv2d
	DownsampleBN        *nn.BatchNorm
}

// ResNet18 is torchvision.models.resnet18(num_classes=numClasses).
func ResNet18(b nn.Builder, numClasses int) *ResNet {
	return NewResNet(b, ResNetConfig{Basic, [4]int{2, 2, 2, 2}, numClasses})
}

// ResNet34 is torchvision.models.resnet34(num_classes=numClasses).
func ResNet34(b nn.Builder, numClasses int) *ResNet {
	return NewResNet(b, ResNetConfig{Basic, [4]int{3, 4, 6, 3}, numClasses})
}

// ResNet50 is torchvision.models.resnet50(num_classes=numClasses).
func ResNet50(b nn.Builder, numClasses int) *ResNet {
	return NewResNet(b, ResNetConfig{Bottleneck, [4]int{3, 4, 6, 3}, numClasses})
}

// ResNet101 is torchvision.models.resnet101(num_classes=numClasses).
func ResNet101(b nn.Builder, numClasses int) *ResNet {
	return NewResNet(b, ResNetConfig{Bottleneck, [4]int{3, 4, 23, 3}, numClasses})
}

// ResNet152 is torchvision.models.resnet152(num_classes=numClasses).
func ResNet152(b nn.Builder, numClasses int) *ResNet {
	return NewResNet(b, ResNetConfig{Bottleneck, [4]int{3, 8, 36, 3}, numClasses})
}

// resnetConv is a bias-free convolution with torchvision's
// kaiming_normal_(mode="fan_out", nonlinearity="relu").
func resnetConv(b nn.Builder, in, out, k, stride int) *nn.Conv2d {
	pad := (k - 1) / 2
	c := nn.NewConv2d(b, in, out, k, op.ConvOpts{Stride: [2]int{stride, stride}, Padding: [2]int{pad, pad}}, false)
	c.Weight.Init = nn.KaimingNormal(out*k*k, math.Sqrt2)
	return c
}

// NewResNet registers a ResNet's parameters under b.
func NewResNet(b nn.Builder, cfg ResNetConfig) *ResNet {
	if cfg.NumClasses <= 0 {
		panic(fmt.Sprintf("zoo: ResNet needs a positive number of classes, got %d", cfg.NumClasses))
	}
	m := &ResNet{Module: nn.NewModule(b), Config: cfg}
	m.Conv1 = nn.NewConv2d(b.Sub("conv1"), 3, 64, 7, op.ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{3, 3}}, false)
	m.Conv1.Weight.Init = nn.KaimingNormal(64*7*7, math.Sqrt2)
	m.BN1 = nn.NewBatchNorm2d(b.Sub("bn1"), 64)
	m.MaxPool = nn.NewMaxPool2d(3, 2, 1)
	exp := cfg.Block.expansion()
	inplanes := 64
	for s := range 4 {
		planes := 64 << s
		stride := 1
		if s > 0 {
			stride = 2
		}
		lb := b.Sub("layer" + strconv.Itoa(s+1))
		for i := range cfg.Layers[s] {
			blk := newResBlock(lb.Sub(strconv.Itoa(i)), cfg.Block, inplanes, planes, stride)
			m.Stages[s] = append(m.Stages[s], blk)
			inplanes = planes * exp
			stride = 1
		}
	}
	m.AvgPool = nn.NewAdaptiveAvgPool2d(1, 1)
	m.FC = nn.NewLinear(b.Sub("fc"), 512*exp, cfg.NumClasses, true)
	return m
}

func newResBlock(b nn.Builder, kind BlockKind, inplanes, planes, stride int) *ResBlock {
	r := &ResBlock{Module: nn.NewModule(b), Kind: kind}
	out := planes * kind.expansion()
	if kind == Basic {
		r.Conv1 = resnetConv(b.Sub("conv1"), inplanes, planes, 3, stride)
		r.BN1 = nn.NewBatchNorm2d(b.Sub("bn1"), planes)
		r.Conv2 = resnetConv(b.Sub("conv2"), planes, planes, 3, 1)
		r.BN2 = nn.NewBatchNorm2d(b.Sub("bn2"), planes)
	} else {
		r.Conv1 = resnetConv(b.Sub("conv1"), inplanes, planes, 1, 1)
		r.BN1 = nn.NewBatchNorm2d(b.Sub("bn1"), planes)
		r.Conv2 = resnetConv(b.Sub("conv2"), planes, planes, 3, stride)
		r.BN2 = nn.NewBatchNorm2d(b.Sub("bn2"), planes)
		r.Conv3 = resnetConv(b.Sub("conv3"), planes, out, 1, 1)
		r.BN3 = nn.NewBatchNorm2d(b.Sub("bn3"), out)
	}
	if stride != 1 || inplanes != out {
		d := b.Sub("downsample")
		r.DownsampleConv = resnetConv(d.Sub("0"), inplanes, out, 1, stride)
		r.DownsampleBN = nn.NewBatchNorm2d(d.Sub("1"), out)
	}
	return r
}

// Forward applies the block: relu(branch(x) + shortcut(x)).
func (r *ResBlock) Forward(x *trace.Tensor) *trace.Tensor {
	return r.Scope(x, func() *trace.Tensor {
		y := op.ReLU(r.BN1.Forward(r.Conv1.Forward(x)))
		y = r.BN2.Forward(r.Conv2.Forward(y))
		if r.Kind == Bottleneck {
			y = r.BN3.Forward(r.Conv3.Forward(op.ReLU(y)))
		}
		id := x
		if r.DownsampleConv != nil {
			id = r.DownsampleBN.Forward(r.DownsampleConv.Forward(x))
		}
		return op.ReLU(op.Add(y, id))
	})
}

// Forward maps images [N, 3, H, W] to logits [N, NumClasses].
func (m *ResNet) Forward(x *trace.Tensor) *trace.Tensor {
	x = m.Scope(x, func() *trace.Tensor {
		return m.MaxPool.Forward(op.ReLU(m.BN1.Forward(m.Conv1.Forward(x))))
	})
	for _, stage := range m.Stages {
		for _, blk := range stage {
			x = blk.Forward(x)
		}
	}
	return m.Scope(x, func() *trace.Tensor {
		x = m.AvgPool.Forward(x)
		x = op.Reshape(x, tensor.Shape{x.Dim(0), -1})
		return m.FC.Forward(x)
	})
}
