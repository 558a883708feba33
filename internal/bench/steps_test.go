package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/internal/cputime"
	"github.com/headroom-ml/headroom/internal/parallel"
)

// Step counts are checked before anything is made: the fresh input
// batches, one a step, are bounded by MaxInputBytes (a billion steps took
// 16 GiB before the first), and counts that overflow or are not positive
// are errors, not a panic in make.
func TestRunHeadroomStepCounts(t *testing.T) {
	w, err := Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		warmup, steps int
		want          string
	}{
		{2, math.MaxInt, "steps"},
		{math.MaxInt, 1, "steps"},
		{0, 0, "at least 1"},
		{-1, 5, "negative"},
		{0, 100_000_000, "fresh input batches"},
	} {
		_, err := RunHeadroom(context.Background(), w, Options{Warmup: c.warmup, Steps: c.steps, Threads: 1})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("warmup %d, steps %d: %v, want an error with %q", c.warmup, c.steps, err, c.want)
		}
	}
}

// The sgemm step's thread report: the busiest threads' run time and all
// threads' waits per product, a thread new in the step counted from 0,
// and the pool's counts over the step.
func TestThreadReport(t *testing.T) {
	ms := time.Millisecond
	before := []cputime.Thread{{ID: 1, Run: 100 * ms, Wait: 4 * ms}, {ID: 2, Run: 50 * ms}, {ID: 3, Run: 7 * ms}}
	after := []cputime.Thread{{ID: 1, Run: 180 * ms, Wait: 4 * ms}, {ID: 2, Run: 130 * ms, Wait: 16 * ms}, {ID: 3, Run: 8 * ms}, {ID: 4, Run: 2 * ms}}
	p0 := parallel.Stats{Loops: 10, Alone: 1, Blocked: 3}
	p1 := parallel.Stats{Loops: 26, Alone: 4, Blocked: 3}
	got := threadReport(before, after, p0, p1, 2, 8)
	want := "; threads ran 10.0ms+10.0ms, waited 2.00ms for a CPU; 3 of 16 loops run alone, 0 worker wake-ups"
	if got != want {
		t.Errorf("threadReport = %q, want %q", got, want)
	}
	if got := threadReport(nil, nil, p0, p1, 2, 8); got != "" {
		t.Errorf("without thread times: %q, want nothing", got)
	}
}
