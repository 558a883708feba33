package main

import (
	"context"
	"errors"
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
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
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
// a device each). Every rank reads the same batches in order (mlp and
// cnn: Fashion-MNIST; the other models: zoo.Synthetic, as train without
// --pipeline); rank 0 prints each step's loss, and every rank its planned
// and measured peak. --budget cuts the stages so that each rank's plan
// fits it (with more micro-batches when --micro-batches is not given and
// the first count does not fit) and caps each rank's device at it;
// --save gathers the stages on rank 0 into one file that train --load
// (one process) reads, and --load reads such a file into the stages.
// --checkpoint-dir, --save-every, --keep and --resume are single-process
// train's checkpoints, written by rank 0 (pipeckpt.go).
func pipeTrainMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(stderr)
	P := fs.Int("pipeline", 2, "pipeline stages, one rank each")
	model := fs.String("model", "mlp", "model: mlp, cnn, the ResNets (cut at residual blocks), gpt2 (transformer blocks) or rrdbnet (RRDB blocks)")
	sched := fs.String("schedule", "gpipe", "the micro-batches' schedule: gpipe or 1f1b")
	micro := fs.Int("micro-batches", 4, "micro-batches each batch is split into")
	batch := fs.Int("batch-size", 64, "samples per step")
	steps := fs.Int("steps", 10, "steps to train")
	limit := fs.Int("limit", 1024, "use only the first N training samples")
	opt := fs.String("optimizer", "adam", "optimizer: adam, adamw or sgd")
	lr := fs.Float64("lr", 1e-3, "learning rate")
	seed := fs.Int64("seed", 1, "initialization seed")
	devSpec := fs.String("device", "cpu", "each rank's device (cpu, cpu:mem=SIZE)")
	budgetFlag := fs.String("budget", "", "each rank's memory budget (e.g. 512MiB): the stages are cut so that each rank's planned peak fits it, and each rank's device is capped at it")
	valSplit := fs.Float64("val-split", 0, "hold out this fraction of the samples (0 to 1): after the last step every rank evaluates them (evaluation mode, batches of --batch-size) and rank 0 prints the validation loss")
	load := fs.String("load", "", "start from these weights (a safetensors file of the whole model, as train --save writes it, with or without --pipeline): each rank reads its stage's")
	save := fs.String("save", "", "write the trained weights, gathered from every stage on rank 0, to this safetensors file (the single-process model's names)")
	tp := fs.Int("tensor", 1, "tensor-parallel ranks per stage: planned (plan --ranks N --pipeline P --tensor T), not yet trained")
	rf := addReplicaFlags(fs)
	ckf := addPipeCkptFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *tp > 1 {
		return fmt.Errorf("train --pipeline %d --tensor %d: %w: tensor × pipeline is planned (headroom plan --ranks N --pipeline %d --tensor %d) and runs in package dist (SplitTP3D), but train does not run it yet", *P, *tp, dist.ErrNotAvailable, *P, *tp)
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if fs.NArg() > 0 {
		return fmt.Errorf("train: unexpected argument %q", fs.Arg(0))
	}
	if *P < 2 || *micro < 1 || *batch < 1 || *steps < 0 || *limit < *batch {
		return fmt.Errorf("train --pipeline %d: needs at least 2 stages, 1 micro-batch, 1 sample per batch and --limit at least --batch-size", *P)
	}
	var budget int64
	if *budgetFlag != "" {
		b, err := device.ParseBytes(*budgetFlag)
		if err != nil || b <= 0 {
			return fmt.Errorf("--budget %q: a size such as 512MiB (%v)", *budgetFlag, err)
		}
		if given["device"] {
			return fmt.Errorf("--budget %s and --device %s: give only --budget (each rank's device is then capped at it)", *budgetFlag, *devSpec)
		}
		budget, *devSpec = b, fmt.Sprintf("cpu:mem=%d", b)
	}
	if err := ckf.check(rf.zero); err != nil {
		return fmt.Errorf("train --pipeline: %w", err)
	}
	if *save != "" {
		if err := checkOutputPath(*save); err != nil {
			return fmt.Errorf("--save: %w", err)
		}
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
	pj, cuts, err := pipeCuts(spec, dist.Layout{Ranks: N, Pipeline: *P, Zero: rf.zero}, *micro, !given["micro-batches"], *batch, *sched, budget, newOpt)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	*micro = pj.Micro
	var src source
	var source string
	n := *limit
	switch *model {
	case "mlp", "cnn":
		ds, _, what, err := dataset.OpenContext(ctx)
		if err != nil {
			return err
		}
		src, source, n = fashionSource{ds}, what, min(n, ds.Len())
	default:
		synth, err := zoo.NewSynthetic(spec, uint64(*seed))
		if err != nil {
			return err
		}
		src, source = synthSource{synth}, fmt.Sprintf("generated for %s (zoo.Synthetic, seed %d)", *model, *seed)
	}
	if !(*valSplit >= 0 && *valSplit < 1) {
		return fmt.Errorf("--val-split %v: a fraction from 0 to below 1", *valSplit)
	}
	held := int(*valSplit * float64(n))
	if *valSplit > 0 && (held < 1 || n-held < *batch) {
		return fmt.Errorf("--val-split %v of %d samples holds out %d, leaving fewer than --batch-size %d to train on", *valSplit, n, held, *batch)
	}
	nTrain := n - held
	meta := pipeMeta(*model, *opt, *lr, *seed, *batch, nTrain, *P, N, *micro, pj.Schedule.String(), cuts)
	if ckf.on() {
		if c == nil || c.Rank() == 0 {
			if k, err := train.CleanCheckpoints(ckf.dir); err != nil {
				return fmt.Errorf("--checkpoint-dir: %w", err)
			} else if k > 0 {
				fmt.Fprintf(stdout, "removed %d unfinished checkpoint file(s) of an earlier run from %s\n", k, ckf.dir)
			}
		}
	}
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
		if *load != "" {
			if err := p.LoadFile(*load); err != nil {
				return fmt.Errorf("--load: %w", err)
			}
		}
		r := c.Rank()
		first := 0
		if ckf.resume != "" {
			k, dir, err := resumePipe(p, spec, ckf, meta)
			if err != nil {
				return err
			}
			first = k
			if r == 0 {
				fmt.Fprintf(stdout, "resumed from %s: step %d\n", dir, k)
				if k >= *steps {
					fmt.Fprintf(stdout, "the checkpoint is at step %d: nothing left to train (raise --steps)\n", k)
				}
			}
		}
		saved := first // the step of the newest checkpoint (written or resumed)
		stepCtx := ctx
		if ckf.on() {
			// The ranks stop together between steps (stopAgreed), so a
			// step is not cut short by the interruption.
			stepCtx = context.WithoutCancel(ctx)
		}
		for step := first; step < *steps; step++ {
			idx := make([]int, *batch)
			for i := range idx {
				idx[i] = (step**batch + i) % nTrain
			}
			x, y, err := src.Batch(idx)
			if err != nil {
				return err
			}
			sp, err := p.Plan(train.MetaOf(x), train.MetaOf(y))
			if err != nil {
				return err
			}
			if budget > 0 && sp[0].Peak > budget {
				// The cut was planned on fresh devices; this rank's own
				// plan is the last word.
				return fmt.Errorf("train --pipeline: %w: rank %d (stage %d, layers %d-%d) needs %s, over --budget %s",
					pipeline.ErrBudget, r, r%*P, sp[0].Lo, sp[0].Hi-1, device.FormatBytes(sp[0].Peak), device.FormatBytes(budget))
			}
			dev.Alloc.ResetPeak()
			loss, err := p.Step(stepCtx, x, y)
			if err != nil {
				return err
			}
			mu.Lock()
			if r == 0 {
				fmt.Fprintf(stdout, "step %d: loss %.6f\n", step+1, loss)
			}
			if step == first {
				fmt.Fprintf(peakOut, "rank %d, stage %d (layers %d-%d): planned peak %d, measured %d\n", r, r%*P, sp[0].Lo, sp[0].Hi-1, sp[0].Peak, dev.Alloc.MaxMemoryAllocated())
			}
			mu.Unlock()
			if !ckf.on() {
				continue
			}
			stop, err := stopAgreed(ctx, c)
			if err != nil {
				return err
			}
			why := "interrupted"
			if !stop {
				if ckf.every == 0 || (step+1)%ckf.every != 0 {
					continue
				}
				why = fmt.Sprintf("every %d steps", ckf.every)
			}
			if err := savePipeCheckpoint(stepCtx, p, c, spec, ckf, meta, step+1, why, stdout); err != nil {
				return err
			}
			saved = step + 1
			if stop {
				// Every rank returns an error now, which ends the job
				// (comm.Run, mpirun): not before rank 0 has written the
				// checkpoint and the hint (after the barrier, another
				// rank's error could end the job before rank 0 printed it).
				if r == 0 {
					fmt.Fprintf(stdout, "resume with: headroom train --pipeline %d --resume %s (and the same flags)\n", *P, ckf.dir)
				}
				if err := c.Barrier(stepCtx); err != nil {
					return err
				}
				return fmt.Errorf("interrupted after step %d, saved in %s: %w", step+1, ckf.dir, context.Cause(ctx))
			}
		}
		if ckf.on() && saved < *steps {
			if err := savePipeCheckpoint(stepCtx, p, c, spec, ckf, meta, *steps, "end of training", stdout); err != nil {
				return err
			}
		}
		if held > 0 {
			var sum float64
			for lo := nTrain; lo < n; lo += *batch {
				idx := make([]int, min(*batch, n-lo))
				for i := range idx {
					idx[i] = lo + i
				}
				x, y, err := src.Batch(idx)
				if err != nil {
					return err
				}
				l, err := p.Evaluate(ctx, x, y)
				if err != nil {
					return err
				}
				sum += l * float64(len(idx))
			}
			if r == 0 {
				fmt.Fprintf(stdout, "validation loss %.6f (%d held-out samples)\n", sum/float64(held), held)
			}
		}
		if *save == "" {
			return nil
		}
		sd, err := p.StateDict(ctx)
		if err != nil || r != 0 {
			return err
		}
		return savePipeline(spec, sd, *save, *P, stdout)
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

// pipeCuts are the pipeline job and its cuts: even without a budget;
// with one, pipeline.CutRanks's, and when more micro-batches may be
// tried (search), the first of micro, 2 micro, 4 micro, ... (at most the
// batch) whose stages fit it. A budget no count fits is an error wrapping
// pipeline.ErrBudget that names the layer and the bytes it needs alone.
func pipeCuts(spec zoo.Spec, layout dist.Layout, micro int, search bool, batch int, sched string, budget int64, newOpt func() (optim.Optimizer, error)) (*dist.PipelineJob, []int, error) {
	for {
		pj, err := pipelineJob(spec.Name, layout.Pipeline, micro, sched, budget)
		if err != nil {
			return nil, nil, err
		}
		cuts, err := dist.Cuts(dist.Job{Example: spec.Example, NewOptimizer: newOpt, Batch: batch, Pipeline: pj}, layout)
		if err == nil || !errors.Is(err, pipeline.ErrBudget) || !search || 2*micro > batch {
			if err != nil && budget > 0 {
				err = fmt.Errorf("--budget %s with %d micro-batches: %w", device.FormatBytes(budget), micro, err)
			}
			return pj, cuts, err
		}
		micro *= 2
	}
}

// savePipeline writes the weights gathered from the stages (sd) into
// the single-process model's safetensors file, as train --save does.
func savePipeline(spec zoo.Spec, sd map[string]*tensor.Tensor, path string, P int, out io.Writer) error {
	full := nn.NewStore()
	spec.New(full.Root())
	if err := full.Materialize(device.CPU(), 0); err != nil {
		return err
	}
	defer full.Release()
	if err := full.LoadStateDict(sd, true); err != nil {
		return fmt.Errorf("--save %s: %w", path, err)
	}
	if err := full.SaveFile(path, map[string]string{"format": "pt", "model": spec.Name}); err != nil {
		return fmt.Errorf("--save %s: %w", path, err)
	}
	fmt.Fprintf(out, "saved weights to %s (gathered from %d stages)\n", path, P)
	return nil
}
