package dist

import (
	"context"
	"errors"
	"fmt"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// Data parallelism across pipelines (DP×PP): N = D×P ranks hold D
// replicas of a P-stage pipeline. Rank r is stage r%P of replica r/P
// (comm.Grid): its stage's activations go by Send/Recv to the ranks of
// its own replica, and its gradients are summed with those of the D
// ranks holding the same stage, in a bucket of its device (category
// communication), before its optimizer steps. Each replica runs its
// share of the global batch, so every step is the global batch's.

// ReplicaOptions configure a pipeline replica.
type ReplicaOptions struct {
	// Zero is the ZeRO stage over the replicas of each stage: 0 (each
	// rank holds its stage's whole optimizer state) or 1 (each holds
	// 1/D of it, and the parameters are all-gathered after the update).
	Zero int
	// BucketBytes is the gradient bucket (0: DefaultBucketBytes), as
	// Options.BucketBytes.
	BucketBytes int64
	Schedule    pipeline.Schedule
	// Agree is anything else every rank must have alike (Options.Agree).
	Agree string
}

// Replica is one rank of data parallelism across pipelines.
type Replica struct {
	*pipeline.Pipeline
	// StageComm is the rank's pipeline (rank = stage); DataComm the
	// ranks that hold the same stage in the other replicas (rank =
	// replica).
	StageComm, DataComm comm.Comm
	sh                  *replicaShared
}

// replicaShared is what the optimizers of a replica's stage (the stage's
// own and those of the meta stages its plans build) read at each step.
type replicaShared struct {
	ctx   context.Context
	share float64
}

// SplitPipelines splits world (N = D×P ranks) into the pipeline of
// each rank (P consecutive ranks) and its data-parallel group (the D
// ranks holding the same stage), as NewReplica wants them. A Meta world
// splits too, for plans.
func SplitPipelines(ctx context.Context, world comm.Comm, P int) (stages, data comm.Comm, err error) {
	if P < 1 || world.Size()%P != 0 {
		return nil, nil, fmt.Errorf("%w: %d ranks are not a multiple of %d pipeline stages", ErrConfig, world.Size(), P)
	}
	return comm.Grid(ctx, world, P)
}

// NewReplica builds stage stages.Rank() of replica data.Rank():
// pipeline.NewRank on stages, each stage's optimizer wrapped so that it
// first sums the gradients over data (and, with ZeRO 1, keeps only its
// shard of the state). Every rank of data must call it with the same
// layers, cuts and options (checked: ErrMismatch); the parameters of
// data's rank 0 are copied to the others. Close the replica's Pipeline.
func NewReplica(ctx context.Context, stages, data comm.Comm, layers []pipeline.Layer, loss train.LossFunc, cuts []int, dev *device.Device, newOpt func() (optim.Optimizer, error), micro int, seed int64, o ReplicaOptions) (*Replica, error) {
	switch {
	case stages == nil || data == nil:
		return nil, fmt.Errorf("%w: no communicator", ErrConfig)
	case o.Zero < 0 || o.Zero > 1:
		return nil, fmt.Errorf("%w: ZeRO stage %d with pipeline stages (valid: 0, 1)", ErrNotAvailable, o.Zero)
	case o.Zero == 1 && data.Size() < 2:
		return nil, fmt.Errorf("%w: ZeRO 1 with pipeline stages shards over the replicas of a stage: it needs at least 2 (--ranks 2×--pipeline)", ErrConfig)
	case o.BucketBytes < 0:
		return nil, fmt.Errorf("%w: bucket of %d bytes", ErrConfig, o.BucketBytes)
	}
	sh := &replicaShared{ctx: ctx, share: 1}
	wrapped := replicaOptimizer(newOpt, data, o, sh)
	p, err := pipeline.NewRank(stages, layers, loss, cuts, dev, wrapped, micro, seed)
	if err != nil {
		return nil, err
	}
	p.Schedule = o.Schedule
	r := &Replica{Pipeline: p, StageComm: stages, DataComm: data, sh: sh}
	if data.Size() > 1 {
		probe, err := newOpt()
		if err != nil {
			p.Close()
			return nil, err
		}
		d := &DataParallel{c: data}
		agree := fmt.Sprintf("pipeline stage %d of %d, cuts %v, %d micro-batches, %v; %s", stages.Rank(), stages.Size(), cuts, micro, o.Schedule, o.Agree)
		if err := d.agree(ctx, p.Stages[0].Store, probe, train.Config{}, Options{Stage: o.Zero, BucketBytes: o.BucketBytes, Agree: agree}); err != nil {
			p.Close()
			return nil, err
		}
		if dev.HasData() {
			for _, q := range p.Stages[0].Store.Params() {
				if v := q.Value.F32(); v != nil {
					if err := data.Broadcast(ctx, v, 0); err != nil {
						p.Close()
						return nil, err
					}
				}
			}
		}
	}
	return r, nil
}

// replicaOptimizer is newOpt with each optimizer wrapped for a stage
// replicated over data.
func replicaOptimizer(newOpt func() (optim.Optimizer, error), data comm.Comm, o ReplicaOptions, sh *replicaShared) func() (optim.Optimizer, error) {
	return func() (optim.Optimizer, error) {
		inner, err := newOpt()
		if err != nil {
			return nil, err
		}
		ro := &replicaOpt{d: &DataParallel{c: data, stage: o.Zero, share: 1}, sh: sh, bucketBytes: o.BucketBytes}
		ro.inner = inner
		if o.Zero == 1 {
			ro.inner = &zeroOpt{inner: inner, d: ro.d}
		}
		return ro, nil
	}
}

// share is the replica's part of a global batch of n samples and its
// weight.
func (r *Replica) share(n int) (lo, hi int, w float64) {
	lo, hi = shareOf(n, r.DataComm.Rank(), r.DataComm.Size())
	return lo, hi, float64(hi-lo) / float64(n)
}

// Step trains on one global batch: the replica takes its share
// (ShardBatch) and returns the global batch's loss.
func (r *Replica) Step(ctx context.Context, x, y *tensor.Tensor) (float64, error) {
	n := x.Shape[0]
	b, err := ShardBatch(train.Batch{X: x, Y: y}, r.DataComm.Rank(), r.DataComm.Size())
	if err != nil {
		return 0, err
	}
	_, _, w := r.share(n)
	r.sh.ctx, r.sh.share = ctx, w
	defer func() { r.sh.ctx = context.Background() }()
	loss, err := r.Pipeline.Step(ctx, b.X, b.Y)
	if err != nil {
		return 0, err
	}
	l := []float64{loss * w}
	if err := r.DataComm.AllReduce64(ctx, l, comm.Sum); err != nil {
		return 0, errors.Join(errors.New("dist: sharing the loss across pipelines"), err)
	}
	return l[0], nil
}

// Plan is the rank's plan of a step on a global batch of x and y (its
// share: pipeline.Pipeline.Plan of it).
func (r *Replica) Plan(x, y trace.Meta) ([]pipeline.StagePlan, error) {
	lo, hi, _ := r.share(x.Shape[0])
	if hi <= lo {
		return nil, fmt.Errorf("%w: a batch of %d samples cannot give each of %d pipelines one", ErrConfig, x.Shape[0], r.DataComm.Size())
	}
	return r.Pipeline.Plan(shareMeta(x, hi-lo), shareMeta(y, hi-lo))
}

func shareMeta(m trace.Meta, n int) trace.Meta {
	m.Shape = m.Shape.Clone()
	m.Shape[0] = n
	return m
}

// replicaOpt is a stage's optimizer under data parallelism across
// pipelines: the stage's gradients (each replica's of its share, which
// it weighs by) are summed over the replicas through the bucket, then
// the inner optimizer steps (under ZeRO 1 a zeroOpt: each rank updates
// its shard, then the parameters are all-gathered).
type replicaOpt struct {
	inner       optim.Optimizer
	d           *DataParallel // c, stage, buf, ctx: what allReduce and zeroOpt use
	sh          *replicaShared
	commAlloc   optim.AllocFunc
	bucketBytes int64
}

var (
	_ optim.Preparer       = (*replicaOpt)(nil)
	_ pipeline.CommBuffers = (*replicaOpt)(nil)
)

func (o *replicaOpt) SetCommAlloc(f optim.AllocFunc) { o.commAlloc = f }

// Prepare allocates the bucket (before the optimizer state, on every
// device the stage is built on, so that plans replay it), then the inner
// optimizer's state.
func (o *replicaOpt) Prepare(params []optim.Param) error {
	var numels []int
	for _, p := range params {
		numels = append(numels, len(p.Value))
	}
	if size := o.d.c.Size(); size > 1 {
		floats, bf := bufferFloats(numels, size, o.d.stage, o.bucketBytes, false)
		o.d.bucketFloats = bf
		if o.commAlloc == nil {
			return fmt.Errorf("%w: a replica's optimizer outside a pipeline stage (no communication buffer)", ErrConfig)
		}
		what := "gradient bucket (pipeline replicas)"
		if o.d.stage > 0 {
			what = "ZeRO shards (pipeline replicas)"
		}
		buf, err := o.commAlloc("", what, floats)
		if err != nil {
			return fmt.Errorf("dist: replica %d: %w", o.d.c.Rank(), err)
		}
		o.d.buf = buf
	}
	if prep, ok := o.inner.(optim.Preparer); ok {
		return prep.Prepare(params)
	}
	return nil
}

func (o *replicaOpt) Step(params []optim.Param) error {
	o.d.ctx = o.sh.ctx
	if o.d.c.Size() > 1 {
		if w := o.sh.share; w != 1 {
			for _, p := range params {
				for i, g := range p.Grad {
					p.Grad[i] = float32(float64(g) * w)
				}
			}
		}
		if err := o.d.allReduce(o.d.ctx, params); err != nil {
			return err
		}
	}
	return o.inner.Step(params)
}

func (o *replicaOpt) StateBytes() int64                      { return o.inner.StateBytes() }
func (o *replicaOpt) SetAlloc(f optim.AllocFunc)             { o.inner.SetAlloc(f) }
func (o *replicaOpt) StateBytesFor(numel int64) int64        { return o.inner.StateBytesFor(numel) }
func (o *replicaOpt) LR() float64                            { return o.inner.LR() }
func (o *replicaOpt) SetLR(lr float64)                       { o.inner.SetLR(lr) }
func (o *replicaOpt) State() map[string]map[string][]float32 { return o.inner.State() }

// share is replica d's samples of the planned global batch.
func (p *pipePlanner) share(d int) int {
	lo, hi := shareOf(p.j.Batch, d, p.l.Ranks/p.l.Pipeline)
	return hi - lo
}

func (p *pipePlanner) options() ReplicaOptions {
	return ReplicaOptions{Zero: p.l.Zero, BucketBytes: p.l.BucketBytes, Schedule: p.j.Pipeline.Schedule}
}

// optimizer is the optimizer of a replica's stage as the ranks run it
// (their bucket included), for pipeline.CutRanks.
func (p *pipePlanner) optimizer() (func() (optim.Optimizer, error), error) {
	data, err := comm.Meta(0, p.l.Ranks/p.l.Pipeline)
	if err != nil {
		return nil, err
	}
	return replicaOptimizer(p.j.NewOptimizer, data, p.options(), &replicaShared{ctx: context.Background(), share: 1}), nil
}

// replica is rank's replica on the meta device, built by the code the
// rank runs.
func (p *pipePlanner) replica(ctx context.Context, rank int) (*Replica, error) {
	world, err := comm.Meta(rank, p.l.Ranks)
	if err != nil {
		return nil, err
	}
	stages, data, err := SplitPipelines(ctx, world, p.l.Pipeline)
	if err != nil {
		return nil, err
	}
	pj := p.j.Pipeline
	return NewReplica(ctx, stages, data, pj.Layers, pj.Loss, p.cuts, device.Meta(), p.j.NewOptimizer, pj.Micro, 1, p.options())
}

// replicaMoved is what the rank sends per step to the replicas of its
// stage: the all-reduce of its gradients (and ZeRO 1's all-gather of its
// parameters), counted as dataPlanner counts them.
func (p *pipePlanner) replicaMoved(r *Replica) int64 {
	var numels []int
	for _, q := range r.Stages[0].Store.Trainable() {
		numels = append(numels, int(q.Numel()))
	}
	return (&dataPlanner{l: Layout{Ranks: r.DataComm.Size(), Zero: p.l.Zero}, numels: numels}).moved()
}

// SaveState implements optim.Stateful: the inner optimizer's (under ZeRO
// 1, zeroOpt's: this rank's shards, marked as such), so that a stage's
// checkpoint is the one a stage without replicas writes.
func (o *replicaOpt) SaveState() optim.SavedState {
	if so, ok := o.inner.(optim.Stateful); ok {
		return so.SaveState()
	}
	return optim.SavedState{Kind: fmt.Sprintf("%T (not stateful)", o.inner)}
}

// LoadState implements optim.Stateful (under ZeRO 1 the whole state is
// cut into this rank's shards).
func (o *replicaOpt) LoadState(s optim.SavedState) error {
	so, ok := o.inner.(optim.Stateful)
	if !ok {
		return fmt.Errorf("%w: optimizer %T cannot load a state", ErrConfig, o.inner)
	}
	return so.LoadState(s)
}
