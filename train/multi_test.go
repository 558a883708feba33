package train_test

import (
	"context"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// twoInputs is a model of features and a mask: masked features zeroed
// before the network.
type twoInputs struct{ net *Net }

func (m twoInputs) ForwardInputs(xs []*trace.Tensor) *trace.Tensor {
	return m.net.Forward(op.MaskedFill(xs[0], xs[1], 0))
}

// A MultiModel trains on several inputs, split together into
// micro-batches, exactly as the one-input model trained on what its
// inputs make (the masked features).
func TestMultiInputModel(t *testing.T) {
	loss := func(out, y *trace.Tensor) *trace.Tensor { return op.CrossEntropy(out, y, op.CrossEntropyOpts{}) }
	x := tensor.FromFloat32(tensor.Shape{4, 4}, []float32{1, 2, 3, 4, 5, 6, 7, 8, -1, -2, -3, -4, 0.5, 0.25, 2, 1})
	mask := tensor.New(tensor.Bool, tensor.Shape{4, 4})
	masked := x.Clone()
	for i := range mask.Data {
		if i%3 == 1 {
			mask.Data[i] = 1
			masked.F32()[i] = 0
		}
	}
	y := tensor.FromInt64(tensor.Shape{4}, []int64{0, 2, 1, 0})
	for _, cfg := range []train.Config{{}, {Accumulation: 2}, {OptimizerInBackward: true}} {
		ref, err := train.SetupConfig(device.CPU(), 9, func(s *nn.Store) (train.Model, train.LossFunc) { return NewNet(s.Root()), loss }, must(optim.NewAdam(optim.AdamDefaults())), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer ref.Close()
		dev := device.CPU()
		tr, err := train.SetupConfig(dev, 9, func(s *nn.Store) (train.Model, train.LossFunc) {
			return train.Multi(twoInputs{NewNet(s.Root())}), loss
		}, must(optim.NewAdam(optim.AdamDefaults())), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		plan, err := tr.PlanInputs([]trace.Meta{train.MetaOf(x), train.MetaOf(mask)}, train.MetaOf(y))
		if err != nil {
			t.Fatal(err)
		}
		for step := range 3 {
			want, err := ref.Step(context.Background(), masked, y)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tr.StepInputs(context.Background(), []*tensor.Tensor{x, mask}, y)
			if err != nil {
				t.Fatalf("%v: %v", cfg, err)
			}
			if got != want {
				t.Fatalf("%v, step %d: loss %v, want %v", cfg, step, got, want)
			}
		}
		if cfg.Accumulation == 0 {
			if got := dev.Alloc.MaxMemoryAllocated(); got != plan.Total() {
				t.Errorf("%v: planned %d, measured %d", cfg, plan.Total(), got)
			}
		}
	}

	// A one-input model given two inputs says so.
	tr, err := train.Setup(device.CPU(), 1, func(s *nn.Store) (train.Model, train.LossFunc) { return NewNet(s.Root()), loss }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.StepInputs(context.Background(), []*tensor.Tensor{x, mask}, y); err == nil || !strings.Contains(err.Error(), "takes one input") {
		t.Errorf("two inputs to a one-input model: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
