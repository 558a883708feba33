package dist_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/plan"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

type zero3Result struct {
	params                       map[string][]float32
	losses                       []float64
	planned, peak                int64
	metaPlanned                  int64
	paramBytes                   int64 // the allocator's parameter bytes
	gradBytes                    int64
	optBytes                     int64
	shardBytes                   int64 // what 1/N shards take, rounded as allocated
	maxGatheredLive              int   // most gathered weight matrices live at once
	gathers, regathers, scatters int
}

// zero3Run is what zero3Train trains under ZeRO-3: the model, a new
// optimizer for each rank, the configuration and ZeRO-3's options; meta
// also plans each rank on the meta device (PlanZero3Rank).
type zero3Run struct {
	build func(*nn.Store) (train.Model, train.LossFunc, error)
	opt   func() optim.Optimizer
	cfg   train.Config
	opts  dist.Zero3Options
	meta  bool
}

// mlpBuild is the test MLP with cross-entropy.
func mlpBuild(s *nn.Store) (train.Model, train.LossFunc, error) {
	return zoo.NewMLP(s.Root(), widths...), zoo.CrossEntropyLoss, nil
}

// zero3Ranks trains the test MLP under ZeRO-3 on n Local ranks, each on
// its share of every global batch, and reports what each rank saw.
func zero3Ranks(t *testing.T, n int, opt string, cfg train.Config, batches []train.Batch) []zero3Result {
	t.Helper()
	return zero3Train(t, n, zero3Run{build: mlpBuild, opt: func() optim.Optimizer { return newOpt(t, opt) }, cfg: cfg, opts: dist.Zero3Options{Seed: 1}, meta: true}, batches)
}

// zero3Train trains run on n Local ranks, each on its share of every
// global batch, and reports what each rank saw: the plans and the
// measured peak are those of the last batch.
func zero3Train(t *testing.T, n int, run zero3Run, batches []train.Batch) []zero3Result {
	t.Helper()
	return onRanks(t, n, func(ctx context.Context, c comm.Comm) (zero3Result, error) {
		dev := device.CPU()
		full := nn.NewStore()
		m, loss, err := run.build(full)
		if err != nil {
			return zero3Result{}, err
		}
		tr, z, err := dist.NewZero3Trainer(ctx, c, dev, full, m, loss, run.opt(), run.cfg, run.opts)
		if err != nil {
			return zero3Result{}, err
		}
		defer z.Close()
		defer tr.Close()
		var r zero3Result
		for i, b := range batches {
			part, err := dist.ShardBatch(b, c.Rank(), n)
			if err != nil {
				return zero3Result{}, err
			}
			if i == len(batches)-1 {
				x, y := train.MetaOf(part.X), train.MetaOf(part.Y)
				mp, err := tr.Plan(x, y)
				if err != nil {
					return zero3Result{}, err
				}
				r.planned = mp.Total()
				if run.meta {
					meta, err := dist.PlanZero3Rank(dist.Zero3Rank{Rank: c.Rank(), Size: n, Build: run.build, X: x, Y: y, Train: run.cfg, Prefetch: run.opts.Prefetch,
						NewOptimizer: func() (optim.Optimizer, error) { return run.opt(), nil }})
					if err != nil {
						return zero3Result{}, err
					}
					r.metaPlanned = meta.Total()
				}
				p, err := tr.TrainProgram(x, y)
				if err != nil {
					return zero3Result{}, err
				}
				r.maxGatheredLive, r.gathers, r.regathers, r.scatters = gatheredLive(p.Plan.Order, p.Plan.Buffers)
				dev.Alloc.ResetPeak()
			}
			l, err := tr.Step(ctx, part.X, part.Y)
			if err != nil {
				return zero3Result{}, err
			}
			r.losses = append(r.losses, l)
		}
		r.peak = dev.Alloc.MaxMemoryAllocated()
		st := dev.Alloc.Stats()
		r.paramBytes, r.gradBytes, r.optBytes = st.ByCategory[device.Parameter], st.ByCategory[device.Gradient], st.ByCategory[device.OptimizerState]
		r.params = map[string][]float32{}
		for _, p := range full.Trainable() {
			v, err := z.Gather(ctx, p.Name)
			if err != nil {
				return zero3Result{}, err
			}
			r.params[p.Name] = v.F32()
			r.shardBytes += device.RoundSize(int64(prim.ShardLen(int(p.Numel()), n)) * 4)
		}
		return r, nil
	})
}

