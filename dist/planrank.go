package dist

import (
	"context"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
)

// rankTrainer sets a rank's trainer up on the meta device by the code the
// rank runs, given its communicator of the whole job (one that moves no
// data) and a new optimizer; done releases what it made, and extra is the
// bytes the rank sends per step outside the step's graph (a data-parallel
// group's all-reduce).
type rankTrainer func(c comm.Comm, opt optim.Optimizer) (tr *train.Trainer, done func(), extra int64, err error)

// planRankStep is what the planners of a rank share: the optimizer, the
// rank's meta communicator (rank of ranks), the trainer mk makes on dev
// (where the rank's parameters are already materialized), and the plan of
// its step on its share of samples in passes of at most ceil(share/acc).
func planRankStep(ctx context.Context, j Job, dev *device.Device, rank, ranks, share, acc int, mk rankTrainer) (RankPlan, error) {
	micro := (share + acc - 1) / acc
	opt, err := j.NewOptimizer()
	if err != nil {
		return RankPlan{}, err
	}
	c, err := comm.Meta(rank, ranks)
	if err != nil {
		return RankPlan{}, err
	}
	tr, done, extra, err := mk(c, opt)
	if err != nil {
		return RankPlan{}, err
	}
	defer done()
	x, y := j.Example(micro)
	mp, reserved, moved, err := planStep(ctx, dev, tr, x, y)
	if err != nil {
		return RankPlan{}, err
	}
	// Passes per step: each runs the graph's collectives again.
	passes := int64((share + micro - 1) / micro)
	return RankPlan{Batch: share, MicroBatch: micro, Memory: mp, Reserved: reserved, Moved: moved*passes + extra}, nil
}
