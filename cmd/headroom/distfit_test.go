package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// `headroom train --budget` on 2 ranks with --recompute auto or
// --precision auto chooses, like one process, what fits in the fewest
// passes: at the reservation of one pass with selective recomputation
// (or bf16-mixed), below that of one pass without, the ranks agree on the
// recomputation (or the precision) and one pass, where a named
// --recompute none (--precision fp32) needs more: shakespeare_char under
// ZeRO 0, the cnn under ZeRO 3.
func TestTrainRanksBudgetChooses(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	reserved := func(model string, batch int, l dist.Layout, cfg train.Config) int64 {
		t.Helper()
		spec, err := lookupSpec(model)
		if err != nil {
			t.Fatal(err)
		}
		j := dist.Job{Build: testkit.Build(spec), Example: spec.Example, Batch: batch, Config: cfg, NewOptimizer: func() (optim.Optimizer, error) { return newOptimizer("adam", 1e-3, -1) }}
		groups, err := dist.PlanRanks(context.Background(), j, l)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := dist.MaxReserved(groups)
		return r
	}
	for _, c := range []struct {
		name, flag string
		model      string
		batch      int
		zero       int
		cheaper    train.Config
		want       string
	}{
		// Selective recomputation saves on the GPT (attention's
		// elementwise work), not on the cnn at this size.
		{"recompute", "recompute", "gpt-shakespeare-char", 4, 0, train.Config{Recompute: train.Selective}, "recompute selective"},
		{"precision", "precision", "cnn", 256, 3, train.Config{Precision: transform.BF16Mixed}, "precision bf16-mixed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.model != "cnn" {
				t.Skip("-short: a GPT step")
			}
			l := dist.Layout{Ranks: 2, Zero: c.zero, BucketBytes: 25 << 20}
			whole, less := reserved(c.model, c.batch, l, train.Config{}), reserved(c.model, c.batch, l, c.cheaper)
			if less >= whole {
				t.Fatalf("one pass reserves %d with %v, %d without: no choice to test", less, c.cheaper, whole)
			}
			f := trainFlags{model: c.model, epochs: 1, batch: c.batch, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: c.batch, steps: 1, recompute: "none", threads: 1, budget: fmt.Sprint(less)}
			f.dist.zero, f.dist.bucket = c.zero, "25MiB"
			out, err := trainRanks(t, 2, f)
			if err != nil {
				t.Fatalf("named: %v\n%s", err, out)
			}
			if strings.Contains(out, "in 1 pass(es)") || strings.Contains(out, "combinations") {
				t.Errorf("with one setting named the ranks should accumulate:\n%s", out)
			}
			if c.flag == "recompute" {
				f.recompute = "auto"
			} else {
				f.precision = "auto"
			}
			out, err = trainRanks(t, 2, f)
			if err != nil {
				t.Fatalf("--%s auto: %v\n%s", c.flag, err, out)
			}
			if !strings.Contains(out, c.want) || !strings.Contains(out, "in 1 pass(es)") {
				t.Errorf("--%s auto at %d bytes should choose %q in one pass:\n%s", c.flag, less, c.want, out)
			}
		})
	}
}
