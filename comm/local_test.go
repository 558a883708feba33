package comm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/comm"
)

func TestLocalCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		if err := comm.Run(context.Background(), n, exercise); err != nil {
			t.Errorf("%d ranks: %v", n, err)
		}
	}
}

// A rank that fails aborts the group: the others, waiting in a
// collective it never joins, return an error naming it instead of
// hanging.
func TestLocalRankFailureAborts(t *testing.T) {
	boom := errors.New("out of data")
	err := comm.Run(context.Background(), 3, func(ctx context.Context, c comm.Comm) error {
		if c.Rank() == 1 {
			return boom
		}
		return c.AllReduce(ctx, make([]float32, 4), comm.Sum)
	})
	if !errors.Is(err, boom) || !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("err = %v, want the failure and the others aborted", err)
	}
	var re *comm.RankError
	if !errors.As(err, &re) || re.Rank != 1 || !strings.Contains(err.Error(), "rank 1: out of data") {
		t.Fatalf("err = %v, want it to name rank 1", err)
	}
}

// Ranks that call different collectives (or lengths) get ErrMismatch
// naming both, not a wrong result or a hang.
func TestLocalMismatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context, c comm.Comm) error
	}{
		{"length", func(ctx context.Context, c comm.Comm) error {
			return c.AllReduce(ctx, make([]float32, 4+c.Rank()), comm.Sum)
		}},
		{"operation", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 0 {
				return c.Barrier(ctx)
			}
			return c.AllReduce(ctx, make([]float32, 1), comm.Sum)
		}},
		{"message", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 0 {
				return c.Send(ctx, make([]float32, 3), 1, 0)
			}
			return c.Recv(ctx, make([]float32, 2), 0, 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := comm.Run(context.Background(), 2, tc.fn)
			if !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), "rank") {
				t.Fatalf("err = %v, want a mismatch naming the ranks", err)
			}
		})
	}
}

// A cancelled rank aborts the group too.
func TestLocalCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	err := comm.Run(context.Background(), 2, func(_ context.Context, c comm.Comm) error {
		if c.Rank() == 0 {
			cancel()
			return c.AllReduce(ctx, make([]float32, 1), comm.Sum)
		}
		// Rank 1 waits in a collective rank 0 abandons.
		return c.AllReduce(context.Background(), make([]float32, 1), comm.Sum)
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("err = %v", err)
	}
}

// Reductions add in rank order: every rank gets the same bits.
func TestLocalDeterministic(t *testing.T) {
	vals := []float32{1e8, 1, -1e8, 1}
	got := make([][]float32, len(vals))
	err := comm.Run(context.Background(), len(vals), func(ctx context.Context, c comm.Comm) error {
		b := []float32{vals[c.Rank()]}
		err := c.AllReduce(ctx, b, comm.Sum)
		got[c.Rank()] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// ((1e8+1)-1e8)+1 in float32: 1e8+1 rounds to 1e8.
	for r, g := range got {
		if g[0] != 1 {
			t.Fatalf("rank %d: %v, want 1 (rank-order float32 sum)", r, g[0])
		}
	}
}

func TestOpenAlone(t *testing.T) {
	t.Setenv("OMPI_COMM_WORLD_SIZE", "")
	t.Setenv("PMI_SIZE", "")
	t.Setenv("OMPI_UNIVERSE_SIZE", "")
	c, err := comm.Open()
	if c != nil || err != nil {
		t.Fatalf("Open outside a launcher = %v, %v; want nil, nil", c, err)
	}
	if !comm.MPIAvailable {
		t.Setenv("OMPI_COMM_WORLD_RANK", "1")
		t.Setenv("OMPI_COMM_WORLD_SIZE", "2")
		if _, err := comm.Open(); !errors.Is(err, comm.ErrNoMPI) || !strings.Contains(err.Error(), "-tags mpi") {
			t.Fatalf("Open under mpirun without MPI: %v", err)
		}
	}
}
