//go:build !mpi

package comm

// MPIAvailable reports whether this build has the MPI transport.
const MPIAvailable = false

func openMPI(rank, size int) (Comm, error) { return nil, errNoMPI(rank, size) }
