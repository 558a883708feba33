package budget

import (
	"context"
	"testing"

	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/zoo"
)

// On ResNet-152 (the 128x128, batch 8 workload) at 40% of its
// activations, checkpointing the residual chain in segments is estimated
// faster than keeping every block output, and the planner picks it.
func TestResidualSegmentsChosenWhereCheaper(t *testing.T) {
	spec, err := zoo.Lookup("resnet152-128")
	if err != nil {
		t.Fatal(err)
	}
	const batch = 8
	prob := Problem{
		Build:        testkit.Build(spec),
		Example:      spec.Example,
		Batch:        batch,
		NewOptimizer: func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) },
		Policies:     []Policy{RecomputeAuto},
		// The budget below is counted with a buffer per gradient.
		GradientBuffers: true,
	}
	prob.Budget = 1 << 50
	whole, err := Fit(context.Background(), prob)
	if err != nil {
		t.Fatal(err)
	}
	m := whole.Baseline.Memory
	prob.Budget = m.Parameters + m.Gradients + m.OptimizerState + m.Activations*4/10 + 32<<20 // + the allocator's segment slack
	fit := func(strides []int) Choice {
		old := chainStrides
		chainStrides = strides
		defer func() { chainStrides = old }()
		r, err := Fit(context.Background(), prob)
		if err != nil {
			t.Fatal(err)
		}
		if r.Best.Accumulation != 1 {
			t.Fatalf("strides %v: %s; want the whole batch", strides, r.Best.Describe())
		}
		return r.Best
	}
	kept := fit([]int{0})
	seg := fit(chainStrides)
	t.Logf("every block output kept: %d nodes recomputed, est. %.3f s; segments of %d: %d nodes, est. %.3f s",
		kept.Recomputed, kept.Time, seg.Stride, seg.Recomputed, seg.Time)
	if seg.Stride == 0 || seg.Time >= kept.Time {
		t.Fatalf("segments not chosen or not cheaper: stride %d, est. %.3f s vs %.3f s", seg.Stride, seg.Time, kept.Time)
	}
}
