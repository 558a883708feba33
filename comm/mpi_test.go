//go:build mpi

package comm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/comm"
)

// workerEnv marks a process started by TestMPI under mpirun: it is a rank
// and runs the named part of the test.
const workerEnv = "HEADROOM_MPI_WORKER"

// MPIRun runs this test binary under mpirun --oversubscribe -np n as
// rank processes that run test (with workerEnv=mode), and returns their
// combined output. It skips the test when mpirun is absent.
func mpiRun(t *testing.T, n int, test, mode string) (string, error) {
	t.Helper()
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found, the MPI transport is not tested: install Open MPI (apt-get install openmpi-bin libopenmpi-dev)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--oversubscribe", "-np", fmt.Sprint(n), os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), workerEnv+"="+mode, MPIRootEnv[0], MPIRootEnv[1])
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mpirun -np %d did not end within 2 minutes:\n%s", n, out)
	}
	return string(out), err
}

// MPIRootEnv lets mpirun start ranks as root (CI containers).
var MPIRootEnv = [2]string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}

// worker runs fn as a rank when this process is one, and reports whether
// it was.
func worker(t *testing.T, fn func(ctx context.Context, c comm.Comm) error) bool {
	mode := os.Getenv(workerEnv)
	if mode == "" {
		return false
	}
	c, err := comm.Open()
	if err != nil || c == nil {
		t.Fatalf("Open under mpirun: %v, %v", c, err)
	}
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
		out, err := mpiRun(t, n, "TestMPICollectives", "collectives")
		if err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", n, err, out)
		}
	}
}

// A rank that dies, or whose context ends inside a collective, stops the
// job within a bounded time, and the output names that rank.
func TestMPIRankFailure(t *testing.T) {
	if worker(t, func(ctx context.Context, c comm.Comm) error {
		switch os.Getenv(workerEnv) {
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
		out, err := mpiRun(t, 2, "TestMPIRankFailure", tc.mode)
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
		out, err := mpiRun(t, n, "TestMPISplit", "split")
		if err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", n, err, out)
		}
	}
}
