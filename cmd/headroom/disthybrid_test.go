package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// `headroom plan --ranks 4 --tensor 2` prints, for each rank of 2
// data-parallel groups of 2 tensor-parallel ranks, the peak that rank
// measures when it trains (in-process ranks, as mpirun's run it), to the
// byte: ZeRO 0 and 2 across the groups, shares of 2 and 1 sequences.
func TestPlanRanksHybridTensorPrinted(t *testing.T) {
	const model, batch = "gpt-shakespeare-char", 3
	for _, zero := range []int{0, 2} {
		t.Run(fmt.Sprintf("zero=%d", zero), func(t *testing.T) {
			if testing.Short() {
				t.Skip("-short: 4 ranks of a 6-layer GPT (dist.TestHybridTensorMatchesOneProcess checks plans on a small one)")
			}
			printed, out := printedPeaks(t, 4, "--model", model, "--batch-size", fmt.Sprint(batch), "--tensor", "2", "--zero", fmt.Sprint(zero))
			if !strings.Contains(out, fmt.Sprintf("4 ranks, ZeRO %d, tensor parallel 2", zero)) {
				t.Errorf("output:\n%s", out)
			}
			spec, err := zoo.Lookup(model)
			if err != nil {
				t.Fatal(err)
			}
			x, y := testkit.SpecBatch(spec, batch, 1)
			peaksEqualPrinted(t, 4, printed, func(ctx context.Context, cm comm.Comm, dev *device.Device, opt optim.Optimizer, release func(func())) (*train.Trainer, train.Batch, error) {
				tp, dp, err := dist.HybridGroups(ctx, cm, 2)
				if err != nil {
					return nil, train.Batch{}, err
				}
				cfg, err := dist.TensorGPTConfig(dist.Job{Build: testkit.Build(spec)})
				if err != nil {
					return nil, train.Batch{}, err
				}
				s := nn.NewStore()
				m, err := zoo.NewTPGPT(s.Root(), cfg, tp.Rank(), tp.Size())
				if err != nil {
					return nil, train.Batch{}, err
				}
				if err := s.Materialize(dev, 1); err != nil {
					return nil, train.Batch{}, err
				}
				release(s.Release)
				tr, par, err := dist.NewHybridTrainer(ctx, tp, dp, dev, s, m, spec.Loss, opt, train.Config{}, dist.Options{Stage: zero, BucketBytes: 25 << 20})
				if err != nil {
					return nil, train.Batch{}, err
				}
				release(par.Close)
				release(tr.Close)
				part, err := dist.ShardBatch(train.Batch{X: x, Y: y}, dp.Rank(), dp.Size())
				return tr, part, err
			})
		})
	}
}

// `headroom train --tensor 2` on 4 in-process ranks (2 groups of 2, as
// mpirun's ranks run it) ends with the weights one process ends with on
// the global batch, within 1e-5 relative (the largest difference of each
// tensor over its largest value), under ZeRO 0, 1 and 2 across the
// groups, with uneven shares (5 sequences: 3 and 2).
func TestTrainRanksHybridTensorEqualsOneProcess(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	withTinyGPT(t)
	dir := t.TempDir()
	base := trainFlags{model: "gpt-tiny", epochs: 1, batch: 5, lr: 0.1, optimizer: "sgd", device: "cpu", seed: 1, limit: 20, steps: 3, recompute: "none"}
	one := base
	one.save = filepath.Join(dir, "one.safetensors")
	var out, log strings.Builder
	if err := trainFashion(context.Background(), one, &out, &log); err != nil {
		t.Fatalf("one process: %v\n%s%s", err, out.String(), log.String())
	}
	want := loadSaved(t, "gpt-tiny", one.save)
	zeros := []int{0, 1, 2}
	if testing.Short() {
		zeros = zeros[:1]
	}
	for _, zero := range zeros {
		t.Run(fmt.Sprintf("zero=%d", zero), func(t *testing.T) {
			many := base
			many.save = filepath.Join(dir, fmt.Sprintf("many%d.safetensors", zero))
			many.dist.zero, many.dist.tensor, many.dist.bucket = zero, 2, "25MiB"
			got, err := trainRanks(t, 4, many)
			if err != nil {
				t.Fatalf("4 ranks: %v\n%s", err, got)
			}
			for _, s := range []string{"data × tensor parallel: 4 ranks (MPI) as 2 groups of 2", fmt.Sprintf("ZeRO stage %d across the groups", zero), "gathered from 2 ranks"} {
				if !strings.Contains(got, s) {
					t.Errorf("rank 0's output lacks %q:\n%s", s, got)
				}
			}
			have := loadSaved(t, "gpt-tiny", many.save)
			worst := 0.0
			for name, w := range want {
				h := have[name]
				if w.DType != tensor.Float32 {
					continue
				}
				var diff, scale float64
				for k, v := range w.F32() {
					diff = max(diff, math.Abs(float64(v-h.F32()[k])))
					scale = max(scale, math.Abs(float64(v)))
				}
				worst = max(worst, diff/scale)
				if diff > 1e-5*scale {
					t.Errorf("%s: largest difference %g of largest value %g", name, diff, scale)
				}
			}
			t.Logf("ZeRO %d: weights within %.3g of one process's", zero, worst)
		})
	}
}

