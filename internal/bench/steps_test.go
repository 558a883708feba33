package bench

import (
	"context"
	"math"
	"strings"
	"testing"
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
