package dist

import (
	"context"
	"fmt"
	"strconv"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// hybridTPPlanner plans the ranks of data parallelism across
// tensor-parallel groups (NewHybridTrainer on HybridGroups of a
// communicator that moves no data): Ranks/Tensor groups of Tensor ranks.
type hybridTPPlanner struct {
	j      Job
	l      Layout
	cfg    zoo.GPTConfig
	acc    int
	groups int   // data-parallel ranks: tensor-parallel groups
	numels []int // a piece's trainable parameters', in order
}

func newHybridTPPlanner(j Job, l Layout) (*hybridTPPlanner, error) {
	acc := max(j.Config.Accumulation, 1)
	switch {
	case j.Build == nil || j.Example == nil || j.NewOptimizer == nil:
		return nil, fmt.Errorf("%w: a job needs Build, Example and NewOptimizer", ErrConfig)
	case l.Ranks%l.Tensor != 0:
		return nil, fmt.Errorf("%w: %d ranks do not split into tensor-parallel groups of %d", ErrConfig, l.Ranks, l.Tensor)
	case l.Zero == 3:
		// ZeRO-3 gathers whole parameters per layer inside the step; the
		// pieces of a tensor-parallel layer would need gathers over the
		// data group of pieces, which NewZero3Trainer does not make.
		return nil, fmt.Errorf("%w: ZeRO 3 with tensor parallelism on %d ranks (%d groups of %d): use ZeRO 0, 1 or 2 across the groups", ErrNotAvailable, l.Ranks, l.Ranks/l.Tensor, l.Tensor)
	case l.Zero < 0 || l.Zero > 3:
		return nil, fmt.Errorf("%w: ZeRO stage %d (valid: 0, 1, 2, 3)", ErrConfig, l.Zero)
	case l.Overlap:
		return nil, fmt.Errorf("%w: overlap with tensor parallelism", ErrNotAvailable)
	case j.Batch < l.Ranks/l.Tensor:
		return nil, fmt.Errorf("%w: a batch of %d samples cannot give each of %d tensor-parallel groups one", ErrConfig, j.Batch, l.Ranks/l.Tensor)
	case acc > 1 && l.Zero == 2:
		return nil, fmt.Errorf("%w: %v with %d passes per step: ZeRO-2 takes each gradient in the backward pass, which needs one", ErrConfig, l, acc)
	}
	cfg, err := TensorGPTConfig(j)
	if err != nil {
		return nil, err
	}
	if err := zoo.CheckTensorParallel(cfg, l.Tensor); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	p := &hybridTPPlanner{j: j, l: l, cfg: cfg, acc: acc, groups: l.Ranks / l.Tensor}
	s := nn.NewStore()
	if _, err := zoo.NewTPGPT(s.Root(), cfg, 0, l.Tensor); err != nil {
		return nil, err
	}
	if err := s.Materialize(device.Meta(), 0); err != nil {
		return nil, err
	}
	for _, q := range s.Trainable() {
		p.numels = append(p.numels, int(q.Numel()))
	}
	return p, nil
}

// key: the group's share of the batch and, under ZeRO, the lengths of the
// rank's shards of its piece; the pieces of a layer are equal (whole
// heads, equal columns), so the place in the tensor group never differs.
func (p *hybridTPPlanner) key(rank int) string {
	d := rank / p.l.Tensor
	lo, hi := shareOf(p.j.Batch, d, p.groups)
	b := strconv.AppendInt(nil, int64(hi-lo), 10)
	if p.l.Zero > 0 {
		for _, n := range p.numels {
			lo, hi, _ := span(n, d, p.groups)
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(hi-lo), 10)
		}
	}
	return string(b)
}

func (p *hybridTPPlanner) plan(ctx context.Context, rank int) (RankPlan, error) {
	lo, hi := shareOf(p.j.Batch, rank/p.l.Tensor, p.groups)
	dev := device.Meta()
	s := nn.NewStore()
	m, err := zoo.NewTPGPT(s.Root(), p.cfg, rank%p.l.Tensor, p.l.Tensor)
	if err != nil {
		return RankPlan{}, err
	}
	if err := s.Materialize(dev, 0); err != nil {
		return RankPlan{}, err
	}
	defer s.Release()
	_, loss := p.j.Build(nn.NewStore())
	return planRankStep(ctx, p.j, dev, rank, p.l.Ranks, hi-lo, p.acc, func(c comm.Comm, opt optim.Optimizer) (*train.Trainer, func(), int64, error) {
		tp, dp, err := HybridGroups(ctx, c, p.l.Tensor)
		if err != nil {
			return nil, nil, 0, err
		}
		tr, d, err := NewHybridTrainer(ctx, tp, dp, dev, s, m, loss, opt, p.j.Config, Options{Stage: p.l.Zero, BucketBytes: p.l.BucketBytes})
		if err != nil {
			return nil, nil, 0, err
		}
		return tr, func() { tr.Close(); d.Close() }, dataMoved(p.numels, p.groups, p.l.Zero), nil
	})
}
