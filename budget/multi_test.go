package budget_test

import (
	"context"
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// maskedModel is a model of two inputs: images and a mask of the pixels
// to zero before the network.
type maskedModel struct{ net train.Model }

func (m maskedModel) ForwardInputs(xs []*trace.Tensor) *trace.Tensor {
	return m.net.Forward(op.MaskedFill(xs[0], xs[1], 0))
}

// NewTrainerInputs plans and trains a model of several inputs within a
// budget that forces micro-batches: StepInputs splits every input
// together and gives the loss and update of the whole batch, as a plain
// one-input trainer given the masked images; PredictInputs gives its
// predictions. Before, the budgeted trainer and Predict took one input.
func TestNewTrainerInputs(t *testing.T) {
	spec, err := zoo.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	build := func(s *nn.Store) (train.Model, train.LossFunc) {
		return train.Multi(maskedModel{spec.New(s.Root())}), spec.Loss
	}
	refBuild := func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss }
	newOpt := func() (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.1}) }
	const batch = 16
	r := rand.New(rand.NewSource(4))
	x := randomImages(r, batch)
	mask := tensor.New(tensor.Bool, x.Shape)
	masked := x.Clone()
	for i := range mask.Data {
		if r.Intn(3) == 0 {
			mask.Data[i] = 1
			masked.F32()[i] = 0
		}
	}
	labels := make([]int64, batch)
	for i := range labels {
		labels[i] = int64(r.Intn(10))
	}
	y := tensor.FromInt64(tensor.Shape{batch}, labels)
	xs := []*tensor.Tensor{x, mask}
	ctx := context.Background()

	_, err = budget.NewTrainerInputs(ctx, build, newOpt, xs, y, budget.Options{Budget: 1, GradientBuffers: true})
	var ts *budget.TooSmallError
	if !errors.As(err, &ts) {
		t.Fatalf("a 1-byte budget: %v", err)
	}
	tr, err := budget.NewTrainerInputs(ctx, build, newOpt, xs, y, budget.Options{Budget: ts.Minimum, Seed: 3, Policies: []budget.Policy{budget.RecomputeNone}, Threads: 2, GradientBuffers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.MicroBatch() >= batch {
		t.Fatalf("micro-batch %d under the minimum budget, want fewer than %d samples", tr.MicroBatch(), batch)
	}
	if tr.Threads() != 2 {
		t.Errorf("Threads() = %d, want Options.Threads 2", tr.Threads())
	}
	ref, err := train.Setup(device.CPU(), 3, refBuild, must(newOpt()))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	want, err := ref.Step(ctx, masked, y)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tr.StepInputs(ctx, xs, y)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-want) > 1e-5*math.Abs(want) {
		t.Errorf("loss %v, want the whole batch's %v", got, want)
	}
	for i, p := range tr.Store.Trainable() {
		a, b := p.Value.F32(), ref.Store.Trainable()[i].Value.F32()
		for j := range a {
			if math.Abs(float64(a[j]-b[j])) > 1e-5 {
				t.Fatalf("%s[%d] = %v after the step, want %v", p.Name, j, a[j], b[j])
			}
		}
	}
	st := tr.Device.Alloc.Stats()
	if st.NumOOMs != 0 || tr.Splits != 0 || st.ReservedBytes.Peak > ts.Minimum {
		t.Errorf("%d OOMs, %d splits, reserved peak %d over the budget %d", st.NumOOMs, tr.Splits, st.ReservedBytes.Peak, ts.Minimum)
	}

	// Predictions from both inputs: the reference's from the masked images.
	pw, err := ref.Predict(ctx, masked)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := tr.PredictInputs(ctx, xs)
	if err != nil {
		t.Fatal(err)
	}
	if !pg.Shape.Equal(pw.Shape) {
		t.Fatalf("predictions %v, want %v", pg.Shape, pw.Shape)
	}
	for i, v := range pg.F32() {
		if w := pw.F32()[i]; math.Abs(float64(v-w)) > 1e-4 {
			t.Fatalf("prediction [%d] = %v, want %v", i, v, w)
		}
	}

	for _, c := range []struct {
		name string
		xs   []*tensor.Tensor
	}{
		{"one input of two", xs[:1]},
		{"mask of another shape", []*tensor.Tensor{x, tensor.New(tensor.Bool, tensor.Shape{batch, 1, 28, 27})}},
		{"mask of fewer samples", []*tensor.Tensor{x, tensor.New(tensor.Bool, tensor.Shape{batch - 1, 1, 28, 28})}},
	} {
		if _, err := tr.StepInputs(ctx, c.xs, y); !errors.Is(err, budget.ErrShape) {
			t.Errorf("%s: err %v, want ErrShape", c.name, err)
		}
	}
}
