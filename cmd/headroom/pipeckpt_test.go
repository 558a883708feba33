package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
)

// cancelAt is stdout that cancels the run once it prints line: an
// interruption at a known step.
type cancelAt struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	line   string
	cancel context.CancelCauseFunc
}

func (w *cancelAt) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.line != "" && bytes.Contains(b, []byte(w.line)) {
		w.cancel(errors.New("test interruption"))
	}
	return w.buf.Write(b)
}

// pipeRun runs train --pipeline with args and returns its stdout, the
// losses by step and the error; interrupt, when not "", cancels the run
// once that line is printed.
func pipeRun(t *testing.T, args []string, interrupt string) (string, map[string]string, error) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	w := &cancelAt{line: interrupt, cancel: cancel}
	var errb bytes.Buffer
	err := pipeTrainMain(ctx, args, w, &errb)
	out := w.buf.String()
	losses := map[string]string{}
	for _, m := range stepLoss.FindAllStringSubmatch(out, -1) {
		losses[m[1]] = m[2]
	}
	return out + errb.String(), losses, err
}

// A pipeline's checkpoint resumes bit for bit: the losses after --resume
// are those of the uninterrupted run, whether the first run ended at its
// --steps or was interrupted (every rank stops after the same step and
// the checkpoint of that step is written), with and without replicas.
// The checkpoint's weights are --save's file.
func TestTrainPipelineResume(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"mlp P2", []string{"--pipeline", "2", "--model", "mlp"}},
		{"cnn P2 1f1b sgd", []string{"--pipeline", "2", "--model", "cnn", "--schedule", "1f1b", "--optimizer", "sgd", "--lr", "0.05"}},
		{"mlp P2 replicas 2", []string{"--pipeline", "2", "--model", "mlp", "--replicas", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := append([]string{"--batch-size", "24", "--micro-batches", "4", "--limit", "96"}, tc.extra...)
			args := func(more ...string) []string { return append(append([]string{}, base...), more...) }
			_, whole, err := pipeRun(t, args("--steps", "6"), "")
			if err != nil || len(whole) != 6 {
				t.Fatalf("uninterrupted run: %v, losses %v", err, whole)
			}
			check := func(what string, got map[string]string, from int) {
				t.Helper()
				if len(got) != 6-from {
					t.Fatalf("%s: losses %v, want steps %d-6", what, got, from+1)
				}
				for s, l := range got {
					if whole[s] != l {
						t.Errorf("%s: step %s loss %s, uninterrupted %s", what, s, l, whole[s])
					}
				}
			}

			// Ended at --steps 3 (the end's checkpoint), then resumed.
			dir := t.TempDir()
			saved := filepath.Join(t.TempDir(), "w.safetensors")
			out, _, err := pipeRun(t, args("--steps", "3", "--checkpoint-dir", dir, "--save", saved), "")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			ck := filepath.Join(dir, "step-000000003")
			a, err1 := safetensors.Load(filepath.Join(ck, "model.safetensors"))
			b, err2 := safetensors.Load(saved)
			if err1 != nil || err2 != nil || len(a) == 0 || len(a) != len(b) {
				t.Fatalf("checkpoint's weights %d (%v), --save's %d (%v)", len(a), err1, len(b), err2)
			}
			for k, v := range a {
				if w, ok := b[k]; !ok || !bytes.Equal(v.Data, w.Data) || v.DType != tensor.Float32 && v.DType != w.DType {
					t.Errorf("%s: the checkpoint's weights differ from --save's", k)
				}
			}
			out, got, err := pipeRun(t, args("--steps", "6", "--resume", dir), "")
			if err != nil {
				t.Fatalf("resume: %v\n%s", err, out)
			}
			check("resumed at step 3", got, 3)
			if _, err := os.Stat(filepath.Join(dir, "step-000000006", "state.json")); err != nil {
				t.Errorf("the resumed run's checkpoint: %v", err)
			}

			// Interrupted after step 2 (every 5 steps would be later).
			dir = t.TempDir()
			out, got, err = pipeRun(t, args("--steps", "6", "--checkpoint-dir", dir, "--save-every", "5"), "step 2: loss")
			if err == nil || !strings.Contains(err.Error(), "interrupted after step 2") || len(got) != 2 {
				t.Fatalf("interrupted run: %v, losses %v\n%s", err, got, out)
			}
			if !strings.Contains(out, "resume with: headroom train --pipeline") {
				t.Errorf("no resume hint:\n%s", out)
			}
			out, got, err = pipeRun(t, args("--steps", "6", "--resume", dir), "")
			if err != nil {
				t.Fatalf("resume: %v\n%s", err, out)
			}
			check("resumed after the interruption at step 2", got, 2)
			t.Logf("%s", out)
		})
	}
}

// A checkpoint of another layout, model or training is refused, naming
// its state.json and what differs; so is one of single-process train.
// ZeRO 1 with pipeline checkpoints is not available yet.
func TestTrainPipelineResumeMismatch(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--pipeline", "2", "--model", "cnn", "--batch-size", "24", "--micro-batches", "4", "--limit", "96"}
	if out, _, err := pipeRun(t, append(append([]string{}, base...), "--steps", "1", "--checkpoint-dir", dir), ""); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	state := filepath.Join(dir, "step-000000001", "state.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pipeline", "3", "--model", "cnn", "--batch-size", "24", "--micro-batches", "4", "--limit", "96"}, "pipeline 2, this run has 3"},
		{[]string{"--pipeline", "2", "--model", "cnn", "--batch-size", "24", "--micro-batches", "2", "--limit", "96"}, "micro-batches 4, this run has 2"},
		{[]string{"--pipeline", "2", "--model", "cnn", "--batch-size", "24", "--micro-batches", "4", "--limit", "96", "--replicas", "2"}, "ranks 2, this run has 4"},
		{[]string{"--pipeline", "2", "--model", "mlp", "--batch-size", "24", "--micro-batches", "4", "--limit", "96"}, "model cnn, this run has mlp"},
		{[]string{"--pipeline", "2", "--model", "cnn", "--batch-size", "24", "--micro-batches", "4", "--limit", "96", "--optimizer", "sgd"}, "optimizer adam, this run has sgd"},
	} {
		_, _, err := pipeRun(t, append(tc.args, "--steps", "2", "--resume", dir), "")
		if err == nil || !strings.Contains(err.Error(), state) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s and %q", tc.args, err, state, tc.want)
		}
	}
	// A single-process checkpoint: no pipeline layout in its state.
	single := t.TempDir()
	if err := run(context.Background(), []string{"train", "--model", "cnn", "--steps", "1", "--batch-size", "24", "--limit", "96", "--checkpoint-dir", single}); err != nil {
		t.Fatalf("single-process train: %v", err)
	}
	_, _, err := pipeRun(t, append(append([]string{}, base...), "--steps", "2", "--resume", single), "")
	if err == nil || !strings.Contains(err.Error(), "state.json") || !strings.Contains(err.Error(), "not a checkpoint of train --pipeline") {
		t.Errorf("a single-process checkpoint resumed with --pipeline: %v", err)
	}
	_, _, err = pipeRun(t, append(append([]string{}, base...), "--steps", "1", "--replicas", "2", "--zero", "1", "--checkpoint-dir", t.TempDir()), "")
	if !errors.Is(err, dist.ErrNotAvailable) {
		t.Errorf("--zero 1 with --checkpoint-dir: %v, want ErrNotAvailable", err)
	}
}
