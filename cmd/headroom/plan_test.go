package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/dataset"
)

// planMinimum is the smallest budget `headroom plan` names for these flags.
func planMinimum(t *testing.T, args ...string) int64 {
	t.Helper()
	var out, errb bytes.Buffer
	err := planMain(context.Background(), append(args, "--budget", "1"), &out, &errb)
	var ts *budget.TooSmallError
	if !errors.As(err, &ts) {
		t.Fatalf("%v with a 1-byte budget: %v", args, err)
	}
	return ts.Minimum
}

// With --precision auto --compress auto, `headroom plan` fits budgets that
// fp32 cannot, and says what it chose.
func TestPlanPrecisionAuto(t *testing.T) {
	base := []string{"--model", "cnn", "--batch", "8"}
	fp32Min := planMinimum(t, base...)
	autoArgs := append(base[:len(base):len(base)], "--precision", "auto", "--compress", "auto")
	if autoMin := planMinimum(t, autoArgs...); autoMin >= fp32Min {
		t.Fatalf("minimum with auto %d, fp32 %d", autoMin, fp32Min)
	}
	var out, errb bytes.Buffer
	if err := planMain(context.Background(), append(autoArgs, "--budget", fmt.Sprint(fp32Min-1)), &out, &errb); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"micro-batch", "precision ", "saved activations:", "recomputation:", "total peak", "estimated slowdown"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "precision fp32\n") && strings.Contains(s, "saved activations: kept as produced") {
		t.Errorf("below fp32's minimum the plan keeps fp32 and every activation:\n%s", s)
	}
	// Without a budget a fixed precision and compression plan one step.
	out.Reset()
	if err := planMain(context.Background(), append(base[:len(base):len(base)], "--precision", "bf16-mixed", "--compress", "int8"), &out, &errb); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "precision bf16-mixed, saved activations int8") || !strings.Contains(s, "activations at peak") {
		t.Errorf("fixed precision plan:\n%s", s)
	}
}

// The --help of plan and train says what auto lets the planner choose.
func TestPrecisionHelp(t *testing.T) {
	for _, cmd := range []string{"plan", "train"} {
		var out, errb bytes.Buffer
		var err error
		if cmd == "plan" {
			err = planMain(context.Background(), []string{"-h"}, &out, &errb)
		} else {
			fs := trainFlagSet(&trainFlags{})
			fs.SetOutput(&errb)
			err = fs.Parse([]string{"-h"})
		}
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s -h: %v", cmd, err)
		}
		h := errb.String()
		for _, want := range []string{"-precision", "-compress", "auto", "bf16-mixed", "fp16-mixed", "int8", "ReLU masks as bits", "--budget"} {
			if !strings.Contains(h, want) {
				t.Errorf("%s -h lacks %q:\n%s", cmd, want, h)
			}
		}
	}
}

// `headroom train --budget B --precision auto --compress auto` trains with
// the precision and compression the planner chose, within B.
func TestTrainBudgetPrecisionAuto(t *testing.T) {
	// The embedded subset (500 test images: the evaluation runs at the
	// micro-batch size) as a directory, whatever is installed.
	dir := t.TempDir()
	if err := os.CopyFS(dir, dataset.Subset()); err != nil {
		t.Fatal(err)
	}
	t.Setenv(dataset.EnvDir, dir)
	const batch = 16
	fp32Min := planMinimum(t, "--model", "cnn", "--batch", fmt.Sprint(batch))
	b := fp32Min - 1
	var out, log bytes.Buffer
	f := trainFlags{model: "cnn", epochs: 1, batch: batch, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 64,
		budget: fmt.Sprint(b), precision: "auto", compress: "auto", recompute: "none"}
	if err := trainFashion(context.Background(), f, &out, &log); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), log.String())
	}
	s := out.String()
	chose := regexp.MustCompile(`\n  precision (\S+)`).FindStringSubmatch(s)
	model := regexp.MustCompile(`precision (\S+); saved activations (\S+);`).FindStringSubmatch(s)
	if chose == nil || model == nil || chose[1] != model[1] {
		t.Fatalf("the plan's precision %v is not the one trained with %v:\n%s", chose, model, s)
	}
	if model[1] == "fp32" && model[2] == "kept" {
		t.Errorf("below fp32's minimum it trained in fp32 keeping every activation:\n%s", s)
	}
	peak := regexp.MustCompile(`training peak allocated ([0-9.]+ \w+)`).FindStringSubmatch(s)
	if peak == nil || !strings.Contains(s, "test accuracy") {
		t.Fatalf("no training report:\n%s", s)
	}
	t.Logf("budget %d: trained with precision %s, saved activations %s, peak %s", b, model[1], model[2], peak[1])
}

