package train_test

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

func relErr(a, b []float32) float64 {
	var d, m float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		m = math.Max(m, math.Abs(float64(b[i])))
	}
	if m == 0 {
		return d
	}
	return d / m
}

// afterOneStep trains a fresh copy of a model one step on batch, split into
// the given number of micro-batches, and returns its parameters.
func afterOneStep(t *testing.T, build func(*nn.Store) (train.Model, train.LossFunc), batch train.Batch, k int, weigh func(*tensor.Tensor) float64) map[string][]float32 {
	t.Helper()
	s := nn.NewStore()
	m, loss := build(s)
	dev := device.CPU()
	if err := s.Materialize(dev, 5); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.5})
	tr, err := train.New(dev, s, m, loss, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.Weigh = weigh
	micro, err := train.Split(batch, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.StepAccumulate(context.Background(), micro); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, p := range s.Trainable() {
		out[p.Name] = append([]float32(nil), p.Value.F32()...)
	}
	return out
}

func TestAccumulationEqualsFullBatch(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	mlp := func(s *nn.Store) (train.Model, train.LossFunc) {
		return zoo.NewMLP(s.Root(), 8, 32, 32, 5), func(out, y *trace.Tensor) *trace.Tensor {
			return op.CrossEntropy(out, y, op.DefaultCrossEntropyOpts())
		}
	}
	x, y := testkit.Classification(r, tensor.Shape{30, 8}, 5)
	full := afterOneStep(t, mlp, train.Batch{X: x, Y: y}, 1, nil)
	for _, k := range []int{2, 3, 4, 7} { // 4 and 7 give micro-batches of unequal sizes
		got := afterOneStep(t, mlp, train.Batch{X: x, Y: y}, k, nil)
		for name, want := range full {
			if e := relErr(got[name], want); e > 1e-5 {
				t.Errorf("k=%d %s: relative error %.3g", k, name, e)
			}
		}
	}
}

// A GPT whose loss averages over non-ignored tokens: micro-batches are
// weighted by their token counts, so the result is the full batch's.
func TestAccumulationWithTokenCounts(t *testing.T) {
	cfg := zoo.GPTConfig{NLayer: 1, NHead: 2, NEmbd: 16, BlockSize: 8, VocabSize: 11, Bias: true}
	gpt := func(s *nn.Store) (train.Model, train.LossFunc) {
		return zoo.NewGPT(s.Root(), cfg), zoo.GPTLoss
	}
	r := rand.New(rand.NewSource(4))
	x := tensor.New(tensor.Int64, tensor.Shape{6, 8})
	y := tensor.New(tensor.Int64, tensor.Shape{6, 8})
	for i := range x.I64() {
		x.I64()[i] = int64(r.Intn(11))
		y.I64()[i] = int64(r.Intn(11))
		if r.Intn(3) == 0 || i < 16 && i%4 != 0 { // uneven: the first rows are mostly ignored
			y.I64()[i] = -1
		}
	}
	tokens := func(y *tensor.Tensor) float64 {
		n := 0
		for _, v := range y.I64() {
			if v != -1 {
				n++
			}
		}
		return float64(n)
	}
	full := afterOneStep(t, gpt, train.Batch{X: x, Y: y}, 1, tokens)
	got := afterOneStep(t, gpt, train.Batch{X: x, Y: y}, 3, tokens)
	for name, want := range full {
		if e := relErr(got[name], want); e > 1e-5 {
			t.Errorf("%s: relative error %.3g", name, e)
		}
	}
	// Weighting by samples instead of tokens is measurably wrong here.
	naive := afterOneStep(t, gpt, train.Batch{X: x, Y: y}, 3, nil)
	worst := 0.0
	for name, want := range full {
		worst = math.Max(worst, relErr(naive[name], want))
	}
	if worst < 1e-4 {
		t.Errorf("sample weighting matched token weighting (%.3g); the test does not exercise token counts", worst)
	}
}

func TestGradScalerSkipsNonFiniteSteps(t *testing.T) {
	s := nn.NewStore()
	m := newMLP(s)
	dev := device.CPU()
	if err := s.Materialize(dev, 1); err != nil {
		t.Fatal(err)
	}
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	tr, err := train.New(dev, s, m, sse, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sc := train.NewGradScaler()
	sc.Scale = 1e39 // beyond float32: the seed, and so the gradients, are inf
	sc.GrowthInterval = 2
	tr.Scaler = sc
	x, y := batch(rand.New(rand.NewSource(1)), 16)
	before := append([]float32(nil), s.Trainable()[0].Value.F32()...)
	if _, err := tr.Step(context.Background(), x, y); err != nil {
		t.Fatal(err)
	}
	if sc.Skipped != 1 || sc.Scale != 0.5e39 {
		t.Fatalf("skipped %d, scale %g", sc.Skipped, sc.Scale)
	}
	if relErr(s.Trainable()[0].Value.F32(), before) != 0 {
		t.Fatal("a skipped step changed the weights")
	}
	sc.Scale = 1024
	for i := 0; i < 2; i++ {
		if _, err := tr.Step(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
	}
	if sc.Scale != 2048 || sc.Skipped != 1 {
		t.Fatalf("after 2 clean steps: scale %g, skipped %d", sc.Scale, sc.Skipped)
	}
	if relErr(s.Trainable()[0].Value.F32(), before) == 0 {
		t.Fatal("clean steps did not update the weights")
	}
}
