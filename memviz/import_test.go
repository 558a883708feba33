package memviz_test

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
	"github.com/headroom-ml/headroom/memviz/internal/pickle"
)

// withoutPickleOnly drops what the pickle does not carry: headroom's
// reserve, release and empty_cache entries and the allocs and frees
// without an address; and each free the pickle writes as memory_viz's
// free_requested and free_completed pair, merged again when read (Merged).
func withoutPickleOnly(s *memviz.Snapshot) *memviz.Snapshot {
	out := *s
	out.Traces = nil
	merged, anyMerged := make([]int, len(s.Traces)), false
	for d, tr := range s.Traces {
		var keep []memviz.Event
		for _, e := range tr {
			if e.Action == device.ActionFree && e.Addr != 0 {
				merged[d]++
				anyMerged = true
			}
			switch e.Action {
			case device.ActionReserve, device.ActionRelease, device.ActionEmptyCache:
				continue
			case device.ActionAlloc, device.ActionFree:
				if e.Addr == 0 {
					continue
				}
			}
			keep = append(keep, e)
		}
		out.Traces = append(out.Traces, keep)
	}
	if anyMerged {
		out.Merged = merged
	}
	return &out
}

// headroom's JSON and pickle read back as the snapshot they were written
// from.
func TestRoundTrip(t *testing.T) {
	for name, mk := range map[string]func(testing.TB) (*device.Snapshot, *device.Allocator){"known": knownSnapshot, "rich": richSnapshot} {
		s, _ := mk(t)
		want := memviz.FromDevice(s)
		js, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := memviz.Decode(name+".json", js)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: JSON reads back as\n%+v\nwant\n%+v", name, got, want)
		}
		got, err = memviz.Decode(name+".pickle", mustPickle(t, s))
		if err != nil {
			t.Fatal(err)
		}
		if w := withoutPickleOnly(want); !reflect.DeepEqual(got, w) {
			t.Errorf("%s: pickle reads back as\n%+v\nwant\n%+v", name, got, w)
		}
	}
}

type torchFacts struct {
	Events    int     `json:"events"`
	Active    []int64 `json:"active"`
	Reserved  []int64 `json:"reserved"`
	Segments  []int   `json:"segments"`
	Pending   []int   `json:"pending"`
	PeakEvent int     `json:"peak_event"`
	PeakTotal int64   `json:"peak_total"`
	Largest   []struct {
		Address   int64  `json:"address"`
		Requested int64  `json:"requested"`
		Where     string `json:"where"`
	} `json:"largest"`
}

