package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/safetensors"
)

// weightsDiff is the largest over the tensors of two saved files of
// ||a-b|| / ||b|| (L2 norms), as dist's tests measure parity.
func weightsDiff(t *testing.T, a, b string) float64 {
	t.Helper()
	wa, err := safetensors.Load(a)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := safetensors.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for k, v := range wb {
		x, y := wa[k].F32(), v.F32()
		if len(x) != len(y) {
			t.Fatalf("%s: %d values, %d", k, len(x), len(y))
		}
		var num, den float64
		for i := range y {
			d := float64(x[i] - y[i])
			num += d * d
			den += float64(y[i]) * float64(y[i])
		}
		worst = max(worst, math.Sqrt(num/max(den, 1e-30)))
	}
	return worst
}

// `headroom train --zero 2 --checkpoint-dir` on 2 ranks writes the
// checkpoint one process writes (the optimizer's shards gathered to rank
// 0): it resumes on 2 ranks and in one process, and one process's resumes
// under ZeRO-2, with the weights of an uninterrupted run within 1e-6.
func TestTrainZeroCheckpoint(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	dir := t.TempDir()
	base := trainFlags{model: "mlp", epochs: 1, batch: 64, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 256, recompute: "none", threads: 1}
	base.dist.bucket = "25MiB"
	one := func(f trainFlags) {
		t.Helper()
		var out, log bytes.Buffer
		if err := trainFashion(context.Background(), f, &out, &log); err != nil {
			t.Fatalf("%v\n%s%s", err, out.String(), log.String())
		}
	}
	two := func(f trainFlags) string {
		t.Helper()
		out, err := trainRanks(t, 2, f)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	copyDir := func(src string) string {
		dst := filepath.Join(t.TempDir(), "ckpt")
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
		return dst
	}

	// Uninterrupted, 4 steps: on 2 ranks under ZeRO-2 and in one process.
	f := base
	f.dist.zero, f.steps, f.save = 2, 4, filepath.Join(dir, "straight2.safetensors")
	two(f)
	f = base
	f.steps, f.save = 4, filepath.Join(dir, "straight1.safetensors")
	one(f)

	// 2 steps on 2 ranks under ZeRO-2, checkpointed; resumed to 4.
	f = base
	f.dist.zero, f.steps, f.ckptDir = 2, 2, filepath.Join(dir, "zero")
	if out := two(f); strings.Count(out, "saved checkpoint") != 1 {
		t.Errorf("rank 0 should save once:\n%s", out)
	}
	for _, n := range []int{2, 1} {
		f = base
		f.steps, f.resume, f.save = 4, copyDir(filepath.Join(dir, "zero")), filepath.Join(dir, "resumed.safetensors")
		if n == 2 {
			f.dist.zero = 2
			two(f)
		} else {
			one(f)
		}
		d := weightsDiff(t, f.save, filepath.Join(dir, "straight2.safetensors"))
		t.Logf("ZeRO-2 checkpoint resumed on %d rank(s): weights within %.3g of the uninterrupted ZeRO-2 run", n, d)
		if d > 1e-6 {
			t.Errorf("resumed on %d rank(s): weights %.3g from the uninterrupted run", n, d)
		}
	}
	// One process's checkpoint, resumed under ZeRO-2 on 2 ranks.
	f = base
	f.steps, f.ckptDir = 2, filepath.Join(dir, "one")
	one(f)
	f = base
	f.dist.zero, f.steps, f.resume, f.save = 2, 4, filepath.Join(dir, "one"), filepath.Join(dir, "resumed1.safetensors")
	two(f)
	if d := weightsDiff(t, f.save, filepath.Join(dir, "straight1.safetensors")); d > 1e-6 {
		t.Errorf("one process's checkpoint under ZeRO-2: weights %.3g from one process's", d)
	} else {
		t.Logf("one process's checkpoint resumed under ZeRO-2 on 2 ranks: within %.3g of one process's run", d)
	}
}

// Checkpoints by time would gather at different steps on different ranks:
// refused under ZeRO, naming the flag.
func TestTrainZeroCheckpointByTime(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	f := trainFlags{model: "mlp", epochs: 1, batch: 64, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 256, recompute: "none", steps: 1, saveEvery: "10m", ckptDir: t.TempDir()}
	f.dist.zero = 1
	_, err := trainRanks(t, 2, f)
	if err == nil || !strings.Contains(err.Error(), "--save-every 10m0s with --zero 1") {
		t.Fatalf("err = %v", err)
	}
}

// `headroom train --overlap` on 2 ranks saves the weights of the run
// without it, bit for bit; refused under ZeRO and without ranks.
func TestTrainOverlap(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	dir := t.TempDir()
	f := trainFlags{model: "mlp", epochs: 1, batch: 64, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 256, recompute: "none", steps: 3, threads: 1}
	f.dist.bucket = "64KiB"
	f.save = filepath.Join(dir, "plain.safetensors")
	if out, err := trainRanks(t, 2, f); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	f.dist.overlap, f.save = true, filepath.Join(dir, "overlap.safetensors")
	if out, err := trainRanks(t, 2, f); err != nil {
		t.Fatalf("--overlap: %v\n%s", err, out)
	}
	if d := weightsDiff(t, f.save, filepath.Join(dir, "plain.safetensors")); d != 0 {
		t.Errorf("--overlap: weights %.3g from the run without it", d)
	}
	f.dist.zero = 1
	if _, err := trainRanks(t, 2, f); err == nil || !strings.Contains(err.Error(), "--overlap with --zero 1") {
		t.Errorf("--overlap --zero 1: %v", err)
	}
	f.dist.zero = 0
	var out, log bytes.Buffer
	if err := trainFashion(context.Background(), f, &out, &log); err == nil || !strings.Contains(err.Error(), "--overlap: only under mpirun") {
		t.Errorf("--overlap alone: %v", err)
	}
}
