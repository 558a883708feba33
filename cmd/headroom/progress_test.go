package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTestProgress(mode string, every time.Duration) (*progress, *bytes.Buffer, *fakeClock) {
	var buf bytes.Buffer
	p := newProgress(&buf, progressFlags{mode: mode, every: every})
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p.now = c.now
	return p, &buf, c
}

// In a log, progress is a plain line at the first step, then at most one
// per interval of the clock (not per step count), and at the epoch's end.
func TestProgressPlainThrottledByTime(t *testing.T) {
	p, buf, c := newTestProgress("plain", 0)
	if p.bar || p.every != plainEvery {
		t.Fatalf("plain progress: bar %v, every %v", p.bar, p.every)
	}
	p.startEpoch(1, 2, 100, 0, 100)
	var shown []int
	for step := 1; step <= 100; step++ {
		// Steps of uneven length: 0.5s, then 3s each from step 40 on.
		d := 500 * time.Millisecond
		if step >= 40 {
			d = 3 * time.Second
		}
		c.t = c.t.Add(d)
		before := buf.Len()
		p.update(progressStat{step: step, loss: 1 / float64(step), samples: 8 * step, peak: 3 << 20})
		if buf.Len() > before {
			shown = append(shown, step)
		}
	}
	p.endEpoch(progressStat{step: 100, loss: 0.01, samples: 800, peak: 3 << 20})
	// 0.5s steps: 20 steps per 10s from step 1 (at 0.5s); step 40 ends
	// at 22.5s, 12s after step 21; then 3s steps: every 4th.
	want := []int{1, 21, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 96, 100}
	if !equalInts(shown, want) {
		t.Errorf("lines at steps %v, want %v", shown, want)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d (endEpoch repeats nothing):\n%s", len(lines), len(want), buf.String())
	}
	// Step 21 at 10.5s: 2 steps/s, 79 steps left in the epoch and 100 after.
	if got, w := lines[1], "epoch 1/2  step 21/100 (21%)  loss 0.0476  2.0 steps/s, 16 samples/s  elapsed 0:11  eta 0:40 (run 1:30)  peak 3.00 MiB"; got != w {
		t.Errorf("line:\n got %q\nwant %q", got, w)
	}
	if strings.ContainsAny(buf.String(), "\r\x1b") {
		t.Errorf("control characters in a log:\n%q", buf.String())
	}
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "epoch 1/2  step 100/100 (100%)") || !strings.Contains(last, "eta 0:00 (run ") {
		t.Errorf("last line %q", last)
	}
}

// A run stopped before the epoch's end (--steps, Ctrl-C) shows where it
// stopped; a slow step reads in seconds per step; a resumed epoch counts
// its rate from the steps this process ran.
func TestProgressPlainEdges(t *testing.T) {
	p, buf, c := newTestProgress("plain", time.Minute)
	p.startEpoch(2, 3, 50, 20, 0)
	c.t = c.t.Add(4 * time.Second)
	p.update(progressStat{step: 21, loss: 0.5, samples: 8})
	c.t = c.t.Add(8 * time.Second)
	p.update(progressStat{step: 22, loss: 0.5, samples: 16})
	c.t = c.t.Add(8 * time.Second)
	p.endEpoch(progressStat{step: 23, loss: 0.25, samples: 24})
	want := "epoch 2/3  step 21/50 (42%)  loss 0.5000  4.00 s/step, 2 samples/s  elapsed 0:04  eta 1:56\n" +
		"epoch 2/3  step 23/50 (46%)  loss 0.2500  6.67 s/step, 1 samples/s  elapsed 0:20  eta 3:00\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
	// Nothing ran: nothing to show.
	buf.Reset()
	p.startEpoch(3, 3, 50, 0, 0)
	p.endEpoch(progressStat{})
	if buf.Len() != 0 {
		t.Errorf("an epoch without steps printed %q", buf.String())
	}
}

