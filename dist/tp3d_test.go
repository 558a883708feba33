package dist_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// tp3dJob is the tiny GPT of tpConfig as a job of pipeline layers.
func tp3dJob(cfg zoo.GPTConfig, batch, micro int, sched pipeline.Schedule, newOpt func() (optim.Optimizer, error)) dist.Job {
	layers, _ := pipeline.GPTLayers(cfg)
	return dist.Job{
		Build: func(s *nn.Store) (train.Model, train.LossFunc) { return zoo.NewGPT(s.Root(), cfg), zoo.GPTLoss },
		Example: func(n int) (trace.Meta, trace.Meta) {
			m := trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n, cfg.BlockSize}}
			return m, m
		},
		NewOptimizer: newOpt,
		Batch:        batch,
		Pipeline:     &dist.PipelineJob{Layers: layers, Loss: zoo.GPTLoss, Schedule: sched, Micro: micro},
	}
}

// Tensor × pipeline (× data) on D×P×T in-process ranks: each rank's stage
// is its piece of the tensor-parallel GPT's blocks (pipeline.TPGPTLayers
// from the one-process model's weights), its collectives on its tensor
// group; every rank's loss is the one-process model's at every step, and
// its measured peak equals its plan at every step and what PlanRanks
// prints for it.
func TestTP3DMatchesOneProcess(t *testing.T) {
	for _, tc := range []struct {
		D, P, T, batch int
		sched          pipeline.Schedule
		zero           int
	}{
		{1, 2, 2, 4, pipeline.GPipe, 0},
		{1, 2, 3, 4, pipeline.OneFOneB, 0},
		{2, 2, 2, 4, pipeline.OneFOneB, 1},
	} {
		t.Run(fmt.Sprintf("D%d_P%d_T%d_%v_zero%d", tc.D, tc.P, tc.T, tc.sched, tc.zero), func(t *testing.T) {
			cfg := tpConfig
			newOpt := func() optim.Optimizer { o, _ := pipeAdam(); return o }
			newOptErr := func() (optim.Optimizer, error) { return pipeAdam() }
			batches := [][2]*tensor.Tensor{}
			for i := range 3 {
				x := tpTokens(tc.batch, cfg.BlockSize, cfg.VocabSize, i)
				y := tpTokens(tc.batch, cfg.BlockSize, cfg.VocabSize, i+5)
				batches = append(batches, [2]*tensor.Tensor{x, y})
			}
			sd, wantLoss, _, _ := tpFull(t, cfg, newOpt, batches)
			const micro = 2
			cuts := evenCuts(cfg.NLayer, tc.P)
			N := tc.D * tc.P * tc.T
			losses := make([][]float64, N)
			planned, peak := make([][]int64, N), make([][]int64, N)
			var mu sync.Mutex
			err := comm.Run(context.Background(), N, func(ctx context.Context, world comm.Comm) error {
				tp, stages, data, err := dist.SplitTP3D(ctx, world, tc.P, tc.T)
				if err != nil {
					return err
				}
				layers, err := pipeline.TPGPTLayers(cfg, tp.Rank(), tc.T)
				if err != nil {
					return err
				}
				dev := device.CPU()
				r, err := dist.NewReplica(ctx, stages, data, layers, zoo.GPTLoss, cuts, dev, newOptErr, micro, 1, dist.ReplicaOptions{Zero: tc.zero, Schedule: tc.sched, BucketBytes: 4096})
				if err != nil {
					return err
				}
				defer r.Close()
				r.TensorComm = tp
				for _, q := range r.Stages[0].Store.Params() {
					piece, err := zoo.TPShard(q.Name, sd[q.Name], tp.Rank(), tc.T)
					if err != nil {
						return err
					}
					if !piece.Shape.Equal(q.Value.Shape) {
						return fmt.Errorf("%s: piece %v, parameter %v", q.Name, piece.Shape, q.Value.Shape)
					}
					copy(q.Value.F32(), piece.F32())
				}
				var ls []float64
				var pl, pk []int64
				for _, b := range batches {
					sp, err := r.Plan(train.MetaOf(b[0]), train.MetaOf(b[1]))
					if err != nil {
						return err
					}
					dev.Alloc.ResetPeak()
					l, err := r.Step(ctx, b[0], b[1])
					if err != nil {
						return err
					}
					ls, pl, pk = append(ls, l), append(pl, sp[0].Peak), append(pk, dev.Alloc.MaxMemoryAllocated())
				}
				mu.Lock()
				losses[world.Rank()], planned[world.Rank()], peak[world.Rank()] = ls, pl, pk
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			job := tp3dJob(cfg, tc.batch, micro, tc.sched, newOptErr)
			l := dist.Layout{Ranks: N, Zero: tc.zero, Pipeline: tc.P, Tensor: tc.T, BucketBytes: 4096}
			groups, err := dist.PlanRanks(context.Background(), job, l)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for rank := range N {
				for i, got := range losses[rank] {
					d := math.Abs(got-wantLoss[i]) / math.Abs(wantLoss[i])
					worst = max(worst, d)
					if d > 1e-5 {
						t.Errorf("rank %d, step %d: loss %v, one process %v", rank, i, got, wantLoss[i])
					}
					if peak[rank][i] != planned[rank][i] {
						t.Errorf("rank %d, step %d: measured peak %d, planned %d", rank, i, peak[rank][i], planned[rank][i])
					}
				}
				gi := slices.IndexFunc(groups, func(g dist.RankPlan) bool { return g.Has(rank) })
				if gi < 0 || groups[gi].Memory.Total() != peak[rank][0] {
					t.Errorf("rank %d: PlanRanks %v, measured first step %d", rank, groups, peak[rank][0])
				}
			}
			t.Logf("losses %v, worst relative difference %.3g; peaks %v", wantLoss, worst, peak)
		})
	}
}
