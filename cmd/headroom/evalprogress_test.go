package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/zoo"
)

// A long evaluation shows its progress as training steps do (RRDBNet's
// 256 generated test samples ran half a minute in silence after the last
// step): nothing before evalQuiet, then a line at most every interval and
// the last state; a quick one shows nothing, so short runs' logs stay as
// they were. The scores are those of the evaluation without progress.
func TestEvaluateShowsProgress(t *testing.T) {
	spec, err := zoo.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	synth, err := zoo.NewSynthetic(spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	set := evalSet{"test", synthSource{synth}, 0, 40}
	tr := evalTrainer(t, spec, device.CPU())
	want, err := evaluate(context.Background(), tr, set, 8, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tick := range []time.Duration{10 * time.Millisecond, 800 * time.Millisecond} {
		var buf bytes.Buffer
		clock := time.Unix(0, 0)
		// Every reading of the clock advances it by tick: 5 batches
		// take 10 ms to 40 ms, or several seconds.
		prog := &progress{w: &buf, every: 3 * time.Second, now: func() time.Time {
			clock = clock.Add(tick)
			return clock
		}}
		r := &runner{prog: prog, evalBatch: 8}
		got, err := r.evaluate(context.Background(), tr, set)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("tick %v: scores %+v, without progress %+v", tick, got, want)
		}
		var lines []string
		if out := strings.TrimSpace(buf.String()); out != "" {
			lines = strings.Split(out, "\n")
		}
		t.Logf("tick %v: %q", tick, lines)
		if tick < evalQuiet/100 {
			if len(lines) != 0 {
				t.Errorf("a quick evaluation shows %q", lines)
			}
			continue
		}
		// Not the first batches (under evalQuiet), not every one after
		// (at most one an interval), and the last state once.
		if len(lines) < 2 || len(lines) > 4 || strings.HasPrefix(lines[0], "evaluating test: 8/40") ||
			!strings.HasPrefix(lines[len(lines)-1], "evaluating test: 40/40 samples, ") || strings.HasPrefix(lines[len(lines)-2], "evaluating test: 40/40") {
			t.Errorf("a long evaluation shows %q", lines)
		}
	}
}
