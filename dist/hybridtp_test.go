package dist_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// hybridOpt is newOpt's SGD, or Adam at its default rate (1e-3) as in
// TestTensorParallelTrains: at newOpt's 1e-2, Adam's normalization makes
// steps of the rate's size out of the rounding noise of tiny gradients,
// in tensor parallelism alone too (4.6e-5 there on 2 ranks).
func hybridOpt(t testing.TB, name string) optim.Optimizer {
	if name != "adam" {
		return newOpt(t, name)
	}
	o, err := optim.NewAdam(optim.AdamDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// hybridJob is the job of the hybrid tests: tpConfig's GPT on global
// batches of batch sequences of 8 tokens.
func hybridJob(t testing.TB, opt string, batch int) dist.Job {
	return dist.Job{
		Build: func(s *nn.Store) (train.Model, train.LossFunc) { return zoo.NewGPT(s.Root(), tpConfig), zoo.GPTLoss },
		Example: func(n int) (trace.Meta, trace.Meta) {
			m := trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n, 8}}
			return m, m
		},
		NewOptimizer: func() (optim.Optimizer, error) { return hybridOpt(t, opt), nil },
		Batch:        batch,
	}
}

type hybridRank struct {
	losses []float64
	params map[string]*tensor.Tensor
	peak   int64
	cats   [8]int64
}

// hybridRanks trains l's ranks (data parallelism across tensor groups) on
// Local ranks from the full model's weights sd, each tensor group on its
// share of every global batch, and returns what each rank saw; peaks are
// of the last step.
func hybridRanks(t *testing.T, j dist.Job, l dist.Layout, sd map[string]*tensor.Tensor, batches [][2]*tensor.Tensor) []hybridRank {
	t.Helper()
	return onRanks(t, l.Ranks, func(ctx context.Context, c comm.Comm) (hybridRank, error) {
		tp, dp, err := dist.HybridGroups(ctx, c, l.Tensor)
		if err != nil {
			return hybridRank{}, err
		}
		dev := device.CPU()
		s := nn.NewStore()
		m, err := zoo.NewTPGPT(s.Root(), tpConfig, tp.Rank(), tp.Size())
		if err != nil {
			return hybridRank{}, err
		}
		if err := s.Materialize(dev, 0); err != nil {
			return hybridRank{}, err
		}
		defer s.Release()
		if err := m.LoadFull(sd, true); err != nil {
			return hybridRank{}, err
		}
		opt, _ := j.NewOptimizer()
		tr, d, err := dist.NewHybridTrainer(ctx, tp, dp, dev, s, m, zoo.GPTLoss, opt, j.Config, dist.Options{Stage: l.Zero})
		if err != nil {
			return hybridRank{}, err
		}
		defer d.Close()
		defer tr.Close()
		var r hybridRank
		for i, b := range batches {
			part, err := dist.ShardBatch(train.Batch{X: b[0], Y: b[1]}, dp.Rank(), dp.Size())
			if err != nil {
				return hybridRank{}, err
			}
			if i == len(batches)-1 {
				dev.Alloc.ResetPeak()
			}
			loss, err := tr.Step(ctx, part.X, part.Y)
			if err != nil {
				return hybridRank{}, err
			}
			r.losses = append(r.losses, loss)
		}
		r.peak, r.cats = dev.Alloc.MaxMemoryAllocated(), dev.Alloc.Stats().ByCategory
		r.params = map[string]*tensor.Tensor{}
		for _, p := range s.Trainable() {
			r.params[p.Name] = p.Value.Clone()
		}
		return r, nil
	})
}

