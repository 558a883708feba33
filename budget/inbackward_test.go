package budget_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"regexp"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

var noGradients = regexp.MustCompile(`\n  gradients +0 B\n`)

// inBackward is p with the optimizer in the backward pass allowed.
func inBackward(p budget.Problem) budget.Problem {
	p.OptimizerInBackward = true
	return p
}

// withSGD is p with SGD with momentum (one state buffer per parameter,
// against Adam's two).
func withSGD(p budget.Problem) budget.Problem {
	p.NewOptimizer = func() (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.01, Momentum: 0.9}) }
	return p
}

// wholeBatch is the smallest budget (to 4 KiB) at which p's whole batch
// fits in one pass with nothing recomputed (MaxBatch, which is exact).
func wholeBatch(t *testing.T, p budget.Problem) int64 {
	t.Helper()
	lo, hi := int64(0), int64(1<<31)
	for hi-lo > 4096 {
		p.Budget = (lo + hi) / 2
		n, err := budget.MaxBatch(context.Background(), p, budget.RecomputeNone)
		if err != nil {
			t.Fatal(err)
		}
		if n == p.Batch {
			hi = p.Budget
		} else {
			lo = p.Budget
		}
	}
	return hi
}

// Between the smallest budget with the optimizer in the backward pass and
// the smallest without, the planner accepts only with it: the whole batch
// in one pass, no gradient buffers. Without it the same budget is refused
// (below every plan's minimum) or needs micro-batches or recomputation
// (below the whole batch's).
func TestInBackwardFitsWhereGradientBuffersDoNot(t *testing.T) {
	type bound struct {
		name string
		of   func(t *testing.T, p budget.Problem) int64
	}
	minimumOf := bound{"minimum", minimum}
	wholeOf := bound{"whole batch", wholeBatch}
	for _, tc := range []struct {
		name  string
		p     budget.Problem
		bound bound
	}{
		{"cnn batch 4 adam", cnnProblem(4, 0), minimumOf},
		{"cnn batch 4 sgd", withSGD(cnnProblem(4, 0)), minimumOf},
		{"cnn batch 16 adam", cnnProblem(16, 0), wholeOf},
		{"cnn batch 4 adam, precision and compression auto", func() budget.Problem {
			p := cnnProblem(4, 0)
			p.Precisions, p.Compress = autoPrecs, autoComps
			return p
		}(), wholeOf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			usual, ib := tc.bound.of(t, tc.p), tc.bound.of(t, inBackward(tc.p))
			if ib >= usual {
				t.Fatalf("%s: %d with the optimizer in the backward pass, %d without: the test needs it lower", tc.bound.name, ib, usual)
			}
			for _, b := range []int64{ib, (ib + usual) / 2, usual - 1} {
				p := inBackward(tc.p)
				p.Budget = b
				r, err := budget.Fit(context.Background(), p)
				if err != nil {
					t.Fatalf("budget %d (%s %d with it, %d without): %v", b, tc.bound.name, ib, usual, err)
				}
				c := r.Best
				if !c.InBackward || c.Accumulation != 1 || c.MicroBatch != p.Batch || c.Memory.Gradients != 0 || !c.Fits || c.Reserved > b {
					t.Fatalf("budget %d: chose %s, gradients %d, reserves %d (fits %v)", b, c.Describe(), c.Memory.Gradients, c.Reserved, c.Fits)
				}
				if tc.bound.name == "whole batch" && c.Recomputed != 0 {
					t.Errorf("budget %d: recomputes %d nodes where the whole batch fits without", b, c.Recomputed)
				}
				var out bytes.Buffer
				r.Print(&out, b)
				if !strings.Contains(out.String(), "optimizer: in the backward pass") || !noGradients.MatchString(out.String()) {
					t.Errorf("the plan does not say where the optimizer runs:\n%s", out.String())
				}

				p.OptimizerInBackward = false
				u, err := budget.Fit(context.Background(), p)
				var ts *budget.TooSmallError
				switch {
				case tc.bound.name == "minimum":
					if !errors.As(err, &ts) || ts.Minimum != usual {
						t.Errorf("budget %d without it: want TooSmallError naming %d, got %v", b, usual, err)
					}
				case errors.Is(err, budget.ErrBudget):
					// Below every plan with gradient buffers.
				case err != nil:
					t.Errorf("budget %d without it: %v", b, err)
				case u.Best.InBackward || u.Best.Accumulation == 1 && u.Best.Recomputed == 0 && u.Best.Precision == transform.FP32 && u.Best.Compression == "none":
					t.Errorf("budget %d without it: chose %s, below the whole batch's %d", b, u.Best.Describe(), usual)
				}
			}
		})
	}
}

