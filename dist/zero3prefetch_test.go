package dist_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// prefetchRanks trains the test MLP under ZeRO-3 with gather prefetch
// depth on n Local ranks and reports what each rank saw.
func prefetchRanks(t *testing.T, n, depth int, cfg train.Config, batches []train.Batch) []zero3Result {
	t.Helper()
	adam := func() optim.Optimizer { return newOpt(t, "adam") }
	return zero3Train(t, n, zero3Run{build: mlpBuild, opt: adam, cfg: cfg, opts: dist.Zero3Options{Seed: 1, Prefetch: depth}, meta: true}, batches)
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
					if want := min(1+depth, 3); res.maxGatheredLive != want {
						t.Errorf("rank %d: %d gathered weight matrices live at once, want %d", r, res.maxGatheredLive, want)
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
	gpt := func(s *nn.Store) (train.Model, train.LossFunc, error) {
		return zoo.NewGPT(s.Root(), tpConfig), zoo.GPTLoss, nil
	}
	run := func(depth int) []zero3Result {
		return zero3Train(t, 2, zero3Run{build: gpt, opt: sgd, opts: dist.Zero3Options{Seed: 3, Prefetch: depth}}, batches)
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
			if res.maxGatheredLive < prev[r].maxGatheredLive || depth == 1 && res.maxGatheredLive <= prev[r].maxGatheredLive || res.peak < prev[r].peak {
				t.Errorf("prefetch %d, rank %d: %d weight matrices live at once and peak %d; with less prefetch %d and %d", depth, r, res.maxGatheredLive, res.peak, prev[r].maxGatheredLive, prev[r].peak)
			}
		}
		t.Logf("prefetch %d: rank 0 peak %d (%d without), %d weight matrices live at once (%d without)", depth, rs[0].peak, base[0].peak, rs[0].maxGatheredLive, base[0].maxGatheredLive)
		prev = rs
	}
}
