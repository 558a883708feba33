package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/dist"
)

// trainRanks runs `headroom train` on n in-process ranks (comm.Local, as
// mpirun's ranks run it) and returns rank 0's output and the joined
// errors.
func trainRanks(t *testing.T, n int, f trainFlags) (string, error) {
	t.Helper()
	var mu sync.Mutex
	var out0 string
	err := comm.Run(context.Background(), n, func(ctx context.Context, c comm.Comm) error {
		g := f
		g.dist.c = c
		var out, log bytes.Buffer
		err := trainFashion(ctx, g, &out, &log)
		if c.Rank() == 0 {
			mu.Lock()
			out0 = out.String() + log.String()
			mu.Unlock()
		}
		return err
	})
	return out0, err
}

// `headroom train --budget` on several ranks: each rank plans itself under
// the budget, the ranks agree on the passes per step and train within it
// (devices capped at the budget); a budget a rank cannot meet stops every
// rank, naming the rank and the smallest budget.
func TestTrainRanksBudget(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	base := trainFlags{model: "mlp", epochs: 1, batch: 1024, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 1024, steps: 2, recompute: "none"}
	base.dist.bucket = "25MiB"
	j := zooJob(t, "mlp", 1024)
	groups, err := dist.PlanRanks(context.Background(), j, dist.Layout{Ranks: 2, BucketBytes: 25 << 20})
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := dist.MaxReserved(groups)
	f := base
	f.budget = fmt.Sprint(whole - 1)
	out, err := trainRanks(t, 2, f)
	if err != nil {
		t.Fatalf("--budget %d on 2 ranks: %v\n%s", whole-1, err, out)
	}
	if !strings.Contains(out, "pass(es) per step") || strings.Contains(out, "in 1 pass(es)") || !strings.Contains(out, "micro-batch") {
		t.Errorf("below one pass's reservation the ranks should accumulate:\n%s", out)
	}
	t.Logf("%s", out)
	// The smallest budget, named on every rank.
	f.budget = "1MiB"
	_, err = trainRanks(t, 2, f)
	var be *dist.RankBudgetError
	if !errors.As(err, &be) || strings.Count(err.Error(), "rank 0 needs") != 2 || !strings.Contains(err.Error(), "the smallest budget every rank meets is") {
		t.Fatalf("--budget 1MiB: %v", err)
	}
	if be.Smallest <= 1<<20 {
		t.Errorf("smallest budget %d", be.Smallest)
	}
	// That budget is enough.
	f.budget = fmt.Sprint(be.Smallest)
	if out, err := trainRanks(t, 2, f); err != nil {
		t.Errorf("--budget %d (the smallest named): %v\n%s", be.Smallest, err, out)
	}
}
