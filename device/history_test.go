package device

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
)

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

func actions(es []TraceEntry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.Action)
	}
	return strings.Join(s, " ")
}

func TestHistory(t *testing.T) {
	a := Meta().Alloc
	b := mustAlloc(t, a, 100, Tag{})
	a.Free(b)
	if h := a.History(); len(h) != 0 {
		t.Fatalf("history recorded while off: %v", h)
	}
	a.RecordHistory(100)
	p := mustAlloc(t, a, 3*mib, Tag{Category: Parameter, Module: "fc", Op: "fc.weight"})
	arena, _ := a.Reserve(1000, Tag{Category: Activation, Op: "arena"})
	a.TrackIn(arena, 512, 512, 400, Tag{Category: Activation, Module: "fc", Op: "relu"})
	a.UntrackIn(arena, 512)
	a.Release(arena)
	a.Free(p)
	a.EmptyCache()
	h := a.History()
	want := "segment_alloc alloc reserve alloc free release free empty_cache segment_free segment_free"
	if got := actions(h); got != want {
		t.Fatalf("history %q\nwant %q", got, want)
	}
	e := h[1] // the parameter's alloc
	if e.Size != 3*mib || e.BlockSize != 3*mib || e.Category != "parameter" || e.Module != "fc" || e.Op != "fc.weight" || e.Pool != "large" || e.Addr == 0 || e.TimeUS == 0 {
		t.Fatalf("alloc entry %+v", e)
	}
	if e := h[3]; e.Addr != h[2].Addr+512 || e.Size != 400 || e.BlockSize != 512 || e.Op != "relu" {
		t.Fatalf("arena tensor entry %+v (arena at %#x)", e, h[2].Addr)
	}
	if h[0].Size != 20*mib || h[0].Category != "" || h[0].Addr != h[1].Addr {
		t.Fatalf("segment entry %+v", h[0])
	}
	if h[8].Size != 2*mib || h[9].Size != 20*mib {
		t.Fatalf("segment_free entries %+v %+v", h[8], h[9])
	}
	for i := 1; i < len(h); i++ {
		if h[i].TimeUS < h[i-1].TimeUS {
			t.Fatal("time goes backwards")
		}
	}

	// The ring keeps the newest entries.
	a.RecordHistory(3)
	if got := actions(a.History()); got != "empty_cache segment_free segment_free" {
		t.Fatalf("after shrinking: %q", got)
	}
	for range 4 {
		a.Free(mustAlloc(t, a, 10, Tag{}))
	}
	if got := actions(a.History()); got != "free alloc free" {
		t.Fatalf("ring: %q", got)
	}
	a.RecordHistory(0) // stop; the entries stay
	a.Free(mustAlloc(t, a, 10, Tag{}))
	if got := actions(a.History()); got != "free alloc free" {
		t.Fatalf("after stopping: %q", got)
	}
	a.ClearHistory()
	if len(a.History()) != 0 {
		t.Fatal("ClearHistory kept entries")
	}
}

func TestOOMHistoryEntry(t *testing.T) {
	a := Meta().Alloc
	_ = a.SetCapacity(4 * mib)
	a.RecordHistory(10)
	_, err := a.Allocate(5*mib, Tag{Category: Activation, Module: "l", Op: "conv"})
	if err == nil {
		t.Fatal("5 MiB fit in 4 MiB")
	}
	h := a.History()
	if len(h) != 1 || h[0].Action != "oom" || h[0].Size != 5*mib || h[0].DeviceFree != 4*mib || h[0].Op != "conv" {
		t.Fatalf("%+v", h)
	}
}