// With the optimizer in the backward pass allowed the named minimum stays
// exact (accepted at Minimum, refused below it), never above the minimum
// without it, whichever plan needs the least memory: the whole batch with
// the update in the backward pass, or one sample per micro-batch with
// gradient buffers.
func TestMinimumExactWithOptimizerInBackward(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    budget.Problem
	}{
		{"cnn batch 4 adam", cnnProblem(4, 0)},
		{"cnn batch 4 sgd", withSGD(cnnProblem(4, 0))},
		{"cnn batch 1 adam", cnnProblem(1, 0)},
		{"cnn batch 16 adam", cnnProblem(16, 0)},
		{"wide batch 4, auto", wideProblem(4, 0, autoPrecs, autoComps)},
		// Many parameters, small activations: setting up, with the
		// gradient buffers the model is materialized with, needs more
		// than the step with the gradients freed.
		{"mlp batch 1 adam", zooProblem("mlp", 1)},
		{"mlp batch 2 sgd", withSGD(zooProblem("mlp", 2))},
		{"big linear batch 2 sgd", bigLinearProblem(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			usual := minimum(t, tc.p)
			p := inBackward(tc.p)
			min := minimum(t, p)
			if min > usual {
				t.Fatalf("minimum %d with the optimizer in the backward pass allowed, %d without", min, usual)
			}
			for _, b := range []int64{min - 1, min - 512<<10} {
				p.Budget = b
				_, err := budget.Fit(context.Background(), p)
				var ts *budget.TooSmallError
				if !errors.As(err, &ts) || ts.Minimum != min {
					t.Fatalf("budget %d: want TooSmallError naming %d, got %v", b, min, err)
				}
			}
			p.Budget = min
			r, err := budget.Fit(context.Background(), p)
			if err != nil {
				t.Fatalf("the named minimum %d is refused: %v", min, err)
			}
			if min < usual && !r.Best.InBackward {
				t.Errorf("at the minimum %d (%d without): chose %s", min, usual, r.Best.Describe())
			}
			runSteps(t, p, r.Best)
			t.Logf("minimum %d (without: %d): %s", min, usual, r.Best.Describe())
		})
	}
}

func zooProblem(name string, batch int) budget.Problem {
	spec, _ := zoo.Lookup(name)
	p := cnnProblem(batch, 0)
	p.Build = testkit.Build(spec)
	p.Example = spec.Example
	return p
}

// bigLinear has two 16 MiB weights, whose gradients have segments of
// their own, and small activations: with the optimizer in the backward
// pass, which holds one gradient at a time, setting up (with the gradient
// buffers the model is materialized with, freed by the first step) needs
// more than any step.
type bigLinear struct{ fc1, fc2, fc3 *nn.Linear }

func bigLinearProblem(batch int) budget.Problem {
	p := withSGD(cnnProblem(batch, 0))
	p.Build = func(s *nn.Store) (train.Model, train.LossFunc) {
		b := s.Root()
		m := &bigLinear{nn.NewLinear(b.Sub("fc1"), 2048, 2048, true), nn.NewLinear(b.Sub("fc2"), 2048, 2048, true), nn.NewLinear(b.Sub("fc3"), 2048, 10, true)}
		return m, func(out, y *trace.Tensor) *trace.Tensor { return op.CrossEntropy(out, y, op.DefaultCrossEntropyOpts()) }
	}
	p.Example = func(n int) (trace.Meta, trace.Meta) {
		return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 2048}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}
	}
	return p
}

func (m *bigLinear) Forward(x *trace.Tensor) *trace.Tensor {
	return m.fc3.Forward(op.ReLU(m.fc2.Forward(op.ReLU(m.fc1.Forward(x)))))
}

