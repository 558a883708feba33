//go:build mpi

package dist_test

import (
	"context"
	"fmt"
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

// stepShares steps tr on this rank's share of each of batches and checks
// that the last step's measured peak equals tr's plan for it; what names
// the run in the message ("rank 1, ZeRO-2"). An error aborts the job.
func stepShares(t *testing.T, ctx context.Context, c comm.Comm, tr *train.Trainer, dev *device.Device, batches []train.Batch, what string) {
	t.Helper()
	for i, b := range batches {
		part, err := dist.ShardBatch(b, c.Rank(), c.Size())
		if err != nil {
			comm.Abort(c, err)
		}
		var planned int64
		if i == len(batches)-1 {
			mp, err := tr.Plan(train.MetaOf(part.X), train.MetaOf(part.Y))
			if err != nil {
				comm.Abort(c, err)
			}
			planned = mp.Total()
			dev.Alloc.ResetPeak()
		}
		if _, err := tr.Step(ctx, part.X, part.Y); err != nil {
			comm.Abort(c, err)
		}
		if peak := dev.Alloc.MaxMemoryAllocated(); planned != 0 && peak != planned {
			t.Errorf("%s: planned peak %d, measured %d", what, planned, peak)
		}
	}
}

// Over MPI, each rank trains its half and ends with the weights of one
// process on the whole batch (within 1e-5), and its planned peak equals
// its measured one, for ZeRO stages 0, 1 and 2.
func TestMPIDataParallel(t *testing.T) {
	if mpitest.Mode() != "" {
		c := mpitest.Join(t)
		defer comm.Close(c)
		batches := data(3)
		want, _ := single(t, "adam", batches)
		for stage := range 3 {
			ctx := context.Background()
			dev := device.CPU()
			s := nn.NewStore()
			m := zoo.NewMLP(s.Root(), widths...)
			if err := s.Materialize(dev, int64(1+c.Rank())); err != nil {
				t.Fatal(err)
			}
			tr, dp, err := dist.NewTrainer(ctx, c, dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "adam"), train.Config{}, dist.Options{Stage: stage, BucketBytes: 4096})
			if err != nil {
				t.Fatal(err)
			}
			stepShares(t, ctx, c, tr, dev, batches, fmt.Sprintf("rank %d, ZeRO-%d", c.Rank(), stage))
			if d := relDiff(params(s), want); d > 1e-5 {
				t.Errorf("rank %d, ZeRO-%d: weights differ from one process's by %.3g relative", c.Rank(), stage, d)
			}
			tr.Close()
			dp.Close()
			s.Release()
		}
		return
	}
	for _, n := range []int{2, 3} {
		if out, err := mpitest.Test(t, n, "TestMPIDataParallel", "1"); err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", n, err, out)
		}
	}
}

// `mpirun -np 2 headroom train` (built with -tags mpi) saves, from rank 0,
// the weights that one process training on the same batches saves.
func TestMPITrainCommand(t *testing.T) {
	bin := mpitest.Headroom(t)
	dir := t.TempDir()
	args := []string{"train", "--model", "mlp", "--limit", "256", "--batch-size", "64", "--steps", "4", "--threads", "1"}
	one := filepath.Join(dir, "one.safetensors")
	if out, err := exec.Command(bin, append(args, "--save", one)...).CombinedOutput(); err != nil {
		t.Fatalf("headroom train: %v\n%s", err, out)
	}
	want, err := safetensors.Load(one)
	if err != nil {
		t.Fatal(err)
	}
	for _, zero := range []string{"0", "2"} {
		two := filepath.Join(dir, "two"+zero+".safetensors")
		out, err := mpitest.Run(t, 2, nil, append([]string{bin}, append(args, "--zero", zero, "--save", two)...)...)
		if err != nil {
			t.Fatalf("mpirun -np 2 headroom train --zero %s: %v\n%s", zero, err, out)
		}
		if strings.Count(out, "data parallel: 2 ranks") != 1 || strings.Count(out, "saved weights") != 1 {
			t.Errorf("--zero %s: rank 0 alone should print and save:\n%s", zero, out)
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
			t.Errorf("--zero %s: weights differ from one process's by %.3g relative", zero, d)
		} else {
			t.Logf("--zero %s: weights within %.3g of one process's", zero, d)
		}
	}
	// A mismatched configuration stops every rank, naming the rank.
	out, err := mpitest.Run(t, 2, nil, "sh", "-c", fmt.Sprintf(`if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec %s %s --optimizer sgd; else exec %s %s; fi`, bin, strings.Join(args, " "), bin, strings.Join(args, " ")))
	if err == nil || !strings.Contains(out, "rank(s) 1 differ from rank 0 in the model") {
		t.Errorf("ranks with different optimizers: %v\n%s", err, out)
	}
}

