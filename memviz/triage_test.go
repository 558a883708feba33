package memviz_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/memviz"
)

// The OOM of 80 GiB with 123456789 bytes free that
// scripts/reference/snapshot_ref.py writes into torch_2x.pickle, and the
// file's 23 entries of device 0 (raw_entries), of which 4
// free_requested/free_completed pairs are shown as one free each (19
// events).
func TestSummaryOOMAndFileEvents(t *testing.T) {
	var f struct {
		torchFacts
		RawEntries int `json:"raw_entries"`
	}
	readFacts(t, "testdata/torch_2x.facts.json", &f)
	s, err := memviz.ReadFile("testdata/torch_2x.pickle")
	if err != nil {
		t.Fatal(err)
	}
	sum := analyze(t, s).Summary("torch_2x.pickle")
	if sum.Events != f.Events || sum.FileEvents != f.RawEntries || sum.Merged != f.RawEntries-f.Events {
		t.Errorf("events %d, file %d, merged %d; want %d, %d, %d", sum.Events, sum.FileEvents, sum.Merged, f.Events, f.RawEntries, f.RawEntries-f.Events)
	}
	if sum.OOMCount != 1 || len(sum.OOMs) != 1 {
		t.Fatalf("%d OOMs (%d listed), want 1", sum.OOMCount, len(sum.OOMs))
	}
	o := sum.OOMs[0]
	if o.Requested != 80<<30 || o.DeviceFree != 123456789 {
		t.Errorf("OOM of %d with %d free, want %d with 123456789", o.Requested, o.DeviceFree, int64(80<<30))
	}
	if o.Active != f.Active[o.Event] {
		t.Errorf("active at the OOM (event %d) %d, want %d", o.Event, o.Active, f.Active[o.Event])
	}

	// headroom's: the fixture's refused 100 MiB allocation, with the 64 MiB
	// limit less the 22 MiB reserved then free; its JSON has no merged pairs.
	r, _ := richSnapshot(t)
	sum = analyze(t, memviz.FromDevice(r)).Summary("rich.json")
	if sum.OOMCount != 1 || sum.OOMs[0].Requested != 100*mib || sum.OOMs[0].DeviceFree != 64*mib-22*mib {
		t.Errorf("rich: %d OOMs %+v, want one of 100 MiB with 42 MiB free", sum.OOMCount, sum.OOMs)
	}
	if sum.OOMs[0].Where != "big matmul" {
		t.Errorf("rich: OOM asked by %q, want big matmul", sum.OOMs[0].Where)
	}
	if sum.Merged != 0 || sum.FileEvents != len(r.DeviceTraces[0]) {
		t.Errorf("rich: file events %d merged %d, want %d and 0", sum.FileEvents, sum.Merged, len(r.DeviceTraces[0]))
	}
}

// sameSize is a PyTorch history of 100 allocations of 1 KiB each freed at
// once, then 50 more that stay: the peak is the last 50, all of one size.
func sameSize() *memviz.Snapshot {
	var tr []memviz.Event
	for i := range 100 {
		addr := int64(1<<20 + 4096*i)
		tr = append(tr, memviz.Event{Action: "alloc", Addr: addr, Size: 1024}, memviz.Event{Action: "free", Addr: addr, Size: 1024})
	}
	for i := range 50 {
		tr = append(tr, memviz.Event{Action: "alloc", Addr: int64(2<<20 + 4096*i), Size: 1024})
	}
	return &memviz.Snapshot{Source: memviz.SourcePyTorch, Traces: [][]memviz.Event{tr}}
}

// The detail control sets how many allocations get bands; whatever it is,
// the bands add up to the total at every point, and the band of smaller
// allocations says how many of them are live at the peak (50 here), not
// only how many it held over the history.
func TestDetail(t *testing.T) {
	a := analyze(t, sameSize())
	for _, c := range []struct {
		detail, bands    int
		otherAll, others int // allocations in the grey band, over the history and at the peak
	}{
		{0, memviz.MaxAllocationSeries + 1, 110, 50},
		{5, 6, 145, 50},
		{memviz.MaxDetail, memviz.MaxDetail + 1, 50, 50},
		{100000, memviz.MaxDetail + 1, 50, 50},
		{-3, memviz.MaxAllocationSeries + 1, 110, 50},
	} {
		sum := a.SummaryDetail("x", c.detail)
		if len(sum.Timeline.Series) != c.bands {
			t.Errorf("detail %d: %d bands, want %d", c.detail, len(sum.Timeline.Series), c.bands)
			continue
		}
		if sum.Allocations != 150 || sum.Peak.Total != 50*1024 {
			t.Errorf("detail %d: %d allocations, peak %d", c.detail, sum.Allocations, sum.Peak.Total)
		}
		for k := range sum.Timeline.Index {
			var sumv int64
			for _, s := range sum.Timeline.Series {
				sumv += s.Values[k]
			}
			if sumv != sum.Timeline.Total[k] {
				t.Fatalf("detail %d: bands add up to %d at point %d, total %d", c.detail, sumv, k, sum.Timeline.Total[k])
			}
		}
		other := sum.Timeline.Series[len(sum.Timeline.Series)-1]
		want := fmt.Sprintf("%d smaller allocations live at the peak (%d over the history)", c.others, c.otherAll)
		if other.Key != "other" || other.Label != want {
			t.Errorf("detail %d: grey band %s %q, want %q", c.detail, other.Key, other.Label, want)
		}
		if pk := sum.Peak.Series[len(sum.Peak.Series)-1]; pk.Bytes != int64(c.others)*1024 {
			t.Errorf("detail %d: grey band at the peak %d, want %d", c.detail, pk.Bytes, c.others*1024)
		}
	}
}

