package memviz_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/memviz"
	"github.com/headroom-ml/headroom/memviz/internal/pickle"
)

// sharedPickle pickles v, keeping its shared values shared (memo
// references), as a crafted file would.
func sharedPickle(t *testing.T, v any) []byte {
	t.Helper()
	data, err := pickle.Marshal(v, 4)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A few kilobytes of pickle that refer to the same values over and over
// (the memo) would stand for a million events or blocks; the reader
// refuses them by the size of the file instead of building them.
func TestDecodeRefusesSharedExpansion(t *testing.T) {
	ev := pickle.DictOf("action", "alloc", "addr", int64(4096), "size", int64(512))
	events := make([]any, 1000)
	for i := range events {
		events[i] = ev
	}
	traces := make([]any, 1000)
	for i := range traces {
		traces[i] = events // one list, a thousand times
	}
	eventsFile := sharedPickle(t, pickle.DictOf("segments", []any{}, "device_traces", traces))

	// Blocks without an address tile their segment, so a shared list of
	// them is at distinct addresses in each segment.
	blk := pickle.DictOf("size", int64(1), "state", "inactive")
	blocks := make([]any, 1000)
	for i := range blocks {
		blocks[i] = blk
	}
	segs := make([]any, 1000)
	for i := range segs {
		segs[i] = pickle.DictOf("device", int64(0), "address", int64(i)<<20, "total_size", int64(1<<20), "blocks", blocks)
	}
	blocksFile := sharedPickle(t, pickle.DictOf("segments", segs))

	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"events.pickle", eventsFile, "a file that expands when read"},
		{"blocks.pickle", blocksFile, "a file that expands when read"},
	} {
		if len(c.data) > 64<<10 {
			t.Fatalf("%s: %d bytes, meant to be small", c.name, len(c.data))
		}
		s, err := memviz.Decode(c.name, c.data)
		if err == nil {
			n := 0
			for _, tr := range s.Traces {
				n += len(tr)
			}
			for _, g := range s.Segments {
				n += len(g.Blocks)
			}
			t.Errorf("%s (%d bytes): read as %d events and blocks", c.name, len(c.data), n)
			continue
		}
		var fe *memviz.FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a *FormatError saying %q", c.name, err, c.want)
		}
	}
}

// Sharing that does not expand, such as the frames lists PyTorch's
// snapshots share among their blocks, stays within the budget.
func TestDecodeSharedFramesAreCheap(t *testing.T) {
	frames := make([]any, 40)
	for i := range frames {
		frames[i] = pickle.DictOf("filename", fmt.Sprintf("model%d.py", i), "line", int64(i), "name", "forward")
	}
	n := 20000
	events := make([]any, n)
	for i := range events {
		events[i] = pickle.DictOf("action", "alloc", "addr", int64(i+1)<<12, "size", int64(512), "frames", frames)
	}
	data := sharedPickle(t, pickle.DictOf("segments", []any{}, "device_traces", []any{events}))
	s, err := memviz.Decode("frames.pickle", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Traces[0]) != n || len(s.Traces[0][n-1].Frames) != 40 {
		t.Errorf("read %d events", len(s.Traces[0]))
	}
}

