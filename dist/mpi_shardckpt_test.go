//go:build mpi

package dist_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/internal/mpitest"
	"github.com/headroom-ml/headroom/safetensors"
)

// loadWeights reads a saved file's float32 tensors.
func loadWeights(t *testing.T, file string) map[string][]float32 {
	t.Helper()
	w, err := safetensors.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]float32{}
	for k, v := range w {
		if len(v.Data) > 0 && v.DType.String() == "float32" {
			m[k] = v.F32()
		}
	}
	return m
}

// `mpirun -np N headroom train --zero 3` (N = 2, 3; gathers prefetched
// one layer ahead) and `--tensor 2` with --checkpoint-dir: resumed on the
// same ranks the run ends with the uninterrupted run's weights bit for
// bit; the ZeRO-3 checkpoint resumed in one process, within 1e-6.
func TestMPIShardCheckpoint(t *testing.T) {
	bin := mpitest.Headroom(t)
	for _, c := range []struct {
		n     int
		args  []string
		steps int
		one   bool
	}{
		{2, []string{"--model", "mlp", "--limit", "256", "--batch-size", "64", "--zero", "3", "--gather-prefetch", "1"}, 4, true},
		{3, []string{"--model", "mlp", "--limit", "256", "--batch-size", "64", "--zero", "3"}, 4, true},
		{2, []string{"--model", "gpt-shakespeare-char", "--limit", "8", "--batch-size", "2", "--tensor", "2"}, 2, false},
	} {
		t.Run(fmt.Sprintf("np%d/%s", c.n, strings.Join(c.args, " ")), func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{bin, "train", "--threads", "1"}, c.args...)
			run := func(more ...string) string {
				t.Helper()
				out, err := mpitest.Run(t, c.n, nil, append(append([]string(nil), args...), more...)...)
				if err != nil {
					t.Fatalf("mpirun -np %d %v: %v\n%s", c.n, more, err, out)
				}
				return out
			}
			straight, resumed, ckpt := filepath.Join(dir, "straight.safetensors"), filepath.Join(dir, "resumed.safetensors"), filepath.Join(dir, "ckpt")
			run("--steps", fmt.Sprint(c.steps), "--save", straight)
			if out := run("--steps", fmt.Sprint(c.steps/2), "--checkpoint-dir", ckpt); strings.Count(out, "saved checkpoint") != 1 {
				t.Fatalf("rank 0 should save once:\n%s", out)
			}
			one := filepath.Join(dir, "ckpt1")
			if out, err := exec.Command("cp", "-r", ckpt, one).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v\n%s", err, out)
			}
			run("--steps", fmt.Sprint(c.steps), "--resume", ckpt, "--save", resumed)
			if d := relDiff(loadWeights(t, resumed), loadWeights(t, straight)); d != 0 {
				t.Errorf("resumed on %d ranks: weights %.3g from the uninterrupted run, want bit for bit", c.n, d)
			}
			if !c.one {
				return
			}
			alone := filepath.Join(dir, "one.safetensors")
			oneArgs := []string{"train", "--threads", "1", "--model", "mlp", "--limit", "256", "--batch-size", "64", "--steps", fmt.Sprint(c.steps), "--resume", one, "--save", alone}
			if out, err := exec.Command(bin, oneArgs...).CombinedOutput(); err != nil {
				t.Fatalf("resumed in one process: %v\n%s", err, out)
			}
			if d := relDiff(loadWeights(t, alone), loadWeights(t, straight)); d > 1e-6 {
				t.Errorf("resumed in one process: weights %.3g from the ranks' run", d)
			} else {
				t.Logf("ZeRO-3 checkpoint of mpirun -np %d resumed in one process: within %.3g", c.n, d)
			}
		})
	}
}

// `mpirun -np 2 headroom train --zero 3 --budget`: just under one pass's
// reservation (cnn, 128 samples a rank: 44 MiB) the ranks agree on 2
// passes (24 MiB); at 1 MiB every rank stops, naming the ranks and the
// smallest budget.
func TestMPITrainBudgetZero3(t *testing.T) {
	bin := mpitest.Headroom(t)
	args := []string{bin, "train", "--model", "cnn", "--limit", "256", "--batch-size", "256", "--steps", "1", "--threads", "1", "--zero", "3"}
	out, err := mpitest.Run(t, 2, nil, append(args, "--budget", "46137343")...)
	if err != nil || !strings.Contains(out, "every rank runs its share in 2 pass(es) per step") {
		t.Fatalf("--budget 44MiB-1: %v\n%s", err, out)
	}
	out, err = mpitest.Run(t, 2, nil, append(args, "--budget", "1MiB")...)
	if err == nil || !strings.Contains(out, "rank 0 needs") || !strings.Contains(out, "the smallest budget every rank meets is") {
		t.Fatalf("--budget 1MiB: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
