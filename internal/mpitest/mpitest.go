// Package mpitest starts the ranks of the `-tags mpi` tests (comm, dist,
// pipeline) under Open MPI's mpirun: this test binary's own test as the
// ranks (Test on the launching side; Mode and Join on the ranks' side), or
// a headroom built with -tags mpi (Headroom, then Run).
package mpitest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/comm"
)

// WorkerEnv marks a process mpirun started as a rank of Test; its value
// is Test's mode.
const WorkerEnv = "HEADROOM_MPI_WORKER"

// RootEnv lets mpirun start ranks as root (CI containers).
var RootEnv = []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}

// Timeout is how long one mpirun may take before the test fails: a rank
// left waiting in a collective would otherwise hang the test binary.
const Timeout = 2 * time.Minute

// Need returns mpirun's path, and skips t where Open MPI is not installed.
func Need(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found, what runs over MPI is not tested: install Open MPI (apt-get install openmpi-bin libopenmpi-dev)")
	}
	return path
}

// Run runs args under `mpirun --oversubscribe -np n` with env added to
// this process's (and RootEnv), and returns the ranks' combined output
// and mpirun's error. It fails t when mpirun does not end within Timeout
// and skips t without Open MPI.
func Run(t testing.TB, n int, env []string, args ...string) (string, error) {
	t.Helper()
	return run(t, Timeout, n, env, args)
}

func run(t testing.TB, timeout time.Duration, n int, env, args []string) (string, error) {
	t.Helper()
	path := Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"--oversubscribe", "-np", fmt.Sprint(n)}, args...)...)
	cmd.Env = append(append(os.Environ(), RootEnv...), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mpirun -np %d did not end within %v:\n%s", n, timeout, out)
	}
	return string(out), err
}

// Test runs this test binary's test named test as n ranks under mpirun,
// each with WorkerEnv set to mode and the test flags given (-test.v, for
// the ranks' logs in the output), as Run does.
func Test(t testing.TB, n int, test, mode string, flags ...string) (string, error) {
	t.Helper()
	return TestWithin(t, Timeout, n, test, mode, flags...)
}

// TestWithin is Test for ranks that may take longer than Timeout.
func TestWithin(t testing.TB, timeout time.Duration, n int, test, mode string, flags ...string) (string, error) {
	t.Helper()
	return run(t, timeout, n, []string{WorkerEnv + "=" + mode}, append([]string{os.Args[0], "-test.run=^" + test + "$"}, flags...))
}

// Mode is the mode Test gave this process, "" where it is not a rank.
func Mode() string { return os.Getenv(WorkerEnv) }

// Join joins the job mpirun started as one of its ranks (comm.Open); it
// fails t where there is none. The caller closes the communicator.
func Join(t testing.TB) comm.Comm {
	t.Helper()
	c, err := comm.Open()
	if err != nil || c == nil {
		t.Fatalf("Open under mpirun: %v, %v", c, err)
	}
	return c
}

// Headroom builds cmd/headroom with -tags mpi (cgo) into a temporary
// directory and returns the binary, for the tests that run it under
// mpirun. It skips t without Open MPI and under -short.
func Headroom(t testing.TB) string {
	t.Helper()
	Need(t)
	if testing.Short() {
		t.Skip("builds headroom with -tags mpi")
	}
	bin := filepath.Join(t.TempDir(), "headroom")
	build := exec.Command("go", "build", "-tags", "mpi", "-o", bin, "github.com/headroom-ml/headroom/cmd/headroom")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags mpi: %v\n%s", err, out)
	}
	return bin
}
