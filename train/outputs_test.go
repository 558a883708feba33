package train_test

import (
	"context"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// With Config.Outputs, Step leaves the model's outputs of the step's
// forward pass (every micro-batch's, in order) for Outputs: the logits a
// forward pass on the weights before the update gives; and the plan, which
// holds them to the end of the step, is still what the step measures.
func TestStepOutputs(t *testing.T) {
	build := func(s *nn.Store) (train.Model, train.LossFunc) {
		return NewNet(s.Root()), func(out, y *trace.Tensor) *trace.Tensor { return op.CrossEntropy(out, y, op.CrossEntropyOpts{}) }
	}
	x := tensor.FromFloat32(tensor.Shape{5, 4}, []float32{1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 2, 3, 4})
	y := tensor.FromInt64(tensor.Shape{5}, []int64{0, 2, 1, 0, 1})
	for _, c := range []struct {
		name string
		cfg  train.Config
	}{
		{"one pass", train.Config{Outputs: true}},
		{"three micro-batches", train.Config{Outputs: true, Accumulation: 3}},
		{"optimizer in backward", train.Config{Outputs: true, OptimizerInBackward: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := device.CPU()
			opt, _ := optim.NewAdamW(optim.AdamWDefaults())
			tr, err := train.SetupConfig(dev, 5, build, opt, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if tr.Outputs() != nil {
				t.Fatal("outputs before any step")
			}
			want, err := tr.Predict(context.Background(), x) // no dropout or norm: the training forward
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Step(context.Background(), x, y); err != nil {
				t.Fatal(err)
			}
			got := tr.Outputs()
			if got == nil || !got.Shape.Equal(tensor.Shape{5, 3}) {
				t.Fatalf("outputs %v, want [5, 3]", got)
			}
			for i, v := range got.F32() {
				if d := v - want.F32()[i]; d > 1e-6 || d < -1e-6 {
					t.Fatalf("output %d = %v, want %v", i, v, want.F32()[i])
				}
			}
		})
	}

	// Planned equals measured with the outputs kept.
	dev := device.CPU()
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	tr, err := train.SetupConfig(dev, 5, build, opt, train.Config{Outputs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	plan, err := tr.Plan(trace.Meta{DType: x.DType, Shape: x.Shape}, trace.Meta{DType: y.DType, Shape: y.Shape})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(context.Background(), x, y); err != nil {
		t.Fatal(err)
	}
	if got := dev.Alloc.MaxMemoryAllocated(); plan.Total() != got {
		t.Errorf("planned %d bytes, measured %d", plan.Total(), got)
	}
}
