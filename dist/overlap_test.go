package dist_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// With the all-reduce overlapped with the backward pass, the weights are
// stage 0's bit for bit, buckets are handed over while the backward pass
// still runs (counted, not timed), and every rank's measured peak equals
// its plan from PlanRanks.
func TestOverlapMatchesStageZero(t *testing.T) {
	batches := data(4)
	for _, n := range []int{2, 3} {
		for _, opt := range []string{"sgd", "adam"} {
			t.Run(fmt.Sprintf("ranks=%d/%s", n, opt), func(t *testing.T) {
				want := ranks(t, n, 0, opt, batches)[0].params
				job := dist.Job{
					Build: func(s *nn.Store) (train.Model, train.LossFunc) {
						return zoo.NewMLP(s.Root(), widths...), zoo.CrossEntropyLoss
					},
					Example: func(k int) (trace.Meta, trace.Meta) {
						return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{k, widths[0]}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{k}}
					},
					NewOptimizer: func() (optim.Optimizer, error) { return newOpt(t, opt), nil },
					Batch:        8,
				}
				l := dist.Layout{Ranks: n, BucketBytes: 1000, Overlap: true}
				groups, err := dist.PlanRanks(context.Background(), job, l)
				if err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				err = comm.Run(context.Background(), n, func(ctx context.Context, c comm.Comm) error {
					dev := device.CPU()
					s := nn.NewStore()
					m := zoo.NewMLP(s.Root(), widths...)
					if err := s.Materialize(dev, int64(1+c.Rank())); err != nil {
						return err
					}
					defer s.Release()
					tr, dp, err := dist.NewTrainer(ctx, c, dev, s, m, zoo.CrossEntropyLoss, newOpt(t, opt), train.Config{}, dist.Options{BucketBytes: 1000, Overlap: true})
					if err != nil {
						return err
					}
					defer dp.Close()
					defer tr.Close()
					for i, b := range batches {
						part, err := dist.ShardBatch(b, c.Rank(), n)
						if err != nil {
							return err
						}
						if i == len(batches)-1 {
							dev.Alloc.ResetPeak()
						}
						if _, err := tr.Step(ctx, part.X, part.Y); err != nil {
							return err
						}
					}
					mu.Lock()
					defer mu.Unlock()
					for _, g := range groups {
						if g.Has(c.Rank()) && g.Memory.Total() != dev.Alloc.MaxMemoryAllocated() {
							t.Errorf("rank %d: planned %d, measured %d", c.Rank(), g.Memory.Total(), dev.Alloc.MaxMemoryAllocated())
						}
					}
					buckets, early := dp.Overlapped()
					if early == 0 || buckets <= len(batches) {
						t.Errorf("rank %d: %d buckets, %d handed over during the backward pass", c.Rank(), buckets, early)
					}
					if c.Rank() == 0 {
						if got := params(s); !same(got, want) {
							t.Errorf("weights differ from stage 0's by %.3g", relDiff(got, want))
						}
						t.Logf("%d buckets over %d steps, %d during the backward pass", buckets, len(batches), early)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func TestOverlapRefused(t *testing.T) {
	l, _ := comm.NewLocal(1)
	for _, tc := range []struct {
		o   dist.Options
		cfg train.Config
	}{
		{dist.Options{Overlap: true, Stage: 1}, train.Config{}},
		{dist.Options{Overlap: true}, train.Config{OptimizerInBackward: true}},
	} {
		dev := device.CPU()
		s := nn.NewStore()
		m := zoo.NewMLP(s.Root(), widths...)
		if err := s.Materialize(dev, 1); err != nil {
			t.Fatal(err)
		}
		_, _, err := dist.NewTrainer(context.Background(), l.Comm(0), dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "adam"), tc.cfg, tc.o)
		if !errors.Is(err, dist.ErrConfig) {
			t.Errorf("%+v %v: err = %v", tc.o, tc.cfg, err)
		}
		s.Release()
	}
}

// Under bf16-mixed too the overlapped all-reduce (the optimizer in the
// backward pass, reading each gradient rounded as a gradient buffer would
// hold it) leaves the weights of the step that all-reduces after the
// backward pass, bit for bit, and hands buckets over during it.
func TestOverlapBF16MatchesAfterBackward(t *testing.T) {
	batches := data(3)
	const n = 2
	run := func(overlap bool) []map[string][]float32 {
		return onRanks(t, n, func(ctx context.Context, c comm.Comm) (map[string][]float32, error) {
			dev := device.CPU()
			s := nn.NewStore()
			m := zoo.NewMLP(s.Root(), widths...)
			if err := s.Materialize(dev, int64(1+c.Rank())); err != nil {
				return nil, err
			}
			defer s.Release()
			tr, dp, err := dist.NewTrainer(ctx, c, dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "adam"), train.Config{Precision: transform.BF16Mixed}, dist.Options{BucketBytes: 1000, Overlap: overlap})
			if err != nil {
				return nil, err
			}
			defer dp.Close()
			defer tr.Close()
			for _, b := range batches {
				part, err := dist.ShardBatch(b, c.Rank(), n)
				if err != nil {
					return nil, err
				}
				if _, err := tr.Step(ctx, part.X, part.Y); err != nil {
					return nil, err
				}
			}
			if _, early := dp.Overlapped(); overlap && early == 0 {
				t.Errorf("rank %d: no bucket handed over during the backward pass", c.Rank())
			}
			return params(s), nil
		})
	}
	want, got := run(false), run(true)
	for r := range n {
		if !same(got[r], want[r]) {
			t.Errorf("rank %d: weights differ from the step without overlap by %.3g", r, relDiff(got[r], want[r]))
		}
	}
}
