package memviz

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz/internal/pickle"
)

// decodePlain is the read without streaming: the whole pickle decoded
// into generic values with every memo slot, then walked.
func decodePlain(t *testing.T, name string, data []byte) *Snapshot {
	t.Helper()
	v, err := pickle.Unmarshal(data, &pickle.Options{
		MaxElements: int64(len(data))/valuesPerByte + 1<<16,
		MaxMemory:   memoryPerByte*int64(len(data)) + memoryFloor,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := newReader(name, int64(len(data))).snapshot(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sharedStacks is a PyTorch-like history of n entries over a few stacks,
// which the pickle shares through its memo (as headroom's writer does)
// across more than one APPENDS batch.
func sharedStacks(n int) *Snapshot {
	stacks := [][]Frame{
		{{"train.py", 10, "step"}, {"model.py", 3, "forward"}},
		{{"train.py", 11, "step"}, {"optim.py", 7, "update"}, {"torch/optim/adam.py", 90, "_single_tensor_adam"}},
		nil,
	}
	evs := make([]Event, 0, n)
	for i := range n {
		a := Event{Action: device.ActionAlloc, Addr: int64(i+1) << 12, Size: 512, TimeUS: int64(i), Frames: stacks[i%3]}
		evs = append(evs, a)
		if i%2 == 1 {
			f := a
			f.Action = device.ActionFree
			evs = append(evs, f)
		}
	}
	return &Snapshot{Source: SourcePyTorch, Traces: [][]Event{evs, evs[:10]},
		Segments: []Segment{{Address: 1 << 12, TotalSize: int64(n+1) << 12, Type: "large",
			Blocks: []Block{{Address: 1 << 12, Size: int64(n) << 12, State: device.StateInactive}}}}}
}

// What streaming reads equals what the plain read gives, on every
// fixture and on generated files that share stacks and entries through
// the memo (which the streaming read once handed back to the plain read),
// both from bytes (Decode) and from the file (ReadFile).
func TestStreamingEqualsPlain(t *testing.T) {
	type file struct {
		name string
		data []byte
	}
	var files []file
	paths, err := filepath.Glob("testdata/*.pickle")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file{filepath.Base(p), data})
	}
	for _, n := range []int{10, 2500} {
		data, err := sharedStacks(n).MarshalPickle()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file{"shared-" + strconv.Itoa(n), data})
	}
	for _, src := range []string{SourcePyTorch, SourceHeadroom} {
		data, err := manySegments(src).MarshalPickle()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file{"blocks-" + src, data})
	}
	large, err := largeHistory(3, 400).MarshalPickle()
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, file{"headroom-large", large})
	dir := t.TempDir()
	for _, f := range files {
		t.Run(f.name, func(t *testing.T) {
			want := decodePlain(t, f.name, f.data)
			refs, ok := pickle.ScanMemo(bytes.NewReader(f.data))
			if !ok {
				t.Fatal("the memo scan refused the file")
			}
			s, err := decodeStreaming(f.name, bytes.NewReader(f.data), int64(len(f.data)), refs)
			if err != nil {
				t.Fatalf("streaming: %v", err)
			}
			if !reflect.DeepEqual(s, want) {
				t.Errorf("streaming read differs from the plain read")
			}
			// without the scan (a file it refuses): the same, or an error
			// that sends the file to the plain read
			if s, err := decodeStreaming(f.name, bytes.NewReader(f.data), int64(len(f.data)), nil); err != nil {
				if !replayable(err) {
					t.Errorf("streaming without the scan: %v, not read again", err)
				}
			} else if !reflect.DeepEqual(s, want) {
				t.Errorf("streaming read without the scan differs from the plain read")
			}
			path := filepath.Join(dir, f.name)
			if err := os.WriteFile(path, f.data, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want.Segments, got.Segments = nil, nil // not compared by name below
			if !reflect.DeepEqual(got.Traces, want.Traces) || got.Source != want.Source {
				t.Errorf("ReadFile differs from the plain read")
			}
		})
	}
}

// Equal stacks are held once however the file spells them, and
// headroom's frames made from module and op once per module and op.
func TestStreamingSharesFrames(t *testing.T) {
	data, err := sharedStacks(2500).MarshalPickle()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Decode("shared", data)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]*Frame{}
	for _, e := range s.Traces[0] {
		if len(e.Frames) == 0 {
			continue
		}
		k := e.Frames[0].Filename + ":" + strconv.Itoa(int(e.Frames[0].Line))
		if p, ok := seen[k]; ok && p != &e.Frames[0] {
			t.Fatalf("stack %s held twice", k)
		}
		seen[k] = &e.Frames[0]
	}
	if len(seen) != 2 {
		t.Errorf("%d stacks, want 2", len(seen))
	}
	h, err := largeHistory(2, 100).MarshalPickle()
	if err != nil {
		t.Fatal(err)
	}
	if s, err = Decode("headroom", h); err != nil {
		t.Fatal(err)
	}
	held := map[*Frame]bool{}
	for _, e := range s.Traces[0] {
		if len(e.Frames) > 0 {
			held[&e.Frames[0]] = true
		}
	}
	// 48 modules' conv2d and im2col, the parameters, and the snapshot entry
	if len(held) > 2*48+2 {
		t.Errorf("%d stacks held for %d entries", len(held), len(s.Traces[0]))
	}
}

