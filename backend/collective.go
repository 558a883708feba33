package backend

import (
	"context"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// CollectiveKernel runs a node that communicates (prim.Collective) with
// the communicator of the run, which the executor binds (exec.Options.Comm):
// nodes and compiled programs hold none.
type CollectiveKernel func(ctx context.Context, c comm.Comm, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error

// Collectives is implemented by backends that run collectives: the
// executor asks it, instead of Kernel, for the kernel of a
// prim.Collective node.
type Collectives interface {
	CollectiveKernel(o trace.Op) (CollectiveKernel, error)
}
