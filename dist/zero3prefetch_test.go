package dist_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

type prefetchResult struct {
	params                     map[string][]float32
	planned, metaPlanned, peak int64
	live, gathers, regathers   int
}

// prefetchRanks trains the test MLP under ZeRO-3 with gather prefetch
// depth on n Local ranks and reports what each rank saw.
func prefetchRanks(t *testing.T, n, depth int, cfg train.Config, batches []train.Batch) []prefetchResult {
	t.Helper()
	res := make([]prefetchResult, n)
	var mu sync.Mutex
	build := func(s *nn.Store) (train.Model, train.LossFunc, error) {
		return zoo.NewMLP(s.Root(), widths...), zoo.CrossEntropyLoss, nil
	}
	err := comm.Run(context.Background(), n, func(ctx context.Context, c comm.Comm) error {
		dev := device.CPU()
		full := nn.NewStore()
		m, loss, _ := build(full)
		tr, z, err := dist.NewZero3Trainer(ctx, c, dev, full, m, loss, newOpt(t, "adam"), cfg, dist.Zero3Options{Seed: 1, Prefetch: depth})
		if err != nil {
			return err
		}
		defer z.Close()
		defer tr.Close()
		var r prefetchResult
		for i, b := range batches {
			part, err := dist.ShardBatch(b, c.Rank(), n)
			if err != nil {
				return err
			}
			if i == len(batches)-1 {
				x, y := train.MetaOf(part.X), train.MetaOf(part.Y)
				mp, err := tr.Plan(x, y)
				if err != nil {
					return err
				}
				r.planned = mp.Total()
				meta, err := dist.PlanZero3Rank(dist.Zero3Rank{Rank: c.Rank(), Size: n, Build: build, X: x, Y: y, Train: cfg, Prefetch: depth,
					NewOptimizer: func() (optim.Optimizer, error) { return newOpt(t, "adam"), nil }})
				if err != nil {
					return err
				}
				r.metaPlanned = meta.Total()
				p, err := tr.TrainProgram(x, y)
				if err != nil {
					return err
				}
				r.live, r.gathers, r.regathers, _ = gatheredLive(p.Plan.Order, p.Plan.Buffers)
				dev.Alloc.ResetPeak()
			}
			if _, err := tr.Step(ctx, part.X, part.Y); err != nil {
				return err
			}
		}
		r.peak = dev.Alloc.MaxMemoryAllocated()
		r.params = map[string][]float32{}
		for _, p := range full.Trainable() {
			v, err := z.Gather(ctx, p.Name)
			if err != nil {
				return err
			}
			r.params[p.Name] = v.F32()
		}
		mu.Lock()
		res[c.Rank()] = r
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestZero3Prefetch: gathering 1 and 2 layers ahead (forward and
// backward) ends 4 Adam steps with exactly the weights of no prefetch
// (bit for bit: only the order of the gathers changes); as many more
// weight matrices are live at once as prefetched (the test MLP has three,
// two of them read again in the backward pass); each rank's plan, on its
// device and on the meta device, equals its measured peak, and the
// prefetched peak is not below the unprefetched one.
func TestZero3Prefetch(t *testing.T) {
	batches := data(4)
	for _, tc := range []struct {
		n   int
		cfg train.Config
	}{{2, train.Config{}}, {3, train.Config{}}, {2, train.Config{Recompute: train.Selective}}} {
		base := prefetchRanks(t, tc.n, 0, tc.cfg, batches)
		for _, depth := range []int{1, 2} {
			t.Run(fmt.Sprintf("%d/%v/depth%d", tc.n, tc.cfg.Recompute.Kind, depth), func(t *testing.T) {
				rs := prefetchRanks(t, tc.n, depth, tc.cfg, batches)
				for r, res := range rs {
					for name, w := range base[r].params {
						for i, v := range res.params[name] {
							if math.Float32bits(v) != math.Float32bits(w[i]) {
								t.Fatalf("rank %d: %s[%d] = %v with prefetch %d, %v without", r, name, i, v, depth, w[i])
							}
						}
					}
					if res.planned != res.peak || res.metaPlanned != res.peak {
						t.Errorf("rank %d: planned %d, meta plan %d, measured peak %d", r, res.planned, res.metaPlanned, res.peak)
					}
					if res.peak < base[r].peak {
						t.Errorf("rank %d: peak %d with prefetch, %d without", r, res.peak, base[r].peak)
					}
					if want := min(1+depth, 3); res.live != want {
						t.Errorf("rank %d: %d gathered weight matrices live at once, want %d", r, res.live, want)
					}
					if res.gathers != base[r].gathers || res.regathers != base[r].regathers {
						t.Errorf("rank %d: %d gathers, %d again for backward; without prefetch %d, %d", r, res.gathers, res.regathers, base[r].gathers, base[r].regathers)
					}
					if r == 0 {
						t.Logf("peak %d (planned %d), without prefetch %d", res.peak, res.planned, base[r].peak)
					}
				}
			})
		}
	}
}

// TestZero3PrefetchGPT: the GPT (its token embedding read by the
// embedding and again by the tied head) under ZeRO-3 on 2 ranks with
// gathers prefetched 0, 1 and 2 layers ahead: the same weights bit for
// bit after 2 SGD steps, each rank's plan its measured peak, more weight
// matrices live at once with prefetch, and peaks that do not fall as the
// prefetch deepens.
func TestZero3PrefetchGPT(t *testing.T) {
	sgd := func() optim.Optimizer { return newOpt(t, "sgd") }
	var batches []train.Batch
	for i := range 2 {
		batches = append(batches, train.Batch{X: tpTokens(4, 8, tpConfig.VocabSize, 2*i+1), Y: tpTokens(4, 8, tpConfig.VocabSize, 2*i+2)})
	}
	type result struct {
		params        map[string][]float32
		planned, peak int64
		live          int
	}
	run := func(depth int) []result {
		res := make([]result, 2)
		var mu sync.Mutex
		err := comm.Run(context.Background(), 2, func(ctx context.Context, c comm.Comm) error {
			dev := device.CPU()
			full := nn.NewStore()
			m := zoo.NewGPT(full.Root(), tpConfig)
			tr, z, err := dist.NewZero3Trainer(ctx, c, dev, full, m, zoo.GPTLoss, sgd(), train.Config{}, dist.Zero3Options{Seed: 3, Prefetch: depth})
			if err != nil {
				return err
			}
			defer z.Close()
			defer tr.Close()
			var r result
			for i, b := range batches {
				part, err := dist.ShardBatch(b, c.Rank(), 2)
				if err != nil {
					return err
				}
				if i == len(batches)-1 {
					x, y := train.MetaOf(part.X), train.MetaOf(part.Y)
					mp, err := tr.Plan(x, y)
					if err != nil {
						return err
					}
					r.planned = mp.Total()
					p, err := tr.TrainProgram(x, y)
					if err != nil {
						return err
					}
					r.live, _, _, _ = gatheredLive(p.Plan.Order, p.Plan.Buffers)
					dev.Alloc.ResetPeak()
				}
				if _, err := tr.Step(ctx, part.X, part.Y); err != nil {
					return err
				}
			}
			r.peak = dev.Alloc.MaxMemoryAllocated()
			r.params = map[string][]float32{}
			for _, p := range full.Trainable() {
				v, err := z.Gather(ctx, p.Name)
				if err != nil {
					return err
				}
				r.params[p.Name] = v.F32()
			}
			mu.Lock()
			res[c.Rank()] = r
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	base := run(0)
	prev := base
	for _, depth := range []int{1, 2} {
		rs := run(depth)
		for r, res := range rs {
			if d := relDiff(res.params, base[r].params); d != 0 {
				t.Errorf("prefetch %d, rank %d: weights %.3g from no prefetch's, want bit for bit", depth, r, d)
			}
			if res.planned != res.peak {
				t.Errorf("prefetch %d, rank %d: planned %d, measured %d", depth, r, res.planned, res.peak)
			}
			// Layer norms (vectors only) sit between the matrices, so two
			// layers ahead may add vectors, not matrices.
			if res.live < prev[r].live || depth == 1 && res.live <= prev[r].live || res.peak < prev[r].peak {
				t.Errorf("prefetch %d, rank %d: %d weight matrices live at once and peak %d; with less prefetch %d and %d", depth, r, res.live, res.peak, prev[r].live, prev[r].peak)
			}
		}
		t.Logf("prefetch %d: rank 0 peak %d (%d without), %d weight matrices live at once (%d without)", depth, rs[0].peak, base[0].peak, rs[0].live, base[0].live)
		prev = rs
	}
}
