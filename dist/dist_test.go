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
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// widths of the test MLP: 3 layers of odd sizes (shards are padded), large
// enough that the allocator's 512-byte rounding does not hide sharding.
var widths = []int{48, 301, 131, 10}

func newOpt(t testing.TB, name string) optim.Optimizer {
	var o optim.Optimizer
	var err error
	switch name {
	case "sgd":
		o, err = optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3})
	case "adam":
		c := optim.AdamDefaults()
		c.LR = 1e-2
		o, err = optim.NewAdam(c)
	case "adamw":
		c := optim.AdamWDefaults()
		c.LR = 1e-2
		o, err = optim.NewAdamW(c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// data is k global batches of 8 samples.
func data(k int) []train.Batch { return dataOf(k, 8) }

// dataOf is k global batches of n samples.
func dataOf(k, n int) []train.Batch {
	r := rand.New(rand.NewSource(7))
	var out []train.Batch
	for range k {
		x, y := testkit.Batch(r, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, widths[0]}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}, widths[len(widths)-1])
		out = append(out, train.Batch{X: x, Y: y})
	}
	return out
}

func params(s *nn.Store) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range s.Trainable() {
		out[p.Name] = slices.Clone(p.Value.F32())
	}
	return out
}

// single trains on the global batches in one process.
func single(t *testing.T, opt string, batches []train.Batch) (map[string][]float32, []float64) {
	dev := device.CPU()
	s := nn.NewStore()
	m := zoo.NewMLP(s.Root(), widths...)
	if err := s.Materialize(dev, 1); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	tr, err := train.New(dev, s, m, zoo.CrossEntropyLoss, newOpt(t, opt))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var losses []float64
	for _, b := range batches {
		l, err := tr.Step(context.Background(), b.X, b.Y)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	return params(s), losses
}

// rankResult is what a rank of ranks() saw.
type rankResult struct {
	params           map[string][]float32
	losses           []float64
	planned, peak    int64
	byCategory       [8]int64 // gradient, optimizer state, communication after the run
	plan             train.MemoryPlan
	fullGradsHeld    bool
	gradShardsExpect int64
	optStateExpect   int64
}

// onRanks runs fn on n Local ranks (comm.Run) and returns what each
// returned, in rank order; a rank's error fails t.
func onRanks[T any](t *testing.T, n int, fn func(ctx context.Context, c comm.Comm) (T, error)) []T {
	t.Helper()
	res := make([]T, n)
	err := comm.Run(context.Background(), n, func(ctx context.Context, c comm.Comm) error {
		r, err := fn(ctx, c)
		res[c.Rank()] = r // each rank its own element; read after Run returns
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// ranks trains on the global batches with n Local ranks, each on its
// share, and checks each rank's planned peak against its measured one on
// the last step.
func ranks(t *testing.T, n, stage int, opt string, batches []train.Batch) []rankResult {
	return onRanks(t, n, func(ctx context.Context, c comm.Comm) (rankResult, error) {
		dev := device.CPU()
		s := nn.NewStore()
		m := zoo.NewMLP(s.Root(), widths...)
		// Another seed on every rank: rank 0's weights are broadcast.
		if err := s.Materialize(dev, int64(1+c.Rank())); err != nil {
			return rankResult{}, err
		}
		defer s.Release()
		tr, dp, err := dist.NewTrainer(ctx, c, dev, s, m, zoo.CrossEntropyLoss, newOpt(t, opt), train.Config{}, dist.Options{Stage: stage, BucketBytes: 1000})
		if err != nil {
			return rankResult{}, err
		}
		defer dp.Close()
		defer tr.Close()
		var r rankResult
		for i, b := range batches {
			part, err := dist.ShardBatch(b, c.Rank(), n)
			if err != nil {
				return rankResult{}, err
			}
			if i == len(batches)-1 {
				mp, err := tr.Plan(train.MetaOf(part.X), train.MetaOf(part.Y))
				if err != nil {
					return rankResult{}, err
				}
				r.plan, r.planned = mp, mp.Total()
				dev.Alloc.ResetPeak()
			}
			l, err := tr.Step(ctx, part.X, part.Y)
			if err != nil {
				return rankResult{}, err
			}
			r.losses = append(r.losses, l)
		}
		r.peak = dev.Alloc.MaxMemoryAllocated()
		st := dev.Alloc.Stats()
		copy(r.byCategory[:], st.ByCategory[:])
		r.params = params(s)
		for _, p := range s.Trainable() {
			r.fullGradsHeld = r.fullGradsHeld || p.Grad != nil
			numel := int(p.Numel())
			c0 := (numel + n - 1) / n
			lo := min(c.Rank()*c0, numel)
			hi := min(lo+c0, numel)
			r.gradShardsExpect += device.RoundSize(int64(c0) * 4)
			if hi > lo {
				per := newOpt(t, opt).StateBytesFor(int64(hi - lo))
				r.optStateExpect += per / int64(4*(hi-lo)) * device.RoundSize(int64(4*(hi-lo)))
			}
		}
		return r, nil
	})
}

// relDiff is max over parameters of |a-b|/|b| in the L2 norm.
func relDiff(a, b map[string][]float32) float64 {
	worst := 0.0
	for name, bv := range b {
		var d, nb float64
		for i, v := range bv {
			e := float64(a[name][i]) - float64(v)
			d += e * e
			nb += float64(v) * float64(v)
		}
		worst = max(worst, math.Sqrt(d/nb))
	}
	return worst
}

func same(a, b map[string][]float32) bool {
	for name, v := range b {
		if !slices.Equal(a[name], v) {
			return false
		}
	}
	return len(a) == len(b)
}

// Two ranks with half of each batch end with the weights of one process
// on the whole batch, within 1e-5 relative: not bit for bit, because each
// rank sums the gradient over its half and the halves are then added (a
// different order of float32 additions than one sum over the batch). The
// ranks themselves agree bit for bit, and ZeRO-1 and -2 give bit for bit
// what plain data parallelism gives (optimizers are elementwise, so
// updating shards is updating the whole). Each rank's planned peak equals
// its measured one.
func TestDataParallelMatchesOneProcess(t *testing.T) {
	const steps = 4
	batches := data(steps)
	for _, opt := range []string{"sgd", "adam", "adamw"} {
		want, wantLoss := single(t, opt, batches)
		var stage0 map[string][]float32
		for _, n := range []int{2, 3} {
			for stage := range 3 {
				t.Run(fmt.Sprintf("%s/ranks=%d/zero=%d", opt, n, stage), func(t *testing.T) {
					res := ranks(t, n, stage, opt, batches)
					for r, rr := range res {
						if !same(rr.params, res[0].params) {
							t.Fatalf("rank %d's weights differ from rank 0's", r)
						}
						if rr.planned != rr.peak {
							t.Errorf("rank %d: planned peak %d, measured %d (%+v)", r, rr.planned, rr.peak, rr.plan)
						}
					}
					d := relDiff(res[0].params, want)
					t.Logf("weights differ from one process's by %.3g relative (L2, worst parameter)", d)
					if d > 1e-5 {
						t.Fatalf("weights after %d steps differ from one process by %.3g relative", steps, d)
					}
					for i, l := range res[0].losses {
						if math.Abs(l-wantLoss[i]) > 1e-5*math.Abs(wantLoss[i]) {
							t.Errorf("step %d: loss %v, one process %v", i, l, wantLoss[i])
						}
					}
					if n == 2 {
						if stage == 0 {
							stage0 = res[0].params
						} else if !same(res[0].params, stage0) {
							t.Errorf("ZeRO-%d's weights differ from plain data parallelism's", stage)
						}
					}
				})
			}
		}
	}
}

// Ranks with shares of different sizes (7 samples over 2 and 3 ranks)
// still train as one process: each rank's gradient is weighted by its
// share of the global batch, not averaged over ranks.
func TestUnevenShares(t *testing.T) {
	batches := dataOf(3, 7)
	want, _ := single(t, "adam", batches)
	for _, n := range []int{2, 3} {
		for stage := range 3 {
			res := ranks(t, n, stage, "adam", batches)
			if d := relDiff(res[0].params, want); d > 1e-5 {
				t.Errorf("%d ranks, ZeRO-%d: weights differ from one process's by %.3g relative", n, stage, d)
			}
			for r, rr := range res {
				if rr.planned != rr.peak {
					t.Errorf("%d ranks, ZeRO-%d, rank %d: planned peak %d, measured %d", n, stage, r, rr.planned, rr.peak)
				}
			}
		}
	}
}

// Under ZeRO each rank's allocator holds 1/N of the optimizer state
// (stage 1 and 2) and of the gradients (stage 2), up to padding to whole
// shards and the allocator's 512-byte rounding; the communication buffer
// is an allocation of its own category; the plan counts all of it.
func TestZeroShardsMemory(t *testing.T) {
	batches := data(2)
	full := ranks(t, 1, 0, "adam", batches)[0]
	fullOpt, fullGrad := full.byCategory[device.OptimizerState], full.byCategory[device.Gradient]
	for _, n := range []int{2, 3} {
		for stage := range 3 {
			t.Run(fmt.Sprintf("ranks=%d/zero=%d", n, stage), func(t *testing.T) {
				for r, rr := range ranks(t, n, stage, "adam", batches) {
					opt, grad, com := rr.byCategory[device.OptimizerState], rr.byCategory[device.Gradient], rr.byCategory[device.Communication]
					t.Logf("rank %d: optimizer state %d (unsharded %d), gradients %d (unsharded %d), communication %d; plan %+v", r, opt, fullOpt, grad, fullGrad, com, rr.plan)
					if com == 0 || rr.plan.Communication != com {
						t.Errorf("rank %d: communication %d, planned %d", r, com, rr.plan.Communication)
					}
					if rr.plan.Gradients != grad || rr.plan.OptimizerState != opt {
						t.Errorf("rank %d: plan %+v, allocator gradients %d optimizer state %d", r, rr.plan, grad, opt)
					}
					if stage == 0 {
						if opt != fullOpt || grad != fullGrad {
							t.Errorf("rank %d: stage 0 holds optimizer state %d and gradients %d, one process %d and %d", r, opt, grad, fullOpt, fullGrad)
						}
						continue
					}
					// Padding: at most one 512-byte granule per buffer more
					// than 1/N, plus the shard's rounding up.
					slack := int64(3 * 2 * 512)
					if opt != rr.optStateExpect || opt > fullOpt/int64(n)+slack {
						t.Errorf("rank %d: optimizer state %d, want %d (~1/%d of %d)", r, opt, rr.optStateExpect, n, fullOpt)
					}
					switch stage {
					case 1:
						if grad != fullGrad {
							t.Errorf("rank %d: ZeRO-1 gradients %d, want all %d", r, grad, fullGrad)
						}
					case 2:
						if rr.fullGradsHeld || grad != rr.gradShardsExpect || grad > fullGrad/int64(n)+3*512 {
							t.Errorf("rank %d: ZeRO-2 gradients %d (full buffers held: %v), want the shards' %d (~1/%d of %d)", r, grad, rr.fullGradsHeld, rr.gradShardsExpect, n, fullGrad)
						}
					}
				}
			})
		}
	}
}

// Ranks set up differently stop with an error naming the rank, on every
// rank; a rank that fails in a step aborts the others' collectives.
func TestMismatchAndFailure(t *testing.T) {
	err := comm.Run(context.Background(), 3, func(ctx context.Context, c comm.Comm) error {
		dev := device.CPU()
		s := nn.NewStore()
		w := slices.Clone(widths)
		if c.Rank() == 2 {
			w[1]++ // another model
		}
		m := zoo.NewMLP(s.Root(), w...)
		if err := s.Materialize(dev, 1); err != nil {
			return err
		}
		defer s.Release()
		tr, dp, err := dist.NewTrainer(ctx, c, dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "sgd"), train.Config{}, dist.Options{})
		if err != nil {
			return err
		}
		tr.Close()
		dp.Close()
		return nil
	})
	if !errors.Is(err, dist.ErrMismatch) || !strings.Contains(err.Error(), "rank(s) 2 differ from rank 0 in the model") {
		t.Fatalf("err = %v", err)
	}
	// Every rank says so, not only rank 2.
	if strings.Count(err.Error(), "rank(s) 2") != 3 {
		t.Fatalf("not every rank reported the mismatch: %v", err)
	}

	b := data(1)[0]
	boom := errors.New("no data")
	err = comm.Run(context.Background(), 2, func(ctx context.Context, c comm.Comm) error {
		dev := device.CPU()
		s := nn.NewStore()
		m := zoo.NewMLP(s.Root(), widths...)
		if err := s.Materialize(dev, 1); err != nil {
			return err
		}
		defer s.Release()
		tr, dp, err := dist.NewTrainer(ctx, c, dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "adam"), train.Config{}, dist.Options{Stage: 2})
		if err != nil {
			return err
		}
		defer dp.Close()
		defer tr.Close()
		if c.Rank() == 1 {
			return boom
		}
		_, err = tr.Step(ctx, b.X, b.Y)
		return err
	})
	if !errors.Is(err, boom) || !errors.Is(err, comm.ErrAborted) || !strings.Contains(err.Error(), "rank 1: no data") {
		t.Fatalf("err = %v", err)
	}
}

func TestOptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    dist.Options
		cfg  train.Config
		want string
	}{
		{"stage", dist.Options{Stage: 3}, train.Config{}, "ZeRO stage 3"},
		{"bucket", dist.Options{BucketBytes: -1}, train.Config{}, "bucket of -1"},
		{"in-backward", dist.Options{Stage: 1}, train.Config{OptimizerInBackward: true}, "ZeRO stage 2 does that"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := comm.NewLocal(1)
			dev := device.CPU()
			s := nn.NewStore()
			m := zoo.NewMLP(s.Root(), widths...)
			if err := s.Materialize(dev, 1); err != nil {
				t.Fatal(err)
			}
			defer s.Release()
			_, _, err := dist.NewTrainer(context.Background(), l.Comm(0), dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "sgd"), tc.cfg, tc.o)
			if !errors.Is(err, dist.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestShardIndices(t *testing.T) {
	for _, tc := range []struct {
		n, size int
		want    [][]int
	}{
		{4, 2, [][]int{{0, 1}, {2, 3}}},
		{5, 2, [][]int{{0, 1, 2}, {3, 4}}},
		{7, 3, [][]int{{0, 1, 2}, {3, 4}, {5, 6}}},
		{2, 3, [][]int{{0}, {1}, {}}},
	} {
		idx := make([]int, tc.n)
		for i := range idx {
			idx[i] = i
		}
		for r, w := range tc.want {
			if got := dist.ShardIndices(idx, r, tc.size); !slices.Equal(got, w) {
				t.Errorf("%d over %d, rank %d: %v, want %v", tc.n, tc.size, r, got, w)
			}
		}
	}
	// ShardBatch takes the same rows.
	b := data(1)[0]
	part, err := dist.ShardBatch(b, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(part.Y.I64(), b.Y.I64()[3:6]) {
		t.Errorf("rank 1 of 3: targets %v, want rows 3..5 of %v", part.Y.I64(), b.Y.I64())
	}
	if _, err := dist.ShardBatch(train.Batch{X: b.X, Y: b.Y}, 0, 9); !errors.Is(err, dist.ErrConfig) {
		t.Errorf("8 samples over 9 ranks: %v", err)
	}
}
