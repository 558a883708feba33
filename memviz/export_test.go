package memviz_test

import (
	"bytes"
	"encoding/binary"
	"flag"
	"os"
	"reflect"
	"slices"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
	"github.com/headroom-ml/headroom/memviz/internal/pickle"
)

var update = flag.Bool("update", false, "rewrite testdata/headroom_export.pickle")

func mustPickle(t *testing.T, s *device.Snapshot) []byte {
	t.Helper()
	data, err := memviz.Pickle(s)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func keys(d *pickle.Dict) []string {
	var out []string
	for _, k := range d.Keys() {
		out = append(out, k.(string))
	}
	return out
}

// The exported pickle has PyTorch's layout: its keys, in its order, with
// its types; headroom's free as free_requested + free_completed; oom with
// device_free instead of addr; no headroom-only actions; every entry a
// category, "unknown" among them; frames as lists of {filename, line,
// name}.
func TestPickleLayout(t *testing.T) {
	s, _ := richSnapshot(t)
	v, err := pickle.Unmarshal(mustPickle(t, s), nil)
	if err != nil {
		t.Fatal(err)
	}
	top := v.(*pickle.Dict)
	if got := keys(top); !slices.Equal(got, []string{"segments", "device_traces", "headroom"}) {
		t.Fatalf("top-level keys %v", got)
	}
	segs, _ := top.GetList("segments")
	if len(segs) != len(s.Segments) || len(segs) == 0 {
		t.Fatalf("%d segments, want %d", len(segs), len(s.Segments))
	}
	wantSeg := []string{"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
		"segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
	for i, sv := range segs {
		seg := sv.(*pickle.Dict)
		if got := keys(seg); !slices.Equal(got, wantSeg) {
			t.Fatalf("segment keys %v\nwant %v", got, wantSeg)
		}
		if id, err := seg.GetTuple("segment_pool_id"); err != nil || len(id) != 2 {
			t.Errorf("segment_pool_id: %v %v", id, err)
		}
		addr, _ := seg.GetInt("address")
		if addr != s.Segments[i].Address {
			t.Errorf("segment %d address %#x, want %#x", i, addr, s.Segments[i].Address)
		}
		blocks, _ := seg.GetList("blocks")
		for j, bv := range blocks {
			b := bv.(*pickle.Dict)
			if got := keys(b)[:5]; !slices.Equal(got, []string{"address", "size", "requested_size", "state", "frames"}) {
				t.Errorf("block keys %v", got)
			}
			a, _ := b.GetInt("address")
			size, _ := b.GetInt("size")
			if a != addr {
				t.Errorf("segment %d block %d at %#x, want %#x: blocks must tile the segment", i, j, a, addr)
			}
			addr = a + size
		}
	}
	traces, _ := top.GetList("device_traces")
	if len(traces) != 1 {
		t.Fatalf("%d device traces, want 1", len(traces))
	}
	var got, want []string
	for _, e := range s.DeviceTraces[0] {
		switch e.Action {
		case device.ActionFree:
			if e.Addr != 0 {
				want = append(want, "free_requested", "free_completed")
			}
		case device.ActionReserve, device.ActionRelease, device.ActionEmptyCache:
		case device.ActionAlloc:
			if e.Addr != 0 {
				want = append(want, e.Action)
			}
		default:
			want = append(want, e.Action)
		}
	}
	unknown := false
	for _, ev := range traces[0].([]any) {
		e := ev.(*pickle.Dict)
		action, _ := e.GetString("action")
		got = append(got, action)
		if action == "oom" {
			if e.Has("addr") || !e.Has("device_free") {
				t.Errorf("oom entry keys %v: PyTorch writes device_free instead of addr", keys(e))
			}
		} else if _, err := e.GetInt("addr"); err != nil {
			t.Errorf("%s entry: %v", action, err)
		}
		for _, k := range []string{"size", "stream", "time_us"} {
			if _, err := e.GetInt(k); err != nil {
				t.Errorf("%s entry: %v", action, err)
			}
		}
		c, err := e.GetString("category")
		if err != nil {
			t.Errorf("%s entry: %v", action, err)
		}
		unknown = unknown || c == "unknown"
		frames, err := e.GetList("frames")
		if err != nil {
			t.Fatalf("%s entry: %v", action, err)
		}
		for _, fv := range frames {
			f := fv.(*pickle.Dict)
			if _, err := f.GetString("filename"); err != nil {
				t.Error(err)
			}
			if _, err := f.GetInt("line"); err != nil {
				t.Error(err)
			}
			if _, err := f.GetString("name"); err != nil {
				t.Error(err)
			}
		}
		if action == "alloc" && len(frames) != 1 {
			t.Errorf("alloc entry has %d frames, want one synthesized from module and op", len(frames))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("actions\n %v\nwant\n %v", got, want)
	}
	if !unknown {
		t.Error("no entry has the category \"unknown\": memory_viz's annotate_snapshot would throw")
	}
	h, err := top.GetDict("headroom")
	if err != nil {
		t.Fatal(err)
	}
	if f, err := h.GetFloat("memory_fraction"); err != nil || f != 1 {
		t.Errorf("memory_fraction %v %v", f, err)
	}
	stats, _ := h.GetDict("stats")
	if p, _ := stats.GetInt("allocated_bytes.all.peak"); p != s.Headroom.Stats["allocated_bytes.all.peak"] {
		t.Errorf("stats allocated peak %d, want %d", p, s.Headroom.Stats["allocated_bytes.all.peak"])
	}
}

// The synthesized frame says who asked: module path as the file, op as
// the function.
func TestPickleFrames(t *testing.T) {
	s, _ := knownSnapshot(t)
	v, err := pickle.Unmarshal(mustPickle(t, s), nil)
	if err != nil {
		t.Fatal(err)
	}
	traces, _ := v.(*pickle.Dict).GetList("device_traces")
	for _, ev := range traces[0].([]any) {
		e := ev.(*pickle.Dict)
		if a, _ := e.GetString("action"); a != "alloc" {
			continue
		}
		if op, _ := e.GetString("op"); op != "linear" {
			continue
		}
		frames, _ := e.GetList("frames")
		f := frames[0].(*pickle.Dict)
		file, _ := f.GetString("filename")
		name, _ := f.GetString("name")
		if file != known.largestModule || name != known.largestOp {
			t.Errorf("frame %s %s, want %s %s", file, name, known.largestModule, known.largestOp)
		}
		return
	}
	t.Fatal("no alloc of op linear")
}

// A trace whose entries all have categories and none "unknown" gets a
// snapshot entry with it (memory_viz would throw otherwise).
func TestPickleAddsUnknown(t *testing.T) {
	a := device.Meta().Alloc
	b, _ := a.Allocate(4096, device.Tag{Category: device.Input, Op: "x"})
	a.RecordHistory(10)
	a.Free(b)
	a.RecordHistory(0) // stop: Snapshot adds no snapshot entry
	s := a.Snapshot()
	v, err := pickle.Unmarshal(mustPickle(t, s), nil)
	if err != nil {
		t.Fatal(err)
	}
	traces, _ := v.(*pickle.Dict).GetList("device_traces")
	var cats []string
	for _, ev := range traces[0].([]any) {
		c, _ := ev.(*pickle.Dict).GetString("category")
		cats = append(cats, c)
	}
	if !slices.Equal(cats, []string{"input", "input", "unknown"}) {
		t.Errorf("categories %v, want the free's two entries and an added unknown", cats)
	}
}

// memoryVizOpcodes are the opcodes memory_viz's JavaScript unpickler
// implements (torch/utils/viz/MemoryViz.js, unpickle), with the length of
// their argument (-1: a length byte follows, -4: a 4-byte length).
var memoryVizOpcodes = map[byte]int{
	0x80: 1, 0x95: 8, '.': 0, '(': 0, 0x94: 0, 'q': 1, 'r': 4, 'h': 1, 'j': 4,
	'}': 0, ']': 0, ')': 0, 'd': 0, 'l': 0, 't': 0, 0x85: 0, 0x86: 0, 0x87: 0,
	's': 0, 'u': 0, 'a': 0, 'e': 0, 'J': 4, 'K': 1, 'M': 2, 0x8a: -1,
	0x8c: -1, 'X': -4, 0x88: 0, 0x89: 0, 'N': 0, 'G': 8,
}

// The exported pickle uses only what memory_viz's unpickler reads, in a
// protocol it accepts (2 to 4).
func TestPickleOpcodesMemoryViz(t *testing.T) {
	s, _ := richSnapshot(t)
	data := mustPickle(t, s)
	for off := 0; off < len(data); {
		op := data[off]
		n, ok := memoryVizOpcodes[op]
		if !ok {
			t.Fatalf("offset %d: opcode %#x (%q), which memory_viz cannot read", off, op, op)
		}
		off++
		switch n {
		case -1:
			n = 1 + int(data[off])
		case -4:
			n = 4 + int(binary.LittleEndian.Uint32(data[off:]))
		}
		if op == 0x80 && (data[off] < 2 || data[off] > 4) {
			t.Fatalf("protocol %d; memory_viz reads 2 to 4", data[off])
		}
		off += n
		if op == '.' {
			if off != len(data) {
				t.Fatalf("STOP at %d of %d bytes", off, len(data))
			}
			return
		}
	}
	t.Fatal("no STOP")
}

// testdata/headroom_export*.pickle are the exports of knownSnapshot and
// richSnapshot, for scripts/reference/snapshot_ref.py --check, which
// verifies with Python that memory_viz can read them. -update rewrites
// them.
func TestExportGolden(t *testing.T) {
	known, _ := knownSnapshot(t)
	rich, _ := richSnapshot(t)
	for path, s := range map[string]*device.Snapshot{
		"testdata/headroom_export.pickle":      known,
		"testdata/headroom_export_rich.pickle": rich,
	} {
		data := mustPickle(t, s)
		if *update {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s; now run /usr/bin/python3 scripts/reference/snapshot_ref.py --check", path)
		}
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(old, data) {
			a, errA := memviz.Decode(path, old)
			b, errB := memviz.Decode("new", data)
			if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
				t.Errorf("%s is out of date (the allocator or the writer changed): run go test ./memviz -run TestExportGolden -update, then scripts/reference/snapshot_ref.py --check", path)
			}
		}
	}
}
