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

// PlanBatch takes the shapes from the batch itself and plans what Step
// then measures; a metadata-only tensor plans the same.
func TestPlanBatch(t *testing.T) {
	build := func(s *nn.Store) (train.Model, train.LossFunc) {
		return NewNet(s.Root()), func(out, y *trace.Tensor) *trace.Tensor { return op.CrossEntropy(out, y, op.CrossEntropyOpts{}) }
	}
	dev := device.CPU()
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	tr, err := train.Setup(dev, 1, build, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	x := tensor.New(tensor.Float32, tensor.Shape{6, 4})
	y := tensor.New(tensor.Int64, tensor.Shape{6})
	plan, err := tr.PlanBatch(x, y)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := tr.PlanBatch(&tensor.Tensor{DType: x.DType, Shape: x.Shape}, &tensor.Tensor{DType: y.DType, Shape: y.Shape})
	if err != nil || meta != plan {
		t.Fatalf("metadata-only plan %+v, %v; want %+v", meta, err, plan)
	}
	if _, err := tr.Step(context.Background(), x, y); err != nil {
		t.Fatal(err)
	}
	if got := dev.Alloc.MaxMemoryAllocated(); got != plan.Total() {
		t.Errorf("planned %d, measured %d", plan.Total(), got)
	}
}