// `headroom plan --optimizer-in-backward` plans steps that update the
// parameters in the backward pass: with a budget between the smallest
// with it and the smallest without, the whole batch in one pass without
// gradient buffers (refused without the flag); without a budget the
// step's plan without gradient buffers, or a warning where it does not
// apply.
func TestPlanOptimizerInBackward(t *testing.T) {
	// Without the flag, gradient buffers (not the arena): the comparison
	// is with them.
	base := []string{"--model", "cnn", "--batch", "4", "--gradient-buffers"}
	flagged := slices.Concat(base, []string{"--optimizer-in-backward"})
	usual, ib := planMinimum(t, base...), planMinimum(t, flagged...)
	if ib >= usual {
		t.Fatalf("minimum %d with --optimizer-in-backward, %d without", ib, usual)
	}
	noGradients := regexp.MustCompile(`\n  gradients +0 B\n`)
	b := fmt.Sprint((ib + usual) / 2)
	for _, tc := range []struct {
		name string
		args []string
		// want in stdout, or the error's text
		want, stderr []string
		err          string
		noGradients  bool
	}{
		{"budget", slices.Concat(flagged, []string{"--budget", b}), []string{"micro-batch 4 x 1 accumulation steps", "optimizer: in the backward pass", "estimated slowdown"}, nil, "", true},
		{"budget without the flag", slices.Concat(base, []string{"--budget", b}), nil, nil, "is too small", false},
		{"budget that needs accumulation", slices.Concat(flagged, []string{"--batch", "64", "--budget", fmt.Sprint(usual)}), []string{"not in the backward pass: the plan accumulates"}, nil, "", false},
		{"no budget", flagged, []string{"optimizer in the backward pass", "total peak"}, nil, "", true},
		{"no budget, bf16-mixed", slices.Concat(flagged, []string{"--precision", "bf16-mixed"}), []string{"precision bf16-mixed", "optimizer in the backward pass"}, nil, "", true},
		{"no budget, fp16-mixed", slices.Concat(flagged, []string{"--precision", "fp16-mixed"}), []string{"precision fp16-mixed"}, []string{"--optimizer-in-backward does not apply", "GradScaler"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := planMain(context.Background(), tc.args, &out, &errb)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%v: error %v, want one containing %q", tc.args, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %v", tc.args, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out.String())
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("%v: stderr lacks %q: %q", tc.args, w, errb.String())
				}
			}
			if noGradients.MatchString(out.String()) != tc.noGradients {
				t.Errorf("%v: gradient buffers in the plan: want none %v:\n%s", tc.args, tc.noGradients, out.String())
			}
		})
	}
}

// `headroom train --budget B --optimizer-in-backward` trains with the
// optimizer in the backward pass where the plan chose it, within a budget
// that does not hold the step with gradient buffers.
func TestTrainBudgetOptimizerInBackward(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, dataset.Subset()); err != nil {
		t.Fatal(err)
	}
	t.Setenv(dataset.EnvDir, dir)
	const batch = 4
	base := []string{"--model", "cnn", "--batch", fmt.Sprint(batch), "--gradient-buffers"}
	usual := planMinimum(t, base...)
	ib := planMinimum(t, slices.Concat(base, []string{"--optimizer-in-backward"})...)
	if ib >= usual {
		t.Fatalf("minimum %d with --optimizer-in-backward, %d without", ib, usual)
	}
	var out, log bytes.Buffer
	f := trainFlags{model: "cnn", epochs: 1, batch: batch, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 32,
		budget: fmt.Sprint(usual - 1), precision: "fp32", compress: "none", recompute: "none", inBack: true, gradBuffers: true}
	if err := trainFashion(context.Background(), f, &out, &log); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), log.String())
	}
	s := out.String()
	// The planner's plan and the trainer's, both without gradient buffers.
	if n := len(regexp.MustCompile(`\n  gradients +0 B\n`).FindAllString(s, -1)); n != 2 || !strings.Contains(s, "optimizer: in the backward pass") || !strings.Contains(s, "test accuracy") {
		t.Fatalf("%d plans without gradient buffers:\n%s", n, s)
	}
	if strings.Contains(log.String(), "does not apply") {
		t.Errorf("log: %s", log.String())
	}
}

// --passes prints what each compile pass did, in the pipeline's order,
// with and without a budget.
func TestPlanPasses(t *testing.T) {
	for _, args := range [][]string{
		{"--model", "cnn", "--batch", "8", "--precision", "bf16-mixed", "--compress", "int8", "--passes"},
		{"--model", "cnn", "--batch", "8", "--budget", "64MiB", "--passes"},
	} {
		var out, errb bytes.Buffer
		if err := planMain(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		s := out.String()
		i := strings.Index(s, "compile passes")
		if i < 0 {
			t.Fatalf("%v: no pass report:\n%s", args, s)
		}
		last := i
		for _, p := range []string{"autodiff", "recompute", "autocast", "compress", "readlow", "fuse", "schedule", "arena"} {
			j := strings.Index(s[last:], "  "+p+" ")
			if j < 0 {
				t.Fatalf("%v: pass %s missing or out of order:\n%s", args, p, s[i:])
			}
			last += j
		}
		if args[len(args)-2] == "int8" && (!strings.Contains(s, "stored compressed") || strings.Contains(s, "autocast   skipped")) {
			t.Errorf("%v: compression and autocast not reported:\n%s", args, s[i:])
		}
	}
}

// Every plan flag is checked before any work, and a mistake is one line
// naming its flag, not the usage: an unknown --policy was ignored, and
// --policy without --budget silently meant nothing.
func TestPlanFlagRefusals(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "bogus", "--budget", "1GiB"}, "--policy"},
		{[]string{"--recompute", "bogus", "--budget", "1GiB"}, "--recompute"},
		{[]string{"--policy", "selective"}, "needs --budget"},
		{[]string{"--batch", "99999999999999999999"}, "--batch"},
		{[]string{"--budget", "NaN"}, "--budget"},
	} {
		var out, errb bytes.Buffer
		err := planMain(context.Background(), c.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
		if strings.Contains(errb.String(), "Usage") || out.Len() > 0 {
			t.Errorf("%v: printed %q and %q", c.args, out.String(), errb.String())
		}
	}
}
