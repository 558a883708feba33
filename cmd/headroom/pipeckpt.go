package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Checkpoints of `train --pipeline` are single-process train's
// (train.Trainer.SaveCheckpoint: DIR/step-N/{model.safetensors,
// optimizer.safetensors,state.json}, written into a temporary directory
// and renamed): the whole model's weights under the single-process
// names, gathered from the stages (Pipeline.StateDict), every stage's
// optimizer state under the same names (Pipeline.OptimizerState), and the
// step, which is the data's position (batch k holds samples k·B, ...).
// Rank 0 of the first replica writes; with ZeRO 0 every replica holds
// the same weights and state. Every rank reads the checkpoint to resume.

// pipeCkptFlags are train --pipeline's flags of checkpoints, named as
// single-process train's.
type pipeCkptFlags struct {
	dir    string
	every  int
	keep   int
	resume string
}

func addPipeCkptFlags(fs *flag.FlagSet) *pipeCkptFlags {
	f := &pipeCkptFlags{}
	fs.StringVar(&f.dir, "checkpoint-dir", "", "write checkpoints (DIR/step-N/{model.safetensors,optimizer.safetensors,state.json}, rank 0) here: every --save-every steps, at the end and on Ctrl-C")
	fs.IntVar(&f.every, "save-every", 0, "write a checkpoint every N steps (needs --checkpoint-dir or --resume)")
	fs.IntVar(&f.keep, "keep", 3, "keep only the newest K checkpoints (0: all)")
	fs.StringVar(&f.resume, "resume", "", "resume exactly from a checkpoint of the same model and layout: a step-N directory, a file in one, or a --checkpoint-dir (its newest); later checkpoints go to the same --checkpoint-dir unless another is given")
	return f
}

// check checks the flags; zero is --zero.
func (f *pipeCkptFlags) check(zero int) error {
	switch {
	case f.every < 0:
		return fmt.Errorf("--save-every %d: must be at least 0 (0: no periodic checkpoints)", f.every)
	case f.keep < 0:
		return fmt.Errorf("--keep %d: must be at least 0 (0: keep all)", f.keep)
	case f.every > 0 && f.dir == "" && f.resume == "":
		return fmt.Errorf("--save-every needs --checkpoint-dir (where the checkpoints go)")
	case zero > 0 && (f.dir != "" || f.resume != ""):
		return fmt.Errorf("--checkpoint-dir and --resume with --pipeline and --zero %d: %w (the replicas' optimizer shards are not gathered yet; use --zero 0)", zero, dist.ErrNotAvailable)
	}
	if f.resume != "" {
		dir, err := train.LatestCheckpoint(f.resume)
		if err != nil {
			return fmt.Errorf("--resume: %w", err)
		}
		if f.dir == "" {
			// Checkpoints of the resumed run go where it came from.
			f.dir = filepath.Dir(dir)
		}
	}
	if f.dir != "" {
		if fi, err := os.Stat(f.dir); err == nil && !fi.IsDir() {
			return fmt.Errorf("--checkpoint-dir %s: not a directory", f.dir)
		} else if err != nil {
			if err := checkOutputPath(f.dir); err != nil {
				return fmt.Errorf("--checkpoint-dir: %w", err)
			}
		}
	}
	return nil
}

// on reports whether the run checkpoints (and so agrees on where to stop
// when interrupted).
func (f *pipeCkptFlags) on() bool { return f.dir != "" }

// stateOpt stands for every stage's optimizer in a train.Trainer that
// writes or reads a pipeline's checkpoint: it holds the whole model's
// state.
type stateOpt struct {
	optim.Optimizer
	s optim.SavedState
}

func (o *stateOpt) SaveState() optim.SavedState        { return o.s }
func (o *stateOpt) LoadState(s optim.SavedState) error { o.s = s; return nil }

// pipeMeta are what a resumed run must share with its checkpoint: the
// model, the optimizer, the data and the layout.
func pipeMeta(model, opt string, lr float64, seed int64, batch, samples, P, N, micro int, sched string, cuts []int) map[string]string {
	return map[string]string{
		"model": model, "optimizer": opt, "lr": fmt.Sprint(lr), "seed": fmt.Sprint(seed),
		"batch": fmt.Sprint(batch), "samples": fmt.Sprint(samples),
		"pipeline": fmt.Sprint(P), "ranks": fmt.Sprint(N), "micro-batches": fmt.Sprint(micro),
		"schedule": sched, "cuts": fmt.Sprint(cuts),
	}
}

