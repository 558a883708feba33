package main

import (
	"context"
	"strings"
	"testing"
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
