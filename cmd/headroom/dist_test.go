package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/dataset"
)

// The data-parallel flags are checked before any work, and a process
// that mpirun started from a build without MPI says so instead of
// training alone N times over.
func TestTrainDistFlags(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	for _, tc := range []struct {
		name  string
		zero  int
		size  string // OMPI_COMM_WORLD_SIZE
		want  string
		noMPI bool // only in a build without MPI
	}{
		{"stage", 4, "", "--zero 4: 0, 1, 2 or 3", false},
		{"zero 3 alone", 3, "", "--zero 3: only under mpirun", false},
		{"zero alone", 1, "", "--zero 1: only under mpirun", false},
		{"mpirun without MPI", 0, "2", "built without MPI", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noMPI && comm.MPIAvailable {
				t.Skip("this build has MPI")
			}
			t.Setenv("OMPI_COMM_WORLD_RANK", "0")
			t.Setenv("OMPI_COMM_WORLD_SIZE", tc.size)
			var out, log bytes.Buffer
			f := trainFlags{model: "mlp", epochs: 1, batch: 8, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 16, steps: 1}
			f.dist.zero = tc.zero
			err := trainFashion(context.Background(), f, &out, &log)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(out.String(), "memory plan") {
				t.Errorf("trained before refusing:\n%s", out.String())
			}
		})
	}
}
