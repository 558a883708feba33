package dist

import (
	"context"
	"fmt"
	"strconv"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
)

// zero3Planner plans the ranks of data parallelism under ZeRO stage 3
// (NewZero3Trainer, each rank on a communicator that moves no data).
type zero3Planner struct {
	j   Job
	l   Layout
	acc int
}

func newZero3Planner(j Job, l Layout) (*zero3Planner, error) {
	switch {
	case j.Build == nil || j.Example == nil || j.NewOptimizer == nil:
		return nil, fmt.Errorf("%w: a job needs Build, Example and NewOptimizer", ErrConfig)
	case j.Batch < l.Ranks:
		return nil, fmt.Errorf("%w: a batch of %d samples cannot give each of %d ranks one", ErrConfig, j.Batch, l.Ranks)
	case l.Overlap:
		// ZeRO-3's collectives are in the step's graph, scheduled with it.
		return nil, fmt.Errorf("%w: overlap is for ZeRO 0 (ZeRO-3's gathers and reduce-scatters are scheduled in the step)", ErrConfig)
	case j.Config.OptimizerInBackward:
		return nil, fmt.Errorf("%w: ZeRO-3 with the optimizer in the backward pass is not supported", ErrConfig)
	}
	return &zero3Planner{j: j, l: l, acc: max(j.Config.Accumulation, 1)}, nil
}

// key: the rank's share of the batch. Every rank's shards have the same
// length (ceil(numel/N), padded), so nothing else differs.
func (p *zero3Planner) key(rank int) string {
	lo, hi := shareOf(p.j.Batch, rank, p.l.Ranks)
	return strconv.Itoa(hi - lo)
}

func (p *zero3Planner) plan(ctx context.Context, rank int) (RankPlan, error) {
	lo, hi := shareOf(p.j.Batch, rank, p.l.Ranks)
	share := hi - lo
	micro := (share + p.acc - 1) / p.acc
	dev := device.Meta()
	s := nn.NewStore() // unmaterialized: the rank materializes its shards
	m, loss := p.j.Build(s)
	opt, err := p.j.NewOptimizer()
	if err != nil {
		return RankPlan{}, err
	}
	c, err := comm.Meta(rank, p.l.Ranks)
	if err != nil {
		return RankPlan{}, err
	}
	tr, z, err := NewZero3Trainer(ctx, c, dev, s, m, loss, opt, p.j.Config, Zero3Options{Prefetch: p.l.Prefetch})
	if err != nil {
		return RankPlan{}, err
	}
	defer z.Close()
	defer tr.Close()
	x, y := p.j.Example(micro)
	mp, reserved, moved, err := planStep(ctx, dev, tr, x, y)
	if err != nil {
		return RankPlan{}, err
	}
	// Passes per step: each gathers and reduce-scatters again.
	passes := int64((share + micro - 1) / micro)
	return RankPlan{Batch: share, MicroBatch: micro, Memory: mp, Reserved: reserved, Moved: moved * passes}, nil
}
