package comm

import (
	"context"
	"fmt"
)

// Meta returns rank's communicator in a group of size ranks that moves no
// data: every collective checks its arguments and returns, leaving the
// buffers as they are. It is the communicator of planning: a rank's
// trainer set up on the meta device with it (dist.NewTrainer) allocates
// exactly what the rank allocates in a real run, for any number of ranks,
// without the others existing. Its collectives never wait, so nothing
// built on it can hang; the context is checked all the same.
//
// A trainer stepped with it would compute with unreduced gradients: it is
// for plans, not for training.
func Meta(rank, size int) (Comm, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of a group of %d ranks", ErrArgument, rank, size)
	}
	return metaComm{rank: rank, size: size}, nil
}

type metaComm struct{ rank, size int }

func (m metaComm) Rank() int { return m.rank }
func (m metaComm) Size() int { return m.size }

func (m metaComm) String() string { return fmt.Sprintf("meta rank %d of %d", m.rank, m.size) }

func (m metaComm) AllReduce(ctx context.Context, buf []float32, op Op) error { return ctx.Err() }

func (m metaComm) AllReduce64(ctx context.Context, buf []float64, op Op) error { return ctx.Err() }

func (m metaComm) ReduceScatter(ctx context.Context, send, recv []float32, op Op) error {
	if err := checkLens(m, "reduce-scatter", len(send), len(recv)); err != nil {
		return err
	}
	return ctx.Err()
}

func (m metaComm) AllGather(ctx context.Context, send, recv []float32) error {
	if err := checkLens(m, "all-gather", len(send), len(recv)); err != nil {
		return err
	}
	return ctx.Err()
}

func (m metaComm) Broadcast(ctx context.Context, buf []float32, root int) error {
	if err := checkRank(m, "root", root); err != nil {
		return err
	}
	return ctx.Err()
}

func (m metaComm) Barrier(ctx context.Context) error { return ctx.Err() }

func (m metaComm) Send(ctx context.Context, buf []float32, dst, tag int) error {
	if err := checkRank(m, "destination", dst); err != nil {
		return err
	}
	return ctx.Err()
}

func (m metaComm) Recv(ctx context.Context, buf []float32, src, tag int) error {
	if err := checkRank(m, "source", src); err != nil {
		return err
	}
	return ctx.Err()
}