// gatheredLive is the most ZeRO-3 gathers of weight matrices (2-D) whose
// buffers are live at one step, and the numbers of gathers and
// reduce-scatters in the step (gathers in the forward pass and again for
// the backward pass apart).
func gatheredLive(order []*trace.Node, buffers []*plan.Buffer) (most, gathers, regathers, scatters int) {
	live := make([]int, len(order))
	for _, b := range buffers {
		if b.Node == nil || b.Value == nil {
			continue
		}
		if o, ok := b.Node.Op.(*prim.AllGather); ok && o.Shape != nil && len(o.Shape) == 2 {
			for i := b.Start; i <= b.End; i++ {
				live[i]++
			}
		}
	}
	for _, n := range order {
		switch o := n.Op.(type) {
		case *prim.AllGather:
			switch {
			case o.Shape != nil && n.Recompute:
				regathers++
			case o.Shape != nil:
				gathers++
			}
		case *prim.ReduceScatter:
			if o.Flat {
				scatters++
			}
		}
	}
	for _, v := range live {
		most = max(most, v)
	}
	return most, gathers, regathers, scatters
}

// TestZero3MatchesOneProcess: ZeRO-3 on 2 and 3 ranks, SGD (momentum,
// weight decay) and Adam, ends 4 steps with the weights of one process on
// the global batches (within 1e-5 relative); every rank's parameters,
// gradients and optimizer state are its 1/N shards as its allocator
// counts them; each rank's plan (and the meta device's, PlanZero3Rank)
// equals its measured peak; the step gathers one weight matrix at a time
// (again in the backward pass) and reduce-scatters every gradient.
func TestZero3MatchesOneProcess(t *testing.T) {
	batches := data(4)
	var fullBytes int64
	for _, w := range [][2]int{{widths[0], widths[1]}, {widths[1], widths[2]}, {widths[2], widths[3]}} {
		fullBytes += device.RoundSize(int64(w[0]*w[1])*4) + device.RoundSize(int64(w[1])*4)
	}
	for _, opt := range []string{"sgd", "adam"} {
		want, wantLosses := single(t, opt, batches)
		for _, tc := range []struct {
			n   int
			cfg train.Config
		}{{2, train.Config{}}, {3, train.Config{}}, {2, train.Config{Recompute: train.Selective}}} {
			n := tc.n
			t.Run(fmt.Sprintf("%s/%d/%v", opt, n, tc.cfg.Recompute.Kind), func(t *testing.T) {
				rs := zero3Ranks(t, n, opt, tc.cfg, batches)
				for r, res := range rs {
					if d := relDiff(res.params, want); d > 1e-5 {
						t.Errorf("rank %d: weights differ from one process's by %.3g relative", r, d)
					} else if r == 0 {
						t.Logf("weights within %.3g of one process's; parameter bytes %d of %d unsharded; peak %d", d, res.paramBytes, fullBytes, res.peak)
					}
					for i, l := range res.losses {
						if d := l - wantLosses[i]; d > 1e-5 || d < -1e-5 {
							t.Errorf("rank %d, step %d: loss %v, one process %v", r, i, l, wantLosses[i])
						}
					}
					if res.planned != res.peak || res.metaPlanned != res.peak {
						t.Errorf("rank %d: planned %d, meta plan %d, measured peak %d", r, res.planned, res.metaPlanned, res.peak)
					}
					if res.paramBytes != res.shardBytes || res.gradBytes != res.shardBytes {
						t.Errorf("rank %d: parameter bytes %d, gradient bytes %d, want the shards' %d", r, res.paramBytes, res.gradBytes, res.shardBytes)
					}
					if res.paramBytes*int64(n) > fullBytes+int64(n)*6*512 {
						t.Errorf("rank %d: %d parameter bytes is more than 1/%d of %d (up to padding and rounding)", r, res.paramBytes, n, fullBytes)
					}
					if opt == "adam" && res.optBytes != 2*res.shardBytes {
						t.Errorf("rank %d: Adam state %d bytes, want two shards' %d", r, res.optBytes, 2*res.shardBytes)
					}
					if res.maxGatheredLive != 1 {
						t.Errorf("rank %d: %d gathered weight matrices live at once, want 1", r, res.maxGatheredLive)
					}
					// The backward pass reads the second and third weights (for
					// the input gradients of their layers), nothing else.
					if res.gathers != 6 || res.regathers != 2 || res.scatters != 6 {
						t.Errorf("rank %d: %d gathers, %d again for the backward pass, %d reduce-scatters; want 6, 2, 6", r, res.gathers, res.regathers, res.scatters)
					}
				}
			})
		}
	}
}