// Over MPI, every rank's measured peak equals the plan dist.PlanRank makes
// for it on the meta device (what `headroom plan --ranks` prints), for
// ZeRO 0–2, the mlp and a small GPT, with uneven shares of the batch.
func TestMPIPlanRanks(t *testing.T) {
	if mpitest.Mode() == "" {
		if out, err := mpitest.Test(t, 2, "TestMPIPlanRanks", "1", "-test.v"); err != nil {
			t.Fatalf("mpirun -np 2: %v\n%s", err, out)
		} else {
			t.Logf("%s", out)
		}
		return
	}
	c := mpitest.Join(t)
	defer comm.Close(c)
	ctx := context.Background()
	for _, name := range []string{"mlp", "gpt"} {
		j := planJobs(t, 5)[name]
		xm, ym := j.Example(j.Batch)
		x, y := testkit.Batch(rand.New(rand.NewSource(3)), xm, ym, 10)
		for zero := range 3 {
			l := dist.Layout{Ranks: c.Size(), Zero: zero, BucketBytes: 4096}
			p, err := dist.PlanRank(ctx, j, l, c.Rank())
			if err != nil {
				comm.Abort(c, err)
			}
			dev := device.CPU()
			s := nn.NewStore()
			m, loss := j.Build(s)
			if err := s.Materialize(dev, 1); err != nil {
				comm.Abort(c, err)
			}
			opt, _ := j.NewOptimizer()
			tr, dp, err := dist.NewTrainer(ctx, c, dev, s, m, loss, opt, j.Config, dist.Options{Stage: zero, BucketBytes: 4096})
			if err != nil {
				comm.Abort(c, err)
			}
			part, err := dist.ShardBatch(train.Batch{X: x, Y: y}, c.Rank(), c.Size())
			if err != nil {
				comm.Abort(c, err)
			}
			for range 2 {
				dev.Alloc.ResetPeak()
				if _, err := tr.Step(ctx, part.X, part.Y); err != nil {
					comm.Abort(c, err)
				}
			}
			if peak := dev.Alloc.MaxMemoryAllocated(); peak != p.Memory.Total() {
				t.Errorf("%s rank %d, ZeRO-%d: planned %d, measured %d", name, c.Rank(), zero, p.Memory.Total(), peak)
			} else {
				t.Logf("%s rank %d, ZeRO-%d: planned = measured = %d", name, c.Rank(), zero, peak)
			}
			tr.Close()
			dp.Close()
			s.Release()
		}
	}
}

