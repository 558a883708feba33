package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// wantsPipeline reports whether train's arguments ask for pipeline stages
// (--pipeline above 1), which pipeTrainMain runs.
func wantsPipeline(args []string) bool {
	for i, a := range args {
		if a == "--" {
			return false
		}
		name, val, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "pipeline" {
			continue
		}
		if !ok && i+1 < len(args) {
			val = args[i+1]
		}
		n, err := strconv.Atoi(val)
		return err != nil || n > 1
	}
	return false
}

// pipeTrainMain is `headroom train --pipeline P`: the model's layers cut
// into P stages, one per rank. Under mpirun (built with -tags mpi) the
// ranks are the job's P processes; alone, P in-process ranks (goroutines,
// a device each). Every rank reads the same batches of Fashion-MNIST in
// order; rank 0 prints each step's loss, and every rank its planned and
// measured peak.
func pipeTrainMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(stderr)
	P := fs.Int("pipeline", 2, "pipeline stages, one rank each")
	model := fs.String("model", "mlp", "model: mlp or cnn (the zoo's models that are lists of layers)")
	sched := fs.String("schedule", "gpipe", "the micro-batches' schedule: gpipe or 1f1b")
	micro := fs.Int("micro-batches", 4, "micro-batches each batch is split into")
	batch := fs.Int("batch-size", 64, "samples per step")
	steps := fs.Int("steps", 10, "steps to train")
	limit := fs.Int("limit", 1024, "use only the first N training samples")
	opt := fs.String("optimizer", "adam", "optimizer: adam, adamw or sgd")
	lr := fs.Float64("lr", 1e-3, "learning rate")
	seed := fs.Int64("seed", 1, "initialization seed")
	devSpec := fs.String("device", "cpu", "each rank's device (cpu, cpu:mem=SIZE)")
	rf := addReplicaFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("train: unexpected argument %q", fs.Arg(0))
	}
	if *P < 2 || *micro < 1 || *batch < 1 || *steps < 0 || *limit < *batch {
		return fmt.Errorf("train --pipeline %d: needs at least 2 stages, 1 micro-batch, 1 sample per batch and --limit at least --batch-size", *P)
	}
	pj, err := pipelineJob(*model, *P, *micro, *sched, 0)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	spec, err := zoo.Lookup(*model)
	if err != nil {
		return err
	}
	newOpt := func() (optim.Optimizer, error) { return newOptimizer(*opt, *lr, -1) }
	c, err := comm.Open()
	if err != nil {
		return err
	}
	size := 0
	if c != nil {
		defer comm.Close(c)
		size = c.Size()
	}
	N, err := rf.ranks(*P, size)
	if err != nil {
		return err
	}
	cuts, err := dist.Cuts(dist.Job{Example: spec.Example, NewOptimizer: newOpt, Batch: *batch, Pipeline: pj}, dist.Layout{Ranks: N, Pipeline: *P, Zero: rf.zero})
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	ds, _, source, err := dataset.OpenContext(ctx)
	if err != nil {
		return err
	}
	n := min(*limit, ds.Len())
	var mu sync.Mutex
	// Each rank's peak line: on stderr for the ranks of mpirun but the
	// first, whose stdout is the job's.
	peakOut := stdout
	rank := func(ctx context.Context, c comm.Comm) error {
		dev, err := device.New(*devSpec)
		if err != nil {
			return err
		}
		p, done, err := rf.replica(ctx, c, *P, pj, cuts, dev, newOpt, *micro, *seed, fmt.Sprint(*model, *batch, *steps, *limit, *opt, *lr))
		if err != nil {
			return err
		}
		defer done()
		r := c.Rank()
		for step := range *steps {
			idx := make([]int, *batch)
			for i := range idx {
				idx[i] = (step**batch + i) % n
			}
			x, y, err := ds.Tensors(idx, dataset.TrainMean, dataset.TrainStd)
			if err != nil {
				return err
			}
			sp, err := p.Plan(train.MetaOf(x), train.MetaOf(y))
			if err != nil {
				return err
			}
			dev.Alloc.ResetPeak()
			loss, err := p.Step(ctx, x, y)
			if err != nil {
				return err
			}
			mu.Lock()
			if r == 0 {
				fmt.Fprintf(stdout, "step %d: loss %.6f\n", step+1, loss)
			}
			if step == 0 {
				fmt.Fprintf(peakOut, "rank %d, stage %d (layers %d-%d): planned peak %d, measured %d\n", r, r%*P, sp[0].Lo, sp[0].Hi-1, sp[0].Peak, dev.Alloc.MaxMemoryAllocated())
			}
			mu.Unlock()
		}
		return nil
	}
	if c != nil {
		if c.Rank() != 0 {
			stdout, peakOut = io.Discard, stderr
		}
		fmt.Fprintf(stdout, "model %s in %d stages (cuts %v) on %d ranks, %v, %d micro-batches, data %s\n", *model, *P, cuts, N, pj.Schedule, *micro, source)
		return rank(ctx, c)
	}
	fmt.Fprintf(stdout, "model %s in %d stages (cuts %v) on %d in-process ranks, %v, %d micro-batches, data %s\n", *model, *P, cuts, N, pj.Schedule, *micro, source)
	return comm.Run(ctx, N, rank)
}
