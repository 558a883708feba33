package budget_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

type mlp struct{ l1, l2 *nn.Linear }

func (m *mlp) Forward(x *trace.Tensor) *trace.Tensor { return m.l2.Forward(op.ReLU(m.l1.Forward(x))) }

// mlpProblem is an in-hidden-out MLP with AdamW, trained with batch
// samples.
func mlpProblem(in, hidden, out, batch int, b int64) budget.Problem {
	return budget.Problem{
		Build: func(s *nn.Store) (train.Model, train.LossFunc) {
			return &mlp{nn.NewLinear(s.Root().Sub("l1"), in, hidden, true), nn.NewLinear(s.Root().Sub("l2"), hidden, out, true)},
				func(o, y *trace.Tensor) *trace.Tensor { return op.CrossEntropy(o, y, op.DefaultCrossEntropyOpts()) }
		},
		Example: func(n int) (trace.Meta, trace.Meta) {
			return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, in}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}
		},
		Batch: batch, Budget: b,
		NewOptimizer: func() (optim.Optimizer, error) { return optim.NewAdamW(optim.AdamWDefaults()) },
	}
}

func accepted(t *testing.T, p budget.Problem) (bool, *budget.TooSmallError) {
	t.Helper()
	_, err := budget.Fit(context.Background(), p)
	var ts *budget.TooSmallError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ts):
		return false, ts
	}
	t.Fatalf("budget %d: %v", p.Budget, err)
	return false, nil
}

// A 64-128-4 MLP at batch 256 with AdamW fit at 180 KiB and at 1.99 MiB
// but was refused at 2.00-2.03 MiB, "the smallest budget that works" being
// 2.04 MiB.
func TestFitIsMonotonicInTheBudget(t *testing.T) {
	p := mlpProblem(64, 128, 4, 256, 0)
	for _, b := range []int64{180 << 10, 1990 << 10, 2 << 20, 2030 << 10, 2040 << 10, 4 << 20} {
		p.Budget = b
		ok, ts := accepted(t, p)
		if !ok {
			t.Errorf("budget %s refused: %v", device.FormatBytes(b), ts)
		}
	}
}

// For budgets a < b, if a is accepted so is b; the minimum named by a
// refusal is accepted and one byte less is refused; a refusal's minimum is
// above its budget.
func TestFitAcceptanceIsMonotonic(t *testing.T) {
	auto := mlpProblem(64, 128, 4, 256, 0)
	auto.Precisions, auto.Compress = budget.AutoPrecisions, budget.AutoCompress
	inBack := mlpProblem(300, 600, 10, 64, 0)
	inBack.OptimizerInBackward = true
	probs := []budget.Problem{
		mlpProblem(64, 128, 4, 256, 0),
		mlpProblem(64, 128, 4, 7, 0),
		mlpProblem(300, 600, 10, 64, 0),
		mlpProblem(1000, 700, 10, 32, 0),
		auto,
		inBack,
	}
	if !testing.Short() {
		probs = append(probs, mlpProblem(16, 2048, 16, 512, 0), wideProblem(2, 0, nil, nil))
	}
	for _, p := range probs {
		p.Budget = 1
		_, ts := accepted(t, p)
		if ts == nil {
			t.Fatal("a 1-byte budget was accepted")
		}
		if ts.Shortfall != budget.StateTooLarge || ts.Least.MicroBatch == 0 {
			t.Errorf("a 1-byte budget: shortfall %v, least plan %+v", ts.Shortfall, ts.Least)
		}
		min := ts.Minimum
		if ok, _ := accepted(t, withBudget(p, min)); !ok {
			t.Errorf("the named minimum %d is refused", min)
		}
		if ok, _ := accepted(t, withBudget(p, min-1)); ok {
			t.Errorf("one byte below the named minimum %d is accepted", min)
		}
		prev := false
		for b := int64(4096); b < 3*min+(4<<20); b += 4096 * 7 {
			ok, ts := accepted(t, withBudget(p, b))
			if prev && !ok {
				t.Fatalf("budget %d refused after a smaller one was accepted: %v", b, ts)
			}
			if ok != (b >= min) {
				t.Fatalf("budget %d: accepted %v, the minimum is %d", b, ok, min)
			}
			if ts != nil && (ts.Minimum != min || ts.Minimum <= ts.Budget || ts.Shortfall == 0) {
				t.Fatalf("budget %d: refusal names minimum %d (from a 1-byte budget: %d)", b, ts.Minimum, min)
			}
			// The message agrees with itself: the least plan needs what
			// it names as the smallest budget.
			if ts != nil && ts.Shortfall == budget.StepTooLarge && !strings.Contains(ts.Reason, "needs "+device.FormatBytes(min)+" of device memory") {
				t.Fatalf("budget %d: %v", b, ts)
			}
			prev = ok
		}
	}
}

func withBudget(p budget.Problem, b int64) budget.Problem {
	p.Budget = b
	return p
}

func TestHugeBatchIsAClearError(t *testing.T) {
	clear := func(err error) bool { return errors.Is(err, budget.ErrBatch) || errors.Is(err, train.ErrSize) }
	for _, n := range []int{math.MaxInt, 1 << 60, math.MaxInt / 784, 1 << 50} {
		_, err := budget.Fit(context.Background(), cnnProblem(n, 1<<30))
		if !clear(err) {
			t.Errorf("batch %d: %v, want ErrBatch or train.ErrSize", n, err)
		}
		// MaxBatch searches up to n: sizes too large to size do not fit.
		if got, err := budget.MaxBatch(context.Background(), cnnProblem(n, 1<<30), budget.RecomputeNone); err != nil || got < 1 || got > 1<<20 {
			t.Errorf("MaxBatch up to %d: %d, %v", n, got, err)
		}
	}
}

// A budget accepted although a device capped at it would not hold the run
// (the allocator maps a 2 MiB segment there, which leaves too little) runs
// on a device capped at Choice.Capacity, below the budget, without an
// out-of-memory.
func TestCapacityBelowBudgetRuns(t *testing.T) {
	p := mlpProblem(64, 128, 4, 256, 2<<20)
	res, err := budget.Fit(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Best
	if c.Capacity <= 0 || c.Capacity > p.Budget {
		t.Fatalf("capacity %d for a budget of %d", c.Capacity, p.Budget)
	}
	if c.Capacity == p.Budget {
		t.Skip("the run fits a device capped at the budget itself")
	}
	var buf strings.Builder
	res.Print(&buf, p.Budget)
	if !strings.Contains(buf.String(), "device capped at") {
		t.Errorf("the plan does not say the device is capped below the budget:\n%s", buf.String())
	}
	dev, err := device.New(fmt.Sprintf("meta:mem=%d", c.Capacity))
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := p.NewOptimizer()
	tr, err := train.SetupConfig(dev, 0, p.Build, opt, c.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for step := 0; step < 5; step++ {
		xm, ym := p.Example(p.Batch)
		if _, err := tr.Step(context.Background(), &tensor.Tensor{DType: xm.DType, Shape: xm.Shape}, &tensor.Tensor{DType: ym.DType, Shape: ym.Shape}); err != nil {
			t.Fatalf("step %d with %s on %d bytes: %v", step, c.Describe(), c.Capacity, err)
		}
	}
	if st := dev.Alloc.Stats(); st.NumOOMs != 0 || st.ReservedBytes.Peak > c.Capacity || tr.Splits != 0 {
		t.Fatalf("%d OOMs, %d splits, reserved peak %d", st.NumOOMs, tr.Splits, st.ReservedBytes.Peak)
	}
}