func TestSnapshot(t *testing.T) {
	a := CPU().Alloc
	a.RecordHistory(100)
	p := mustAlloc(t, a, 1000, Tag{Category: Parameter, Module: "fc", Op: "fc.weight"})
	g := mustAlloc(t, a, 5000, Tag{Category: Gradient, Module: "fc", Op: "fc.weight"})
	arena, _ := a.Reserve(3*mib, Tag{Category: Activation, Op: "arena"})
	a.TrackIn(arena, mib, 4096, 4000, Tag{Category: Activation, Module: "fc", Op: "linear"})
	a.Free(g)
	s := a.Snapshot()
	if len(s.Segments) != 2 || len(s.DeviceTraces) != 1 {
		t.Fatalf("%d segments, %d traces", len(s.Segments), len(s.DeviceTraces))
	}
	sort.Slice(s.Segments, func(i, j int) bool { return s.Segments[i].SegmentType > s.Segments[j].SegmentType })
	small, large := s.Segments[0], s.Segments[1]
	if small.SegmentType != "small" || small.TotalSize != 2*mib || small.AllocatedSize != 1024 || small.RequestedSize != 1000 || small.ActiveSize != 1024 {
		t.Fatalf("small segment %+v", small)
	}
	if small.Address != p.Address() {
		t.Fatalf("segment at %#x, parameter at %#x", small.Address, p.Address())
	}
	wantSmall := []BlockInfo{
		{Address: p.Address(), Size: 1024, RequestedSize: 1000, State: "active_allocated", Category: "parameter", Module: "fc", Op: "fc.weight"},
		{Address: p.Address() + 1024, Size: 2*mib - 1024, State: "inactive"},
	}
	if got, _ := jsonString(small.Blocks); got != mustJSON(t, wantSmall) {
		t.Fatalf("small blocks\n got %s\nwant %s", got, mustJSON(t, wantSmall))
	}
	base := arena.Address()
	wantLarge := []BlockInfo{
		{Address: base, Size: mib, State: "inactive", Arena: true},
		{Address: base + mib, Size: 4096, RequestedSize: 4000, State: "active_allocated", Category: "activation", Module: "fc", Op: "linear", Arena: true},
		{Address: base + mib + 4096, Size: 2*mib - 4096, State: "inactive", Arena: true},
		{Address: base + 3*mib, Size: 17 * mib, State: "inactive"},
	}
	if got, _ := jsonString(large.Blocks); got != mustJSON(t, wantLarge) {
		t.Fatalf("large blocks\n got %s\nwant %s", got, mustJSON(t, wantLarge))
	}
	if large.AllocatedSize != 4096 || large.TotalSize != 20*mib {
		t.Fatalf("large segment %+v", large)
	}
	// On cpu, addresses are the real pointers.
	if uintptrOf(p.Data) != p.Address() {
		t.Fatalf("address %#x, data at %#x", p.Address(), uintptrOf(p.Data))
	}
	if got := actions(s.DeviceTraces[0]); got != "segment_alloc alloc alloc segment_alloc reserve alloc free snapshot" {
		t.Fatalf("trace %q", got)
	}
	if s.Headroom.Version != 1 || s.Headroom.Device != "cpu" || s.Headroom.Stats["allocated_bytes.all.current"] != 1024+4096 ||
		s.Headroom.CategoryBytes["activation"] != 4096 || s.Headroom.CategoryBytesAtPeak["gradient"] != 5120 || s.Headroom.HistoryMaxEntries != 100 {
		t.Fatalf("headroom part %+v", s.Headroom)
	}

	// The JSON has PyTorch's keys.
	js, err := jsonString(s)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(js), &raw); err != nil {
		t.Fatal(err)
	}
	seg := raw["segments"].([]any)[0].(map[string]any)
	for _, k := range []string{"device", "address", "total_size", "stream", "segment_type", "segment_pool_id", "allocated_size", "active_size", "requested_size", "blocks"} {
		if _, ok := seg[k]; !ok {
			t.Errorf("segment lacks %q", k)
		}
	}
	blk := seg["blocks"].([]any)[0].(map[string]any)
	for _, k := range []string{"address", "size", "requested_size", "state"} {
		if _, ok := blk[k]; !ok {
			t.Errorf("block lacks %q", k)
		}
	}
	ev := raw["device_traces"].([]any)[0].([]any)[1].(map[string]any)
	for _, k := range []string{"action", "addr", "size", "stream", "time_us", "category", "module", "op"} {
		if _, ok := ev[k]; !ok {
			t.Errorf("trace entry lacks %q", k)
		}
	}
	// A snapshot round-trips through JSON.
	var back Snapshot
	if err := json.Unmarshal([]byte(js), &back); err != nil {
		t.Fatal(err)
	}
	if js2, _ := jsonString(&back); js2 != js {
		t.Fatal("snapshot does not round-trip through JSON")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	s, err := jsonString(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Under a capacity smaller than PyTorch's 20 MiB segment, a request gets a
// segment of its own size instead of failing.
func TestTightSegmentUnderCapacity(t *testing.T) {
	a := Meta().Alloc
	_ = a.SetCapacity(4 * mib)
	b, err := a.Allocate(3*mib, Tag{Category: Activation})
	if err != nil {
		t.Fatal(err)
	}
	if r := a.Stats().ReservedBytes.Current; r != 3*mib {
		t.Fatalf("reserved %d, want a 3 MiB segment", r)
	}
	a.Free(b)
	u := Meta().Alloc
	b, _ = u.Allocate(3*mib, Tag{Category: Activation})
	if r := u.Stats().ReservedBytes.Current; r != LargeBuffer {
		t.Fatalf("without a capacity reserved %d, want PyTorch's %d", r, LargeBuffer)
	}
	u.Free(b)
}

// MarkStep brackets a step with step_begin and step_end entries numbered
// from 1; with history off it records nothing and does not count.
func TestMarkStep(t *testing.T) {
	a := Meta().Alloc
	a.MarkStep()() // off: not recorded, not counted
	a.RecordHistory(100)
	for range 2 {
		end := a.MarkStep()
		b := mustAlloc(t, a, 100, Tag{Category: Activation})
		a.Free(b)
		end()
	}
	h := a.History()
	if got, want := actions(h), "step_begin segment_alloc alloc free step_end step_begin alloc free step_end"; got != want {
		t.Fatalf("history %q, want %q", got, want)
	}
	for i, want := range map[int]int64{0: 1, 4: 1, 5: 2, 8: 2} {
		if h[i].Step != want || h[i].Addr != 0 || h[i].Size != 0 || h[i].TimeUS == 0 {
			t.Errorf("entry %d: %+v, want step %d", i, h[i], want)
		}
	}
	s, err := jsonString(h[5])
	if err != nil || !strings.Contains(s, `"action":"step_begin"`) || !strings.Contains(s, `"step":2`) {
		t.Errorf("JSON %s (%v)", s, err)
	}
}
