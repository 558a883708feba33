package dist

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
)

// Data parallelism across tensor-parallel groups (Megatron-LM's DP×TP):
// N = D×T ranks. The T consecutive ranks of a tensor group (ranks r with
// the same r/T) split every layer as NewTensorTrainer does and run the
// same share of the global batch, the group's (ShardBatch of data rank
// r/T over D); the D ranks holding the same piece (the same r%T) form a
// data-parallel group, which sums the pieces' gradients after the
// backward pass (or, under ZeRO 1 and 2, shards the pieces' optimizer
// state and gradients across itself), as NewTrainer's DataParallel does
// for whole models. A rank's collectives inside the step run on its
// tensor group, those around it on its data group.

// HybridGroups splits c's N ranks into the rank's tensor-parallel group of
// tensor consecutive ranks and its data-parallel group of the N/tensor
// ranks with the same place in theirs (comm.Grid). Every rank of c calls
// it.
func HybridGroups(ctx context.Context, c comm.Comm, tensor int) (tp, dp comm.Comm, err error) {
	if c == nil {
		return nil, nil, fmt.Errorf("%w: no communicator", ErrConfig)
	}
	if tensor < 1 || c.Size()%tensor != 0 {
		return nil, nil, fmt.Errorf("%w: %d ranks do not split into tensor-parallel groups of %d", ErrConfig, c.Size(), tensor)
	}
	return comm.Grid(ctx, c, tensor)
}

// NewHybridTrainer makes a rank's trainer of data parallelism across
// tensor-parallel groups: model is the rank's piece (zoo.NewTPGPT with
// rank tp.Rank() of tp.Size()), tp and dp its groups (HybridGroups). It is
// NewTrainer over dp, o's ZeRO stage sharding the piece across dp, with tp
// bound to every run of the step as NewTensorTrainer binds it. Feed the
// trainer its data group's share of each global batch (ShardBatch of rank
// dp.Rank() of dp.Size()); every rank of a tensor group gets the same.
// Close the trainer, then the DataParallel.
func NewHybridTrainer(ctx context.Context, tp, dp comm.Comm, dev *device.Device, store *nn.Store, model train.Model, loss train.LossFunc, opt optim.Optimizer, cfg train.Config, o Options) (*train.Trainer, *DataParallel, error) {
	if tp == nil || dp == nil {
		return nil, nil, fmt.Errorf("%w: no communicator", ErrConfig)
	}
	if o.Overlap {
		// Its buckets fill from the backward pass of a step whose graph
		// also runs the tensor group's collectives: not tested together.
		return nil, nil, fmt.Errorf("%w: overlap with tensor parallelism", ErrNotAvailable)
	}
	if dev.HasData() {
		t := &DataParallel{c: tp}
		if err := t.agree(ctx, store, opt, cfg, Options{Agree: "tensor parallel " + o.Agree}); err != nil {
			return nil, nil, err
		}
	}
	tr, d, err := NewTrainer(ctx, dp, dev, store, model, loss, opt, cfg, o)
	if err != nil {
		return nil, nil, err
	}
	ro := exec.Options{}
	if tr.RunOptions != nil {
		ro = *tr.RunOptions
	}
	ro.Comm = tp
	tr.RunOptions = &ro
	return tr, d, nil
}
