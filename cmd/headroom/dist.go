package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
)

// distFlags are train's flags of data-parallel training, which runs when
// headroom is started by mpirun (built with -tags mpi).
type distFlags struct {
	zero    int
	bucket  string
	overlap bool
	c       comm.Comm // the job's communicator; nil when training alone
	agree   string    // the flags every rank must share (dist.Options.Agree)
	dp      *dist.DataParallel
	// ZeRO 3 and tensor parallelism (disttp.go): the ranks per layer, the
	// full model's host store, ZeRO-3's shards, --save on every rank.
	tensor int
	full   *nn.Store
	z3     *dist.Zero3
	save   string
	tp     comm.Comm // the rank's tensor group with several data groups (disthybrid.go)
	// gatherPrefetch is --gather-prefetch (ZeRO 3: layers gathered ahead).
	gatherPrefetch int
	// ckpt gathers a sharded model's checkpoints (distzero3.go).
	ckpt *dist.ShardCheckpoints
}

func addDistFlags(fs *flag.FlagSet, d *distFlags) {
	fs.IntVar(&d.zero, "zero", 0, "under mpirun: ZeRO stage, 0 (every rank holds all gradients and optimizer state), 1 (optimizer state sharded across ranks) 2 (gradients sharded too; the optimizer runs in the backward pass) or 3 (parameters sharded too, gathered per layer in the step)")
	fs.IntVar(&d.tensor, "tensor", 1, "under mpirun, GPT models: tensor-parallel ranks per layer (attention heads and MLP columns split); the ranks a multiple of it: data parallelism across the groups")
	fs.StringVar(&d.bucket, "bucket-size", "25MiB", "under mpirun: the gradient bucket all-reduced at once (ZeRO 0 and 1)")
	fs.IntVar(&d.gatherPrefetch, "gather-prefetch", 0, gatherPrefetchUsage)
	fs.BoolVar(&d.overlap, "overlap", false, "under mpirun, ZeRO 0: all-reduce each gradient bucket as soon as the backward pass has finished it, while the backward pass goes on (one pass per step, fp32, no clipping; same results)")
}

// setupDist joins the job mpirun started, if any, after the flags are
// checked. Rank 0 alone prints, saves, logs and writes checkpoints: the
// others' output is discarded and those flags cleared. Each rank trains
// on its share of every batch of --batch-size.
func (f *trainFlags) setupDist(out, log io.Writer) (io.Writer, io.Writer, error) {
	d := &f.dist
	if d.zero < 0 || d.zero > 3 {
		return out, log, fmt.Errorf("--zero %d: 0, 1, 2 or 3", d.zero)
	}
	if d.tensor < 0 {
		return out, log, fmt.Errorf("--tensor %d: at least 1", d.tensor)
	}
	if err := checkGatherPrefetch(d.gatherPrefetch, d.zero, d.tensor); err != nil {
		return out, log, err
	}
	if d.bucket != "" {
		if _, err := device.ParseBytes(d.bucket); err != nil {
			return out, log, fmt.Errorf("--bucket-size: %w", err)
		}
	}
	c := d.c // given by the caller: in-process ranks (tests)
	if c == nil {
		var err error
		if c, err = comm.Open(); err != nil {
			return out, log, err
		}
	}
	if c == nil {
		if d.zero != 0 {
			return out, log, fmt.Errorf("--zero %d: only under mpirun (with several ranks)", d.zero)
		}
		if d.overlap {
			return out, log, fmt.Errorf("--overlap: only under mpirun (with several ranks)")
		}
		if d.tensor > 1 {
			return out, log, fmt.Errorf("--tensor %d: only under mpirun (with as many ranks)", d.tensor)
		}
		if d.gatherPrefetch > 0 {
			return out, log, fmt.Errorf("--gather-prefetch %d: only under mpirun, with --zero 3", d.gatherPrefetch)
		}
		return out, log, nil
	}
	d.c = c
	// What every rank must agree on besides the model and configuration
	// (dist.NewTrainer checks those): the data and the schedule.
	d.agree = fmt.Sprintf("model=%s data=%s limit=%d batch=%d seed=%d epochs=%d steps=%d lr=%g wd=%g clip=%g accumulate=%d val=%g load=%s resume=%s schedule=%+v val=%s prefetch=%d skip-bad=%t",
		f.model, f.data, f.limit, f.batch, f.seed, f.epochs, f.steps, f.lr, f.weightDecay, f.clipGrad, f.accum, f.valSplit, f.load, f.resume, f.sched, f.val, f.prefetch, f.skipBad)
	switch {
	case f.budget != "" && f.data != "":
		return out, log, fmt.Errorf("--budget with --data on %d ranks: the data loader's buffers are not planned per rank yet (use --device cpu:mem=SIZE)", c.Size())
	case isMeta(f.device):
		return out, log, fmt.Errorf("--device %s with %d ranks: plan one rank with --device meta alone", f.device, c.Size())
	case d.overlap && d.zero > 0:
		return out, log, fmt.Errorf("--overlap with --zero %d: overlapping the all-reduce with the backward pass is for ZeRO 0", d.zero)
	case (d.zero > 0 || d.tensor > 1) && f.everyTime > 0:
		what := fmt.Sprintf("--zero %d", d.zero)
		if d.tensor > 1 {
			what = fmt.Sprintf("--tensor %d", d.tensor)
		}
		return out, log, fmt.Errorf("--save-every %v with %s: the ranks gather the optimizer's shards together at a checkpoint, which a time would place at different steps on different ranks (use --save-every STEPS)", f.everyTime, what)
	case f.batch < c.Size() && d.tensor <= 1:
		return out, log, fmt.Errorf("--batch-size %d: fewer samples than the %d ranks", f.batch, c.Size())
	}
	if err := f.checkSharded(c.Size()); err != nil {
		return out, log, err
	}
	d.save = f.save // under ZeRO 3 and --tensor every rank gathers for it
	if c.Rank() > 0 {
		f.save, f.logPath, f.snapshot, f.summary, f.tensorboard = "", "", "", false, ""
		f.watch = watchFlags{} // --live and --profile: rank 0 alone
		out, log = io.Discard, io.Discard
	}
	return out, log, nil
}

