package train_test

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// Net is what `class Net(nn.Module)` would be in PyTorch: layers registered
// under the names PyTorch would give them, and a forward function.
type Net struct {
	FC1, FC2 *nn.Linear
}

func NewNet(b nn.Builder) *Net {
	return &Net{FC1: nn.NewLinear(b.Sub("fc1"), 4, 8, true), FC2: nn.NewLinear(b.Sub("fc2"), 8, 3, true)}
}

func (m *Net) Forward(x *trace.Tensor) *trace.Tensor {
	return m.FC2.Forward(op.GELU(m.FC1.Forward(x), "none"))
}

// A custom model trained with cross-entropy and AdamW. The memory plan is
// known before the first step; weights could be loaded from a PyTorch
// state_dict with safetensors.Load and Store.LoadStateDict.
func Example() {
	store := nn.NewStore()
	model := NewNet(store.Root())
	dev := device.CPU()
	if err := store.Materialize(dev, 0); err != nil {
		panic(err)
	}
	defer store.Release()
	opt, _ := optim.NewAdamW(optim.AdamWDefaults())
	loss := func(out, y *trace.Tensor) *trace.Tensor {
		return op.CrossEntropy(out, y, op.DefaultCrossEntropyOpts())
	}
	tr, err := train.New(dev, store, model, loss, opt)
	if err != nil {
		panic(err)
	}
	defer tr.Close()

	x := tensor.FromFloat32(tensor.Shape{2, 4}, []float32{1, 0, 0, 1, 0, 1, 1, 0})
	y := tensor.FromInt64(tensor.Shape{2}, []int64{0, 2})
	plan, _ := tr.Plan(trace.Meta{DType: x.DType, Shape: x.Shape}, trace.Meta{DType: y.DType, Shape: y.Shape})
	if _, err := tr.Step(context.Background(), x, y); err != nil {
		panic(err)
	}
	fmt.Println("parameters:", store.NumParams())
	fmt.Println("planned peak equals measured:", plan.Total() == dev.Alloc.MaxMemoryAllocated())
	// Output:
	// parameters: 67
	// planned peak equals measured: true
}
