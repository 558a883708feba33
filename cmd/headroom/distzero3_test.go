package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
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
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// `headroom plan --ranks N --zero 3 --gather-prefetch D` prints each
// rank's measured peak under ZeRO-3 with D layers' gathers ahead, to the
// byte, for D = 0, 1, 2, in fp32 and bf16-mixed (in-process ranks running
// the trainer mpirun's ranks run).
func TestPlanRanksGatherPrefetchPrinted(t *testing.T) {
	for _, c := range []struct {
		model        string
		ranks, batch int
		precision    string
	}{{"mlp", 2, 5, "fp32"}, {"mlp", 3, 5, "fp32"}, {"cnn", 2, 4, "fp32"}, {"cnn", 2, 4, "bf16-mixed"}} {
		prec, err := transform.ParsePrecision(c.precision)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := zoo.Lookup(c.model)
		if err != nil {
			t.Fatal(err)
		}
		x, y := testkit.SpecBatch(spec, c.batch, 1)
		var base map[int]int64
		for _, depth := range []int{0, 1, 2} {
			t.Run(fmt.Sprintf("%s/ranks=%d/%s/depth=%d", c.model, c.ranks, c.precision, depth), func(t *testing.T) {
				printed, _ := printedPeaks(t, c.ranks, "--model", c.model, "--batch-size", fmt.Sprint(c.batch), "--zero", "3", "--gather-prefetch", fmt.Sprint(depth), "--precision", c.precision)
				if depth == 0 {
					base = printed
				} else {
					t.Logf("rank 0 planned %d, %d without prefetch", printed[0], base[0])
				}
				peaksEqualPrinted(t, c.ranks, printed, func(ctx context.Context, cm comm.Comm, dev *device.Device, opt optim.Optimizer, release func(func())) (*train.Trainer, train.Batch, error) {
					s := nn.NewStore()
					tr, z, err := dist.NewZero3Trainer(ctx, cm, dev, s, spec.New(s.Root()), spec.Loss, opt, train.Config{Precision: prec}, dist.Zero3Options{Seed: 1, Prefetch: depth})
					if err != nil {
						return nil, train.Batch{}, err
					}
					release(z.Close)
					release(tr.Close)
					part, err := dist.ShardBatch(train.Batch{X: x, Y: y}, cm.Rank(), cm.Size())
					return tr, part, err
				})
			})
		}
	}
}

// `train --zero 3 --gather-prefetch 1` on in-process ranks saves the
// weights of `--gather-prefetch 0` bit for bit; the flag is refused
// outside ZeRO 3 by train and by plan --ranks.
func TestTrainRanksGatherPrefetch(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	dir := t.TempDir()
	base := trainFlags{model: "mlp", epochs: 1, batch: 8, lr: 1e-2, optimizer: "adam", device: "cpu", seed: 1, limit: 32, steps: 3, recompute: "none"}
	base.dist.zero = 3
	saved := map[int]string{}
	for _, depth := range []int{0, 1} {
		f := base
		f.dist.gatherPrefetch = depth
		f.save = filepath.Join(dir, fmt.Sprintf("prefetch%d.safetensors", depth))
		if out, err := trainRanks(t, 2, f); err != nil {
			t.Fatalf("--gather-prefetch %d: %v\n%s", depth, err, out)
		}
		saved[depth] = f.save
	}
	want, have := loadSaved(t, "mlp", saved[0]), loadSaved(t, "mlp", saved[1])
	for name, w := range want {
		for k, v := range w.F32() {
			if math.Float32bits(v) != math.Float32bits(have[name].F32()[k]) {
				t.Fatalf("%s[%d]: %v with prefetch, %v without", name, k, have[name].F32()[k], v)
			}
		}
	}
	f := base
	f.dist.zero, f.dist.gatherPrefetch = 2, 1
	if _, err := trainRanks(t, 2, f); err == nil || !strings.Contains(err.Error(), "--gather-prefetch 1: only with --zero 3") {
		t.Errorf("train --zero 2 --gather-prefetch 1: %v", err)
	}
	var out bytes.Buffer
	for _, args := range [][]string{{"--zero", "2"}, {}} {
		err := planMain(context.Background(), append([]string{"--ranks", "2", "--model", "mlp", "--gather-prefetch", "1"}, args...), &out, &out)
		if err == nil || !strings.Contains(err.Error(), "only with --zero 3") {
			t.Errorf("plan --ranks 2 --gather-prefetch 1 %v: %v", args, err)
		}
	}
}

