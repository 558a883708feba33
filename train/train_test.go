package train_test

import (
	"context"
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
)

type mlp struct{ l1, l2 *nn.Linear }

func newMLP(s *nn.Store) *mlp {
	b := s.Root()
	return &mlp{l1: nn.NewLinear(b.Sub("0"), 8, 16, true), l2: nn.NewLinear(b.Sub("2"), 16, 4, true)}
}

func (m *mlp) Forward(x *trace.Tensor) *trace.Tensor { return m.l2.Forward(op.ReLU(m.l1.Forward(x))) }

func sse(out, y *trace.Tensor) *trace.Tensor { return op.Mean(op.Square(op.Sub(out, y)), false) }

// batch is n examples for the mlp: inputs and targets normal.
func batch(r *rand.Rand, n int) (*tensor.Tensor, *tensor.Tensor) {
	return testkit.Batch(r, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 8}}, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 4}}, 0)
}

// newTrainer is the mlp with Adam on dev, initialized with seed 1.
func newTrainer(t *testing.T, dev *device.Device) *train.Trainer {
	t.Helper()
	opt, err := optim.NewAdam(optim.AdamDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Trainer(t, dev, 1, func(s *nn.Store) (train.Model, train.LossFunc) { return newMLP(s), sse }, opt)
}

// The plan's predicted peak equals the allocator's measured peak, on the cpu
// and on the meta device, including a shorter last batch.
func TestPlannedPeakEqualsMeasured(t *testing.T) {
	for _, kind := range []string{"cpu", "meta"} {
		t.Run(kind, func(t *testing.T) {
			dev, _ := device.New(kind)
			tr := newTrainer(t, dev)
			defer tr.Close()
			r := rand.New(rand.NewSource(1))
			for _, n := range []int{32, 32, 7} {
				x, y := batch(r, n)
				// Run once so the optimizer state exists, then measure.
				if _, err := tr.Step(context.Background(), x, y); err != nil {
					t.Fatal(err)
				}
				mp, err := tr.Plan(trace.Meta{DType: x.DType, Shape: x.Shape}, trace.Meta{DType: y.DType, Shape: y.Shape})
				if err != nil {
					t.Fatal(err)
				}
				dev.Alloc.ResetPeak()
				if _, err := tr.Step(context.Background(), x, y); err != nil {
					t.Fatal(err)
				}
				got := dev.Alloc.MaxMemoryAllocated()
				if got != mp.Total() {
					t.Fatalf("batch %d: measured peak %d, planned %d (%+v)", n, got, mp.Total(), mp)
				}
			}
		})
	}
}

func TestLossDecreases(t *testing.T) {
	tr := newTrainer(t, device.CPU())
	defer tr.Close()
	r := rand.New(rand.NewSource(2))
	x, y := batch(r, 64)
	first, err := tr.Step(context.Background(), x, y)
	if err != nil {
		t.Fatal(err)
	}
	var last float64
	for i := 0; i < 200; i++ {
		if last, err = tr.Step(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
	}
	if !(last < first*0.7) {
		t.Fatalf("loss did not decrease: first %v, last %v", first, last)
	}
}