// TestHybridTensorMatchesOneProcess: 4 ranks as 2 data-parallel groups of
// 2 tensor-parallel ranks (and 6 as 2 of 3), ZeRO 0, 1 and 2 across the
// groups, 3 steps on global batches of 5 sequences (shares 3 and 2):
// the loss of every step is one process's on the global batch, the
// pieces gathered from either tensor group are one process's weights
// within 1e-5 (relative), the groups' pieces are bit-identical, and every
// rank's measured peak (and its communication, optimizer-state and
// parameter bytes) equals the plan PlanRanks made for it on the meta
// device.
func TestHybridTensorMatchesOneProcess(t *testing.T) {
	cases := []struct {
		l   dist.Layout
		opt string
	}{
		{dist.Layout{Ranks: 4, Tensor: 2}, "sgd"},
		{dist.Layout{Ranks: 4, Tensor: 2}, "adam"},
		{dist.Layout{Ranks: 4, Tensor: 2, Zero: 1}, "adam"},
		{dist.Layout{Ranks: 4, Tensor: 2, Zero: 2}, "adam"},
		{dist.Layout{Ranks: 6, Tensor: 3, Zero: 1}, "sgd"},
	}
	if testing.Short() {
		cases = cases[1:3]
	}
	var batches [][2]*tensor.Tensor
	for i := range 3 {
		batches = append(batches, [2]*tensor.Tensor{tpTokens(5, 8, tpConfig.VocabSize, 2*i+1), tpTokens(5, 8, tpConfig.VocabSize, 2*i+2)})
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v/%s", tc.l, tc.opt), func(t *testing.T) {
			j := hybridJob(t, tc.opt, 5)
			sd, losses, _, params := tpFull(t, tpConfig, func() optim.Optimizer { return hybridOpt(t, tc.opt) }, batches)
			rs := hybridRanks(t, j, tc.l, sd, batches)
			for r, res := range rs {
				for i, l := range res.losses {
					if d := l - losses[i]; d > 1e-5*losses[i] || -d > 1e-5*losses[i] {
						t.Errorf("rank %d step %d: loss %v, one process %v", r, i, l, losses[i])
					}
				}
			}
			T := tc.l.Tensor
			worst := 0.0
			for g := range tc.l.Ranks / T {
				group := rs[g*T : (g+1)*T]
				for name, p := range gatherHybrid(t, group) {
					want := params[name]
					if tc.opt == "adam" && strings.HasSuffix(name, "c_attn.bias") {
						// Zero gradient in exact arithmetic (TestTensorParallelTrains).
						e := tpConfig.NEmbd
						p = tensor.FromFloat64(tensor.Shape{2 * e}, slices.Concat(p.Float64s()[:e], p.Float64s()[2*e:]))
						want = tensor.FromFloat64(tensor.Shape{2 * e}, slices.Concat(want.Float64s()[:e], want.Float64s()[2*e:]))
					}
					d := maxRel(p, want)
					worst = max(worst, d)
					if d > 1e-5 {
						t.Errorf("group %d: %s after 3 steps differs from one process's by %.3g", g, name, d)
					}
				}
				for i, res := range group {
					for name, p := range res.params {
						if !slices.Equal(p.F32(), rs[i].params[name].F32()) {
							t.Errorf("rank %d's %s differs from rank %d's (the same piece in another data group)", g*T+i, name, i)
						}
					}
				}
			}
			groups, err := dist.PlanRanks(context.Background(), j, tc.l)
			if err != nil {
				t.Fatal(err)
			}
			for r, res := range rs {
				var g *dist.RankPlan
				for i := range groups {
					if groups[i].Has(r) {
						g = &groups[i]
					}
				}
				if g == nil {
					t.Fatalf("rank %d is in no group of %+v", r, groups)
				}
				mp := g.Memory
				if mp.Total() != res.peak {
					t.Errorf("rank %d (group %s): planned %d, measured %d", r, g.RanksString(), mp.Total(), res.peak)
				}
				if c := res.cats; mp.OptimizerState != c[device.OptimizerState] || mp.Communication != c[device.Communication] || mp.Parameters != c[device.Parameter] || mp.Communication == 0 {
					t.Errorf("rank %d: plan %+v, allocator %v", r, mp, c)
				}
				if want := (3 - r/T); g.Batch != want || g.Moved <= 0 {
					t.Errorf("rank %d: planned a share of %d samples (want %d), moving %d bytes", r, g.Batch, want, g.Moved)
				}
			}
			t.Logf("worst parameter difference %.3g; peaks %d (rank 0), %d (rank %d); %d plan groups", worst, rs[0].peak, rs[tc.l.Ranks-1].peak, tc.l.Ranks-1, len(groups))
		})
	}
}

// gatherHybrid puts one tensor group's pieces back to full shapes.
func gatherHybrid(t *testing.T, group []hybridRank) map[string]*tensor.Tensor {
	t.Helper()
	out := map[string]*tensor.Tensor{}
	for name := range group[0].params {
		var pieces []*tensor.Tensor
		for _, r := range group {
			pieces = append(pieces, r.params[name])
		}
		full, err := zoo.TPGather(name, pieces)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = full
	}
	return out
}

// Data × tensor layouts the planner cannot plan are refused with the
// reason; the ZeRO stage and the share decide a rank's plan, not its place
// in the tensor group.
func TestPlanHybridTensor(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		l    dist.Layout
		want error
		says string
	}{
		{dist.Layout{Ranks: 6, Tensor: 4}, dist.ErrConfig, "groups of 4"},
		{dist.Layout{Ranks: 4, Tensor: 2, Zero: 3}, dist.ErrNotAvailable, "ZeRO 3 with tensor parallelism on 4 ranks"},
		{dist.Layout{Ranks: 4, Tensor: 2, Overlap: true}, dist.ErrNotAvailable, "overlap"},
		{dist.Layout{Ranks: 12, Tensor: 2}, dist.ErrConfig, "6 tensor-parallel groups"},
		{dist.Layout{Ranks: 8, Tensor: 4}, dist.ErrConfig, "heads"},
	} {
		_, err := dist.PlanRanks(ctx, hybridJob(t, "adam", 5), c.l)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want %v saying %q", c.l, err, c.want, c.says)
		}
	}
	// 1024 ranks as 512 groups of 2: two plans (shares of 2 and 1 of a
	// batch of 1000), ZeRO-1's state 1/512 of a piece's, padded.
	groups, err := dist.PlanRanks(ctx, hybridJob(t, "adam", 1000), dist.Layout{Ranks: 1024, Tensor: 2, Zero: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Tiny parameters leave the last ranks empty shards: a few plans.
	if last := groups[len(groups)-1]; len(groups) > 16 || last.RanksString() != "976–1023" || last.Batch != 1 || groups[0].Batch != 2 {
		t.Errorf("1024 ranks: groups %v", groups)
	}
	one, err := dist.PlanRanks(ctx, hybridJob(t, "adam", 1000), dist.Layout{Ranks: 2, Tensor: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s, s1 := groups[0].Memory.OptimizerState, one[0].Memory.OptimizerState; 2*s > s1 {
		t.Errorf("optimizer state of a rank of 512 groups %d, of one group %d", s, s1)
	}
}
