package zoo

import (
	"fmt"
	"sort"
	"strings"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// Spec describes a model of the zoo: how to build it, what one batch of
// its inputs and targets looks like, and the loss it trains with.
type Spec struct {
	Name        string
	Description string
	// New registers the model's parameters under b and returns it.
	New func(b nn.Builder) train.Model
	// Example returns the metadata of a batch of batch inputs and targets.
	Example func(batch int) (x, y trace.Meta)
	// Loss is the training loss of the model's output and the target.
	Loss train.LossFunc
}

func images(n, c, h, w int) trace.Meta {
	return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, c, h, w}}
}

func labels(shape ...int) trace.Meta {
	return trace.Meta{DType: tensor.Int64, Shape: tensor.Shape(shape)}
}

// CrossEntropyLoss is F.cross_entropy(out, y) with PyTorch's defaults.
func CrossEntropyLoss(out, y *trace.Tensor) *trace.Tensor {
	return op.CrossEntropy(out, y, op.DefaultCrossEntropyOpts())
}

// L1Loss is F.l1_loss(out, y), the mean absolute error.
func L1Loss(out, y *trace.Tensor) *trace.Tensor { return op.L1Loss(out, y, op.ReductionMean) }

func classifier(name, desc string, build func(nn.Builder) train.Model, c, h, w int) Spec {
	return Spec{Name: name, Description: desc, New: build, Loss: CrossEntropyLoss,
		Example: func(n int) (trace.Meta, trace.Meta) { return images(n, c, h, w), labels(n) }}
}

func resnetSpec(name string, ctor func(nn.Builder, int) *ResNet, what string) Spec {
	return classifier(name, what+" (torchvision), 1000 classes, 224x224 RGB",
		func(b nn.Builder) train.Model { return ctor(b, 1000) }, 3, 224, 224)
}

func gptSpec(name, desc string, cfg GPTConfig) Spec {
	return Spec{Name: name, Description: desc, Loss: GPTLoss,
		New: func(b nn.Builder) train.Model { return NewGPT(b, cfg) },
		Example: func(n int) (trace.Meta, trace.Meta) {
			return labels(n, cfg.BlockSize), labels(n, cfg.BlockSize)
		}}
}

var specs = []Spec{
	classifier("mlp", "MLP 784-256-10 for Fashion-MNIST",
		func(b nn.Builder) train.Model { return NewMLP(b, 784, 256, 10) }, 1, 28, 28),
	classifier("cnn", "two-conv CNN for Fashion-MNIST",
		func(b nn.Builder) train.Model { return NewFashionCNN(b) }, 1, 28, 28),
	resnetSpec("resnet18", ResNet18, "ResNet-18"),
	resnetSpec("resnet34", ResNet34, "ResNet-34"),
	resnetSpec("resnet50", ResNet50, "ResNet-50"),
	resnetSpec("resnet101", ResNet101, "ResNet-101"),
	resnetSpec("resnet152", ResNet152, "ResNet-152"),
	// The configurations headroom's memory and speed targets are stated for.
	classifier("resnet18-64", "ResNet-18, 10 classes, 64x64 RGB",
		func(b nn.Builder) train.Model { return ResNet18(b, 10) }, 3, 64, 64),
	classifier("resnet152-128", "ResNet-152, 100 classes, 128x128 RGB",
		func(b nn.Builder) train.Model { return ResNet152(b, 100) }, 3, 128, 128),
	gptSpec("gpt2", "nanoGPT GPT-2 small (124M), 1024 tokens", GPT2Config()),
	gptSpec("gpt-shakespeare-char", "nanoGPT's shakespeare_char model (6 layers, 384 wide, 256 characters)",
		GPTConfig{NLayer: 6, NHead: 6, NEmbd: 384, BlockSize: 256, VocabSize: 65, Dropout: 0.2}),
	{Name: "rrdbnet", Description: "ESRGAN generator RRDBNet (nf 64, nb 23, gc 32), x4 from 32x32, L1 loss",
		New:  func(b nn.Builder) train.Model { return NewRRDBNet(b, DefaultRRDBNetConfig()) },
		Loss: L1Loss,
		Example: func(n int) (trace.Meta, trace.Meta) {
			return images(n, 3, 32, 32), images(n, 3, 128, 128)
		}},
}

// Specs returns every model of the zoo, sorted by name.
func Specs() []Spec {
	out := append([]Spec(nil), specs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the names Lookup accepts, sorted.
func Names() []string {
	var out []string
	for _, s := range Specs() {
		out = append(out, s.Name)
	}
	return out
}

// Lookup returns the model named name.
func Lookup(name string) (Spec, error) {
	for _, s := range specs {
		if s.Name == name {
			return s, nil
		}
	}
	return Spec{}, fmt.Errorf("zoo: unknown model %q (valid: %s)", name, strings.Join(Names(), ", "))
}

// StateDictLoader is implemented by models whose checkpoints need more than
// Store.LoadStateDict, such as GPT's tied weights.
type StateDictLoader interface {
	LoadStateDict(sd map[string]*tensor.Tensor, strict bool) error
}

// LoadStateDict loads a PyTorch state_dict into model m, whose parameters
// are in s: through the model's own LoadStateDict when it has one, else
// s.LoadStateDict. Missing and unexpected keys are reported by name
// (*nn.LoadError).
func LoadStateDict(m train.Model, s *nn.Store, sd map[string]*tensor.Tensor, strict bool) error {
	if l, ok := m.(StateDictLoader); ok {
		return l.LoadStateDict(sd, strict)
	}
	return s.LoadStateDict(sd, strict)
}
