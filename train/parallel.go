package train

import (
	"context"

	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
)

// Parallel is how a trainer takes part in data-parallel training
// (Config.Parallel; package dist implements it over a comm.Comm). Every
// rank calls it in the same order each step, so its methods may run
// collectives.
type Parallel interface {
	// Share is called at the start of each step with the weight of this
	// rank's batch (its samples, or Trainer.Weigh's total) and returns
	// this rank's share of the global batch: the factor the loss seed is
	// multiplied by, so that the ranks' gradients add up to the gradient
	// of the global batch.
	Share(ctx context.Context, weight float64) (float64, error)
	// Reduce is called after the backward passes, before the optimizer,
	// with the parameters (Grad nil where no gradient buffer is kept) and
	// this rank's loss. It combines the gradients across ranks in place
	// as the optimizer needs them and returns the global batch's loss.
	Reduce(ctx context.Context, params []optim.Param, loss float64) (float64, error)
}

// Reorderer is implemented by a Parallel that chooses where some nodes of
// its steps run (ZeRO-3's gather prefetch): Reorder gets each step after
// the transform passes, just before it is scheduled and laid out, and
// returns it with the same nodes in a valid order of its choosing, so the
// plan is the reordered step's.
type Reorderer interface {
	Reorder(g *trace.Graph) (*trace.Graph, error)
}
