//go:build mpi

package dist_test

import (
	"fmt"
	"os/exec"
	"regexp"
	"testing"

	"github.com/headroom-ml/headroom/internal/mpitest"
)

// `mpirun -np P headroom train --pipeline P` (P = 2, 3; built with -tags mpi), one
// stage per process, prints the losses the same command prints with
// in-process ranks, and each rank's planned peak equals its measured one.
func TestMPITrainPipeline(t *testing.T) {
	bin := mpitest.Headroom(t)
	losses := regexp.MustCompile(`(?m)^step \d+: loss \S+$`)
	peak := regexp.MustCompile(`(?m)^rank (\d+), stage \d+ \(layers [^)]*\): planned peak (\d+), measured (\d+)$`)
	for _, tc := range []struct {
		sched string
		np    int
	}{{"gpipe", 2}, {"1f1b", 2}, {"gpipe", 3}, {"1f1b", 3}} {
		sched := tc.sched
		args := []string{"train", "--pipeline", fmt.Sprint(tc.np), "--model", "cnn", "--schedule", sched, "--steps", "3", "--batch-size", "24", "--limit", "96"}
		one, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("headroom %v: %v\n%s", args, err, one)
		}
		two, err := mpitest.Run(t, tc.np, nil, append([]string{bin}, args...)...)
		if err != nil {
			t.Fatalf("mpirun -np %d headroom %v: %v\n%s", tc.np, args, err, two)
		}
		want, got := losses.FindAllString(string(one), -1), losses.FindAllString(two, -1)
		if len(want) != 3 || len(got) != 3 {
			t.Fatalf("%s: losses %q in process, %q over MPI:\n%s", sched, want, got, two)
		}
		for i := range want {
			if want[i] != got[i] {
				t.Errorf("%s: %q in process, %q over MPI", sched, want[i], got[i])
			}
		}
		ps := peak.FindAllStringSubmatch(two, -1)
		if len(ps) != tc.np {
			t.Fatalf("%s: %d ranks printed their peaks:\n%s", sched, len(ps), two)
		}
		for _, m := range ps {
			if m[2] != m[3] {
				t.Errorf("%s, rank %s: planned peak %s, measured %s", sched, m[1], m[2], m[3])
			}
		}
		t.Logf("%s over MPI:\n%s", sched, two)
	}
}
