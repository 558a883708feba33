package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

func TestSuggest(t *testing.T) {
	cands := []string{"batch-size", "budget", "lr", "epochs", "precision", "threads"}
	for _, tc := range []struct{ word, want string }{
		{"batch", "batch-size"},   // a prefix
		{"bugdet", "budget"},      // swapped letters
		{"precison", "precision"}, // a letter left out
		{"thread", "threads"},
		{"ep", ""}, // too short to guess from a prefix, too far otherwise
		{"xyz", ""},
		{"memory", ""},
	} {
		if got := suggest(tc.word, cands); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"train", "train", 0},
		{"trian", "train", 1}, {"plna", "plan", 1}, {"kitten", "sitting", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// A mistyped command or flag is answered with the nearest name, once.
func TestMistypedCommandAndFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"trian"}, `unknown command "trian"; did you mean "train"?`},
		{[]string{"pln", "--budget", "1GiB"}, `did you mean "plan"?`},
		{[]string{"train", "--bugdet", "1GiB"}, "unknown flag --bugdet; did you mean --budget?"},
		{[]string{"plan", "--precison", "fp32"}, "unknown flag --precison; did you mean --precision?"},
	} {
		err := run(context.Background(), tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// train and plan share flag names: plan's older --batch and --policy are
// the same flags as --batch-size and --recompute, as in train.
func TestPlanSharesTrainFlagNames(t *testing.T) {
	out := func(args ...string) string {
		var stdout, stderr strings.Builder
		if err := planMain(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("plan %q: %v", args, err)
		}
		return stdout.String()
	}
	a := out("--model", "cnn", "--batch-size", "8", "--budget", "16MiB", "--recompute", "selective")
	b := out("--model", "cnn", "--batch", "8", "--budget", "16MiB", "--policy", "selective")
	if a != b || !strings.Contains(a, "batch 8") {
		t.Errorf("--batch-size/--recompute and --batch/--policy differ:\n%s\n%s", a, b)
	}
	if !strings.Contains(a, "recomputation: selective") {
		t.Errorf("--recompute selective did not restrict the planner:\n%s", a)
	}
}

// Help lists flags in --flag form, an alias on its flag's line.
func TestHelpInFlagForm(t *testing.T) {
	var stdout, stderr strings.Builder
	if err := planMain(context.Background(), []string{"-h"}, &stdout, &stderr); err == nil {
		t.Fatal("plan -h: no flag.ErrHelp")
	}
	help := stderr.String() + stdout.String()
	for _, want := range []string{"\n  --batch-size, --batch int\n", "\n  --recompute, --policy string\n", "\n  --budget string\n"} {
		if !strings.Contains(help, want) {
			t.Errorf("plan -h lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "\n  -budget") || strings.Contains(help, "\n  --batch int") {
		t.Errorf("plan -h prints single-dash or alias lines:\n%s", help)
	}
}

// plan --max-batch prints, per recomputation policy, budget.MaxBatch's
// answer (the largest batch that fits in one pass), and needs --budget.
func TestPlanMaxBatch(t *testing.T) {
	var stdout, stderr strings.Builder
	args := []string{"--model", "cnn", "--batch-size", "512", "--budget", "24MiB", "--max-batch"}
	if err := planMain(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	spec, err := zoo.Lookup("cnn")
	if err != nil {
		t.Fatal(err)
	}
	prob := budget.Problem{
		Build:        func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss },
		Example:      spec.Example,
		Batch:        512,
		Budget:       24 << 20,
		NewOptimizer: func() (optim.Optimizer, error) { return newOptimizer("adam", 1e-3, -1) },
	}
	for _, p := range budget.Policies {
		n, err := budget.MaxBatch(context.Background(), prob, p)
		if err != nil {
			t.Fatal(err)
		}
		if n < 1 || n >= 512 {
			t.Fatalf("MaxBatch(%v) = %d: the test wants a budget that cuts the batch", p, n)
		}
		if want := fmt.Sprintf("  recompute %-10s %d\n", p, n); !strings.Contains(stdout.String(), want) {
			t.Errorf("plan --max-batch lacks %q:\n%s", want, stdout.String())
		}
	}
	if err := planMain(context.Background(), []string{"--max-batch"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--max-batch needs --budget") {
		t.Errorf("--max-batch without --budget: %v", err)
	}
}
