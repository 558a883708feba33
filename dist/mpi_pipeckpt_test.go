//go:build mpi

package dist_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/headroom-ml/headroom/internal/mpitest"
)

// `mpirun -np 4 headroom train --pipeline 2` (2 replicas of 2 stages)
// with --checkpoint-dir, then --resume: the resumed run's losses are the
// uninterrupted run's, and the checkpoint written over MPI resumes as
// well in one process (in-process ranks, --replicas 2).
func TestMPITrainPipelineResume(t *testing.T) {
	bin := mpitest.Headroom(t)
	loss := regexp.MustCompile(`(?m)^step (\d+): loss (\S+)$`)
	losses := func(out string) map[string]string {
		m := map[string]string{}
		for _, s := range loss.FindAllStringSubmatch(out, -1) {
			m[s[1]] = s[2]
		}
		return m
	}
	args := []string{bin, "train", "--pipeline", "2", "--model", "cnn", "--schedule", "1f1b", "--batch-size", "24", "--limit", "96"}
	with := func(more ...string) []string { return append(append([]string{}, args...), more...) }
	out, err := mpitest.Run(t, 4, nil, with("--steps", "4")...)
	whole := losses(out)
	if err != nil || len(whole) != 4 {
		t.Fatalf("uninterrupted: %v, losses %v\n%s", err, whole, out)
	}
	dir := t.TempDir()
	if out, err := mpitest.Run(t, 4, nil, with("--steps", "2", "--checkpoint-dir", dir)...); err != nil {
		t.Fatalf("first half: %v\n%s", err, out)
	}
	out, err = mpitest.Run(t, 4, nil, with("--steps", "4", "--resume", dir)...)
	got := losses(out)
	if err != nil || len(got) != 2 || got["3"] != whole["3"] || got["4"] != whole["4"] {
		t.Fatalf("resumed over MPI: %v, losses %v, uninterrupted %v\n%s", err, got, whole, out)
	}
	one, err := exec.Command(bin, with("--steps", "4", "--replicas", "2", "--resume", filepath.Join(dir, "step-000000002"))[1:]...).CombinedOutput()
	got = losses(string(one))
	if err != nil || len(got) != 2 || got["3"] != whole["3"] || got["4"] != whole["4"] {
		t.Fatalf("resumed in one process: %v, losses %v, uninterrupted %v\n%s", err, got, whole, one)
	}
	t.Logf("uninterrupted %v; resumed at step 2 over MPI and in one process alike", whole)
}
