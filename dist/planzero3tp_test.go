package dist_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// measuredLayout trains j under l (ZeRO-3 or tensor parallelism) on
// l.Ranks Local ranks for two steps and returns each rank's measured peak
// of the second step and its allocator's bytes by category then.
func measuredLayout(t *testing.T, j dist.Job, l dist.Layout) ([]int64, [][8]int64) {
	peaks := make([]int64, l.Ranks)
	cats := make([][8]int64, l.Ranks)
	var mu sync.Mutex
	r := rand.New(rand.NewSource(3))
	var batches []train.Batch
	for range 2 {
		xm, ym := j.Example(j.Batch)
		x, y := testkit.Batch(r, xm, ym, 10)
		batches = append(batches, train.Batch{X: x, Y: y})
	}
	err := comm.Run(context.Background(), l.Ranks, func(ctx context.Context, c comm.Comm) error {
		dev := device.CPU()
		opt, _ := j.NewOptimizer()
		var tr *train.Trainer
		shard := true
		if l.Tensor > 1 {
			cfg, err := dist.TensorGPTConfig(j)
			if err != nil {
				return err
			}
			s := nn.NewStore()
			m, err := zoo.NewTPGPT(s.Root(), cfg, c.Rank(), c.Size())
			if err != nil {
				return err
			}
			if err := s.Materialize(dev, 1); err != nil {
				return err
			}
			defer s.Release()
			if tr, err = dist.NewTensorTrainer(ctx, c, dev, s, m, zoo.GPTLoss, opt, j.Config); err != nil {
				return err
			}
			shard = false // every rank of the group runs the whole batch
		} else {
			s := nn.NewStore()
			m, loss := j.Build(s)
			t3, z, err := dist.NewZero3Trainer(ctx, c, dev, s, m, loss, opt, j.Config, dist.Zero3Options{Seed: 1})
			if err != nil {
				return err
			}
			defer z.Close()
			tr = t3
		}
		defer tr.Close()
		for i, b := range batches {
			part := b
			if shard {
				var err error
				if part, err = dist.ShardBatch(b, c.Rank(), c.Size()); err != nil {
					return err
				}
			}
			if i == len(batches)-1 {
				dev.Alloc.ResetPeak()
			}
			if _, err := tr.Step(ctx, part.X, part.Y); err != nil {
				return err
			}
		}
		mu.Lock()
		peaks[c.Rank()] = dev.Alloc.MaxMemoryAllocated()
		cats[c.Rank()] = dev.Alloc.Stats().ByCategory
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return peaks, cats
}

// Every rank's measured peak equals the plan PlanRanks made for it on the
// meta device, to the byte, under ZeRO-3 (uneven shares of the batch,
// padded shards) and tensor parallelism.
func TestPlanRanksZero3TensorEqualsMeasured(t *testing.T) {
	type tc struct {
		model string
		l     dist.Layout
		batch int
	}
	cases := []tc{
		{"gpt", dist.Layout{Ranks: 2, Zero: 3}, 5},
		{"gpt", dist.Layout{Ranks: 3, Zero: 3}, 5},
		{"mlp", dist.Layout{Ranks: 3, Zero: 3}, 7},
		{"gpt", dist.Layout{Ranks: 2, Tensor: 2}, 3},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%v", c.model, c.l), func(t *testing.T) {
			j := planJobs(t, c.batch)[c.model]
			groups, err := dist.PlanRanks(context.Background(), j, c.l)
			if err != nil {
				t.Fatal(err)
			}
			peaks, cats := measuredLayout(t, j, c.l)
			for r, peak := range peaks {
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
				if mp.Total() != peak {
					t.Errorf("rank %d (group %s): planned %d, measured %d", r, g.RanksString(), mp.Total(), peak)
				}
				if cc := cats[r]; mp.OptimizerState != cc[device.OptimizerState] || mp.Communication != cc[device.Communication] || mp.Parameters != cc[device.Parameter] {
					t.Errorf("rank %d: plan %+v, allocator %v", r, mp, cc)
				}
				if g.Moved <= 0 {
					t.Errorf("rank %d: moves %d bytes per step", r, g.Moved)
				}
			}
			t.Logf("%d groups; peaks %v; moved %d", len(groups), peaks, groups[0].Moved)
		})
	}
}

// What the planners cannot plan is refused with the reason.
func TestPlanRanksZero3TensorRefused(t *testing.T) {
	cases := []struct {
		model string
		l     dist.Layout
		want  error
	}{
		{"gpt", dist.Layout{Ranks: 3, Tensor: 3}, dist.ErrConfig},                // 2 heads
		{"mlp", dist.Layout{Ranks: 2, Tensor: 2}, dist.ErrConfig},                // not a GPT
		{"gpt", dist.Layout{Ranks: 4, Tensor: 2, Zero: 3}, dist.ErrNotAvailable}, // data × tensor under ZeRO-3
		{"gpt", dist.Layout{Ranks: 2, Tensor: 2, Zero: 1}, dist.ErrNotAvailable},
		{"gpt", dist.Layout{Ranks: 2, Zero: 3, Overlap: true}, dist.ErrConfig},
		{"gpt", dist.Layout{Ranks: 8, Zero: 3}, dist.ErrConfig}, // 5 samples
	}
	for _, c := range cases {
		_, err := dist.PlanRanks(context.Background(), planJobs(t, 5)[c.model], c.l)
		if !errors.Is(err, c.want) {
			t.Errorf("%s %v: %v, want %v", c.model, c.l, err, c.want)
		}
	}
}
