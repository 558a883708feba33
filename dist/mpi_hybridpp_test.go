//go:build mpi

package dist_test

import (
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/internal/mpitest"
)

// `mpirun -np 4 headroom train --pipeline 2` (built with -tags mpi): 2
// replicas of a 2-stage pipeline, each on half of every batch, print the
// losses of one pipeline on the whole batch in one process (within 1e-5
// relative), for the mlp and the cnn, GPipe and 1F1B, ZeRO 0 and 1; each
// of the 4 ranks' planned peak equals its measured one and the peak
// `headroom plan --ranks 4 --pipeline 2` printed for it.
func TestMPITrainReplicas(t *testing.T) {
	bin := mpitest.Headroom(t)
	losses := regexp.MustCompile(`(?m)^step \d+: loss (\S+)$`)
	peak := regexp.MustCompile(`(?m)^rank (\d+), stage \d+ \(layers [^)]*\): planned peak (\d+), measured (\d+)$`)
	parse := func(out string) []float64 {
		var ls []float64
		for _, m := range losses.FindAllStringSubmatch(out, -1) {
			l, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		return ls
	}
	for _, tc := range []struct {
		model, sched, zero string
	}{{"mlp", "gpipe", "0"}, {"cnn", "1f1b", "0"}, {"cnn", "gpipe", "1"}, {"mlp", "1f1b", "1"}} {
		common := []string{"train", "--pipeline", "2", "--model", tc.model, "--schedule", tc.sched, "--steps", "3", "--batch-size", "24", "--limit", "96", "--micro-batches", "3"}
		one, err := exec.Command(bin, common...).CombinedOutput()
		if err != nil {
			t.Fatalf("headroom %v: %v\n%s", common, err, one)
		}
		args := append(append([]string{bin}, common...), "--zero", tc.zero, "--bucket-size", "256KiB")
		four, err := mpitest.Run(t, 4, nil, args...)
		if err != nil {
			t.Fatalf("mpirun -np 4 %v: %v\n%s", args, err, four)
		}
		want, got := parse(string(one)), parse(four)
		if len(want) != 3 || len(got) != 3 {
			t.Fatalf("%v: losses %v in one pipeline, %v on 2 replicas over MPI:\n%s", tc, want, got, four)
		}
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-5*math.Abs(want[i]) {
				t.Errorf("%v step %d: loss %v on 2 replicas over MPI, %v in one pipeline", tc, i+1, got[i], want[i])
			}
		}
		plan := []string{"plan", "--ranks", "4", "--pipeline", "2", "--model", tc.model, "--schedule", tc.sched, "--batch-size", "24", "--accumulate", "3", "--zero", tc.zero, "--bucket-size", "256KiB", "--bytes"}
		planned, err := exec.Command(bin, plan...).CombinedOutput()
		if err != nil {
			t.Fatalf("headroom %v: %v\n%s", plan, err, planned)
		}
		printed := printedRankPeaks(t, string(planned))
		ps := peak.FindAllStringSubmatch(four, -1)
		if len(ps) != 4 {
			t.Fatalf("%v: %d ranks printed their peaks:\n%s", tc, len(ps), four)
		}
		for _, m := range ps {
			r, _ := strconv.Atoi(m[1])
			if m[2] != m[3] || printed[r] != m[3] {
				t.Errorf("%v, rank %s: planned peak %s, measured %s, plan --ranks printed %s", tc, m[1], m[2], m[3], printed[r])
			}
		}
		t.Logf("%v over MPI:\n%s", tc, four)
	}
}

// printedRankPeaks maps each rank to the peak column of `plan --ranks
// --bytes` output (ranks listed as "0, 2").
func printedRankPeaks(t *testing.T, out string) map[int]string {
	t.Helper()
	cols := regexp.MustCompile(`\s{2,}`)
	peaks := map[int]string{}
	var header []string
	for _, line := range strings.Split(out, "\n") {
		f := cols.Split(strings.TrimSpace(line), -1)
		if len(f) > 0 && f[0] == "ranks" {
			header = f
			continue
		}
		if header == nil || len(f) != len(header) || header[7] != "peak" {
			continue
		}
		for _, r := range strings.Split(f[0], ", ") {
			n, err := strconv.Atoi(r)
			if err != nil {
				t.Fatalf("row %q: %v", line, err)
			}
			peaks[n] = f[7]
		}
	}
	if len(peaks) != 4 {
		t.Fatalf("%d ranks in the plan:\n%s", len(peaks), out)
	}
	return peaks
}
