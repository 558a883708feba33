package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/zoo"
)

// `headroom plan --ranks D×P --pipeline P [--zero 1]` prints, for each
// rank, the peak it measures running its stage of its replica
// (dist.NewReplica over comm.Grid's groups, in-process ranks) on the
// printed global batch: the mlp and cnn, GPipe and 1F1B, even and uneven
// shares.
func TestPlanReplicasPrintedEqualsMeasured(t *testing.T) {
	for _, tc := range []struct {
		model        string
		ranks, p     int
		sched, zero  string
		batch, micro int
	}{{"mlp", 4, 2, "gpipe", "0", 12, 3}, {"cnn", 4, 2, "1f1b", "1", 12, 3}, {"cnn", 6, 2, "gpipe", "0", 10, 2}, {"cnn", 6, 3, "1f1b", "1", 13, 2}} {
		t.Run(fmt.Sprintf("%s/%d=%d×%d/%s/zero%s", tc.model, tc.ranks, tc.ranks/tc.p, tc.p, tc.sched, tc.zero), func(t *testing.T) {
			printed, out := printedPeaks(t, tc.ranks, "--pipeline", fmt.Sprint(tc.p), "--model", tc.model, "--batch-size", fmt.Sprint(tc.batch),
				"--accumulate", fmt.Sprint(tc.micro), "--schedule", tc.sched, "--zero", tc.zero, "--bucket-size", "64KiB")
			t.Log(out)
			pj, err := pipelineJob(tc.model, tc.p, tc.micro, tc.sched, 0)
			if err != nil {
				t.Fatal(err)
			}
			spec, _ := zoo.Lookup(tc.model)
			newOpt := func() (optim.Optimizer, error) { return newOptimizer("adam", 1e-3, -1) }
			rf := &replicaFlags{bucket: "64KiB"}
			fmt.Sscan(tc.zero, &rf.zero)
			job := dist.Job{Example: spec.Example, NewOptimizer: newOpt, Batch: tc.batch, Pipeline: pj}
			cuts, err := dist.Cuts(job, dist.Layout{Ranks: tc.ranks, Pipeline: tc.p, Zero: rf.zero})
			if err != nil {
				t.Fatal(err)
			}
			xm, ym := spec.Example(tc.batch)
			x, y := testkit.Batch(rand.New(rand.NewSource(1)), xm, ym, 10)
			measured := make([]int64, tc.ranks)
			var mu sync.Mutex
			err = comm.Run(context.Background(), tc.ranks, func(ctx context.Context, c comm.Comm) error {
				dev := device.CPU()
				r, done, err := rf.replica(ctx, c, tc.p, pj, cuts, dev, newOpt, tc.micro, 1, "")
				if err != nil {
					return err
				}
				defer done()
				if _, err := r.Step(ctx, x, y); err != nil {
					return err
				}
				mu.Lock()
				measured[c.Rank()] = dev.Alloc.MaxMemoryAllocated()
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for r, m := range measured {
				if printed[r] != m {
					t.Errorf("rank %d: printed peak %d, measured %d", r, printed[r], m)
				}
			}
		})
	}
}

// `headroom train --pipeline 2 --replicas 2` (4 in-process ranks, each
// replica on half of every batch) gives the losses of one pipeline on
// the whole batch, GPipe and 1F1B, ZeRO 0 and 1; every rank's planned
// peak equals its measured one. Bad replica flags are refused.
func TestTrainReplicasInProcess(t *testing.T) {
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := pipeTrainMain(context.Background(), append([]string{"--steps", "3", "--batch-size", "24", "--micro-batches", "3", "--limit", "96"}, args...), &out, &errb)
		return out.String() + errb.String(), err
	}
	for _, model := range []string{"mlp", "cnn"} {
		one, err := run("--pipeline", "2", "--model", model)
		if err != nil {
			t.Fatalf("%s: %v\n%s", model, err, one)
		}
		want := pipeLosses(t, one, 2)
		for _, extra := range [][]string{{"--schedule", "gpipe"}, {"--schedule", "1f1b", "--zero", "1"}} {
			out, err := run(append([]string{"--pipeline", "2", "--replicas", "2", "--model", model}, extra...)...)
			if err != nil {
				t.Fatalf("%s %v: %v\n%s", model, extra, err, out)
			}
			got := pipeLosses(t, out, 4)
			t.Logf("%s %v:\n%s", model, extra, out)
			if len(got) != 3 || len(want) != 3 {
				t.Fatalf("losses %v, one pipeline %v", got, want)
			}
			for i := range got {
				if math.IsNaN(got[i]) || math.Abs(got[i]-want[i]) > 1e-5*math.Abs(want[i]) {
					t.Errorf("%s %v step %d: loss %v on 2 replicas, %v on one pipeline", model, extra, i+1, got[i], want[i])
				}
			}
		}
	}
	for _, args := range [][]string{{"--pipeline", "2", "--replicas", "0"}, {"--pipeline", "2", "--replicas", "2", "--zero", "2"}, {"--pipeline", "2", "--zero", "1"}} {
		if out, err := run(args...); err == nil {
			t.Errorf("%v: no error\n%s", args, out)
		}
	}
}
