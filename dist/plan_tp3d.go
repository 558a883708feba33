package dist

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Tensor × pipeline (Megatron's 3D layout): N = D×P×T ranks. Rank r is
// tensor rank r%T of stage (r/T)%P of replica r/(P·T): the T ranks of a
// stage hold its transformer blocks split as zoo.NewTPGPT splits them
// and meet in the all-reduces inside the stage's programs; the P stages
// of a replica pass activations and their gradients by Send/Recv; the D
// ranks holding the same piece of the same stage sum their gradients
// (ZeRO 0 or 1 over them, as across pipelines): SplitTP3D makes the
// three groups, NewReplica the stage on the layers of TPGPTLayers, with
// the tensor group as the pipeline's TensorComm.

// tp3dPlanner plans the ranks of tensor × pipeline layouts, each by the
// code a replica's stage runs (NewReplica on the pipeline cut of the
// tensor-parallel GPT, pipeline.TPGPTLayers), on the meta device, where
// the tensor group's collectives move nothing and need no communicator.
type tp3dPlanner struct {
	j    Job
	l    Layout
	cfg  zoo.GPTConfig
	cuts []int
}

func newTP3DPlanner(j Job, l Layout) (*tp3dPlanner, error) {
	pj := j.Pipeline
	PT := l.Pipeline * l.Tensor
	switch {
	case pj == nil || pj.Loss == nil:
		return nil, fmt.Errorf("%w: tensor × pipeline (--pipeline %d --tensor %d) needs the job as pipeline layers", ErrConfig, l.Pipeline, l.Tensor)
	case l.Ranks%PT != 0:
		return nil, fmt.Errorf("%w: %d ranks are not a multiple of %d pipeline stages × %d tensor ranks", ErrConfig, l.Ranks, l.Pipeline, l.Tensor)
	case l.Zero < 0 || l.Zero > 1 || l.Overlap:
		return nil, fmt.Errorf("%w: %v: tensor × pipeline takes ZeRO 0 or 1 over the replicas of a stage's piece, without overlap", ErrNotAvailable, l)
	case l.Zero == 1 && l.Ranks == PT:
		return nil, fmt.Errorf("%w: ZeRO 1 with one tensor × pipeline replica: its shards are spread over the replicas (--ranks 2×pipeline×tensor at least)", ErrConfig)
	case j.Batch < l.Ranks/PT:
		return nil, fmt.Errorf("%w: a batch of %d samples cannot give each of %d replicas one", ErrConfig, j.Batch, l.Ranks/PT)
	case pj.Micro < 1:
		return nil, fmt.Errorf("%w: %d micro-batches", ErrConfig, pj.Micro)
	case j.Example == nil || j.NewOptimizer == nil:
		return nil, fmt.Errorf("%w: a job needs Build, Example and NewOptimizer", ErrConfig)
	}
	cfg, err := TensorGPTConfig(j)
	if err != nil {
		return nil, err
	}
	if err := zoo.CheckTensorParallel(cfg, l.Tensor); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.NLayer < l.Pipeline {
		return nil, fmt.Errorf("%w: %d transformer blocks cannot fill %d pipeline stages", ErrConfig, cfg.NLayer, l.Pipeline)
	}
	p := &tp3dPlanner{j: j, l: l, cfg: cfg}
	// The blocks divided as evenly as they count, as a pipeline without
	// a budget divides its layers.
	for s := range l.Pipeline + 1 {
		p.cuts = append(p.cuts, s*cfg.NLayer/l.Pipeline)
	}
	return p, nil
}

// coords are rank's place: tensor rank, stage and replica.
func (p *tp3dPlanner) coords(rank int) (t, s, d int) {
	T, P := p.l.Tensor, p.l.Pipeline
	return rank % T, (rank / T) % P, rank / (P * T)
}

func (p *tp3dPlanner) replicas() int { return p.l.Ranks / (p.l.Pipeline * p.l.Tensor) }

func (p *tp3dPlanner) share(d int) int {
	lo, hi := shareOf(p.j.Batch, d, p.replicas())
	return hi - lo
}

// key: the stage and the replica's share; the pieces of a tensor group
// are equal (whole heads, equal columns), so its rank never differs.
func (p *tp3dPlanner) key(rank int) string {
	_, s, d := p.coords(rank)
	return fmt.Sprint(s, " ", p.share(d))
}

// replica is rank's stage on the meta device, built by NewReplica on the
// layers of its tensor rank.
func (p *tp3dPlanner) replica(ctx context.Context, rank int) (*Replica, error) {
	t, s, d := p.coords(rank)
	layers, err := pipeline.TPGPTLayers(p.cfg, t, p.l.Tensor)
	if err != nil {
		return nil, err
	}
	world, err := comm.Meta(rank, p.l.Ranks)
	if err != nil {
		return nil, err
	}
	tp, stages, data, err := SplitTP3D(ctx, world, p.l.Pipeline, p.l.Tensor)
	if err != nil {
		return nil, err
	}
	if tp.Rank() != t || stages.Rank() != s || data.Rank() != d {
		return nil, fmt.Errorf("rank %d split as tensor %d, stage %d, replica %d, not %d, %d, %d", rank, tp.Rank(), stages.Rank(), data.Rank(), t, s, d)
	}
	pj := p.j.Pipeline
	o := ReplicaOptions{Zero: p.l.Zero, BucketBytes: p.l.BucketBytes, Schedule: pj.Schedule}
	r, err := NewReplica(ctx, stages, data, layers, pj.Loss, p.cuts, device.Meta(), p.j.NewOptimizer, pj.Micro, 1, o)
	if err != nil {
		return nil, err
	}
	r.TensorComm = tp
	return r, nil
}

func (p *tp3dPlanner) plan(ctx context.Context, rank int) (RankPlan, error) {
	pj := p.j.Pipeline
	r, err := p.replica(ctx, rank)
	if err != nil {
		return RankPlan{}, err
	}
	defer r.Close()
	x, y := p.j.Example(p.j.Batch)
	sps, err := r.Plan(x, y)
	if err != nil {
		return RankPlan{}, err
	}
	_, s, d := p.coords(rank)
	sp, share := sps[0], p.share(d)
	m := train.MemoryPlan{Parameters: sp.Parameters, Gradients: sp.Gradients, OptimizerState: sp.OptimizerState, Communication: sp.CommunicationAtPeak,
		PeakStep: fmt.Sprintf("stage %d of %d (blocks %d-%d), tensor parallel %d, %v", s, p.l.Pipeline, sp.Lo, sp.Hi-1, p.l.Tensor, pj.Schedule)}
	m.Activations = sp.Peak - m.Parameters - m.Gradients - m.OptimizerState - m.Communication
	micro := (share + pj.Micro - 1) / pj.Micro
	// Sent: activations and their gradients to the neighbouring stages,
	// the tensor group's all-reduces inside the stage's programs, and
	// the gradients' all-reduce over the replicas of the piece.
	moved := sp.Sent + sp.Collectives + (&pipePlanner{l: p.l}).replicaMoved(r)
	return RankPlan{Batch: share, MicroBatch: micro, Memory: m, Reserved: sp.Reserved, Moved: moved}, nil
}
