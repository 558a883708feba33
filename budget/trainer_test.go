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
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// NewTrainer under a budget that forces micro-batches: Step takes the
// whole batch, splits it itself, stays within the budget, and gives the
// loss and the update of the whole batch at once (a plain trainer on an
// uncapped device, same seed).
func TestNewTrainerSplitsWithinBudget(t *testing.T) {
	spec, err := zoo.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	build := func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss }
	newOpt := func() (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.1}) }
	const batch = 16
	r := rand.New(rand.NewSource(1))
	x := randomImages(r, batch)
	labels := make([]int64, batch)
	for i := range labels {
		labels[i] = int64(r.Intn(10))
	}
	y := tensor.FromInt64(tensor.Shape{batch}, labels)
	ctx := context.Background()

	// The least memory the planner can run the batch in: micro-batches.
	_, err = budget.NewTrainer(ctx, build, newOpt, x, y, budget.Options{Budget: 1, GradientBuffers: true})
	var ts *budget.TooSmallError
	if !errors.As(err, &ts) {
		t.Fatalf("a 1-byte budget: %v", err)
	}
	tr, err := budget.NewTrainer(ctx, build, newOpt, x, y, budget.Options{Budget: ts.Minimum, Seed: 3, Policies: []budget.Policy{budget.RecomputeNone}, GradientBuffers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.MicroBatch() >= batch {
		t.Fatalf("micro-batch %d under the minimum budget, want fewer than %d samples", tr.MicroBatch(), batch)
	}

	ref, err := train.Setup(device.CPU(), 3, build, must(newOpt()))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	want, err := ref.Step(ctx, x, y)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tr.Step(ctx, x, y)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-want) > 1e-5*math.Abs(want) {
		t.Errorf("loss %v, want the whole batch's %v", got, want)
	}
	for i, p := range tr.Store.Trainable() {
		q := ref.Store.Trainable()[i]
		a, b := p.Value.F32(), q.Value.F32()
		for j := range a {
			if math.Abs(float64(a[j]-b[j])) > 1e-5 {
				t.Fatalf("%s[%d] = %v after the step, want %v", p.Name, j, a[j], b[j])
			}
		}
	}
	// A shorter last batch and a longer one: more or fewer micro-batches.
	for _, n := range []int{5, 2 * batch} {
		xs := randomImages(r, n)
		ys := tensor.FromInt64(tensor.Shape{n}, make([]int64, n))
		if _, err := tr.Step(ctx, xs, ys); err != nil {
			t.Fatalf("batch of %d: %v", n, err)
		}
	}
	st := tr.Device.Alloc.Stats()
	if st.NumOOMs != 0 || tr.Splits != 0 || st.ReservedBytes.Peak > ts.Minimum {
		t.Errorf("%d OOMs, %d splits, reserved peak %d over the budget %d", st.NumOOMs, tr.Splits, st.ReservedBytes.Peak, ts.Minimum)
	}

	for _, c := range []struct {
		name string
		x, y *tensor.Tensor
	}{
		{"other image size", &tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{4, 1, 28, 27}}, &tensor.Tensor{DType: tensor.Int64, Shape: tensor.Shape{4}}},
		{"other dtype", &tensor.Tensor{DType: tensor.Float64, Shape: tensor.Shape{4, 1, 28, 28}}, &tensor.Tensor{DType: tensor.Int64, Shape: tensor.Shape{4}}},
		{"sample counts differ", &tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{4, 1, 28, 28}}, &tensor.Tensor{DType: tensor.Int64, Shape: tensor.Shape{3}}},
		{"no batch axis", &tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{}}, &tensor.Tensor{DType: tensor.Int64, Shape: tensor.Shape{}}},
	} {
		if _, err := tr.Step(ctx, c.x, c.y); !errors.Is(err, budget.ErrShape) {
			t.Errorf("%s: err %v, want ErrShape", c.name, err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func randomImages(r *rand.Rand, n int) *tensor.Tensor {
	v := make([]float32, n*28*28)
	for i := range v {
		v[i] = 2*r.Float32() - 1
	}
	return tensor.FromFloat32(tensor.Shape{n, 1, 28, 28}, v)
}

// With Options.Outputs the steps keep the model's outputs for the
// trainer's Outputs, within the budget: the whole batch's logits,
// joined from its micro-batches.
func TestNewTrainerOutputs(t *testing.T) {
	spec, err := zoo.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	build := func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss }
	newOpt := func() (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.1}) }
	const batch = 12
	r := rand.New(rand.NewSource(2))
	x := randomImages(r, batch)
	y := tensor.FromInt64(tensor.Shape{batch}, make([]int64, batch))
	ctx := context.Background()
	_, err = budget.NewTrainer(ctx, build, newOpt, x, y, budget.Options{Budget: 1, Outputs: true})
	var ts *budget.TooSmallError
	if !errors.As(err, &ts) {
		t.Fatalf("a 1-byte budget: %v", err)
	}
	tr, err := budget.NewTrainer(ctx, build, newOpt, x, y, budget.Options{Budget: ts.Minimum, Outputs: true, Policies: []budget.Policy{budget.RecomputeNone}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	want, err := tr.Predict(ctx, x) // no dropout or norm in the mlp
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(ctx, x, y); err != nil {
		t.Fatal(err)
	}
	got := tr.Outputs()
	if got == nil || !got.Shape.Equal(want.Shape) {
		t.Fatalf("outputs %v, want shape %v", got, want.Shape)
	}
	for i, v := range got.F32() {
		if d := v - want.F32()[i]; d > 1e-5 || d < -1e-5 {
			t.Fatalf("output %d = %v, want %v", i, v, want.F32()[i])
		}
	}
	st := tr.Device.Alloc.Stats()
	if st.NumOOMs != 0 || tr.Splits != 0 || st.ReservedBytes.Peak > ts.Minimum {
		t.Errorf("%d OOMs, %d splits, reserved peak %d over the budget %d (micro-batch %d)", st.NumOOMs, tr.Splits, st.ReservedBytes.Peak, ts.Minimum, tr.MicroBatch())
	}
}

// NewTrainer keeps the gradients of a step of one fp32 micro-batch in the
// step's arena unless asked for buffers (as headroom train and plan, and
// PyTorch's zero_grad(set_to_none=True)): no gradient bytes held for the
// whole step, and a planned peak no higher than with buffers.
func TestNewTrainerGradientsInTheArenaByDefault(t *testing.T) {
	spec, _ := zoo.Lookup("cnn")
	build := func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss }
	newOpt := func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }
	x := randomImages(rand.New(rand.NewSource(1)), 8)
	y := tensor.FromInt64(tensor.Shape{8}, make([]int64, 8))
	ctx := context.Background()
	var peaks [2]int64
	for i, bufs := range []bool{false, true} {
		tr, err := budget.NewTrainer(ctx, build, newOpt, x, y, budget.Options{Budget: 1 << 30, Device: "meta", GradientBuffers: bufs})
		if err != nil {
			t.Fatal(err)
		}
		b := tr.Plan.Best
		_, grads := tr.Store.ParamBytes()
		if tr.GradientsInArena(1) == bufs || b.ArenaGradients == bufs || tr.Config().GradientBuffers != bufs {
			t.Errorf("GradientBuffers %v: in the arena %v, planned %v, config %v", bufs, tr.GradientsInArena(1), b.ArenaGradients, tr.Config())
		}
		if held := tr.Device.Alloc.Stats().ByCategory[device.Gradient]; (held == 0) != !bufs || (b.Memory.Gradients == 0) != !bufs {
			t.Errorf("GradientBuffers %v: %d bytes of gradient buffers held, %d planned (the parameters' gradients: %d)", bufs, held, b.Memory.Gradients, grads)
		}
		peaks[i] = b.Memory.Total()
		tr.Close()
	}
	if peaks[0] > peaks[1] {
		t.Errorf("planned peak %d with gradients in the arena, %d with buffers", peaks[0], peaks[1])
	}
}
