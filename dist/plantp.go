package dist

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// tensorPlanner plans the ranks of a tensor-parallel GPT (zoo.NewTPGPT,
// NewTensorTrainer, each rank on a communicator that moves no data).
type tensorPlanner struct {
	j   Job
	l   Layout
	cfg zoo.GPTConfig
	acc int
}

// TensorGPTConfig is the configuration of the GPT that j builds, or an
// error when it builds another model: tensor parallelism splits the GPT.
func TensorGPTConfig(j Job) (zoo.GPTConfig, error) {
	if j.Build == nil {
		return zoo.GPTConfig{}, fmt.Errorf("%w: a job needs Build", ErrConfig)
	}
	m, _ := j.Build(nn.NewStore())
	g, ok := m.(*zoo.GPT)
	if !ok {
		return zoo.GPTConfig{}, fmt.Errorf("%w: tensor parallelism splits the GPT (zoo.NewGPT); the job's model is %T", ErrConfig, m)
	}
	return g.Config, nil
}

func newTensorPlanner(j Job, l Layout) (*tensorPlanner, error) {
	switch {
	case j.Example == nil || j.NewOptimizer == nil:
		return nil, fmt.Errorf("%w: a job needs Build, Example and NewOptimizer", ErrConfig)
	case l.Ranks != l.Tensor:
		// Data parallelism across tensor groups: newHybridTPPlanner.
		return nil, fmt.Errorf("%w: %d ranks in one tensor-parallel group of %d", ErrConfig, l.Ranks, l.Tensor)
	case l.Zero != 0:
		return nil, fmt.Errorf("%w: ZeRO stage %d with tensor parallelism (ZeRO shards over data-parallel ranks, of which there is one)", ErrNotAvailable, l.Zero)
	case l.Overlap:
		return nil, fmt.Errorf("%w: overlap is for data parallelism, ZeRO 0", ErrConfig)
	}
	cfg, err := TensorGPTConfig(j)
	if err != nil {
		return nil, err
	}
	if err := zoo.CheckTensorParallel(cfg, l.Tensor); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &tensorPlanner{j: j, l: l, cfg: cfg, acc: max(j.Config.Accumulation, 1)}, nil
}

// key: every rank holds equal pieces (whole heads, equal MLP columns) and
// runs the whole batch, so all ranks plan alike.
func (p *tensorPlanner) key(int) string { return "" }

func (p *tensorPlanner) plan(ctx context.Context, rank int) (RankPlan, error) {
	dev := device.Meta()
	s := nn.NewStore()
	m, err := zoo.NewTPGPT(s.Root(), p.cfg, rank, p.l.Tensor)
	if err != nil {
		return RankPlan{}, err
	}
	if err := s.Materialize(dev, 0); err != nil {
		return RankPlan{}, err
	}
	defer s.Release()
	_, loss := p.j.Build(nn.NewStore())
	// Every rank of the group runs the whole batch.
	return planRankStep(ctx, p.j, dev, rank, p.l.Tensor, p.j.Batch, p.acc, func(c comm.Comm, opt optim.Optimizer) (*train.Trainer, func(), int64, error) {
		tr, err := NewTensorTrainer(ctx, c, dev, s, m, loss, opt, p.j.Config)
		if err != nil {
			return nil, nil, 0, err
		}
		return tr, tr.Close, 0, nil
	})
}
