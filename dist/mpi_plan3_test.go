//go:build mpi

package dist_test

import (
	"context"
	"math/rand"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/mpitest"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Over MPI, every rank's measured peak equals the plan dist.PlanRank makes
// for it on the meta device (what `headroom plan --ranks` prints), under
// ZeRO-3 (the mlp and a small GPT, uneven shares of the batch) and tensor
// parallelism (the small GPT over all the ranks).
func TestMPIPlanRanksZero3Tensor(t *testing.T) {
	if mpitest.Mode() == "" {
		if out, err := mpitest.Test(t, 2, "TestMPIPlanRanksZero3Tensor", "1", "-test.v"); err != nil {
			t.Fatalf("mpirun -np 2: %v\n%s", err, out)
		} else {
			t.Logf("%s", out)
		}
		return
	}
	c := mpitest.Join(t)
	defer comm.Close(c)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		l    dist.Layout
	}{
		{"mlp", dist.Layout{Ranks: c.Size(), Zero: 3}},
		{"gpt", dist.Layout{Ranks: c.Size(), Zero: 3}},
		{"gpt", dist.Layout{Ranks: c.Size(), Tensor: c.Size()}},
	} {
		j := planJobs(t, 5)[tc.name]
		xm, ym := j.Example(j.Batch)
		x, y := testkit.Batch(rand.New(rand.NewSource(3)), xm, ym, 10)
		p, err := dist.PlanRank(ctx, j, tc.l, c.Rank())
		if err != nil {
			comm.Abort(c, err)
		}
		dev := device.CPU()
		opt, _ := j.NewOptimizer()
		s := nn.NewStore()
		var tr *train.Trainer
		var closeAll func()
		part := train.Batch{X: x, Y: y}
		if tc.l.Tensor > 1 {
			cfg, err := dist.TensorGPTConfig(j)
			if err != nil {
				comm.Abort(c, err)
			}
			m, err := zoo.NewTPGPT(s.Root(), cfg, c.Rank(), c.Size())
			if err != nil {
				comm.Abort(c, err)
			}
			if err := s.Materialize(dev, 1); err != nil {
				comm.Abort(c, err)
			}
			if tr, err = dist.NewTensorTrainer(ctx, c, dev, s, m, zoo.GPTLoss, opt, j.Config); err != nil {
				comm.Abort(c, err)
			}
			closeAll = func() { tr.Close(); s.Release() }
		} else {
			m, loss := j.Build(s)
			t3, z, err := dist.NewZero3Trainer(ctx, c, dev, s, m, loss, opt, j.Config, dist.Zero3Options{Seed: 1})
			if err != nil {
				comm.Abort(c, err)
			}
			tr, closeAll = t3, func() { t3.Close(); z.Close() }
			if part, err = dist.ShardBatch(part, c.Rank(), c.Size()); err != nil {
				comm.Abort(c, err)
			}
		}
		for range 2 {
			dev.Alloc.ResetPeak()
			if _, err := tr.Step(ctx, part.X, part.Y); err != nil {
				comm.Abort(c, err)
			}
		}
		if peak := dev.Alloc.MaxMemoryAllocated(); peak != p.Memory.Total() {
			t.Errorf("%s rank %d, %v: planned %d, measured %d", tc.name, c.Rank(), tc.l, p.Memory.Total(), peak)
		} else {
			t.Logf("%s rank %d, %v: planned = measured = %d", tc.name, c.Rank(), tc.l, peak)
		}
		closeAll()
	}
}

// `mpirun -np 2 headroom train --zero 3` saves, from rank 0, the weights
// one process saves (within 1e-5); `--tensor 2` trains the GPT split
// across the ranks and saves its gathered weights.
func TestMPITrainZero3Tensor(t *testing.T) {
	bin := mpitest.Headroom(t)
	dir := t.TempDir()
	args := []string{"train", "--model", "mlp", "--limit", "256", "--batch-size", "64", "--steps", "4", "--threads", "1"}
	one := filepath.Join(dir, "one.safetensors")
	if out, err := exec.Command(bin, append(args, "--save", one)...).CombinedOutput(); err != nil {
		t.Fatalf("headroom train: %v\n%s", err, out)
	}
	two := filepath.Join(dir, "two.safetensors")
	out, err := mpitest.Run(t, 2, nil, append([]string{bin}, append(args, "--zero", "3", "--save", two)...)...)
	if err != nil || strings.Count(out, "ZeRO stage 3") != 1 || strings.Count(out, "gathered from 2 ranks") != 1 {
		t.Fatalf("mpirun -np 2 headroom train --zero 3: %v\n%s", err, out)
	}
	want, err := safetensors.Load(one)
	if err != nil {
		t.Fatal(err)
	}
	got, err := safetensors.Load(two)
	if err != nil {
		t.Fatal(err)
	}
	a, b := map[string][]float32{}, map[string][]float32{}
	for k, v := range want {
		b[k] = v.F32()
		a[k] = got[k].F32()
	}
	if d := relDiff(a, b); d > 1e-5 {
		t.Errorf("--zero 3: weights differ from one process's by %.3g relative", d)
	} else {
		t.Logf("--zero 3: weights within %.3g of one process's", d)
	}
	gpt := filepath.Join(dir, "gpt.safetensors")
	out, err = mpitest.Run(t, 2, nil, bin, "train", "--model", "gpt-shakespeare-char", "--limit", "4", "--batch-size", "2", "--steps", "1", "--threads", "1", "--tensor", "2", "--save", gpt)
	if err != nil || strings.Count(out, "tensor parallel: 2 ranks") != 1 || strings.Count(out, "gathered from 2 ranks") != 1 {
		t.Fatalf("mpirun -np 2 headroom train --tensor 2: %v\n%s", err, out)
	}
	if _, err := safetensors.Load(gpt); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", out)
}