// On a terminal the bar is redrawn in place (carriage return, erase to
// the end of the line) by time, fits the terminal's width, and the epoch
// ends with a newline; clear erases it before other output.
func TestProgressBar(t *testing.T) {
	p, buf, c := newTestProgress("bar", 0)
	p.width = 100
	if !p.bar || p.every != barEvery {
		t.Fatalf("bar progress: bar %v, every %v", p.bar, p.every)
	}
	p.startEpoch(1, 1, 10, 0, 0)
	for step := 1; step <= 10; step++ {
		c.t = c.t.Add(100 * time.Millisecond) // a redraw every other step
		p.update(progressStat{step: step, loss: 0.5, samples: step * 4, peak: 1 << 20})
		if step == 6 {
			p.clear()
		}
	}
	p.endEpoch(progressStat{step: 10, loss: 0.5, samples: 40, peak: 1 << 20})
	out := buf.String()
	draws := regexp.MustCompile(`\r(epoch[^\r\x1b]*)\x1b\[K`).FindAllStringSubmatch(out, -1)
	var steps []string
	for _, d := range draws {
		steps = append(steps, regexp.MustCompile(`\d+/10 `).FindString(d[1]))
		if n := len([]rune(d[1])); n > p.width {
			t.Errorf("a bar of %d columns on a %d-column terminal: %q", n, p.width, d[1])
		}
	}
	// Step 1, then each 200ms; after clear (step 6) the next step redraws.
	if got := strings.Join(steps, ","); got != "1/10 ,3/10 ,5/10 ,7/10 ,9/10 ,10/10 " {
		t.Errorf("redrawn at %s", got)
	}
	if !strings.Contains(out, "\r\x1b[K\r") || !strings.HasSuffix(out, "\x1b[K\n") {
		t.Errorf("no clear or final newline: %q", out)
	}
	final := draws[len(draws)-1][1]
	// 100 columns less the fields and one: a bar of 25.
	if want := "epoch 1/1 " + strings.Repeat("█", 25) + " 100% 10/10 [0:01<0:00, 10.0 steps/s] loss 0.5000  peak 1.00 MiB"; final != want {
		t.Errorf("final bar\n got %q\nwant %q", final, want)
	}
}

func TestProgressModes(t *testing.T) {
	var buf bytes.Buffer
	if p := newProgress(&buf, progressFlags{mode: "auto"}); p.bar {
		t.Error("auto on a buffer is a bar")
	}
	p := newProgress(&buf, progressFlags{mode: "none"})
	p.startEpoch(1, 1, 2, 0, 0)
	p.update(progressStat{step: 1})
	p.endEpoch(progressStat{step: 2})
	if buf.Len() != 0 {
		t.Errorf("--progress none printed %q", buf.String())
	}
	for _, bad := range []progressFlags{{mode: "fancy"}, {mode: "bar", every: -time.Second}} {
		if bad.check() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Work other than steps (headroom prepare) is shown by the same rules:
// in a log, the first note at once, then one per interval, the last state
// at the end (unless just shown), and the next work's first note at once;
// on a terminal, one line redrawn in place and ended; none: nothing.
func TestProgressNotes(t *testing.T) {
	p, buf, c := newTestProgress("plain", 0)
	for i := 1; i <= 30; i++ { // a second each: shown at 1, 11 and 21
		c.t = c.t.Add(time.Second)
		p.note(fmt.Sprintf("prepare: %d/30", i))
	}
	p.endNote("prepare: 30/30")
	p.note("prepare: next 1") // straight after: a new work's first
	p.endNote("prepare: next 1")
	if got, want := buf.String(), "prepare: 1/30\nprepare: 11/30\nprepare: 21/30\nprepare: 30/30\nprepare: next 1\n"; got != want {
		t.Errorf("plain notes:\n got %q\nwant %q", got, want)
	}

	p, buf, c = newTestProgress("bar", 0)
	for i := 1; i <= 3; i++ {
		c.t = c.t.Add(time.Second)
		p.note(fmt.Sprintf("prepare: %d/3", i))
	}
	p.endNote("prepare: 3/3")
	if got, want := buf.String(), "\rprepare: 1/3\x1b[K\rprepare: 2/3\x1b[K\rprepare: 3/3\x1b[K\n"; got != want {
		t.Errorf("bar notes:\n got %q\nwant %q", got, want)
	}

	p, buf, _ = newTestProgress("none", 0)
	p.note("prepare: 1/1")
	p.endNote("prepare: 1/1")
	if buf.Len() != 0 {
		t.Errorf("--progress none: %q", buf.String())
	}
}
