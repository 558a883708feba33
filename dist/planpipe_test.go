package dist_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

type fwd func(x *trace.Tensor) *trace.Tensor

func (f fwd) Forward(x *trace.Tensor) *trace.Tensor { return f(x) }

func pipeLayers() []pipeline.Layer {
	widths := []int{32, 96, 96, 128, 96, 10}
	var ls []pipeline.Layer
	for i := 0; i+1 < len(widths); i++ {
		in, out, relu := widths[i], widths[i+1], i+2 < len(widths)
		ls = append(ls, func(b nn.Builder) train.Model {
			l := nn.NewLinear(b, in, out, true)
			return fwd(func(x *trace.Tensor) *trace.Tensor {
				y := l.Forward(x)
				if relu {
					y = op.ReLU(y)
				}
				return y
			})
		})
	}
	return ls
}

// Under a budget the pipeline planner cuts the stages as
// pipeline.CutRanks does, and every rank's planned peak fits; without a
// job of layers, or with ZeRO 2 over replicas of the pipeline, it is not
// available.
func TestPlanPipelineBudget(t *testing.T) {
	newOpt := func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }
	example := func(n int) (trace.Meta, trace.Meta) {
		return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 32}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}
	}
	x, y := example(24)
	_, whole, err := pipeline.CutRanks(pipeLayers(), zoo.CrossEntropyLoss, newOpt, []int64{1 << 40}, 4, pipeline.OneFOneB, x, y)
	if err != nil {
		t.Fatal(err)
	}
	budget := whole[0].Peak * 45 / 100
	want, _, err := pipeline.CutRanks(pipeLayers(), zoo.CrossEntropyLoss, newOpt, []int64{budget, budget, budget, budget}, 4, pipeline.OneFOneB, x, y)
	if err != nil {
		t.Fatal(err)
	}
	P := len(want) - 1
	if P < 2 {
		t.Fatalf("cuts %v: 45%% of one stage's peak each should need several stages", want)
	}
	job := dist.Job{Example: example, NewOptimizer: newOpt, Batch: 24,
		Pipeline: &dist.PipelineJob{Layers: pipeLayers(), Loss: zoo.CrossEntropyLoss, Schedule: pipeline.OneFOneB, Micro: 4, Budget: budget}}
	l := dist.Layout{Ranks: P, Pipeline: P}
	cuts, err := dist.Cuts(job, l)
	if err != nil || !slices.Equal(cuts, want) {
		t.Fatalf("cuts %v (%v), CutRanks %v", cuts, err, want)
	}
	groups, err := dist.PlanRanks(context.Background(), job, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != P {
		t.Fatalf("%d groups for %d stages", len(groups), P)
	}
	for _, g := range groups {
		if g.Memory.Total() > budget || g.Memory.Total() <= 0 {
			t.Errorf("rank %d: planned %d, budget %d", g.Rank, g.Memory.Total(), budget)
		}
	}
	for _, tc := range []struct {
		j dist.Job
		l dist.Layout
	}{{dist.Job{Example: example, NewOptimizer: newOpt, Batch: 24}, l}, {job, dist.Layout{Ranks: 2 * P, Pipeline: P, Zero: 2}}} {
		if _, err := dist.PlanRanks(context.Background(), tc.j, tc.l); !errors.Is(err, dist.ErrNotAvailable) {
			t.Errorf("%v: %v", tc.l, err)
		}
	}
}