// What data parallelism across tensor groups does not support is refused
// before anything runs, on every rank, naming the flags.
func TestTrainRanksHybridTensorRefused(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	withTinyGPT(t)
	base := trainFlags{model: "gpt-tiny", epochs: 1, batch: 4, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 8, steps: 1}
	cases := []struct {
		name  string
		ranks int
		set   func(f *trainFlags)
		want  string
	}{
		{"not a multiple", 3, func(f *trainFlags) { f.dist.tensor = 2 }, "--tensor 2 on 3 ranks: the ranks must be a multiple"},
		{"zero 3", 4, func(f *trainFlags) { f.dist.tensor = 2; f.dist.zero = 3 }, "--tensor 2 with --zero 3 on 4 ranks: ZeRO 3 across tensor-parallel groups is not available"},
		{"batch", 4, func(f *trainFlags) { f.dist.tensor = 2; f.batch = 1 }, "--batch-size 1: fewer samples than the 2 tensor-parallel groups"},
		{"checkpoints", 4, func(f *trainFlags) { f.dist.tensor = 2; f.ckptDir = "x" }, "checkpoints across tensor-parallel groups"},
		{"budget", 4, func(f *trainFlags) { f.dist.tensor = 2; f.budget = "64MiB" }, "--budget with --tensor 2 on 4 ranks"},
		{"data", 4, func(f *trainFlags) { f.dist.tensor = 2; f.data = "x.csv" }, "--data with --tensor 2 on 4 ranks"},
		{"overlap", 4, func(f *trainFlags) { f.dist.tensor = 2; f.dist.overlap = true }, "--overlap with --tensor 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := base
			c.set(&f)
			if _, err := trainRanks(t, c.ranks, f); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
}

// --budget without --zero or --tensor also tries data parallelism across
// tensor groups of every degree that divides the ranks and the heads
// (6 heads on 12 ranks: 2, 3 and 6), under ZeRO 0 and 2; with clipping
// ZeRO 2 is left out.
func TestPlanRanksBudgetTriesHybridTensor(t *testing.T) {
	run := func(args ...string) string {
		var out strings.Builder
		if err := planMain(context.Background(), append([]string{"--ranks", "12", "--model", "gpt-shakespeare-char", "--batch-size", "12", "--budget", "64GiB"}, args...), &out, &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	out := run()
	for _, tdeg := range []int{2, 3, 6} {
		for _, z := range []int{0, 2} {
			if want := fmt.Sprintf("12 ranks, ZeRO %d, tensor parallel %d ", z, tdeg); !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	}
	if strings.Contains(out, "tensor parallel 4") || strings.Contains(out, "tensor parallel 12") {
		t.Errorf("degrees that do not divide the 6 heads tried:\n%s", out)
	}
	if out := run("--clip-grad", "1"); !strings.Contains(out, "ZeRO 0, tensor parallel 2 ") || strings.Contains(out, "ZeRO 2, tensor parallel") {
		t.Errorf("--clip-grad:\n%s", out)
	}
}
