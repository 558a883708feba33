package dist_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

func pipeSGD() (optim.Optimizer, error) {
	return optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9})
}

func pipeAdam() (optim.Optimizer, error) {
	c := optim.AdamDefaults()
	c.LR = 1e-2
	return optim.NewAdam(c)
}

func pipeExample(n int) (trace.Meta, trace.Meta) {
	return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 32}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}
}

func pipeBatches(k, n int) []train.Batch {
	r := rand.New(rand.NewSource(5))
	var out []train.Batch
	for range k {
		xm, ym := pipeExample(n)
		x, y := testkit.Batch(r, xm, ym, 10)
		out = append(out, train.Batch{X: x, Y: y})
	}
	return out
}

// pipeOneProcess trains pipeLayers as one model on one device on the
// global batches: its initial weights, final weights and losses.
func pipeOneProcess(t *testing.T, newOpt func() (optim.Optimizer, error), batches []train.Batch) (init map[string]*tensor.Tensor, final map[string][]float32, losses []float64) {
	t.Helper()
	dev := device.CPU()
	s := nn.NewStore()
	m := pipeline.Sequential(s, pipeLayers())
	if err := s.Materialize(dev, 1); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	init = s.StateDict()
	opt, _ := newOpt()
	tr, err := train.New(dev, s, m, zoo.CrossEntropyLoss, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, b := range batches {
		l, err := tr.Step(context.Background(), b.X, b.Y)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	return init, params(s), losses
}

type replicaResult struct {
	losses        []float64
	params        map[string][]float32
	planned, peak []int64 // per step
	first         pipeline.StagePlan
}

// replicaRun trains on D×P in-process ranks (comm.Run, a device each,
// split by dist.SplitPipelines) and returns what each rank saw.
func replicaRun(t *testing.T, D, P int, cuts []int, newOpt func() (optim.Optimizer, error), o dist.ReplicaOptions, micro int, init map[string]*tensor.Tensor, batches []train.Batch) []replicaResult {
	t.Helper()
	return onRanks(t, D*P, func(ctx context.Context, world comm.Comm) (replicaResult, error) {
		stages, data, err := dist.SplitPipelines(ctx, world, P)
		if err != nil {
			return replicaResult{}, err
		}
		dev := device.CPU()
		r, err := dist.NewReplica(ctx, stages, data, pipeLayers(), zoo.CrossEntropyLoss, cuts, dev, newOpt, micro, int64(7+world.Rank()), o)
		if err != nil {
			return replicaResult{}, err
		}
		defer r.Close()
		if err := r.Load(init); err != nil {
			return replicaResult{}, err
		}
		var out replicaResult
		for i, b := range batches {
			sp, err := r.Plan(train.MetaOf(b.X), train.MetaOf(b.Y))
			if err != nil {
				return replicaResult{}, err
			}
			if i == 0 {
				out.first = sp[0]
			}
			dev.Alloc.ResetPeak()
			l, err := r.Step(ctx, b.X, b.Y)
			if err != nil {
				return replicaResult{}, err
			}
			out.losses = append(out.losses, l)
			out.planned = append(out.planned, sp[0].Peak)
			out.peak = append(out.peak, dev.Alloc.MaxMemoryAllocated())
		}
		out.params = params(r.Stages[0].Store)
		return out, nil
	})
}

// D replicas of a P-stage pipeline (D×P in-process ranks), GPipe and
// 1F1B, ZeRO 0 and 1, shares even and uneven: every rank's losses are
// the one-process run's on the global batch, the weights too within
// float tolerance, the replicas of a stage hold the same weights, each
// rank's measured peak equals its plan at every step, and the first
// step's equals what dist.PlanRanks prints for the rank. Uneven shares
// train with SGD: the weights of a share are rounded (4/10), and Adam
// turns a gradient that is zero up to rounding into a whole step.
func TestReplicasMatchOneProcess(t *testing.T) {
	for _, tc := range []struct {
		D, P, batch int
		sched       pipeline.Schedule
		zero        int
	}{
		{2, 2, 12, pipeline.GPipe, 0},
		{2, 2, 12, pipeline.OneFOneB, 0},
		{2, 2, 12, pipeline.OneFOneB, 1},
		{2, 3, 12, pipeline.GPipe, 1},
		{3, 2, 10, pipeline.GPipe, 1},
		{2, 3, 11, pipeline.OneFOneB, 0},
	} {
		t.Run(fmt.Sprintf("D%d_P%d_%v_zero%d", tc.D, tc.P, tc.sched, tc.zero), func(t *testing.T) {
			batches := pipeBatches(3, tc.batch)
			newOpt, name := pipeAdam, "adam"
			if tc.batch%tc.D != 0 {
				newOpt, name = pipeSGD, "sgd"
			}
			init, want, wantLoss := pipeOneProcess(t, newOpt, batches)
			o := dist.ReplicaOptions{Zero: tc.zero, Schedule: tc.sched, BucketBytes: 4096}
			res := replicaRun(t, tc.D, tc.P, evenCuts(5, tc.P), newOpt, o, 2, init, batches)
			job := dist.Job{Example: pipeExample, NewOptimizer: newOpt, Batch: tc.batch,
				Pipeline: &dist.PipelineJob{Layers: pipeLayers(), Loss: zoo.CrossEntropyLoss, Schedule: tc.sched, Micro: 2}}
			l := dist.Layout{Ranks: tc.D * tc.P, Pipeline: tc.P, Zero: tc.zero, BucketBytes: 4096}
			if cuts, err := dist.Cuts(job, l); err != nil || !slices.Equal(cuts, evenCuts(5, tc.P)) {
				t.Fatalf("cuts %v (%v)", cuts, err)
			}
			groups, err := dist.PlanRanks(context.Background(), job, l)
			if err != nil {
				t.Fatal(err)
			}
			final := map[string][]float32{}
			for rank, r := range res {
				for i, l := range r.losses {
					if math.Abs(l-wantLoss[i]) > 1e-6*math.Abs(wantLoss[i]) {
						t.Errorf("rank %d, step %d: loss %v, one process %v", rank, i, l, wantLoss[i])
					}
				}
				for i := range r.peak {
					if r.peak[i] != r.planned[i] {
						t.Errorf("rank %d, step %d: measured peak %d, planned %d", rank, i, r.peak[i], r.planned[i])
					}
				}
				gi := slices.IndexFunc(groups, func(g dist.RankPlan) bool { return g.Has(rank) })
				if gi < 0 || groups[gi].Memory.Total() != r.peak[0] {
					t.Errorf("rank %d: PlanRanks %v, measured first step %d", rank, groups, r.peak[0])
				}
				if tc.batch%tc.D == 0 && r.first.CommunicationAtPeak == 0 {
					t.Errorf("rank %d: no bucket in the plan (%v)", rank, r.first)
				}
				for name, v := range r.params {
					if w, ok := final[name]; ok {
						if !slices.Equal(w, v) {
							t.Errorf("rank %d: %s differs from another replica's", rank, name)
						}
						continue
					}
					final[name] = v
				}
			}
			if len(final) != len(want) {
				t.Fatalf("%d parameters held, %d in the model", len(final), len(want))
			}
			worst := relDiff(final, want)
			t.Logf("%s: weights within %.3g of one process's; plans %v", name, worst, groups)
			if worst > 1e-5 {
				t.Fatalf("weights differ from one process's by %.3g relative", worst)
			}
		})
	}
}

func evenCuts(n, P int) []int {
	var cuts []int
	for s := range P + 1 {
		cuts = append(cuts, s*n/P)
	}
	return cuts
}

// ZeRO 1 over the replicas of a stage holds 1/D of its optimizer state
// (up to the padding of shards and the allocator's 512-byte blocks) and
// a communication buffer; what is not available is refused.
func TestPlanReplicasZeroAndRefusals(t *testing.T) {
	job := dist.Job{Example: pipeExample, NewOptimizer: pipeAdam, Batch: 16,
		Pipeline: &dist.PipelineJob{Layers: pipeLayers(), Loss: zoo.CrossEntropyLoss, Schedule: pipeline.OneFOneB, Micro: 4}}
	plans := map[int][]dist.RankPlan{}
	for _, z := range []int{0, 1} {
		g, err := dist.PlanRanks(context.Background(), job, dist.Layout{Ranks: 8, Pipeline: 2, Zero: z})
		if err != nil {
			t.Fatal(err)
		}
		plans[z] = g
	}
	for rank := range 8 {
		var os [2]int64
		for z := range 2 {
			gi := slices.IndexFunc(plans[z], func(g dist.RankPlan) bool { return g.Has(rank) })
			os[z] = plans[z][gi].Memory.OptimizerState
			if plans[z][gi].Memory.Communication == 0 {
				t.Errorf("rank %d, ZeRO %d: no communication buffer", rank, z)
			}
		}
		// 4 replicas; at most 3 parameters per stage, 2 Adam buffers each.
		if os[1]*4 > os[0]+4*6*512 || os[1] >= os[0] {
			t.Errorf("rank %d: optimizer state %d under ZeRO 1, %d under ZeRO 0", rank, os[1], os[0])
		}
	}
	for _, tc := range []struct {
		l    dist.Layout
		want error
	}{
		{dist.Layout{Ranks: 6, Pipeline: 4}, dist.ErrConfig},
		{dist.Layout{Ranks: 4, Pipeline: 2, Zero: 2}, dist.ErrNotAvailable},
		{dist.Layout{Ranks: 4, Pipeline: 2, Zero: 3}, dist.ErrNotAvailable},
		{dist.Layout{Ranks: 2, Pipeline: 2, Zero: 1}, dist.ErrConfig},
		{dist.Layout{Ranks: 4, Pipeline: 2, Overlap: true}, dist.ErrNotAvailable},
	} {
		if _, err := dist.PlanRanks(context.Background(), job, tc.l); !errors.Is(err, tc.want) {
			t.Errorf("%v: %v, want %v", tc.l, err, tc.want)
		}
	}
}

// Replicas set up differently (another number of micro-batches on
// replica 1) stop every rank with ErrMismatch naming the rank; a batch
// smaller than the replicas is refused.
func TestReplicasMismatch(t *testing.T) {
	cuts := evenCuts(5, 2)
	err := comm.Run(context.Background(), 4, func(ctx context.Context, world comm.Comm) error {
		stages, data, err := dist.SplitPipelines(ctx, world, 2)
		if err != nil {
			return err
		}
		micro := 2 + data.Rank()
		r, err := dist.NewReplica(ctx, stages, data, pipeLayers(), zoo.CrossEntropyLoss, cuts, device.CPU(), pipeAdam, micro, 1, dist.ReplicaOptions{})
		if err != nil {
			return err
		}
		r.Close()
		return nil
	})
	if !errors.Is(err, dist.ErrMismatch) || !strings.Contains(err.Error(), "rank(s) 1 differ") {
		t.Fatalf("micro-batches differing across replicas: %v", err)
	}
	err = comm.Run(context.Background(), 4, func(ctx context.Context, world comm.Comm) error {
		stages, data, err := dist.SplitPipelines(ctx, world, 2)
		if err != nil {
			return err
		}
		r, err := dist.NewReplica(ctx, stages, data, pipeLayers(), zoo.CrossEntropyLoss, cuts, device.CPU(), pipeAdam, 2, 1, dist.ReplicaOptions{})
		if err != nil {
			return err
		}
		defer r.Close()
		b := pipeBatches(1, 1)[0]
		_, err = r.Step(ctx, b.X, b.Y)
		return err
	})
	if !errors.Is(err, dist.ErrConfig) {
		t.Fatalf("a batch of 1 on 2 replicas: %v", err)
	}
	if _, _, err := dist.SplitPipelines(context.Background(), mustMeta(t, 0, 6), 4); !errors.Is(err, dist.ErrConfig) {
		t.Fatalf("6 ranks into pipelines of 4: %v", err)
	}
}

func mustMeta(t *testing.T, rank, size int) comm.Comm {
	c, err := comm.Meta(rank, size)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Under a budget the replicas' stages are cut with their buckets
// counted (with a large one a layer fits no more, as the cut says):
// every rank's planned peak fits; each rank sends its stage's activations
// and the all-reduce of its gradients.
func TestPlanReplicasBudget(t *testing.T) {
	job := dist.Job{Example: pipeExample, NewOptimizer: pipeAdam, Batch: 48,
		Pipeline: &dist.PipelineJob{Layers: pipeLayers(), Loss: zoo.CrossEntropyLoss, Schedule: pipeline.OneFOneB, Micro: 4}}
	x, y := pipeExample(24)
	_, whole, err := pipeline.CutRanks(pipeLayers(), zoo.CrossEntropyLoss, pipeAdam, []int64{1 << 40}, 4, pipeline.OneFOneB, x, y)
	if err != nil {
		t.Fatal(err)
	}
	budget := whole[0].Peak * 45 / 100
	job.Pipeline.Budget = budget
	bare, _, err := pipeline.CutRanks(pipeLayers(), zoo.CrossEntropyLoss, pipeAdam, []int64{budget, budget, budget}, 4, pipeline.OneFOneB, x, y)
	if err != nil {
		t.Fatal(err)
	}
	for _, bucket := range []int64{1 << 10, 96 << 10} {
		l := dist.Layout{Ranks: 6, Pipeline: 3, BucketBytes: bucket}
		cuts, err := dist.Cuts(job, l)
		if bucket > 1<<10 {
			// A bucket as large as a stage's gradients: the stage of
			// layer 2 alone no longer fits, which the cut says.
			if !errors.Is(err, pipeline.ErrBudget) || !strings.Contains(err.Error(), "layer 2 alone") {
				t.Errorf("bucket %d: cuts %v, %v", bucket, cuts, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		groups, err := dist.PlanRanks(context.Background(), job, l)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("budget %d, bucket %d: cuts %v (without buckets %v): %v", budget, bucket, cuts, bare, groups)
		for _, g := range groups {
			if g.Memory.Total() > budget || g.Memory.Communication == 0 {
				t.Errorf("bucket %d, rank %d: planned %d (communication %d), budget %d", bucket, g.Rank, g.Memory.Total(), g.Memory.Communication, budget)
			}
			if g.Moved <= 0 {
				t.Errorf("rank %d sends nothing", g.Rank)
			}
		}
	}
}

// A stage's replicas, single ranks at a stride, print short.
func TestRanksStringStrided(t *testing.T) {
	for _, tc := range []struct {
		spans []dist.Span
		want  string
	}{
		{[]dist.Span{{1, 1}, {5, 5}, {9, 9}, {13, 13}, {17, 17}}, "1, 5, …, 17"},
		{[]dist.Span{{0, 0}, {2, 2}, {4, 4}, {6, 6}}, "0, 2, 4, 6"},
		{[]dist.Span{{0, 511}, {768, 768}}, "0–511, 768"},
		{[]dist.Span{{0, 0}, {2, 2}, {4, 4}, {6, 6}, {9, 9}}, "0, 2, 4, 6, 9"},
		{[]dist.Span{{0, 0}, {2, 3}, {4, 4}, {6, 6}, {8, 8}}, "0, 2–3, 4, 6, 8"},
	} {
		if got := (dist.RankPlan{Ranks: tc.spans}).RanksString(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.spans, got, tc.want)
		}
	}
}
