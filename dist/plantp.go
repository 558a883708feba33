package dist

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
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
		// A data-parallel group of tensor-parallel groups needs each rank
		// in two communicators (its tensor group's, its data group's),
		// which package comm cannot split a job into yet.
		return nil, fmt.Errorf("%w: %d ranks with tensor parallelism %d: data parallelism across tensor-parallel groups (package comm has no communicator split yet); use --ranks %d", ErrNotAvailable, l.Ranks, l.Tensor, l.Tensor)
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
	share := p.j.Batch // every rank of the group runs the whole batch
	micro := (share + p.acc - 1) / p.acc
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
	opt, err := p.j.NewOptimizer()
	if err != nil {
		return RankPlan{}, err
	}
	c, err := comm.Meta(rank, p.l.Tensor)
	if err != nil {
		return RankPlan{}, err
	}
	tr, err := NewTensorTrainer(ctx, c, dev, s, m, loss, opt, p.j.Config)
	if err != nil {
		return RankPlan{}, err
	}
	defer tr.Close()
	x, y := p.j.Example(micro)
	mp, reserved, moved, err := planStep(ctx, dev, tr, x, y)
	if err != nil {
		return RankPlan{}, err
	}
	passes := int64((share + micro - 1) / micro)
	return RankPlan{Batch: share, MicroBatch: micro, Memory: mp, Reserved: reserved, Moved: moved * passes}, nil
}
