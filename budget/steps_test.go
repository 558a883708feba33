package budget_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Under any budget the planner accepts, 500 steps of every zoo model run
// without an out-of-memory and never reserve past the budget. The steps run
// on the meta device: the same allocator and executor as the cpu, without
// the arithmetic.
func TestAcceptedBudgetsHold500Steps(t *testing.T) {
	small := map[string]bool{"mlp": true, "cnn": true, "resnet18-64": true, "gpt-shakespeare-char": true}
	for _, spec := range zoo.Specs() {
		if testing.Short() && !small[spec.Name] {
			continue
		}
		t.Run(spec.Name, func(t *testing.T) {
			const batch = 4
			build := testkit.Build(spec)
			newOpt := func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }
			prob := budget.Problem{Build: build, Example: spec.Example, Batch: batch, NewOptimizer: newOpt, Budget: 1}
			_, err := budget.Fit(context.Background(), prob)
			var ts *budget.TooSmallError
			if !errors.As(err, &ts) {
				t.Fatalf("a 1-byte budget: %v", err)
			}
			prob.Budget = 1 << 50
			res, err := budget.Fit(context.Background(), prob)
			if err != nil {
				t.Fatal(err)
			}
			whole := res.Baseline.Reserved
			for _, b := range []int64{ts.Minimum, (ts.Minimum + whole) / 2, whole} {
				prob.Budget = b
				res, err := budget.Fit(context.Background(), prob)
				if err != nil {
					t.Fatalf("budget %d: %v", b, err)
				}
				dev, _ := device.New(fmt.Sprintf("meta:mem=%d", b))
				o, _ := newOpt()
				tr, err := train.Setup(dev, 0, build, o)
				if err != nil {
					t.Fatalf("budget %d: %v", b, err)
				}
				if err := tr.SetConfig(train.Config{Recompute: train.MustRecompute(res.Best.Remat)}); err != nil {
					t.Fatal(err)
				}
				for step := 0; step < 500; step++ {
					n := batch
					if step%7 == 6 {
						n = batch - 1 // a shorter last batch
					}
					xm, ym := spec.Example(n)
					x := &tensor.Tensor{DType: xm.DType, Shape: xm.Shape}
					y := &tensor.Tensor{DType: ym.DType, Shape: ym.Shape}
					parts, err := train.Split(train.Batch{X: x, Y: y}, min(res.Best.Accumulation, n))
					if err != nil {
						t.Fatal(err)
					}
					if _, err := tr.StepAccumulate(context.Background(), parts); err != nil {
						t.Fatalf("budget %d, step %d (%+v): %v", b, step, res.Best, err)
					}
				}
				st := dev.Alloc.Stats()
				if st.NumOOMs != 0 || st.ReservedBytes.Peak > b || tr.Splits != 0 {
					t.Fatalf("budget %d: %d OOMs, %d splits, reserved peak %d", b, st.NumOOMs, tr.Splits, st.ReservedBytes.Peak)
				}
				tr.Close()
			}
		})
	}
}
