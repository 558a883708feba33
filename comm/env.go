package comm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// ErrNoMPI is matched by errors.Is when a process started by mpirun was
// built without MPI: it would train alone, N times over.
var ErrNoMPI = errors.New("comm: built without MPI")

// Launched returns the rank and size that a launcher (Open MPI's mpirun,
// or a PMI launcher such as MPICH's or Slurm's) gave this process in its
// environment; size 0 when it was not started by one.
func Launched() (rank, size int) {
	for _, k := range [][2]string{{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"PMI_RANK", "PMI_SIZE"}, {"PMIX_RANK", "OMPI_UNIVERSE_SIZE"}} {
		r, err1 := strconv.Atoi(os.Getenv(k[0]))
		s, err2 := strconv.Atoi(os.Getenv(k[1]))
		if err1 == nil && err2 == nil && s > 0 {
			return r, s
		}
	}
	return 0, 0
}

// Open returns the communicator of the job this process belongs to: nil
// when it runs alone (not started by a launcher, or as its only rank),
// the MPI communicator of all ranks under mpirun in a build with the mpi
// tag, and an error wrapping ErrNoMPI under mpirun otherwise.
func Open() (Comm, error) {
	rank, size := Launched()
	if size <= 1 {
		return nil, nil
	}
	return openMPI(rank, size)
}

// Close ends c's part in its group: MPI_Finalize for MPI (nothing for
// Local, or nil).
func Close(c Comm) error {
	if cl, ok := c.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// Abort stops every rank of c's group, because of err on this rank: a
// Local group is aborted, an MPI job is ended by MPI_Abort (which does
// not return).
func Abort(c Comm, err error) {
	switch c := c.(type) {
	case *localComm:
		c.l.Abort(&RankError{Rank: c.rank, Err: err})
	case interface{ Abort(error) }:
		c.Abort(err)
	}
}

// errNoMPI is what Open says under a launcher in a build without MPI.
func errNoMPI(rank, size int) error {
	return fmt.Errorf("%w: this process is rank %d of %d started by a launcher (mpirun), but headroom was built without MPI; build it with `go build -tags mpi` (cgo and Open MPI's libopenmpi-dev)", ErrNoMPI, rank, size)
}