// Blocks are placed in their segments in address order, at distinct
// addresses; segments of a device do not overlap.
func TestDecodeDistinctAddresses(t *testing.T) {
	seg := func(addr, size int64, blocks string) string {
		return fmt.Sprintf(`{"device":0,"address":%d,"total_size":%d,"blocks":[%s]}`, addr, size, blocks)
	}
	blk := func(addr, size int64) string {
		return fmt.Sprintf(`{"address":%d,"size":%d,"state":"active_allocated"}`, addr, size)
	}
	for _, c := range []struct {
		name, segs, want string
	}{
		{"ok", seg(0, 4096, blk(0, 1024)+","+blk(1024, 3072)) + "," + seg(4096, 4096, ""), ""},
		{"overlapping blocks", seg(0, 4096, blk(0, 2048)+","+blk(1024, 1024)), "segments[0].blocks[1]: block at 0x400 of 1024 bytes overlaps the block before it"},
		{"same block twice", seg(0, 4096, blk(0, 0)+","+blk(0, 0)), "segments[0].blocks[1]"},
		{"blocks out of order", seg(0, 4096, blk(2048, 1024)+","+blk(0, 1024)), "overlaps the block before it"},
		{"overlapping segments", seg(0, 8192, "") + "," + seg(4096, 4096, ""), "segments[1]: segment at 0x1000 of 4096 bytes overlaps segments[0]"},
		{"same segment twice", seg(8192, 0, "") + "," + seg(8192, 0, ""), "overlaps segments[0]"},
		{"other device", seg(0, 8192, "") + `,{"device":1,"address":0,"total_size":8192,"blocks":[]}`, ""},
	} {
		data := []byte(`{"segments":[` + c.segs + `],"device_traces":[]}`)
		if !json.Valid(data) {
			t.Fatalf("%s: bad JSON %s", c.name, data)
		}
		_, err := memviz.Decode(c.name+".json", data)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// manyBlocks is a PyTorch snapshot of one segment of n active blocks and
// segs-1 more segments of one block each: real memory, nothing shared.
func manyBlocks(n, segs int, category string) *memviz.Snapshot {
	s := &memviz.Snapshot{Source: memviz.SourcePyTorch, Traces: [][]memviz.Event{}}
	big := memviz.Segment{Address: 1 << 30, TotalSize: int64(n) * 512, Type: "large"}
	for i := range n {
		big.Blocks = append(big.Blocks, memviz.Block{Address: big.Address + int64(i)*512, Size: 512, Requested: 500, State: "active_allocated",
			Category: fmt.Sprintf("%s%d", category, i), Frames: []memviz.Frame{{Filename: strings.Repeat("deep/", 1000) + "model.py", Line: 1, Name: "forward"}}})
	}
	s.Segments = append(s.Segments, big)
	for i := 1; i < segs; i++ {
		addr := int64(1)<<40 + int64(i)<<20
		s.Segments = append(s.Segments, memviz.Segment{Address: addr, TotalSize: 4096,
			Blocks: []memviz.Block{{Address: addr, Size: 1024, Requested: 1024, State: "active_allocated"}}})
	}
	return s
}

// What the page is sent, and so what it draws, is bounded whatever the
// snapshot holds: a state of 50000 blocks in 1500 segments sends at most
// MaxStateBlocks tiles and MaxStateSegments segments (the rest elided and
// counted, one elided tile per segment at most), and the totals still
// count everything.
func TestStateIsBounded(t *testing.T) {
	const n, segs = 50_000, 1500
	s := manyBlocks(n, segs, "")
	a, err := memviz.Analyze(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	st := a.State(0)
	tiles, elided := 0, 0
	for _, g := range st.Segments {
		tiles += len(g.Blocks)
		for _, b := range g.Blocks {
			if b.State == "elided" {
				elided += b.Count
			}
		}
	}
	if max := memviz.MaxStateBlocks + memviz.MaxStateSegments; tiles > max || len(st.Segments) > memviz.MaxStateSegments || !st.Truncated {
		t.Errorf("state sends %d tiles in %d segments (truncated %v), want at most %d in %d",
			tiles, len(st.Segments), st.Truncated, max, memviz.MaxStateSegments)
	}
	// PyTorch's timeline counts the requested bytes.
	if st.Blocks != n+segs-1 || st.SegmentCount != segs || st.Active != int64(n)*500+int64(segs-1)*1024 {
		t.Errorf("state counts %d blocks in %d segments, %d bytes active", st.Blocks, st.SegmentCount, st.Active)
	}
	if elided < n-memviz.MaxStateBlocks {
		t.Errorf("elided tiles count %d blocks, want at least %d", elided, n-memviz.MaxStateBlocks)
	}
	js, _ := json.Marshal(st)
	if len(js) > 1<<20 {
		t.Errorf("state reply is %d bytes", len(js))
	}
	sum, _ := json.Marshal(a.Summary("big"))
	if len(sum) > 1<<20 {
		t.Errorf("summary reply is %d bytes", len(sum))
	}
}

// Categories are strings of the file: a snapshot that names 100000 of
// them gets a bounded number of bands.
func TestCategorySeriesAreBounded(t *testing.T) {
	s := manyBlocks(100_000, 1, "cat")
	s.Source = memviz.SourceHeadroom
	a, err := memviz.Analyze(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	sum := a.Summary("cats")
	if len(sum.Timeline.Series) > memviz.MaxAllocationSeries+1 {
		t.Errorf("%d series", len(sum.Timeline.Series))
	}
	js, _ := json.Marshal(sum)
	if len(js) > 1<<20 {
		t.Errorf("summary reply is %d bytes", len(js))
	}
}

// A pickle of one-byte values is refused by its value count before it is
// built: a snapshot holds a value for every few bytes, not for every one.
func TestDecodeRefusesValueFloods(t *testing.T) {
	const n = 2_000_000
	batched := []byte{0x80, 4, ']'}
	for len(batched) < n {
		batched = append(batched, '(')
		for range 1000 {
			batched = append(batched, 'N')
		}
		batched = append(batched, 'e')
	}
	batched = append(batched, '.')
	flat := append([]byte{0x80, 4, ']', '('}, make([]byte, n)...)
	for i := 4; i < len(flat); i++ {
		flat[i] = 'N'
	}
	flat = append(flat, 'e', '.')
	// One dict of distinct int keys: 6 bytes of input an entry, over 100
	// bytes of items and index decoded.
	intKeys := []byte{0x80, 2, '}'}
	for k := 0; len(intKeys) < 3*n; k++ {
		if k%1000 == 0 {
			intKeys = append(intKeys, '(')
		}
		intKeys = append(intKeys, 'J', byte(k), byte(k>>8), byte(k>>16), byte(k>>24), 'N')
		if k%1000 == 999 {
			intKeys = append(intKeys, 'u')
		}
	}
	intKeys = append(intKeys, 'u', '.')
	for name, data := range map[string][]byte{"batched": batched, "flat": flat, "int keys": intKeys} {
		var err error
		alloc := allocated(func() { _, err = memviz.Decode(name+".pickle", data) })
		if !errors.Is(err, pickle.ErrLimit) || !errors.Is(err, memviz.ErrFormat) {
			t.Errorf("%s: %v, want a limit error", name, err)
		}
		// a small multiple of the input (the budget is 16 per byte plus a
		// floor); the flat one is bounded by pickle's MaxStack instead.
		// 6 MB of int keys allocated 237 MiB before MaxMemory, 101 after.
		if limit := 24*uint64(len(data)) + 32<<20; alloc > limit && name != "flat" {
			t.Errorf("%s: %d bytes of pickle allocated %d MiB, more than %d MiB", name, len(data), alloc>>20, limit>>20)
		}
	}
}

func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// JSON of empty objects is refused by their count before it is decoded:
// a snapshot's objects are hundreds of bytes each. Braces inside strings
// do not count.
func TestDecodeRefusesJSONFloods(t *testing.T) {
	flood := []byte(`{"segments":[` + strings.Repeat(`{},`, 1_000_000) + `{}],"device_traces":[]}`)
	_, err := memviz.Decode("flood.json", flood)
	if err == nil || !strings.Contains(err.Error(), "objects and arrays") {
		t.Errorf("flood: %v", err)
	}
	braces := []byte(`{"segments":[],"device_traces":[[{"action":"snapshot","module":"` + strings.Repeat(`{[\"`, 100_000) + `"}]]}`)
	if _, err := memviz.Decode("braces.json", braces); err != nil {
		t.Errorf("braces in a string: %v", err)
	}
}
