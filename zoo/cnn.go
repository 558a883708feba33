package zoo

import (
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// FashionCNN is the small CNN headroom trains on Fashion-MNIST:
//
//	conv1 = Conv2d(1, 32, 3, padding=1); ReLU; MaxPool2d(2)
//	conv2 = Conv2d(32, 64, 3, padding=1); ReLU; MaxPool2d(2)
//	fc1 = Linear(64*7*7, 128); ReLU; fc2 = Linear(128, 10)
type FashionCNN struct {
	Conv1, Conv2 *nn.Conv2d
	FC1, FC2     *nn.Linear
}

// NewFashionCNN registers the CNN's parameters under b.
func NewFashionCNN(b nn.Builder) *FashionCNN {
	return &FashionCNN{
		Conv1: nn.NewConv2d(b.Sub("conv1"), 1, 32, 3, op.ConvOpts{Padding: [2]int{1, 1}}, true),
		Conv2: nn.NewConv2d(b.Sub("conv2"), 32, 64, 3, op.ConvOpts{Padding: [2]int{1, 1}}, true),
		FC1:   nn.NewLinear(b.Sub("fc1"), 64*7*7, 128, true),
		FC2:   nn.NewLinear(b.Sub("fc2"), 128, 10, true),
	}
}

// Forward maps [N, 1, 28, 28] images to [N, 10] logits.
func (m *FashionCNN) Forward(x *trace.Tensor) *trace.Tensor {
	x = op.MaxPool2d(op.ReLU(m.Conv1.Forward(x)), op.PoolOpts{Kernel: [2]int{2, 2}})
	x = op.MaxPool2d(op.ReLU(m.Conv2.Forward(x)), op.PoolOpts{Kernel: [2]int{2, 2}})
	x = op.Reshape(x, tensor.Shape{x.Dim(0), -1})
	return m.FC2.Forward(op.ReLU(m.FC1.Forward(x)))
}