// runSteps runs plan c of p on a cpu device capped at p.Budget, set up as
// a real run is (the model with its gradient buffers, then the optimizer
// state): two full batches and a shorter one. It fails unless the steps
// run without running out of memory or splitting, the reserved memory
// (setting up included) stays within the budget and the plan's Reserved,
// the steps' allocated peak within the planned one, and no gradient
// buffers are left by steps with the optimizer in the backward pass.
func runSteps(t *testing.T, p budget.Problem, c budget.Choice) {
	t.Helper()
	dev, err := device.New(fmt.Sprintf("cpu:mem=%d", p.Budget))
	if err != nil {
		t.Fatal(err)
	}
	opt, err := p.NewOptimizer()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := train.SetupConfig(dev, 1, p.Build, opt, c.Config())
	if err != nil {
		t.Fatalf("setting up %s within %d: %v", c.Describe(), p.Budget, err)
	}
	defer tr.Close()
	if r := dev.Alloc.Stats().ReservedBytes.Current; r > c.Reserved {
		t.Errorf("%s: setting up reserves %d, more than the %d the plan says it needs", c.Describe(), r, c.Reserved)
	}
	if err := c.Apply(tr); err != nil {
		t.Fatal(err)
	}
	if tr.Config().OptimizerInBackward != c.InBackward {
		t.Fatalf("Apply set OptimizerInBackward %v for %s", tr.Config().OptimizerInBackward, c.Describe())
	}
	// Plan frees the gradient buffers as an in-backward step will: from
	// there on the step's plan holds.
	if _, err := tr.Plan(p.Example(c.MicroBatch)); err != nil {
		t.Fatal(err)
	}
	dev.Alloc.ResetPeak()
	r := rand.New(rand.NewSource(1))
	for step := 0; step < 3; step++ {
		n := p.Batch
		if step == 2 && n > 1 {
			n-- // a shorter last batch
		}
		xm, ym := p.Example(n)
		x, y := tensor.New(xm.DType, xm.Shape), tensor.New(ym.DType, ym.Shape) // class 0 targets
		for i := range x.F32() {
			x.F32()[i] = float32(r.NormFloat64())
		}
		parts, err := train.Split(train.Batch{X: x, Y: y}, min(c.Accumulation, n))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.StepAccumulate(context.Background(), parts); err != nil {
			t.Fatalf("%s within %d, step %d: %v", c.Describe(), p.Budget, step, err)
		}
	}
	st := dev.Alloc.Stats()
	if st.NumOOMs != 0 || tr.Splits != 0 || st.AllocatedBytes.Peak > c.Memory.Total() || st.ReservedBytes.Peak > p.Budget {
		t.Fatalf("%s: step peak %d (planned %d), reserved %d of %d, %d OOMs, %d splits",
			c.Describe(), st.AllocatedBytes.Peak, c.Memory.Total(), st.ReservedBytes.Peak, p.Budget, st.NumOOMs, tr.Splits)
	}
	if c.InBackward {
		for _, pr := range tr.Store.Trainable() {
			if pr.Grad != nil {
				t.Fatalf("%s has a gradient buffer after an in-backward step", pr.Name)
			}
		}
	}
}

// A plan runs the optimizer in the backward pass exactly when it may: one
// micro-batch, without a GradScaler (not fp16-mixed), and only when
// allowed; in fp32 and in bf16. Accumulating plans and fp16 plans keep
// gradient buffers.
func TestInBackwardOnlyWithOneMicroBatch(t *testing.T) {
	for _, precs := range [][]transform.Precision{autoPrecs, {transform.BF16Mixed, transform.FP16Mixed}} {
		inBackwardOnlyWithOneMicroBatch(t, precs)
	}
}

func inBackwardOnlyWithOneMicroBatch(t *testing.T, precs []transform.Precision) {
	base := cnnProblem(16, 0)
	base.Precisions = precs
	min := minimum(t, inBackward(base))
	for _, allowed := range []bool{false, true} {
		for _, b := range []int64{min, min + 1<<20, min + 4<<20, 1 << 30} {
			p := base
			p.Budget, p.OptimizerInBackward = b, allowed
			r, err := budget.Fit(context.Background(), p)
			if errors.Is(err, budget.ErrBudget) && !allowed {
				continue // below the minimum without it
			}
			if err != nil {
				t.Fatalf("budget %d, allowed %v: %v", b, allowed, err)
			}
			for _, c := range r.Candidates {
				want := allowed && c.Accumulation == 1 && !c.Precision.NeedsScaler()
				if c.InBackward != want || (c.Memory.Gradients == 0) != want || strings.Contains(c.Describe(), "optimizer in backward") != want {
					t.Errorf("budget %d, allowed %v: %s with gradients %d", b, allowed, c.Describe(), c.Memory.Gradients)
				}
			}
			// The update in the backward pass costs no time: where the
			// whole batch fits either way it is the baseline's step.
			if allowed && b == 1<<30 && (!r.Best.InBackward || r.Best.Recomputed != 0 || r.Slowdown() != 1) && !r.Best.Precision.NeedsScaler() {
				t.Errorf("budget %d: chose %s, slowdown %v", b, r.Best.Describe(), r.Slowdown())
			}
			var out bytes.Buffer
			r.Print(&out, b)
			if allowed && r.Best.Accumulation > 1 && !strings.Contains(out.String(), "not in the backward pass: the plan accumulates") {
				t.Errorf("the plan does not say why the optimizer is not in the backward pass:\n%s", out.String())
			}
			if !allowed && strings.Contains(out.String(), "optimizer:") {
				t.Errorf("not asked for, the plan talks about the optimizer:\n%s", out.String())
			}
		}
	}
}