// localBatch is this rank's share of a batch of n samples.
func (d *distFlags) localBatch(n int) int {
	if d.c == nil {
		return n
	}
	r, size := d.dataRank()
	return len(dist.ShardIndices(make([]int, n), r, size))
}

// evalBatch is the batch every rank evaluates in: the largest rank's
// micro-batch (rank 0's share is the largest). Under ZeRO 3 and --tensor
// a forward pass is collective, so every rank must run as many batches.
func (d *distFlags) evalBatch(n, accum int) int {
	if d.c != nil {
		_, size := d.dataRank()
		n = len(dist.ShardIndices(make([]int, n), 0, size))
	}
	return (n + accum - 1) / accum
}

// newRankTrainer is train.NewConfig, or dist.NewTrainer under mpirun.
// done releases what it made.
func (d *distFlags) newRankTrainer(ctx context.Context, out io.Writer, dev *device.Device, store *nn.Store, model train.Model, loss train.LossFunc, opt optim.Optimizer, cfg train.Config) (*train.Trainer, func(), error) {
	if d.c == nil {
		tr, err := train.NewConfig(dev, store, model, loss, opt, cfg)
		if err != nil {
			return nil, nil, err
		}
		return tr, tr.Close, nil
	}
	if d.sharded() {
		return d.newShardedTrainer(ctx, out, dev, store, model, loss, opt, cfg)
	}
	var bucket int64
	if d.bucket != "" {
		bucket, _ = device.ParseBytes(d.bucket)
	}
	tr, dp, err := dist.NewTrainer(ctx, d.c, dev, store, model, loss, opt, cfg, dist.Options{Stage: d.zero, BucketBytes: bucket, Agree: d.agree, Overlap: d.overlap})
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(out, "data parallel: %d ranks (MPI), each on its share of every batch, ZeRO stage %d; rank 0 prints, saves and logs\n", d.c.Size(), d.zero)
	d.dp = dp
	return tr, func() { tr.Close(); dp.Close() }, nil
}

// shard returns this rank's share of a global batch; ok is false when the
// batch has fewer samples than ranks (an epoch's short last batch): every
// rank skips it alike.
func (d *distFlags) shard(x, y *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor, bool, error) {
	r, size := d.dataRank()
	if d.c == nil || size == 1 {
		return x, y, true, nil // tensor parallelism: the whole batch on every rank of a group
	}
	if x.Shape[0] < size {
		return nil, nil, false, nil
	}
	b, err := dist.ShardBatch(train.Batch{X: x, Y: y}, r, size)
	return b.X, b.Y, err == nil, err
}

// finish ends this rank's part in the job: MPI_Finalize after success;
// after an error every rank is stopped (MPI_Abort), so none waits in a
// collective this one will not join.
func (d *distFlags) finish(err error) error {
	if d.c == nil {
		return err
	}
	if err != nil {
		comm.Abort(d.c, err)
		return err
	}
	return comm.Close(d.c)
}

// checkpoint is this rank's part in a checkpoint: under ZeRO every rank
// gathers the optimizer state's shards (a collective; the same steps on
// every rank), and rank 0 alone writes (write false on the others), the
// file one process writes. A checkpoint on interruption is not taken
// under ZeRO: the ranks may stop at different points.
func (d *distFlags) checkpoint(why string) (write bool, err error) {
	if d.c == nil {
		return true, nil
	}
	if d.sharded() {
		return d.checkpointSharded(why)
	}
	if d.zero > 0 {
		if why == "interrupted" {
			return false, fmt.Errorf("--zero %d: no checkpoint on interruption: the ranks gather the optimizer's shards only between the same steps (the newest checkpoint on disk is complete)", d.zero)
		}
		// The collectives abort with the group (comm.Local) or the job
		// (MPI_Abort) when a rank fails, so this does not wait forever.
		if err := d.dp.GatherState(context.Background()); err != nil {
			return false, err
		}
	}
	return d.c.Rank() == 0, nil
}
