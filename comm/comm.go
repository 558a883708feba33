// Package comm is the communicator the engine's distributed training talks
// through: collectives (all-reduce, reduce-scatter, all-gather, broadcast,
// barrier) and point-to-point messages between the ranks of a group, on
// float32 buffers. It is an interface so that the engine never depends on
// one transport: Local runs N ranks as goroutines of one process (tests,
// and devices of one machine), MPI (build tag mpi, Open MPI through cgo)
// runs one rank per process under mpirun, and NCCL can implement it later.
//
// Every call that waits takes a context. A rank that fails or is cancelled
// aborts the group (Local) or the job (MPI), so that no other rank waits
// forever in a collective it will never join.
package comm

import (
	"context"
	"errors"
	"fmt"
)

// Op is a reduction.
type Op uint8

const (
	// Sum adds the ranks' values, in rank order where the transport
	// allows (Local does; MPI chooses its own order).
	Sum Op = iota
	// Avg is Sum divided by the number of ranks.
	Avg
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	}
	return fmt.Sprintf("Op(%d)", o)
}

// Comm is one rank's view of a group of Size ranks. Collectives must be
// called by every rank in the same order with matching lengths; a
// mismatch is an error (ErrMismatch) where the transport can see it.
type Comm interface {
	Rank() int
	Size() int
	// AllReduce reduces buf over the ranks, in place: every rank ends with
	// the same result.
	AllReduce(ctx context.Context, buf []float32, op Op) error
	// AllReduce64 is AllReduce on float64 values (losses, sample counts:
	// scalars that float32 would round).
	AllReduce64(ctx context.Context, buf []float64, op Op) error
	// ReduceScatter reduces send (Size()*len(recv) values) over the ranks
	// and leaves block Rank() of the result, send[r*m:(r+1)*m] reduced, in
	// recv.
	ReduceScatter(ctx context.Context, send, recv []float32, op Op) error
	// AllGather concatenates every rank's send into recv, rank order
	// (len(recv) = Size()*len(send)). send may be recv's own block,
	// recv[Rank()*m:(Rank()+1)*m] (in place).
	AllGather(ctx context.Context, send, recv []float32) error
	// Broadcast copies root's buf into every rank's buf.
	Broadcast(ctx context.Context, buf []float32, root int) error
	// Barrier returns when every rank has called it.
	Barrier(ctx context.Context) error
	// Send sends buf to rank dst with a tag; Recv receives a message of
	// exactly len(buf) values from src with that tag.
	Send(ctx context.Context, buf []float32, dst, tag int) error
	Recv(ctx context.Context, buf []float32, src, tag int) error
}

var (
	// ErrMismatch is matched by errors.Is when the ranks disagree about a
	// collective: a different operation, length or root.
	ErrMismatch = errors.New("comm: ranks called different collectives")
	// ErrAborted is matched by errors.Is when a call ends because another
	// rank failed and aborted the group; the error names that rank.
	ErrAborted = errors.New("comm: the group was aborted")
	// ErrArgument is matched by errors.Is for a bad argument: a rank out
	// of range, buffers whose lengths do not fit the group's size.
	ErrArgument = errors.New("comm: bad argument")
)

// RankError is a rank's failure: the operation it was in and why (its
// context was cancelled, a mismatch, its own error).
type RankError struct {
	Rank int
	Op   string
	Err  error
}

func (e *RankError) Error() string {
	if e.Op == "" {
		return fmt.Sprintf("rank %d: %v", e.Rank, e.Err)
	}
	return fmt.Sprintf("rank %d in %s: %v", e.Rank, e.Op, e.Err)
}

func (e *RankError) Unwrap() error { return e.Err }

// checkLens checks the buffer lengths of a collective.
func checkLens(c Comm, op string, send, recv int) error {
	switch op {
	case "reduce-scatter":
		if send != c.Size()*recv {
			return fmt.Errorf("%w: reduce-scatter of %d values over %d ranks into %d", ErrArgument, send, c.Size(), recv)
		}
	case "all-gather":
		if recv != c.Size()*send {
			return fmt.Errorf("%w: all-gather of %d values from %d ranks into %d", ErrArgument, send, c.Size(), recv)
		}
	}
	return nil
}

func checkRank(c Comm, what string, r int) error {
	if r < 0 || r >= c.Size() {
		return fmt.Errorf("%w: %s %d of a group of %d ranks", ErrArgument, what, r, c.Size())
	}
	return nil
}
