package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// bytesIn returns every size that re (a number and a unit) finds in s, in
// bytes.
func bytesIn(t *testing.T, s, re string) []float64 {
	t.Helper()
	var vs []float64
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(s, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		switch m[2] {
		case "KiB":
			v *= 1 << 10
		case "MiB":
			v *= 1 << 20
		case "GiB":
			v *= 1 << 30
		}
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		t.Fatalf("no %q in:\n%s", re, s)
	}
	return vs
}

// `headroom train` keeps gradients in the arena by default: its plan is
// below the one with --gradient-buffers and equals the measured peak, as
// that one does; with accumulation the gradients are in buffers, and the
// run says so.
func TestTrainArenaGradientsByDefault(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	run := func(buffers bool, accum int) (planned, peak float64, out string) {
		var o, l bytes.Buffer
		f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 128, accum: accum, gradBuffers: buffers}
		if err := trainFashion(context.Background(), f, &o, &l); err != nil {
			t.Fatalf("%v\n%s", err, l.String())
		}
		return bytesIn(t, o.String(), `total peak\s+([0-9.]+) (\w+)`)[0], bytesIn(t, o.String(), `training peak allocated ([0-9.]+) (\w+)`)[0], o.String()
	}
	for _, tc := range []struct {
		buffers bool
		accum   int
		want    string
	}{
		{false, 1, "gradients: in the arena (held from backward to the optimizer step)"},
		{true, 1, "gradients: in buffers held for the whole step (--gradient-buffers)"},
		{false, 2, "gradients: in buffers held for the whole step (not in the arena: 2 micro-batches"},
	} {
		planned, peak, out := run(tc.buffers, tc.accum)
		if planned != peak || !strings.Contains(out, tc.want) {
			t.Errorf("buffers %v, accumulate %d: planned %v, measured %v; want %q in:\n%s", tc.buffers, tc.accum, planned, peak, tc.want, out)
		}
		if tc.accum == 1 {
			if tc.buffers {
				if arena, _, _ := run(false, 1); arena >= planned {
					t.Errorf("planned %v with gradients in the arena, %v with --gradient-buffers", arena, planned)
				}
			} else if !strings.Contains(out, "gradients (transient)") {
				t.Errorf("no gradients in the arena in the plan:\n%s", out)
			}
		}
	}
}

// wholeBatchBudget is the smallest budget (to 4 KiB) at which the whole
// batch of `headroom plan --model cnn --batch batch` fits in one pass with
// nothing recomputed, with gradients in the arena or in buffers.
func wholeBatchBudget(t *testing.T, batch int, arena bool) int64 {
	t.Helper()
	spec, _ := zoo.Lookup("cnn")
	p := budget.Problem{
		Build:        func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss },
		Example:      spec.Example,
		Batch:        batch,
		NewOptimizer: func() (optim.Optimizer, error) { return newOptimizer("adam", 1e-3, -1) },
		// As plan and train pass it.
		GradientBuffers: !arena,
	}
	lo, hi := int64(0), int64(1<<31)
	for hi-lo > 4096 {
		p.Budget = (lo + hi) / 2
		n, err := budget.MaxBatch(context.Background(), p, budget.RecomputeNone)
		if err != nil {
			t.Fatal(err)
		}
		if n == batch {
			hi = p.Budget
		} else {
			lo = p.Budget
		}
	}
	return hi
}

// Between the smallest budget that holds the whole batch with gradients in
// the arena and the smallest with buffers, `headroom plan --budget` fits
// the whole batch in one pass by default and says where the gradients
// are; with --gradient-buffers it needs micro-batches or recomputation.
// `headroom train` with that budget trains so, and its plans (the
// planner's and the trainer's) equal the measured peak.
func TestBudgetArenaGradientsByDefault(t *testing.T) {
	const batch = 4
	arena, usual := wholeBatchBudget(t, batch, true), wholeBatchBudget(t, batch, false)
	if arena >= usual {
		t.Fatalf("whole batch: %d with gradients in the arena, %d with buffers", arena, usual)
	}
	b := fmt.Sprint((arena + usual) / 2)
	args := []string{"--model", "cnn", "--batch", fmt.Sprint(batch), "--budget", b}
	var out, errb bytes.Buffer
	if err := planMain(context.Background(), args, &out, &errb); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, w := range []string{"micro-batch 4 x 1 accumulation steps", "recomputation: none", "gradients: in the arena (held from backward to the optimizer step)", "\n  gradients                       0 B\n"} {
		if !strings.Contains(s, w) {
			t.Errorf("plan %v lacks %q:\n%s", args, w, s)
		}
	}
	out.Reset()
	err := planMain(context.Background(), append(args, "--gradient-buffers"), &out, &errb)
	if err == nil && (strings.Contains(out.String(), "micro-batch 4 x 1 accumulation steps") && strings.Contains(out.String(), "recomputation: none") ||
		strings.Contains(out.String(), "gradients: in the arena")) {
		t.Errorf("with --gradient-buffers the whole batch fits in one pass below %d:\n%s", usual, out.String())
	}

	dir := t.TempDir()
	if err := os.CopyFS(dir, dataset.Subset()); err != nil {
		t.Fatal(err)
	}
	t.Setenv(dataset.EnvDir, dir)
	var o, l bytes.Buffer
	f := trainFlags{model: "cnn", epochs: 1, batch: batch, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 32,
		budget: b, precision: "fp32", compress: "none", recompute: "none"}
	if err := trainFashion(context.Background(), f, &o, &l); err != nil {
		t.Fatalf("%v\n%s\n%s", err, o.String(), l.String())
	}
	s = o.String()
	plans := bytesIn(t, s, `total peak\s+([0-9.]+) (\w+)`)
	peak := bytesIn(t, s, `training peak allocated ([0-9.]+) (\w+)`)[0]
	if len(plans) != 2 || plans[0] != peak || plans[1] != peak || !strings.Contains(s, "gradients: in the arena") || !strings.Contains(s, "test accuracy") {
		t.Errorf("plans %v, measured %v:\n%s", plans, peak, s)
	}
}