// `headroom train --zero 3` (mlp, Adam) and `--tensor 2` (a GPT without
// dropout, SGD) with --checkpoint-dir on 2 ranks write the checkpoint one
// process writes: resumed on 2 ranks the run ends with the uninterrupted
// run's weights bit for bit; resumed in one process, within 1e-5.
func TestTrainShardedCheckpoint(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	withTinyGPT(t)
	for _, c := range []struct {
		model        string
		zero, tensor int
		batch, limit int
		opt          string
		lr           float64
	}{
		{"mlp", 3, 1, 16, 64, "adam", 1e-2},
		{"gpt-tiny", 0, 2, 4, 16, "sgd", 0.1},
	} {
		t.Run(fmt.Sprintf("%s/zero=%d/tensor=%d", c.model, c.zero, c.tensor), func(t *testing.T) {
			dir := t.TempDir()
			base := trainFlags{model: c.model, epochs: 1, batch: c.batch, lr: c.lr, optimizer: c.opt, device: "cpu", seed: 1, limit: c.limit, recompute: "none", threads: 1}
			ranks := func(f trainFlags) string {
				t.Helper()
				f.dist.zero, f.dist.tensor = c.zero, c.tensor
				out, err := trainRanks(t, 2, f)
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				return out
			}
			f := base
			f.steps, f.save = 4, filepath.Join(dir, "straight.safetensors")
			ranks(f)
			f = base
			f.steps, f.ckptDir = 2, filepath.Join(dir, "ckpt")
			if out := ranks(f); strings.Count(out, "saved checkpoint") != 1 {
				t.Errorf("rank 0 should save once:\n%s", out)
			}
			// The resumed runs write their checkpoints where they resumed
			// from: one process resumes from a copy.
			if err := os.CopyFS(filepath.Join(dir, "ckpt1"), os.DirFS(filepath.Join(dir, "ckpt"))); err != nil {
				t.Fatal(err)
			}
			f = base
			f.steps, f.resume, f.save = 4, filepath.Join(dir, "ckpt"), filepath.Join(dir, "resumed.safetensors")
			if out := ranks(f); !strings.Contains(out, "resumed from") {
				t.Errorf("rank 0's output:\n%s", out)
			}
			if d := weightsDiff(t, f.save, filepath.Join(dir, "straight.safetensors")); d != 0 {
				t.Errorf("resumed on 2 ranks: weights %.3g from the uninterrupted run, want bit for bit", d)
			}
			f.dist = distFlags{}
			f.resume, f.save = filepath.Join(dir, "ckpt1"), filepath.Join(dir, "one.safetensors")
			var out, log bytes.Buffer
			if err := trainFashion(context.Background(), f, &out, &log); err != nil {
				t.Fatalf("resumed in one process: %v\n%s%s", err, out.String(), log.String())
			}
			if d := weightsDiff(t, f.save, filepath.Join(dir, "straight.safetensors")); d > 1e-5 {
				t.Errorf("resumed in one process: weights %.3g from the ranks' run", d)
			} else {
				t.Logf("resumed in one process: within %.3g of the ranks' run", d)
			}
		})
	}
}

