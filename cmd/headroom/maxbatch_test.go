package main

import (
	"bytes"
	"context"
	"flag"
	"regexp"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
)

// train --max-batch trains with the batch plan --max-batch reports for the
// same budget and policy (both from budget.MaxBatch), and the steps run
// within the budget.
func TestTrainMaxBatch(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	for _, policy := range []string{"none", "selective"} {
		out := trainArgs(t, "--model", "cnn", "--budget", "20MiB", "--max-batch", "--recompute", policy, "--steps", "1", "--limit", "600")
		m := regexp.MustCompile(`--max-batch: batch (\d+), the largest of at most 600 that fits 20.00 MiB`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: no batch chosen:\n%s", policy, out)
		}
		if !strings.Contains(out, "batch "+m[1]+"; precision") {
			t.Errorf("%s: did not train with batch %s:\n%s", policy, m[1], out)
		}
		var plan, log bytes.Buffer
		if err := planMain(context.Background(), []string{"--model", "cnn", "--budget", "20MiB", "--batch-size", "600", "--max-batch", "--recompute", policy}, &plan, &log); err != nil {
			t.Fatal(err)
		}
		if want := regexp.MustCompile(`recompute ` + policy + ` +` + m[1] + `\n`); !want.MatchString(plan.String()) {
			t.Errorf("%s: train chose %s, plan says:\n%s", policy, m[1], plan.String())
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-batch"}, "--max-batch needs --budget"},
		{[]string{"--max-batch", "--budget", "20MiB", "--accumulate", "2"}, "the largest batch is the one that fits in one pass"},
		{[]string{"--max-batch", "--budget", "1MiB"}, "--max-batch: not even one sample fits"},
	} {
		var f trainFlags
		fs := trainFlagSet(&f)
		if err := parseFlags(fs, append([]string{"--model", "cnn", "--limit", "64"}, tt.args...)); err != nil {
			t.Fatal(err)
		}
		f.given = map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
		var out, log bytes.Buffer
		if err := trainFashion(context.Background(), f, &out, &log); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want %q", tt.args, err, tt.want)
		}
	}
}
