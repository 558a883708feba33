package budget_test

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

type exampleNet struct{ FC1, FC2 *nn.Linear }

func (m *exampleNet) Forward(x *trace.Tensor) *trace.Tensor {
	return m.FC2.Forward(op.ReLU(m.FC1.Forward(x)))
}

// One call plans training within a memory budget and returns a trainer
// that runs the plan: the model is written once, the shapes come from the
// example batch, Step takes whole batches and splits them itself, and the
// step's outputs are kept for metrics.
func ExampleNewTrainer() {
	build := func(s *nn.Store) (train.Model, train.LossFunc) {
		b := s.Root()
		m := &exampleNet{FC1: nn.NewLinear(b.Sub("fc1"), 64, 512, true), FC2: nn.NewLinear(b.Sub("fc2"), 512, 10, true)}
		return m, func(out, y *trace.Tensor) *trace.Tensor { return op.CrossEntropy(out, y, op.CrossEntropyOpts{}) }
	}
	newOpt := func() (optim.Optimizer, error) { return optim.NewAdamW(optim.AdamWDefaults()) }

	const batch = 256
	x := tensor.New(tensor.Float32, tensor.Shape{batch, 64})
	y := tensor.New(tensor.Int64, tensor.Shape{batch})
	const limit = 2 << 20 // 2 MiB: less than the whole batch at once needs
	tr, err := budget.NewTrainer(context.Background(), build, newOpt, x, y, budget.Options{Budget: limit, Outputs: true})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	if _, err := tr.Step(context.Background(), x, y); err != nil {
		panic(err)
	}
	// The logits of the step's forward pass, for training metrics.
	fmt.Println("outputs:", tr.Outputs().Shape)
	fmt.Println("whole batch fits:", tr.Plan.Baseline.Reserved <= limit)
	fmt.Println("split into micro-batches:", tr.MicroBatch() < batch)
	fmt.Println("within the budget:", tr.Device.Alloc.Stats().ReservedBytes.Peak <= limit)
	// Output:
	// outputs: [256, 10]
	// whole batch fits: false
	// split into micro-batches: true
	// within the budget: true
}