// `headroom train --budget` under --zero 3 (with and without prefetch)
// and --tensor 2: each rank plans itself under the budget, the ranks
// agree on the passes and train within it (devices capped at the budget);
// a budget a rank cannot meet stops every rank, naming the rank and the
// smallest budget, which is then enough.
func TestTrainRanksBudgetSharded(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	withTinyGPT(t)
	for _, c := range []struct {
		model                  string
		zero, tensor, prefetch int
		batch                  int
	}{
		{"cnn", 3, 1, 0, 256},
		{"cnn", 3, 1, 1, 256},
		{"gpt-tiny", 0, 2, 0, 64},
	} {
		t.Run(fmt.Sprintf("%s/zero=%d/tensor=%d/prefetch=%d", c.model, c.zero, c.tensor, c.prefetch), func(t *testing.T) {
			if testing.Short() && c.prefetch > 0 {
				t.Skip("-short")
			}
			f := trainFlags{model: c.model, epochs: 1, batch: c.batch, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: c.batch, steps: 1, recompute: "none", threads: 1}
			f.dist.zero, f.dist.tensor, f.dist.gatherPrefetch, f.dist.bucket = c.zero, c.tensor, c.prefetch, "25MiB"
			spec, err := lookupSpec(c.model)
			if err != nil {
				t.Fatal(err)
			}
			j := dist.Job{Build: testkit.Build(spec), Example: spec.Example, Batch: c.batch, NewOptimizer: func() (optim.Optimizer, error) { return newOptimizer("adam", 1e-3, -1) }}
			groups, err := dist.PlanRanks(context.Background(), j, f.dist.layout(2, 25<<20))
			if err != nil {
				t.Fatal(err)
			}
			whole, _ := dist.MaxReserved(groups)
			f.budget = fmt.Sprint(whole - 1)
			out, err := trainRanks(t, 2, f)
			if err != nil {
				t.Fatalf("--budget %d on 2 ranks: %v\n%s", whole-1, err, out)
			}
			if !strings.Contains(out, "pass(es) per step") || strings.Contains(out, "in 1 pass(es)") {
				t.Errorf("below one pass's reservation the ranks should accumulate:\n%s", out)
			}
			f.budget = "1MiB"
			_, err = trainRanks(t, 2, f)
			var be *dist.RankBudgetError
			if !errors.As(err, &be) || !strings.Contains(err.Error(), "rank 0 needs") || !strings.Contains(err.Error(), "the smallest budget every rank meets is") {
				t.Fatalf("--budget 1MiB: %v", err)
			}
			f.budget = fmt.Sprint(be.Smallest)
			if out, err := trainRanks(t, 2, f); err != nil {
				t.Errorf("--budget %d (the smallest named): %v\n%s", be.Smallest, err, out)
			}
		})
	}
}

// `headroom train --data` under --zero 3 (the mlp on a CSV table) and
// --tensor 2 (a GPT without dropout on a token file) on in-process ranks
// ends with the weights one process ends with on the same data, within
// 1e-5 relative (the largest difference of each tensor over its largest
// value).
func TestTrainRanksShardedData(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	withTinyGPT(t)
	dir := t.TempDir()
	var csv strings.Builder
	for r := range 48 {
		fmt.Fprint(&csv, r%3)
		for j := range 784 {
			fmt.Fprintf(&csv, ",%d", (r*31+j*(r%3+1))%17)
		}
		csv.WriteString("\n")
	}
	table := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(table, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	toks := make([]byte, 2*2000)
	for i := range 2000 {
		binary.LittleEndian.PutUint16(toks[2*i:], uint16(i*7%65))
	}
	tokens := filepath.Join(dir, "train.bin")
	if err := os.WriteFile(tokens, toks, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model, data  string
		zero, tensor int
		batch        int
		opt          string
		lr           float64
	}{
		{"mlp", table, 3, 1, 8, "adam", 1e-2},
		{"gpt-tiny", tokens, 0, 2, 4, "sgd", 0.1},
	} {
		t.Run(fmt.Sprintf("%s/zero=%d/tensor=%d", c.model, c.zero, c.tensor), func(t *testing.T) {
			base := trainFlags{model: c.model, data: c.data, epochs: 1, batch: c.batch, lr: c.lr, optimizer: c.opt, device: "cpu", seed: 1, steps: 3, recompute: "none", threads: 1}
			one := base
			one.save = filepath.Join(t.TempDir(), "one.safetensors")
			var out, log bytes.Buffer
			if err := trainFashion(context.Background(), one, &out, &log); err != nil {
				t.Fatalf("one process: %v\n%s%s", err, out.String(), log.String())
			}
			many := base
			many.save = filepath.Join(t.TempDir(), "many.safetensors")
			many.dist.zero, many.dist.tensor = c.zero, c.tensor
			got, err := trainRanks(t, 2, many)
			if err != nil {
				t.Fatalf("2 ranks: %v\n%s", err, got)
			}
			if !strings.Contains(got, "data: ") || !strings.Contains(got, "step 3") {
				t.Errorf("rank 0's output:\n%s", got)
			}
			want, have := loadSaved(t, c.model, one.save), loadSaved(t, c.model, many.save)
			for name, w := range want {
				if w.DType != tensor.Float32 {
					continue
				}
				var diff, scale float64
				for k, v := range w.F32() {
					diff = max(diff, math.Abs(float64(v-have[name].F32()[k])))
					scale = max(scale, math.Abs(float64(v)))
				}
				if diff > 1e-5*scale {
					t.Errorf("%s: largest difference %g of largest value %g", name, diff, scale)
				}
			}
		})
	}
}