// MaxBatch with the optimizer in the backward pass allowed is the true
// maximum of a run set up as a real one is: a trainer on a meta device
// capped at the budget that frees its gradients (Plan, as its first step
// does) and reserves the step's arena, with no cache emptied by hand.
func TestMaxBatchInBackward(t *testing.T) {
	const b = 13 << 20
	usual, err := budget.MaxBatch(context.Background(), cnnProblem(1000, b), budget.RecomputeNone)
	if err != nil {
		t.Fatal(err)
	}
	got, err := budget.MaxBatch(context.Background(), inBackward(cnnProblem(1000, b)), budget.RecomputeNone)
	if err != nil {
		t.Fatal(err)
	}
	if got <= usual || got >= 1000 {
		t.Fatalf("max batch %d with the optimizer in the backward pass, %d without", got, usual)
	}
	fits := func(n int) bool {
		spec, _ := zoo.Lookup("cnn")
		dev, _ := device.New(fmt.Sprintf("meta:mem=%d", b))
		opt, _ := optim.NewAdam(optim.AdamDefaults())
		tr, err := train.SetupConfig(dev, 0, cnnProblem(1, 0).Build, opt, train.Config{OptimizerInBackward: true})
		if err != nil {
			return false
		}
		defer tr.Close()
		x, y := spec.Example(n)
		if _, err := tr.Plan(x, y); err != nil {
			t.Fatal(err)
		}
		p, err := tr.InBackwardProgram(trace.Meta(x), trace.Meta(y))
		if err != nil {
			t.Fatal(err)
		}
		return tr.Arena().Ensure(p.Plan.ArenaBytes) == nil
	}
	if !fits(got) || fits(got+1) {
		t.Fatalf("max batch %d: fits(%d)=%v, fits(%d)=%v", got, got, fits(got), got+1, fits(got+1))
	}
}

// Accepted plans with the optimizer in the backward pass run on a cpu
// device capped at the budget (runSteps), from the smallest budget to
// more than the whole batch needs.
func TestInBackwardPlansRunWithinBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    budget.Problem
		// budgets from the minimum with the optimizer in the backward
		// pass, the minimum without and the smallest budget holding the
		// whole batch with nothing recomputed, with it
		budgets func(ib, usual, whole int64) []int64
	}{
		{"cnn batch 4 adam", cnnProblem(4, 0), func(ib, usual, whole int64) []int64 { return []int64{ib, (ib + usual) / 2, whole, whole + 1<<20} }},
		{"cnn batch 16 sgd", withSGD(cnnProblem(16, 0)), func(ib, usual, whole int64) []int64 { return []int64{whole, whole + 4<<20} }},
		// Setting up, gradient buffers and all, needs more than the step.
		{"mlp batch 1 adam", zooProblem("mlp", 1), func(ib, usual, whole int64) []int64 { return []int64{ib, 64 << 20} }},
		// (Its minimum runs in TestMinimumExactWithOptimizerInBackward.)
		{"big linear batch 2 sgd", bigLinearProblem(2), func(ib, usual, whole int64) []int64 { return []int64{256 << 20} }},
	} {
		p := inBackward(tc.p)
		ib, usual, whole := minimum(t, p), minimum(t, tc.p), wholeBatch(t, p)
		for _, b := range tc.budgets(ib, usual, whole) {
			p.Budget = b
			res, err := budget.Fit(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			t.Run(fmt.Sprintf("%s %s %s", tc.name, device.FormatBytes(b), res.Best.Describe()), func(t *testing.T) {
				if !res.Best.InBackward {
					t.Fatalf("budget %d: chose %s", b, res.Best.Describe())
				}
				runSteps(t, p, res.Best)
			})
		}
	}
}