// largeHistory is a headroom history of steps steps of perStep
// activations over 48 modules (as the benchmark's), with the frames
// headroom's writer gives module and op.
func largeHistory(steps, perStep int) *Snapshot {
	const base = int64(1) << 36
	var ev []Event
	add := func(e Event) {
		e.TimeUS = int64(len(ev)) * 3
		e.Frames = headroomFrames(e.Category, e.Module, e.Op)
		ev = append(ev, e)
	}
	for s := 1; s <= steps; s++ {
		add(Event{Action: device.ActionStepBegin, Step: int64(s)})
		at := base
		for j := range perStep {
			mod := "layers." + strconv.Itoa(j%48)
			add(Event{Action: device.ActionAlloc, Addr: at, Size: 4096, BlockSize: 4096, Pool: "large", Category: "activation", Module: mod, Op: "conv2d"})
			add(Event{Action: device.ActionAlloc, Addr: at + 4096, Size: 512, BlockSize: 512, Pool: "large", Category: "temporary", Module: mod, Op: "im2col"})
			add(Event{Action: device.ActionFree, Addr: at + 4096, Size: 512, BlockSize: 512, Pool: "large", Category: "temporary", Module: mod, Op: "im2col"})
			at += 4096
		}
		add(Event{Action: device.ActionStepEnd, Step: int64(s)})
	}
	return &Snapshot{Source: SourceHeadroom, Traces: [][]Event{ev}, Headroom: &device.SnapshotInfo{Version: 1, Device: "cpu"},
		Segments: []Segment{{Address: base, TotalSize: 1 << 30, Type: "large", Blocks: []Block{{Address: base, Size: 1 << 30, State: device.StateInactive}}}}}
}

// BenchmarkDecodeHistory reads a headroom history of about 100000 entries
// (11 MB) from memory: the cost per entry of the streaming read.
func BenchmarkDecodeHistory(b *testing.B) {
	data, err := largeHistory(250, 100).MarshalPickle()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode("history", data); err != nil {
			b.Fatal(err)
		}
	}
}

// manySegments is a state of 3 segments of 1500 blocks each, their stacks
// shared, some with headroom's tags (and "unknown", which headroom's
// files read as none).
func manySegments(source string) *Snapshot {
	s := &Snapshot{Source: source, Traces: [][]Event{}}
	if source == SourceHeadroom {
		s.Headroom = &device.SnapshotInfo{Version: 1, Device: "cpu"}
	}
	for g := range 3 {
		base := int64(g+1) << 32
		seg := Segment{Address: base, TotalSize: 1500 << 12, Type: "large", Frames: []Frame{{"alloc.py", int64(g), "segment"}}}
		for b := range 1500 {
			blk := Block{Address: base + int64(b)<<12, Size: 1 << 12, Requested: 1000, State: device.StateActiveAllocated}
			switch b % 3 {
			case 0:
				blk.Frames = []Frame{{"model.py", int64(b % 7), "forward"}, {"train.py", 1, "step"}}
			case 1:
				blk.Category, blk.Module, blk.Op = "activation", "layers."+strconv.Itoa(b%5), "conv2d"
			default:
				blk.State, blk.Requested, blk.Category = device.StateInactive, 0, "unknown"
			}
			seg.Blocks = append(seg.Blocks, blk)
		}
		s.Segments = append(s.Segments, seg)
	}
	return s
}

// ReadFile reads a pickle from the file as a stream, and a bad one fails
// exactly as Decode of its bytes does: the file named, the offset given.
func TestReadFileErrorsAsDecode(t *testing.T) {
	good, err := sharedStacks(1500).MarshalPickle()
	if err != nil {
		t.Fatal(err)
	}
	bad := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"truncated", good[:len(good)/2]},
		{"unknown opcode", bad(func(b []byte) []byte { b[len(b)/3] = 0xff; return b })},
		{"no STOP", good[:len(good)-1]},
		{"a class", append([]byte("\x80\x04\x95\x1a\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94\x93\x94."), good...)},
		{"not a snapshot", []byte("\x80\x04K\x01.")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".pickle")
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, want := Decode(path, tc.data)
			_, got := ReadFile(path)
			if want == nil || got == nil || got.Error() != want.Error() {
				t.Fatalf("ReadFile: %v\nDecode: %v", got, want)
			}
			if !strings.Contains(got.Error(), path) {
				t.Errorf("%v: the file is not named", got)
			}
		})
	}
}

// A zoomed range of a long history starts its sweep from the last mark
// before it, and gets the bands a sweep from the first event gives, by
// category and by allocation, at the default detail and another.
func TestZoomFromMarks(t *testing.T) {
	byCategory := largeHistory(500, 100)
	byAlloc := largeHistory(500, 100)
	byAlloc.Source, byAlloc.Headroom = SourcePyTorch, nil
	for i := range byAlloc.Traces[0] {
		byAlloc.Traces[0][i].Category = ""
	}
	for _, s := range []*Snapshot{byCategory, byAlloc} {
		a, err := Analyze(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.marks) < 2 {
			t.Fatalf("%d marks for %d events", len(a.marks), len(a.events))
		}
		n := len(a.events)
		ranges := [][2]int{{0, 100}, {markEvery - 5, markEvery + 5}, {markEvery - 2, markEvery + 3}, {markEvery - 1, markEvery}, {markEvery, markEvery}, {n/2 - 300, n/2 + 4000}, {n - 50, n + 10}, {0, n}}
		for _, detail := range []int{0, 7} {
			var with []*Timeline
			for _, r := range ranges {
				with = append(with, a.TimelineRange(r[0], r[1], detail))
			}
			marks := a.marks
			a.marks = nil
			for k, r := range ranges {
				if want := a.TimelineRange(r[0], r[1], detail); !reflect.DeepEqual(with[k], want) {
					t.Errorf("%s, detail %d, events %d to %d: the range differs from a sweep from the start", a.mode, detail, r[0], r[1])
				}
			}
			a.marks = marks
		}
	}
}
