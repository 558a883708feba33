package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/zoo"
)

// `headroom plan --ranks P --pipeline P` prints, for each rank, the peak
// that rank measures running its stage (pipeline.NewRank, in-process
// ranks over comm.Local) on a batch of the printed size: the zoo's mlp
// and cnn, GPipe and 1F1B, 2 to 4 stages, and resnet18-64 cut at its
// residual blocks.
func TestPlanPipelinePrintedEqualsMeasured(t *testing.T) {
	for _, tc := range []struct {
		model string
		p     int
		sched string
	}{{"mlp", 2, "gpipe"}, {"mlp", 2, "1f1b"}, {"cnn", 2, "gpipe"}, {"cnn", 3, "1f1b"}, {"cnn", 4, "gpipe"}, {"resnet18-64", 2, "1f1b"}} {
		t.Run(fmt.Sprintf("%s/p=%d/%s", tc.model, tc.p, tc.sched), func(t *testing.T) {
			const batch, micro = 12, 3
			printed, out := printedPeaks(t, tc.p, "--pipeline", fmt.Sprint(tc.p), "--model", tc.model, "--batch-size", fmt.Sprint(batch), "--accumulate", fmt.Sprint(micro), "--schedule", tc.sched)
			t.Log(out)
			pj, err := pipelineJob(tc.model, tc.p, micro, tc.sched, 0)
			if err != nil {
				t.Fatal(err)
			}
			spec, _ := zoo.Lookup(tc.model)
			newOpt := func() (optim.Optimizer, error) { return newOptimizer("adam", 1e-3, -1) }
			job := dist.Job{Example: spec.Example, NewOptimizer: newOpt, Batch: batch, Pipeline: pj}
			cuts, err := dist.Cuts(job, dist.Layout{Ranks: tc.p, Pipeline: tc.p})
			if err != nil {
				t.Fatal(err)
			}
			xm, ym := spec.Example(batch)
			x, y := testkit.Batch(rand.New(rand.NewSource(1)), xm, ym, 10)
			measured := make([]int64, tc.p)
			var mu sync.Mutex
			err = comm.Run(context.Background(), tc.p, func(ctx context.Context, c comm.Comm) error {
				dev := device.CPU()
				p, err := pipeline.NewRank(c, pj.Layers, pj.Loss, cuts, dev, newOpt, micro, 1)
				if err != nil {
					return err
				}
				defer p.Close()
				p.Schedule = pj.Schedule
				if _, err := p.Step(ctx, x, y); err != nil {
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
	// Models not cut into stages (a GPT with dropout, which each stage's
	// recomputation would redraw), and ZeRO 2 over replicas of a
	// pipeline, are said to be not available.
	run := func(args ...string) error {
		var out, errb bytes.Buffer
		return planMain(context.Background(), args, &out, &errb)
	}
	for _, args := range [][]string{{"--ranks", "2", "--pipeline", "2", "--model", "gpt-shakespeare-char"}, {"--ranks", "4", "--pipeline", "2", "--zero", "2", "--model", "cnn"}} {
		err := run(args...)
		if !errors.Is(err, dist.ErrNotAvailable) {
			t.Errorf("%v: %v", args, err)
		}
	}
	if err := run("--ranks", "2", "--pipeline", "2", "--model", "cnn", "--schedule", "zigzag"); err == nil || !strings.Contains(err.Error(), "gpipe or 1f1b") {
		t.Errorf("--schedule zigzag: %v", err)
	}
}