// pipeMetaKeys are pipeMeta's keys, the first cause of a mismatch first.
var pipeMetaKeys = []string{"model", "optimizer", "lr", "seed", "batch", "samples", "pipeline", "ranks", "micro-batches", "schedule", "cuts"}

// fullStore is the whole single-process model on the host.
func fullStore(spec zoo.Spec) (*nn.Store, error) {
	full := nn.NewStore()
	spec.New(full.Root())
	if err := full.Materialize(device.CPU(), 0); err != nil {
		return nil, err
	}
	return full, nil
}

// savePipeCheckpoint is every rank's part in a checkpoint after step
// steps: the first replica's stages gather their weights and optimizer
// state on world rank 0, which writes them. A collective of the ranks.
func savePipeCheckpoint(ctx context.Context, r *dist.Replica, world comm.Comm, spec zoo.Spec, f *pipeCkptFlags, meta map[string]string, step int, why string, out io.Writer) error {
	if r.DataComm.Rank() != 0 {
		return nil // another replica: the same weights and state
	}
	sd, err := r.StateDict(ctx)
	if err != nil {
		return err
	}
	st, err := r.OptimizerState(ctx)
	if err != nil || world.Rank() != 0 {
		return err
	}
	full, err := fullStore(spec)
	if err != nil {
		return err
	}
	defer full.Release()
	if err := full.LoadStateDict(sd, true); err != nil {
		return fmt.Errorf("--checkpoint-dir %s: %w", f.dir, err)
	}
	tr := &train.Trainer{Device: device.CPU(), Store: full, Opt: &stateOpt{s: *st}}
	dir, err := tr.SaveCheckpoint(f.dir, train.Checkpoint{Step: int64(step), Batch: step, Meta: meta}, f.keep)
	if err != nil {
		return fmt.Errorf("--checkpoint-dir %s (%s): %w", f.dir, why, err)
	}
	fmt.Fprintf(out, "saved checkpoint %s (step %d, %s)\n", dir, step, why)
	return nil
}

// resumePipe loads the checkpoint of --resume into the rank's stage and
// returns the steps it had taken. A checkpoint of another model, data or
// layout is refused, naming its state.json and what differs.
func resumePipe(r *dist.Replica, spec zoo.Spec, f *pipeCkptFlags, meta map[string]string) (int, string, error) {
	ck, dir, err := train.ReadCheckpoint(f.resume)
	if err != nil {
		return 0, dir, err
	}
	file := filepath.Join(dir, "state.json")
	for _, k := range pipeMetaKeys {
		got, ok := ck.Meta[k]
		if !ok {
			got = "(none: not a checkpoint of train --pipeline)"
		}
		if got != meta[k] {
			return 0, dir, fmt.Errorf("--resume %s: the checkpoint was trained with %s %s, this run has %s (resuming exactly needs the same model, data and layout)", file, k, got, meta[k])
		}
	}
	full, err := fullStore(spec)
	if err != nil {
		return 0, dir, err
	}
	defer full.Release()
	so := &stateOpt{}
	tr := &train.Trainer{Device: device.CPU(), Store: full, Opt: so}
	if ck, _, err = tr.LoadCheckpoint(dir); err != nil {
		return 0, dir, err
	}
	if err := r.Load(full.StateDict()); err != nil {
		return 0, dir, fmt.Errorf("--resume %s: %w", dir, err)
	}
	if err := r.LoadOptimizerState(so.s); err != nil {
		return 0, dir, fmt.Errorf("--resume %s: %w", dir, err)
	}
	return int(ck.Step), dir, nil
}

// stopAgreed reports whether any rank has been interrupted (its ctx
// cancelled): every rank calls it after each step, so that all stop
// after the same step and can write its checkpoint together.
func stopAgreed(ctx context.Context, world comm.Comm) (bool, error) {
	v := []float64{0}
	if ctx.Err() != nil {
		v[0] = 1
	}
	// Not ctx: it is cancelled on the ranks that ask to stop.
	if err := world.AllReduce64(context.WithoutCancel(ctx), v, comm.Sum); err != nil {
		return false, err
	}
	return v[0] > 0, nil
}
