package memviz_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/memviz"
)

// A recorded training run whose step leaks 1 MiB, opened in Chromium: a
// bar per step with its peak, each after the second 1 MiB higher, the
// rising ones red and the leak said above them; a tick on the timeline
// where each step began; the x-axis is time; and the cached-segment
// timeline's bands with the reserved peak.
func TestBrowserStepsAndSegments(t *testing.T) {
	chromium(t)
	ds := trainedSnapshot(t, 5, true)
	data, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "leak.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := memviz.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := analyze(t, s).Summary("leak.json")
	url := serve(t, "leak.json", s)
	dom := dumpDOM(t, url)

	if attr, _ := elem(t, dom, "steps-section"); attr["data-count"] != "5" {
		t.Errorf("steps section counts %q steps", attr["data-count"])
	}
	_, bars := elem(t, dom, "step-bars")
	rects := regexp.MustCompile(`<rect([^>]*)>`).FindAllStringSubmatch(bars, -1)
	if len(rects) != 5 {
		t.Fatalf("%d step bars, want 5", len(rects))
	}
	var peaks []int64
	red := 0
	for k, r := range rects {
		a := attributes(r[1])
		p, _ := strconv.ParseInt(a["data-peak"], 10, 64)
		peaks = append(peaks, p)
		if p != sum.Steps.Steps[k].Peak || a["data-step"] != strconv.Itoa(k+1) {
			t.Errorf("bar %d: step %s peak %d, want step %d peak %d", k, a["data-step"], p, k+1, sum.Steps.Steps[k].Peak)
		}
		if a["class"] == "rising" {
			red++
		}
	}
	for k := 2; k < 5; k++ {
		if peaks[k]-peaks[k-1] != leakBytes {
			t.Errorf("step %d peaks %d above step %d, want %d", k+1, peaks[k]-peaks[k-1], k, leakBytes)
		}
	}
	if red != 3 {
		t.Errorf("%d bars marked rising, want 3", red)
	}
	attr, text := elem(t, dom, "step-leak")
	if _, hidden := attr["hidden"]; hidden || attr["data-bytes"] != strconv.Itoa(3*leakBytes) || !strings.Contains(text, "last 3 steps") {
		t.Errorf("leak alert %v %q", attr, text)
	}
	_, ticks := elem(t, dom, "step-ticks")
	if n := strings.Count(ticks, `class="steptick"`); n != 5 {
		t.Errorf("%d step ticks on the timeline, want 5", n)
	}
	if n := strings.Count(dom, ">x-axis: time since the first event<"); n != 2 {
		t.Errorf("%d plots with time on the x-axis, want 2 (the active and the reserved memory)", n)
	}

	// the cached-segment timeline
	_, rs := elem(t, dom, "reserved-series")
	if n := strings.Count(rs, "<polygon"); n != len(sum.Reserved.Series) || n == 0 {
		t.Errorf("%d segment bands, want %d", n, len(sum.Reserved.Series))
	}
	var maxR int64
	for _, v := range sum.Reserved.Total {
		maxR = max(maxR, v)
	}
	attr, text = elem(t, dom, "reserved-peak")
	checkBytes(t, "the reserved peak", attr, text, maxR)

	// events on the x-axis when asked
	if dom := dumpDOM(t, url+"#axis=event"); !strings.Contains(dom, ">x-axis: events<") {
		t.Error("#axis=event does not put events on the x-axis")
	}
}
