package dist

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/comm"
)

// SplitTP3D splits world (N = D×P×T ranks) into the groups of tensor ×
// pipeline parallelism, Megatron's order (tensor innermost): rank r is
// tensor rank r%T of stage (r/T)%P of replica r/(P·T). tensor is the T
// ranks holding the pieces of the rank's stage (the TPGPT's collectives
// run on it: pipeline.Pipeline.TensorComm); stages the P ranks of the
// rank's replica holding the same piece (rank = stage: Send/Recv of
// activations); data the D ranks holding the same piece of the same
// stage (its gradients are summed over it). A Meta world splits too, for
// plans.
func SplitTP3D(ctx context.Context, world comm.Comm, P, T int) (tensor, stages, data comm.Comm, err error) {
	if P < 1 || T < 1 || world.Size()%(P*T) != 0 {
		return nil, nil, nil, fmt.Errorf("%w: %d ranks are not a multiple of %d pipeline stages × %d tensor ranks", ErrConfig, world.Size(), P, T)
	}
	coords := func(r int) (t, s, d int) { return r % T, (r / T) % P, r / (P * T) }
	if tensor, err = comm.SplitBy(ctx, world, func(r int) (int, int) { t, _, _ := coords(r); return r / T, t }); err != nil {
		return nil, nil, nil, err
	}
	if stages, err = comm.SplitBy(ctx, world, func(r int) (int, int) { t, s, d := coords(r); return d*T + t, s }); err != nil {
		return nil, nil, nil, err
	}
	if data, err = comm.SplitBy(ctx, world, func(r int) (int, int) { t, s, d := coords(r); return s*T + t, d }); err != nil {
		return nil, nil, nil, err
	}
	return tensor, stages, data, nil
}
