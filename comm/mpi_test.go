//go:build mpi

package comm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/internal/mpitest"
)

// worker runs fn as a rank when this process is one, and reports whether
// it was.
func worker(t *testing.T, fn func(ctx context.Context, c comm.Comm) error) bool {
	if mpitest.Mode() == "" {
		return false
	}
	c := mpitest.Join(t)
	if err := fn(context.Background(), c); err != nil {
		t.Fatalf("rank %d: %v", c.Rank(), err)
	}
	if err := comm.Close(c); err != nil {
		t.Fatal(err)
	}
	return true
}

// The MPI transport passes the same checks as Local, on 2 and 3 ranks.
func TestMPICollectives(t *testing.T) {
	if worker(t, exercise) {
		return
	}
	for _, n := range []int{2, 3} {
		out, err := mpitest.Test(t, n, "TestMPICollectives", "collectives")
		if err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", n, err, out)
		}
	}
}

// A rank that dies, or whose context ends inside a collective, stops the
// job within a bounded time, and the output names that rank.
func TestMPIRankFailure(t *testing.T) {
	if worker(t, func(ctx context.Context, c comm.Comm) error {
		switch mpitest.Mode() {
		case "die":
			if c.Rank() == 1 {
				os.Exit(3) // without MPI_Finalize: mpirun ends the job
			}
		case "cancel":
			if c.Rank() == 0 {
				ctx, cancel := context.WithCancel(ctx)
				go func() { time.Sleep(100 * time.Millisecond); cancel() }()
				// Rank 1 never joins this collective.
				err := c.AllReduce(ctx, make([]float32, 1), comm.Sum)
				if err != nil {
					comm.Abort(c, err)
				}
				return fmt.Errorf("returned after MPI_Abort: %v", err)
			}
			// Rank 1 waits for a message that never comes.
			return c.Recv(ctx, make([]float32, 1), 0, 99)
		}
		err := c.AllReduce(ctx, make([]float32, 8), comm.Sum)
		return errors.Join(errors.New("all-reduce returned with a dead peer"), err)
	}) {
		return
	}
	for _, tc := range []struct{ mode, want string }{
		{"die", "exit"},
		{"cancel", "rank 0 of 2 aborts the job: rank 0 in all-reduce: context canceled"},
	} {
		out, err := mpitest.Test(t, 2, "TestMPIRankFailure", tc.mode)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: err %v, output without %q:\n%s", tc.mode, err, tc.want, out)
		}
	}
}

// MPI_Comm_split gives the groups Local gives (the same cases, np 3 and
// 4), every collective works inside them, and Grid's two splits of 4
// ranks into blocks of 2 sum what they should.
func TestMPISplit(t *testing.T) {
	if worker(t, func(ctx context.Context, c comm.Comm) error {
		if err := exerciseSplits(ctx, c); err != nil {
			return err
		}
		if c.Size()%2 != 0 {
			return nil
		}
		block, across, err := comm.Grid(ctx, c, 2)
		if err != nil {
			return err
		}
		b, a := []float32{float32(c.Rank())}, []float32{float32(c.Rank())}
		if err := block.AllReduce(ctx, b, comm.Sum); err != nil {
			return err
		}
		if err := across.AllReduce(ctx, a, comm.Sum); err != nil {
			return err
		}
		first, col := c.Rank()/2*2, c.Rank()%2
		if b[0] != float32(2*first+1) || a[0] != float32(col*c.Size()/2+c.Size()/2*(c.Size()/2-1)) {
			return fmt.Errorf("rank %d: block sum %v, across sum %v", c.Rank(), b[0], a[0])
		}
		return errors.Join(comm.Close(block), comm.Close(across))
	}) {
		return
	}
	for _, n := range []int{3, 4} {
		out, err := mpitest.Test(t, n, "TestMPISplit", "split")
		if err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", n, err, out)
		}
	}
}
