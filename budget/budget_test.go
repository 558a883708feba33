package budget_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// cnnProblem is the cnn at batch with gradient buffers: the tests compare
// the planner's other choices with them, and the arena's with arenaGrads.
func cnnProblem(batch int, b int64) budget.Problem {
	spec, _ := zoo.Lookup("cnn")
	return budget.Problem{
		Build:           testkit.Build(spec),
		Example:         spec.Example,
		Batch:           batch,
		Budget:          b,
		NewOptimizer:    func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) },
		GradientBuffers: true,
	}
}

func TestTooSmallBudgetSaysTheMinimum(t *testing.T) {
	for _, tc := range []struct {
		name  string
		precs []transform.Precision
		comps []transform.Compression
	}{
		{"fp32", nil, nil},
		{"precision and compression auto", budget.AutoPrecisions, budget.AutoCompress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prob := func(b int64) budget.Problem {
				p := cnnProblem(32, b)
				p.Precisions, p.Compress = tc.precs, tc.comps
				return p
			}
			_, err := budget.Fit(context.Background(), prob(4<<20))
			var ts *budget.TooSmallError
			if !errors.As(err, &ts) || !errors.Is(err, budget.ErrBudget) {
				t.Fatalf("want TooSmallError, got %v", err)
			}
			// The minimum it names must itself be accepted.
			if _, err := budget.Fit(context.Background(), prob(ts.Minimum)); err != nil {
				t.Fatalf("the named minimum %d is refused: %v", ts.Minimum, err)
			}
			if _, err := budget.Fit(context.Background(), prob(ts.Minimum-1)); err == nil {
				t.Fatalf("one byte below the named minimum %d is accepted", ts.Minimum)
			}
		})
	}
}

// Whatever the planner accepts runs: on a cpu device capped at the budget,
// steps with the chosen micro-batching and recomputation never run out of
// memory and the measured peak stays within the budget.
func TestAcceptedPlansRunWithinBudget(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	// From the smallest budget the planner accepts to one that holds the
	// whole batch without recomputation.
	_, err := budget.Fit(context.Background(), cnnProblem(24, 1))
	var ts *budget.TooSmallError
	if !errors.As(err, &ts) {
		t.Fatalf("a 1-byte budget: %v", err)
	}
	for _, b := range []int64{ts.Minimum, ts.Minimum + 1<<20, ts.Minimum + 4<<20, ts.Minimum + 32<<20} {
		t.Run(device.FormatBytes(b), func(t *testing.T) {
			res, err := budget.Fit(context.Background(), cnnProblem(24, b))
			if err != nil {
				t.Fatal(err)
			}
			dev, err := device.New(fmt.Sprintf("cpu:mem=%d", b))
			if err != nil {
				t.Fatal(err)
			}
			opt, _ := optim.NewAdam(optim.AdamDefaults())
			tr, err := train.Setup(dev, 1, cnnProblem(1, 0).Build, opt)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if err := tr.SetConfig(train.Config{Recompute: train.MustRecompute(res.Best.Remat)}); err != nil {
				t.Fatal(err)
			}
			for step := 0; step < 3; step++ {
				n := 24
				if step == 2 {
					n = 17 // a shorter last batch
				}
				x, y := testkit.Classification(r, tensor.Shape{n, 1, 28, 28}, 10)
				parts, err := train.Split(train.Batch{X: x, Y: y}, min(res.Best.Accumulation, n))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tr.StepAccumulate(context.Background(), parts); err != nil {
					t.Fatalf("step %d with %+v: %v", step, res.Best, err)
				}
			}
			st := dev.Alloc.Stats()
			if st.NumOOMs != 0 || st.AllocatedBytes.Peak > b || st.AllocatedBytes.Peak > res.Best.Memory.Total() {
				t.Fatalf("budget %d: peak %d (planned %d), %d OOMs", b, st.AllocatedBytes.Peak, res.Best.Memory.Total(), st.NumOOMs)
			}
		})
	}
}

func TestMaxBatchIsTheTrueMaximum(t *testing.T) {
	const b = 40 << 20
	got, err := budget.MaxBatch(context.Background(), cnnProblem(1000, b), budget.RecomputeNone)
	if err != nil {
		t.Fatal(err)
	}
	if got < 1 || got >= 1000 {
		t.Fatalf("max batch %d", got)
	}
	// Independently: set up the run on a meta device capped at the budget
	// and reserve the step's arena; n samples fit when nothing runs out.
	fits := func(n int) bool {
		spec, _ := zoo.Lookup("cnn")
		dev, _ := device.New(fmt.Sprintf("meta:mem=%d", b))
		opt, _ := optim.NewAdam(optim.AdamDefaults())
		tr, err := train.SetupConfig(dev, 0, cnnProblem(1, 0).Build, opt, train.Config{GradientBuffers: true}) // as cnnProblem
		if err != nil {
			return false
		}
		defer tr.Close()
		x, y := spec.Example(n)
		p, err := tr.TrainProgram(trace.Meta(x), trace.Meta(y))
		if err != nil {
			t.Fatal(err)
		}
		return tr.Arena().Ensure(p.Plan.ArenaBytes) == nil
	}
	if !fits(got) || fits(got+1) {
		t.Fatalf("max batch %d: fits(%d)=%v, fits(%d)=%v", got, got, fits(got), got+1, fits(got+1))
	}
}
