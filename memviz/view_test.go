package memviz_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
)

func analyze(t *testing.T, s *memviz.Snapshot) *memviz.Analysis {
	t.Helper()
	a, err := memviz.Analyze(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The known sequence: its peak, its categories at the peak, its largest
// allocation, the allocator's own record of them, and the state at the
// peak.
func TestKnownSummary(t *testing.T) {
	s, alloc := knownSnapshot(t)
	a := analyze(t, memviz.FromDevice(s))
	sum := a.Summary("known.json")
	if sum.Mode != memviz.ByCategory || sum.Events != known.events || len(sum.Timeline.Index) != known.events {
		t.Fatalf("mode %s, %d events, %d points; want category, %d", sum.Mode, sum.Events, len(sum.Timeline.Index), known.events)
	}
	if sum.Peak.Total != known.peak || sum.Peak.Event != known.peakEvent {
		t.Errorf("peak %d after event %d, want %d after %d", sum.Peak.Total, sum.Peak.Event, known.peak, known.peakEvent)
	}
	if p := alloc.MaxMemoryAllocated(); p != known.peak || sum.Headroom.AllocatedPeak != p {
		t.Errorf("the allocator's peak %d (in the file %d), want %d", p, sum.Headroom.AllocatedPeak, known.peak)
	}
	var keys []string
	got := map[string]int64{}
	for _, v := range sum.Peak.Series {
		keys = append(keys, v.Key)
		got[v.Key] = v.Bytes
	}
	if want := []string{"parameter", "gradient", "activation"}; !slices.Equal(keys, want) {
		t.Errorf("series %v, want %v", keys, want)
	}
	want := map[string]int64{"parameter": known.param, "activation": known.act, "gradient": known.grad}
	for k, v := range want {
		if got[k] != v || s.Headroom.CategoryBytesAtPeak[k] != v {
			t.Errorf("%s at the peak: %d (allocator: %d), want %d", k, got[k], s.Headroom.CategoryBytesAtPeak[k], v)
		}
	}
	l := sum.Largest[0]
	if l.Size != known.largest || l.Module != known.largestModule || l.Op != known.largestOp || l.Category != "activation" {
		t.Errorf("largest %+v", l)
	}
	if len(sum.Largest) != 5 {
		t.Errorf("%d allocations live at the peak, want 5", len(sum.Largest))
	}
	for i := 1; i < len(sum.Largest); i++ {
		if sum.Largest[i].Size > sum.Largest[i-1].Size {
			t.Errorf("largest not sorted: %d after %d", sum.Largest[i].Size, sum.Largest[i-1].Size)
		}
	}
	st := a.State(known.peakEvent)
	if st.Active != known.peak || st.Reserved != known.reservedAtPeak || len(st.Segments) != 2 || st.Blocks != 5 {
		t.Errorf("state at the peak: active %d reserved %d in %d segments, %d blocks", st.Active, st.Reserved, len(st.Segments), st.Blocks)
	}
	// before the first segment: nothing; at the end: the two parameters
	// and gradients in the small segment, the large one cached
	if st := a.State(-3); st.Event != 0 || st.Reserved != 2*mib || st.Active != 0 {
		t.Errorf("after event 0: %+v", st)
	}
	end := a.State(1 << 30)
	if end.Event != known.events-1 || end.Active != 1400*kib || end.Reserved != 22*mib {
		t.Errorf("at the end: event %d active %d reserved %d", end.Event, end.Active, end.Reserved)
	}
}

// Step arenas: tensors placed in an arena are blocks of it, the space
// between them is held by the arena; a Track without an address has no
// place; a free whose alloc was not recorded counts from the start.
func TestArenaState(t *testing.T) {
	s, alloc := richSnapshot(t)
	a := analyze(t, memviz.FromDevice(s))
	sum := a.Summary("rich")
	if sum.Peak.Total != alloc.MaxMemoryAllocated() {
		t.Errorf("peak %d, allocator's %d", sum.Peak.Total, alloc.MaxMemoryAllocated())
	}
	var trackIn int
	for i, e := range s.DeviceTraces[0] {
		if e.Action == device.ActionAlloc && e.Op == "softmax" {
			trackIn = i
		}
	}
	st := a.State(trackIn + 1) // + the Track
	var states []string
	var arena *memviz.SegState
	for i := range st.Segments {
		if st.Segments[i].Type == "large" {
			arena = &st.Segments[i]
		}
	}
	if arena == nil {
		t.Fatalf("no large segment at event %d: %+v", trackIn+1, st)
	}
	for _, b := range arena.Blocks {
		states = append(states, fmt.Sprintf("%s %d", b.State, b.Size))
	}
	want := []string{"active_allocated 2097152", "arena 2097152", "active_allocated 1048576", "arena 3145728", "inactive 12582912"}
	if !slices.Equal(states, want) {
		t.Errorf("large segment at event %d:\n %v\nwant\n %v", trackIn+1, states, want)
	}
	if st.Unplaced != 1 {
		t.Errorf("%d unplaced blocks, want the Track's 1", st.Unplaced)
	}
	if st.Active != mib+2*mib+mib+512 {
		t.Errorf("active %d", st.Active)
	}
	// the input allocated before recording counts from the start
	if sum.Timeline.Total[0] != mib {
		t.Errorf("after the first event (the input's free): %d, want the weight's 1 MiB", sum.Timeline.Total[0])
	}
}

// An arena reserved before recording started shows in the final state.
func TestArenaBeforeHistory(t *testing.T) {
	al := device.Meta().Alloc
	arena, err := al.Reserve(4*mib, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		t.Fatal(err)
	}
	al.RecordHistory(100)
	al.TrackIn(arena, mib, mib, mib, device.Tag{Category: device.Activation, Module: "m", Op: "relu"})
	a := analyze(t, memviz.FromDevice(al.Snapshot()))
	var states []string
	for _, b := range a.State(1).Segments[0].Blocks {
		states = append(states, fmt.Sprintf("%s %d", b.State, b.Size))
	}
	want := []string{"arena 1048576", "active_allocated 1048576", "arena 2097152", "inactive 16777216"}
	if !slices.Equal(states, want) {
		t.Errorf("%v\nwant %v", states, want)
	}
}

// A long history is cut to MaxPoints points that keep the peak; the bands
// add up to the total at every point.
func TestLongHistory(t *testing.T) {
	al := device.Meta().Alloc
	al.RecordHistory(100000)
	var live []*device.Block
	for i := range 3000 {
		b, err := al.Allocate(int64(512*(1+i%7)), device.Tag{Category: device.Category(i % 3), Op: "x"})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, b)
		if i%3 == 2 {
			al.Free(live[0])
			live = live[1:]
		}
		if i == 2222 {
			big, _ := al.Allocate(3*mib, device.Tag{Category: device.Temporary, Op: "spike"})
			al.Free(big)
		}
	}
	a := analyze(t, memviz.FromDevice(al.Snapshot()))
	sum := a.Summary("long")
	if n := len(sum.Timeline.Index); n != memviz.MaxPoints {
		t.Fatalf("%d points, want %d", n, memviz.MaxPoints)
	}
	if sum.Peak.Total != al.MaxMemoryAllocated() {
		t.Errorf("peak %d, allocator's %d", sum.Peak.Total, al.MaxMemoryAllocated())
	}
	k := slices.Index(sum.Timeline.Index, sum.Peak.Event)
	if k < 0 || sum.Timeline.Total[k] != sum.Peak.Total {
		t.Fatalf("the peak (event %d) is not a point", sum.Peak.Event)
	}
	for k := range sum.Timeline.Index {
		var s int64
		for _, ser := range sum.Timeline.Series {
			s += ser.Values[k]
		}
		if s != sum.Timeline.Total[k] {
			t.Fatalf("point %d: bands add up to %d, total %d", k, s, sum.Timeline.Total[k])
		}
	}
}

// PyTorch's files are stacked by allocation: the largest get bands, the
// rest share one.
func TestByAllocation(t *testing.T) {
	s := &memviz.Snapshot{Source: memviz.SourcePyTorch}
	var tr []memviz.Event
	n := memviz.MaxAllocationSeries + 10
	for i := range n {
		tr = append(tr, memviz.Event{Action: "alloc", Addr: int64(4096 * (i + 1)), Size: int64(100 + i)})
	}
	s.Traces = [][]memviz.Event{tr}
	sum := analyze(t, s).Summary("x")
	if sum.Mode != memviz.ByAllocation || len(sum.Timeline.Series) != memviz.MaxAllocationSeries+1 {
		t.Fatalf("mode %s, %d series", sum.Mode, len(sum.Timeline.Series))
	}
	last := sum.Timeline.Series[len(sum.Timeline.Series)-1]
	if last.Key != "other" || last.Values[n-1] != 100*10+45 {
		t.Errorf("other: %s %v", last.Key, last.Values[n-1])
	}
	if sum.Largest[0].Size != int64(100+n-1) {
		t.Errorf("largest %d", sum.Largest[0].Size)
	}
	if _, err := memviz.Analyze(s, 3); err == nil {
		t.Error("device 3 of a one-device snapshot accepted")
	}
}