// The event list pages through the history; the state of an event carries
// its stack.
func TestEventsAndStacks(t *testing.T) {
	a := analyze(t, sameSize())
	ev := a.Events(0)
	if ev.Events != 250 || len(ev.Rows) != memviz.MaxEventPage || ev.Rows[1].Action != "free" || ev.Rows[0].Active != 1024 || ev.Rows[1].Active != 0 {
		t.Errorf("first page: %d events, %d rows, %+v", ev.Events, len(ev.Rows), ev.Rows[:2])
	}
	if ev := a.Events(240); len(ev.Rows) != 10 || ev.Rows[9].Index != 249 || ev.Rows[9].Active != 50*1024 {
		t.Errorf("last page: %+v", ev.Rows)
	}
	if ev := a.Events(1 << 40); len(ev.Rows) != 0 {
		t.Errorf("past the end: %d rows", len(ev.Rows))
	}
	s, err := memviz.ReadFile("testdata/torch_2x.pickle")
	if err != nil {
		t.Fatal(err)
	}
	ta := analyze(t, s)
	sum := ta.Summary("x")
	st := ta.State(sum.OOMs[0].Event)
	if !strings.Contains(st.Stack, "linear.py:114:forward") {
		t.Errorf("the OOM's stack:\n%s", st.Stack)
	}
	if !strings.Contains(sum.Timeline.Series[0].Stack, ".py:") {
		t.Errorf("band %s has stack %q", sum.Timeline.Series[0].Key, sum.Timeline.Series[0].Stack)
	}
}

// A range of a long history has every event when it fits in MaxPoints,
// with the known totals; a longer range keeps its largest point.
func TestTimelineRange(t *testing.T) {
	a := analyze(t, longHistory(2500))
	tl := a.TimelineRange(199, 100, 0) // reversed: the same range
	if len(tl.Index) != 100 || tl.Index[0] != 100 || tl.Index[99] != 199 {
		t.Fatalf("range 100-199: %d points from %v", len(tl.Index), tl.Index[:1])
	}
	for k, i := range tl.Index {
		if tl.Total[k] != int64(i+1)*1024 {
			t.Fatalf("after event %d: %d, want %d", i, tl.Total[k], (i+1)*1024)
		}
		var sum int64
		for _, s := range tl.Series {
			sum += s.Values[k]
		}
		if sum != tl.Total[k] {
			t.Fatalf("after event %d bands add up to %d, total %d", i, sum, tl.Total[k])
		}
	}
	tl = a.TimelineRange(-5, 1<<40, 3)
	if len(tl.Index) != memviz.MaxPoints || len(tl.Series) != 4 || !slices.Contains(tl.Index, 2499) {
		t.Errorf("whole history: %d points, %d bands, peak (event 2499) shown: %v", len(tl.Index), len(tl.Series), slices.Contains(tl.Index, 2499))
	}
}

// manyOOMs is a history of n OOMs of i+1 MiB each, with 1 GiB free.
func manyOOMs(n int) *memviz.Snapshot {
	tr := []memviz.Event{{Action: "alloc", Addr: 1 << 20, Size: 4096}}
	for i := range n {
		tr = append(tr, memviz.Event{Action: "oom", Size: int64(i+1) << 20, DeviceFree: 1 << 30})
	}
	return &memviz.Snapshot{Source: memviz.SourcePyTorch, Traces: [][]memviz.Event{tr}}
}

// Every OOM is counted; MaxOOMs are listed, the first ones, in order.
func TestOOMsAreBounded(t *testing.T) {
	sum := analyze(t, manyOOMs(3*memviz.MaxOOMs)).Summary("x")
	if sum.OOMCount != 3*memviz.MaxOOMs || len(sum.OOMs) != memviz.MaxOOMs {
		t.Fatalf("%d OOMs counted, %d listed; want %d and %d", sum.OOMCount, len(sum.OOMs), 3*memviz.MaxOOMs, memviz.MaxOOMs)
	}
	for k, o := range sum.OOMs {
		if o.Event != k+1 || o.Requested != int64(k+1)<<20 || o.DeviceFree != 1<<30 || o.Active != 4096 {
			t.Fatalf("OOM %d: %+v", k, o)
		}
	}
}
