package dist

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/train"
)

// PipelineJob is what a job cut into pipeline stages needs besides Job:
// the model as a list of layers (Job.Build is not used), how the
// micro-batches run, and the budget that chooses the cuts.
type PipelineJob struct {
	Layers   []pipeline.Layer
	Loss     train.LossFunc
	Schedule pipeline.Schedule
	// Micro is the number of micro-batches a step's batch is split into
	// (at least 1).
	Micro int
	// Budget, when above 0, is each rank's device memory: the stages are
	// cut by pipeline.CutRanks so that each rank's planned peak fits it.
	// Without it the layers are divided as evenly as they count.
	Budget int64
}

// pipePlanner plans the ranks of pipeline stages on ranks
// (pipeline.NewRank): rank r runs stage r. Each is planned by the code
// it runs, on the meta device with a communicator that moves no data.
type pipePlanner struct {
	j    Job
	l    Layout
	cuts []int
}

func newPipePlanner(j Job, l Layout) (*pipePlanner, error) {
	pj := j.Pipeline
	switch {
	case pj == nil || len(pj.Layers) == 0 || pj.Loss == nil:
		return nil, fmt.Errorf("%w: pipeline stages (--pipeline %d) of a model that is not a list of layers", ErrNotAvailable, l.Pipeline)
	case l.Ranks%l.Pipeline != 0:
		return nil, fmt.Errorf("%w: %d ranks for %d pipeline stages: --ranks must be a multiple of --pipeline (replicas of the pipeline)", ErrConfig, l.Ranks, l.Pipeline)
	case l.Tensor > 1 || l.Zero > 1 || l.Overlap:
		return nil, fmt.Errorf("%w: pipeline stages with tensor parallelism, ZeRO 2 or 3, or overlap (ZeRO 1 over the replicas of a stage is)", ErrNotAvailable)
	case l.Zero == 1 && l.Ranks == l.Pipeline:
		return nil, fmt.Errorf("%w: ZeRO 1 with one pipeline: its shards are spread over the replicas of each stage (--ranks 2×--pipeline at least)", ErrConfig)
	case j.Batch < l.Ranks/l.Pipeline:
		return nil, fmt.Errorf("%w: a batch of %d samples cannot give each of %d pipelines one", ErrConfig, j.Batch, l.Ranks/l.Pipeline)
	case pj.Micro < 1:
		return nil, fmt.Errorf("%w: %d micro-batches", ErrConfig, pj.Micro)
	case j.Example == nil || j.NewOptimizer == nil:
		return nil, fmt.Errorf("%w: a job needs Example and NewOptimizer", ErrConfig)
	case len(pj.Layers) < l.Pipeline:
		return nil, fmt.Errorf("%w: %d layers cannot fill %d pipeline stages", ErrConfig, len(pj.Layers), l.Pipeline)
	}
	p := &pipePlanner{j: j, l: l}
	// Cut for the first replica's share, the largest, with the
	// optimizers the ranks run (their buckets included).
	x, y := j.Example(p.share(0))
	if pj.Budget > 0 {
		budgets := make([]int64, l.Pipeline)
		for i := range budgets {
			budgets[i] = pj.Budget
		}
		newOpt, err := p.optimizer()
		if err != nil {
			return nil, err
		}
		cuts, _, err := pipeline.CutRanks(pj.Layers, pj.Loss, newOpt, budgets, pj.Micro, pj.Schedule, x, y)
		if err != nil {
			return nil, err
		}
		if len(cuts) != l.Pipeline+1 {
			// Fewer stages hold the model: cut it into as many as
			// asked anyway, evenly.
			cuts = nil
		}
		p.cuts = cuts
	}
	if p.cuts == nil {
		n, P := len(pj.Layers), l.Pipeline
		for s := range P + 1 {
			p.cuts = append(p.cuts, s*n/P)
		}
	}
	return p, nil
}

// key: every stage is planned once per size of a replica's share (rank
// r is stage r%P of replica r/P).
func (p *pipePlanner) key(rank int) string {
	return fmt.Sprint(rank%p.l.Pipeline, " ", p.share(rank/p.l.Pipeline))
}

func (p *pipePlanner) plan(ctx context.Context, rank int) (RankPlan, error) {
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
	sp, s, share := sps[0], rank%p.l.Pipeline, p.share(rank/p.l.Pipeline)
	m := train.MemoryPlan{Parameters: sp.Parameters, Gradients: sp.Gradients, OptimizerState: sp.OptimizerState, Communication: sp.CommunicationAtPeak,
		PeakStep: fmt.Sprintf("stage %d of %d (layers %d-%d), %v", s, p.l.Pipeline, sp.Lo, sp.Hi-1, pj.Schedule)}
	m.Activations = sp.Peak - m.Parameters - m.Gradients - m.OptimizerState - m.Communication
	micro := (share + pj.Micro - 1) / pj.Micro
	return RankPlan{Batch: share, MicroBatch: micro, Memory: m, Reserved: sp.Reserved, Moved: sp.Sent + p.replicaMoved(r)}, nil
}

// Cuts are the layers each stage starts at (and the last one's end), as
// the planner of a pipeline layout chose them.
func Cuts(j Job, l Layout) ([]int, error) {
	p, err := newPipePlanner(j, l)
	if err != nil {
		return nil, err
	}
	return p.cuts, nil
}