func readFacts(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

// PyTorch 2.x's snapshot (scripts/reference/snapshot_ref.py): the history
// read back gives, after every event, the active and reserved bytes and
// the segments the simulation that wrote it had, though its oldest entries
// were dropped; and so does PyTorch 2.0's layout of the same snapshot.
func TestPyTorchSnapshot(t *testing.T) {
	var f torchFacts
	readFacts(t, "testdata/torch_2x.facts.json", &f)
	for _, file := range []string{"testdata/torch_2x.pickle", "testdata/torch_2_0.pickle"} {
		s, err := memviz.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if s.Source != memviz.SourcePyTorch || s.Headroom != nil {
			t.Errorf("%s: source %q", file, s.Source)
		}
		if !slices.Equal(s.Devices(), []int{0, 1}) || len(s.Traces) != 2 || len(s.Traces[1]) != 0 {
			t.Errorf("%s: devices %v, %d traces", file, s.Devices(), len(s.Traces))
		}
		if len(s.Traces[0]) != f.Events {
			t.Fatalf("%s: %d events (free_requested+free_completed merged), want %d", file, len(s.Traces[0]), f.Events)
		}
		a, err := memviz.Analyze(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		sum := a.Summary(file)
		if sum.Mode != memviz.ByAllocation {
			t.Errorf("%s: mode %s", file, sum.Mode)
		}
		if !slices.Equal(sum.Timeline.Total, f.Active) {
			t.Errorf("%s: active bytes after each event\n %v\nwant\n %v", file, sum.Timeline.Total, f.Active)
		}
		if sum.Peak.Event != f.PeakEvent || sum.Peak.Total != f.PeakTotal {
			t.Errorf("%s: peak %d after event %d, want %d after %d", file, sum.Peak.Total, sum.Peak.Event, f.PeakTotal, f.PeakEvent)
		}
		var bands int64
		for _, v := range sum.Peak.Series {
			bands += v.Bytes
		}
		if bands != f.PeakTotal {
			t.Errorf("%s: the bands at the peak add up to %d, want %d", file, bands, f.PeakTotal)
		}
		for i, l := range f.Largest {
			g := sum.Largest[i]
			if g.Address != l.Address || g.Size != l.Requested || g.Where != l.Where {
				t.Errorf("%s: largest #%d: %#x %d %q, want %#x %d %q", file, i+1, g.Address, g.Size, g.Where, l.Address, l.Requested, l.Where)
			}
		}
		for i := range f.Events {
			pending := 0
			st := a.State(i)
			if st.Reserved != f.Reserved[i] || len(st.Segments) != f.Segments[i] || st.Active != f.Active[i] || st.Unplaced != 0 {
				t.Errorf("%s: after event %d: reserved %d in %d segments, active %d (%d unplaced); want %d in %d, active %d",
					file, i, st.Reserved, len(st.Segments), st.Active, st.Unplaced, f.Reserved[i], f.Segments[i], f.Active[i])
			}
			for _, g := range st.Segments {
				at := g.Address
				for _, b := range g.Blocks {
					if b.Address != at {
						t.Fatalf("%s: after event %d: segment %#x: block at %#x, want %#x", file, i, g.Address, b.Address, at)
					}
					at += b.Size
					if b.State == "active_pending_free" {
						pending++
					}
				}
				if at != g.Address+g.Size {
					t.Fatalf("%s: after event %d: segment %#x: blocks end at %#x, want %#x", file, i, g.Address, at, g.Address+g.Size)
				}
			}
			if pending != f.Pending[i] {
				t.Errorf("%s: after event %d: %d blocks pending free, want %d", file, i, pending, f.Pending[i])
			}
		}
	}
}

// PyTorch 1.13's torch.cuda.memory_snapshot(): a list of segments whose
// blocks have history instead of requested_size and frames.
func TestPyTorch113(t *testing.T) {
	var f torchFacts
	readFacts(t, "testdata/torch_2x.facts.json", &f)
	s, err := memviz.ReadFile("testdata/torch_1_13.pickle")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Segments) != 3 || len(s.Traces) != 0 {
		t.Fatalf("%d segments, %d traces", len(s.Segments), len(s.Traces))
	}
	a, err := memviz.Analyze(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	sum := a.Summary("1.13")
	last := f.Active[len(f.Active)-1]
	if sum.Events != 0 || len(sum.Timeline.Total) != 1 || sum.Peak.Total != last {
		t.Errorf("%d events, timeline %v; want the final state's %d", sum.Events, sum.Timeline.Total, last)
	}
	if w := sum.Largest[0].Where; !strings.HasSuffix(w, "train.py:130 main") {
		t.Errorf("largest allocation's frame %q (from the block's history)", w)
	}
	st := a.State(0)
	if st.Reserved != f.Reserved[len(f.Reserved)-1] {
		t.Errorf("reserved %d", st.Reserved)
	}
}

// Expandable segments: segment_map and segment_unmap grow and shrink one
// segment; the state after each event has the mapped ranges the writer had.
func TestPyTorchExpandable(t *testing.T) {
	var f struct {
		Events int         `json:"events"`
		Mapped [][][]int64 `json:"mapped"`
	}
	readFacts(t, "testdata/torch_expandable.facts.json", &f)
	s, err := memviz.ReadFile("testdata/torch_expandable.pickle")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Segments[0].Expandable {
		t.Error("is_expandable not read")
	}
	a, err := memviz.Analyze(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.Traces[0]); n != f.Events {
		t.Fatalf("%d events, want %d", n, f.Events)
	}
	for i, want := range f.Mapped {
		var got [][]int64
		for _, g := range a.State(i).Segments {
			got = append(got, []int64{g.Address, g.Size})
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("after event %d (%s): mapped %v, want %v", i, s.Traces[0][i].Action, got, want)
		}
	}
}

// Bad files give errors that name the file and say what is wrong, and
// where.
func TestDecodeErrors(t *testing.T) {
	ref, err := os.ReadFile("testdata/torch_2x.pickle")
	if err != nil {
		t.Fatal(err)
	}
	known, _ := knownSnapshot(t)
	js, _ := json.Marshal(known)
	evil, _ := pickle.Marshal(map[string]any{"segments": []any{}}, 2)
	evil = append([]byte("\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00."), evil...)
	swap := func(s, old, new string) []byte {
		if !strings.Contains(s, old) {
			t.Fatalf("%q not in the JSON", old)
		}
		return []byte(strings.Replace(s, old, new, 1))
	}
	for _, c := range []struct {
		name string
		data []byte
		want []string
	}{
		{"empty.pickle", nil, []string{"empty.pickle", "empty"}},
		{"cut.pickle", ref[:len(ref)/2], []string{"cut.pickle", "truncated"}},
		{"cut.json", js[:len(js)/2], []string{"cut.json", "truncated"}},
		{"garbage.pickle", []byte("\x80\x04\xffnot a pickle"), []string{"garbage.pickle", "neither JSON nor a readable pickle"}},
		{"tensor.pickle", evil, []string{"tensor.pickle", "torch._utils._rebuild_tensor_v2", "only dicts, lists"}},
		{"os.pickle", []byte("cos\nsystem\n(S'echo hi'\ntR."), []string{"os.pickle", "os.system", "nothing of it was run"}},
		{"syntax.json", []byte("{\"segments\": [}\n"), []string{"syntax.json", "invalid JSON at byte 15 (line 1)"}},
		{"string.json", []byte(`"hello"`), []string{"string.json", "the top level is a str"}},
		{"number.pickle", []byte("\x80\x04K\x05."), []string{"number.pickle", "the top level is a int"}},
		{"other.json", []byte(`{"model": "resnet"}`), []string{"other.json", "not a memory snapshot", "[model]"}},
		{"type.json", swap(string(js), `"total_size":2097152`, `"total_size":"2 MiB"`), []string{"type.json", "segments[0].total_size: want int, got str"}},
		{"float.json", swap(string(js), `"total_size":2097152`, `"total_size":2.5`), []string{"segments[0].total_size: want int, got float"}},
		{"blocks.json", swap(string(js), `"blocks":[`, `"blocs":[`), []string{"segments[0]: missing key \"blocks\""}},
		{"state.json", swap(string(js), `"state":"active_allocated"`, `"state":1`), []string{"segments[0].blocks[0].state: want str, got int"}},
		{"action.json", swap(string(js), `"action":"alloc"`, `"action":["alloc"]`), []string{"device_traces[0][1].action: want str, got list"}},
		{"traces.json", swap(string(js), `"device_traces":[[`, `"device_traces":[{"a":1},[`), []string{"device_traces[0]: want list, got dict"}},
		{"negative.json", swap(string(js), `"total_size":2097152`, `"total_size":-5`), []string{"segments[0].total_size: negative size -5"}},
		{"outside.json", swap(string(js), `"size":614400`, `"size":99999999`), []string{"segments[0].blocks[0]", "outside its segment"}},
		{"big.json", swap(string(js), `"total_size":2097152`, `"total_size":99999999999999999999`), []string{"segments[0].total_size", "does not fit in 64 bits"}},
		{"stats.json", swap(string(js), `"stats":{`, `"stats":{"x":"y",`), []string{"headroom.stats.x: want int, got str"}},
		{"frames.json", []byte(`{"segments":[],"device_traces":[[{"action":"alloc","addr":1,"size":2,"frames":[{"filename":3}]}]]}`), []string{"device_traces[0][0].frames[0].filename: want str, got int"}},
		{"noaddr.json", []byte(`{"segments":[],"device_traces":[[{"action":"alloc","size":2}]]}`), []string{"device_traces[0][0]: missing key \"addr\""}},
	} {
		_, err := memviz.Decode(c.name, c.data)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		var fe *memviz.FormatError
		if !errors.As(err, &fe) || !errors.Is(err, memviz.ErrFormat) {
			t.Errorf("%s: error %T %v is not a *FormatError", c.name, err, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.name, err, w)
			}
		}
	}
	if _, err := memviz.ReadFile("testdata/no such file.pickle"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
}

// The importer never panics, and what it accepts the viewer can show and
// the writer can write.
func FuzzImport(f *testing.F) {
	for _, name := range []string{"torch_2x.pickle", "torch_2_0.pickle", "torch_1_13.pickle", "torch_expandable.pickle", "headroom_export.pickle", "headroom_export_rich.pickle"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	s, _ := richSnapshot(f)
	js, _ := json.Marshal(s)
	f.Add(js)
	f.Add([]byte(`{"segments":[{"address":4096,"total_size":1024,"blocks":[{"size":512,"state":"active_allocated"},{"size":512,"state":"inactive"}]}],"device_traces":[[{"action":"free","addr":4096,"size":512},{"action":"segment_map","addr":0,"size":4096},{"action":"segment_unmap","addr":8192,"size":4096}]]}`))
	// Shared references that expand, and blocks and segments that overlap.
	ev := pickle.DictOf("action", "alloc", "addr", int64(4096), "size", int64(512))
	evs := []any{ev, ev, ev, ev, ev, ev, ev, ev}
	if data, err := pickle.Marshal(pickle.DictOf("segments", []any{}, "device_traces", []any{evs, evs, evs, evs}), 4); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"segments":[{"address":0,"total_size":4096,"blocks":[{"address":0,"size":2048,"state":"active_allocated"},{"address":1024,"size":1024,"state":"inactive"}]},{"address":2048,"total_size":4096,"blocks":[]}],"device_traces":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := memviz.Decode("fuzz", data)
		if err != nil {
			var fe *memviz.FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not a *FormatError: %v", err, err)
			}
			return
		}
		for _, d := range append(s.Devices(), 0) {
			a, err := memviz.Analyze(s, d)
			if err != nil {
				t.Fatal(err)
			}
			sum := a.Summary("fuzz")
			for _, i := range []int{-1, 0, sum.Peak.Event, sum.Events - 1, sum.Events + 5} {
				a.State(i)
			}
		}
		if _, err := s.MarshalPickle(); err != nil && !errors.Is(err, pickle.ErrType) && !errors.Is(err, pickle.ErrUnsupported) {
			t.Fatalf("writing back: %v", err)
		}
	})
}