// `mpirun -np 2 headroom train --budget B`: the ranks plan themselves
// under B and train within it; a budget the ranks cannot meet stops the
// job with a message naming the rank and the smallest budget.
func TestMPITrainBudget(t *testing.T) {
	bin := mpitest.Headroom(t)
	args := []string{bin, "train", "--model", "mlp", "--limit", "1024", "--batch-size", "1024", "--steps", "1", "--threads", "1"}
	out, err := mpitest.Run(t, 2, nil, append(args, "--budget", "27262975")...) // just under one pass's 26 MiB
	if err != nil || !strings.Contains(out, "every rank runs its share in 16 pass(es) per step") {
		t.Fatalf("--budget 26MiB-1: %v\n%s", err, out)
	}
	out, err = mpitest.Run(t, 2, nil, append(args, "--budget", "1MiB")...)
	if err == nil || !strings.Contains(out, "rank 0 needs") || !strings.Contains(out, "the smallest budget every rank meets is") {
		t.Fatalf("--budget 1MiB: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// `mpirun -np 2 headroom train --zero 2 --checkpoint-dir`: the checkpoint
// (the optimizer's shards gathered to rank 0) resumes in one process with
// the weights of the uninterrupted ZeRO-2 run within 1e-6.
func TestMPIZeroCheckpoint(t *testing.T) {
	bin := mpitest.Headroom(t)
	dir := t.TempDir()
	args := []string{"train", "--model", "mlp", "--limit", "256", "--batch-size", "64", "--threads", "1"}
	straight, resumed, ckpt := filepath.Join(dir, "straight.safetensors"), filepath.Join(dir, "resumed.safetensors"), filepath.Join(dir, "ckpt")
	if out, err := mpitest.Run(t, 2, nil, append([]string{bin}, append(args, "--zero", "2", "--steps", "4", "--save", straight)...)...); err != nil {
		t.Fatalf("uninterrupted: %v\n%s", err, out)
	}
	if out, err := mpitest.Run(t, 2, nil, append([]string{bin}, append(args, "--zero", "2", "--steps", "2", "--checkpoint-dir", ckpt)...)...); err != nil || strings.Count(out, "saved checkpoint") != 1 {
		t.Fatalf("checkpointed: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, append(args, "--steps", "4", "--resume", ckpt, "--save", resumed)...).CombinedOutput(); err != nil {
		t.Fatalf("resumed in one process: %v\n%s", err, out)
	}
	a, b := map[string][]float32{}, map[string][]float32{}
	for _, x := range []struct {
		m    map[string][]float32
		file string
	}{{a, resumed}, {b, straight}} {
		w, err := safetensors.Load(x.file)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range w {
			x.m[k] = v.F32()
		}
	}
	if d := relDiff(a, b); d > 1e-6 {
		t.Errorf("resumed in one process: weights %.3g from the uninterrupted ZeRO-2 run", d)
	} else {
		t.Logf("ZeRO-2 checkpoint of mpirun -np 2 resumed in one process: within %.3g", d)
	}
}

// Over MPI, the all-reduce overlapped with the backward pass (from a
// goroutine: MPI_THREAD_SERIALIZED, the step makes no other call until it
// ends) gives one process's weights within 1e-5 and the planned peak.
func TestMPIOverlap(t *testing.T) {
	if mpitest.Mode() == "" {
		if out, err := mpitest.Test(t, 2, "TestMPIOverlap", "1"); err != nil {
			t.Fatalf("mpirun -np 2: %v\n%s", err, out)
		}
		return
	}
	c := mpitest.Join(t)
	defer comm.Close(c)
	batches := data(3)
	want, _ := single(t, "adam", batches)
	ctx := context.Background()
	dev := device.CPU()
	s := nn.NewStore()
	m := zoo.NewMLP(s.Root(), widths...)
	if err := s.Materialize(dev, int64(1+c.Rank())); err != nil {
		t.Fatal(err)
	}
	tr, dp, err := dist.NewTrainer(ctx, c, dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "adam"), train.Config{}, dist.Options{BucketBytes: 4096, Overlap: true})
	if err != nil {
		comm.Abort(c, err)
	}
	stepShares(t, ctx, c, tr, dev, batches, fmt.Sprintf("rank %d", c.Rank()))
	if d := relDiff(params(s), want); d > 1e-5 {
		t.Errorf("rank %d: weights differ from one process's by %.3g relative", c.Rank(), d)
	}
	if buckets, early := dp.Overlapped(); early == 0 {
		t.Errorf("rank %d: %d buckets, none during the backward pass", c.Rank(), buckets)
	}
	tr.Close()
	dp.Close()
	s.Release()
}