// TestZero3Refusals: a materialized model store, a configuration already
// parallel, and the optimizer in the backward pass are refused.
func TestZero3Refusals(t *testing.T) {
	err := comm.Run(context.Background(), 2, func(ctx context.Context, c comm.Comm) error {
		dev := device.CPU()
		s := nn.NewStore()
		m := zoo.NewMLP(s.Root(), widths...)
		if err := s.Materialize(dev, 1); err != nil {
			return err
		}
		defer s.Release()
		_, _, err := dist.NewZero3Trainer(ctx, c, dev, s, m, zoo.CrossEntropyLoss, nil, train.Config{}, dist.Zero3Options{})
		if !errors.Is(err, dist.ErrConfig) || !strings.Contains(err.Error(), "unmaterialized") {
			return fmt.Errorf("materialized store: %v", err)
		}
		s2 := nn.NewStore()
		m2 := zoo.NewMLP(s2.Root(), widths...)
		_, _, err = dist.NewZero3Trainer(ctx, c, dev, s2, m2, zoo.CrossEntropyLoss, nil, train.Config{OptimizerInBackward: true}, dist.Zero3Options{})
		if !errors.Is(err, dist.ErrConfig) {
			return fmt.Errorf("optimizer in backward: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestZero3GPT: the GPT (whose token embedding is read twice, by the
// embedding and by the tied LM head) under ZeRO-3 on 2 ranks, started from
// the full model's weights (Zero3Options.Weights), ends 3 SGD steps with
// one process's weights, and each rank's plan is its measured peak.
func TestZero3GPT(t *testing.T) {
	newSGD := func() optim.Optimizer {
		o, err := optim.NewSGD(optim.SGDConfig{LR: 0.1, Momentum: 0.9})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	var batches [][2]*tensor.Tensor
	for i := range 3 {
		batches = append(batches, [2]*tensor.Tensor{tpTokens(4, 8, tpConfig.VocabSize, 2*i+1), tpTokens(4, 8, tpConfig.VocabSize, 2*i+2)})
	}
	sd, losses, _, want := tpFull(t, tpConfig, newSGD, batches)
	gpt := func(s *nn.Store) (train.Model, train.LossFunc, error) {
		return zoo.NewGPT(s.Root(), tpConfig), zoo.GPTLoss, nil
	}
	var tb []train.Batch
	for _, b := range batches {
		tb = append(tb, train.Batch{X: b[0], Y: b[1]})
	}
	rs := zero3Train(t, 2, zero3Run{build: gpt, opt: newSGD, opts: dist.Zero3Options{Weights: sd}}, tb)
	for r, res := range rs {
		for i, l := range res.losses {
			if d := l - losses[i]; d > 1e-5 || d < -1e-5 {
				t.Errorf("rank %d, step %d: loss %v, one process %v", r, i, l, losses[i])
			}
		}
		if res.peak != res.planned {
			t.Errorf("rank %d: planned peak %d, measured %d", r, res.planned, res.peak)
		}
		for name, v := range res.params {
			if d := maxRel(tensor.FromFloat32(want[name].Shape, v), want[name]); d > 1e-5 {
				t.Errorf("rank %d: %s differs from one process's by %.3g", r, name, d)
			}
		}
	}
}

// TestTensorAndZero3Mismatch: a rank set up with another model stops
// every rank with a message naming it, under tensor parallelism and under
// ZeRO-3, instead of meeting the others in different collectives.
func TestTensorAndZero3Mismatch(t *testing.T) {
	err := comm.Run(context.Background(), 2, func(ctx context.Context, c comm.Comm) error {
		full := nn.NewStore()
		w := widths
		if c.Rank() == 1 {
			w = []int{48, 300, 131, 10}
		}
		m := zoo.NewMLP(full.Root(), w...)
		_, _, err := dist.NewZero3Trainer(ctx, c, device.CPU(), full, m, zoo.CrossEntropyLoss, nil, train.Config{}, dist.Zero3Options{})
		return err
	})
	if !errors.Is(err, dist.ErrMismatch) || !strings.Contains(err.Error(), "rank(s) 1 differ") {
		t.Errorf("ZeRO-3 with another model on rank 1: %v", err)
	}
	err = comm.Run(context.Background(), 2, func(ctx context.Context, c comm.Comm) error {
		cfg := tpConfig
		if c.Rank() == 1 {
			cfg.NLayer = 1
		}
		dev := device.CPU()
		s := nn.NewStore()
		m, err := zoo.NewTPGPT(s.Root(), cfg, c.Rank(), 2)
		if err != nil {
			return err
		}
		if err := s.Materialize(dev, 0); err != nil {
			return err
		}
		defer s.Release()
		_, err = dist.NewTensorTrainer(ctx, c, dev, s, m, zoo.GPTLoss, nil, train.Config{})
		return err
	})
	if !errors.Is(err, dist.ErrMismatch) || !strings.Contains(err.Error(), "rank(s) 1 differ") {
		t.Errorf("tensor parallel with another model on rank 1: %v", err)
	}
}
