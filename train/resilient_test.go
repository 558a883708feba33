package train_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// A batch whose step does not fit the device is split and accumulated: the
// step succeeds and the weights are those of the whole batch.
func TestOutOfMemoryStepIsSplit(t *testing.T) {
	spec, _ := zoo.Lookup("cnn")
	prob := budget.Problem{
		Build:        testkit.Build(spec),
		Example:      spec.Example,
		Batch:        64,
		NewOptimizer: func() (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.1}) },
	}
	// Find a capacity that holds a batch of 8 to 60 samples, not 64.
	var capacity int64
	for b := int64(16 << 20); b < 256<<20; b += 1 << 20 {
		prob.Budget = b
		n, err := budget.MaxBatch(context.Background(), prob, budget.RecomputeNone)
		if err == nil && n >= 8 && n <= 60 {
			capacity = b
			break
		}
	}
	if capacity == 0 {
		t.Fatal("no capacity found that fits a batch of 8 to 60 but not 64")
	}
	r := rand.New(rand.NewSource(2))
	x, y := testkit.Classification(r, tensor.Shape{64, 1, 28, 28}, 10)
	step := func(spec string) (*train.Trainer, *nn.Store, float64) {
		dev, err := device.New(spec)
		if err != nil {
			t.Fatal(err)
		}
		s := nn.NewStore()
		m, loss := prob.Build(s)
		if err := s.Materialize(dev, 3); err != nil {
			t.Fatal(err)
		}
		opt, _ := prob.NewOptimizer()
		tr, err := train.New(dev, s, m, loss, opt)
		if err != nil {
			t.Fatal(err)
		}
		l, err := tr.Step(context.Background(), x, y)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		return tr, s, l
	}
	capped, cs, lc := step(fmt.Sprintf("cpu:mem=%d", capacity))
	defer capped.Close()
	free, fs, lf := step("cpu")
	defer free.Close()
	if capped.Splits == 0 {
		t.Fatal("the capped step was not split")
	}
	if d := lc - lf; d > 1e-5*lf || d < -1e-5*lf {
		t.Fatalf("loss %v split, %v whole", lc, lf)
	}
	for i, p := range cs.Trainable() {
		if e := relErr(p.Value.F32(), fs.Trainable()[i].Value.F32()); e > 1e-5 {
			t.Errorf("%s: relative error %.3g", p.Name, e)
		}
	}
	if peak := capped.Device.Alloc.Stats().ReservedBytes.Peak; peak > capacity {
		t.Fatalf("reserved %d beyond the capacity %d", peak, capacity)
	}
	t.Logf("capacity %s: %d splits", device.FormatBytes(capacity), capped.Splits)
}
