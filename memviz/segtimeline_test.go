package memviz_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/memviz"
)

// fixtures is every snapshot with segment events the tests know: headroom's
// (with an arena, an OOM and empty_cache) and PyTorch's (with expandable
// segments, mapped and unmapped in pieces).
func fixtures(t *testing.T) map[string]*memviz.Snapshot {
	t.Helper()
	known, _ := knownSnapshot(t)
	rich, _ := richSnapshot(t)
	out := map[string]*memviz.Snapshot{"known": memviz.FromDevice(known), "rich": memviz.FromDevice(rich)}
	for _, f := range []string{"torch_2x.pickle", "torch_expandable.pickle", "torch_2_0.pickle", "torch_1_13.pickle"} {
		s, err := memviz.ReadFile("testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = s
	}
	return out
}

// The cached-segment timeline's reserved bytes after every event are the
// segments State finds at that event (the two undo the segment events
// separately: one per moment, one over the history), its bands add up to
// them, and at the known sequence's peak it is what the allocator
// reserved then.
func TestReservedTimeline(t *testing.T) {
	for name, s := range fixtures(t) {
		a := analyze(t, s)
		sum := a.Summary(name)
		r := sum.Reserved
		if r == nil || len(r.Index) != len(sum.Timeline.Index) || len(r.Total) != len(r.Index) || len(r.Series) == 0 {
			t.Fatalf("%s: reserved timeline %+v", name, r)
		}
		for k, i := range r.Index {
			if st := a.State(i); r.Total[k] != st.Reserved {
				t.Errorf("%s: after event %d: reserved %d, the state says %d", name, i, r.Total[k], st.Reserved)
			}
			var sumv int64
			for _, se := range r.Series {
				sumv += se.Values[k]
			}
			if sumv != r.Total[k] {
				t.Errorf("%s: after event %d: bands add up to %d, total %d", name, i, sumv, r.Total[k])
			}
		}
		if name == "known" && r.Total[known.peakEvent] != known.reservedAtPeak {
			t.Errorf("reserved at the peak %d, want %d", r.Total[known.peakEvent], known.reservedAtPeak)
		}
		// a zoomed range carries the same numbers
		if n := len(r.Index); n > 2 {
			z := a.TimelineRange(1, n-2, 0)
			if z.Reserved == nil || len(z.Reserved.Total) != n-2 || z.Reserved.Total[0] != r.Total[1] {
				t.Errorf("%s: zoomed reserved %+v", name, z.Reserved)
			}
		}
	}
}

// The x-axis is time when every event has a time, in order; events
// otherwise. The SVG places points by time as the page does.
func TestTimeAxis(t *testing.T) {
	s, err := memviz.ReadFile("testdata/torch_2x.pickle")
	if err != nil {
		t.Fatal(err)
	}
	sum := analyze(t, s).Summary("torch_2x.pickle")
	tm := sum.Timeline.Time
	if sum.Axis != "time" || len(tm) != len(sum.Timeline.Index) {
		t.Fatalf("axis %q, %d times for %d points", sum.Axis, len(tm), len(sum.Timeline.Index))
	}
	for k, i := range sum.Timeline.Index {
		if tm[k] != s.Traces[0][i].TimeUS {
			t.Errorf("point %d: time %d, event %d has %d", k, tm[k], i, s.Traces[0][i].TimeUS)
		}
	}
	var buf bytes.Buffer
	if err := sum.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	n := len(tm)
	for _, e := range svgElems(t, buf.Bytes()) {
		if e.name != "polygon" {
			continue
		}
		pts := strings.Fields(e.attr["points"])
		for k := range n {
			want := strconv.FormatFloat(80+float64(tm[k]-tm[0])*870/float64(tm[n-1]-tm[0]), 'f', 1, 64)
			if x, _, _ := strings.Cut(pts[k], ","); x != want {
				t.Fatalf("band %s point %d at x %s, want %s (by time)", e.attr["data-key"], k, x, want)
			}
		}
		break
	}
	if !strings.Contains(buf.String(), "x-axis: time since the first event") {
		t.Error("the SVG does not say its x-axis is time")
	}

	// no times, or times out of order: events, said as such
	long := longHistory(10)
	back := longHistory(10)
	for i := range back.Traces[0] {
		back.Traces[0][i].TimeUS = int64(100 - i)
	}
	for _, c := range []*memviz.Snapshot{long, back} {
		sum := analyze(t, c).Summary("x")
		buf.Reset()
		sum.WriteSVG(&buf)
		if sum.Axis != "event" || sum.Timeline.Time != nil || !strings.Contains(buf.String(), "x-axis: events (the file has no times, or not in order)") {
			t.Errorf("axis %q, times %v", sum.Axis, sum.Timeline.Time)
		}
	}
}
