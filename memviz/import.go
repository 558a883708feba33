package memviz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"sort"
	"strings"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/elide"
	"github.com/headroom-ml/headroom/memviz/internal/pickle"
)

// ErrFormat is what every error of Decode wraps: the data is not a memory
// snapshot this package can read.
var ErrFormat = errors.New("not a readable memory snapshot")

// FormatError says what is wrong with a snapshot file and where.
type FormatError struct {
	File string // the file's name
	Path string // where in the snapshot: "segments[2].blocks[0].size"; empty for the file as a whole
	Msg  string
	Err  error // the pickle or JSON reader's error, if any
}

func (e *FormatError) Error() string {
	s := "memory snapshot " + e.File + ": "
	if e.Path != "" {
		s += e.Path + ": "
	}
	return s + e.Msg
}

// Unwrap returns ErrFormat and the reader's error.
func (e *FormatError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrFormat, e.Err}
	}
	return []error{ErrFormat}
}

// MaxFileBytes is the largest snapshot file ReadFile reads: decoding may
// take up to 16 times the file's size (memoryPerByte; a history read as a
// stream takes about 6), and PyTorch's snapshots of long runs measure
// hundreds of megabytes.
const MaxFileBytes = 2 << 30

// ReadFile reads a snapshot file (see Decode). Only a regular file is
// read: opening a FIFO would block until a writer came (uninterruptibly,
// so Ctrl-C could not stop it), and a device such as /dev/zero would be
// read until memory ran out.
func ReadFile(path string) (*Snapshot, error) {
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, &FormatError{File: path, Msg: fmt.Sprintf("not a regular file (%s): a snapshot is read from a file", st.Mode().Type())}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Checked again on what was opened, in case the path changed.
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &FormatError{File: path, Msg: fmt.Sprintf("not a regular file (%s): a snapshot is read from a file", st.Mode().Type())}
	}
	if st.Size() > MaxFileBytes {
		return nil, &FormatError{File: path, Msg: fmt.Sprintf("%s, more than the %s a snapshot may be: decoded it would take several times that in memory", device.FormatBytes(st.Size()), device.FormatBytes(MaxFileBytes))}
	}
	// A file that grows while it is read is read to its size at the open.
	// A pickle is read as a stream (twice: the memo scan, then the
	// values), so that the file is never in memory whole.
	var first [1]byte
	for off := int64(0); off < st.Size(); off++ {
		if _, err := f.ReadAt(first[:], off); err != nil {
			return nil, err
		}
		if c := first[0]; c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			continue
		}
		if c := first[0]; c != '{' && c != '[' && c != '"' {
			return decodePickle(path, func() io.Reader { return io.NewSectionReader(f, 0, st.Size()) }, st.Size())
		}
		break
	}
	data, err := io.ReadAll(io.LimitReader(f, st.Size()))
	if err != nil {
		return nil, err
	}
	return Decode(path, data)
}

// Decode reads a memory snapshot: headroom's JSON (docs/snapshot-schema.md),
// headroom's pickle (Pickle), or PyTorch's pickles of
// torch.cuda.memory._snapshot() (torch.cuda.memory._dump_snapshot, PyTorch
// 2.x: segments with blocks, device_traces) and of
// torch.cuda.memory_snapshot() (a list of segments; PyTorch 1.13's blocks
// with "history" instead of frames and requested_size). The kind is told by
// the content, not the name, which only labels errors. Keys this reader
// does not know are ignored.
//
// A pickle is read with nothing allowed but plain values (dicts, lists,
// tuples, strings, numbers): a snapshot names no class, and a pickle that
// does is refused before anything of it is used. Every error is a
// *FormatError naming the file and, for content of the wrong type or
// shape, where in the snapshot it is.
func Decode(name string, data []byte) (*Snapshot, error) {
	r := newReader(name, int64(len(data)))
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, r.fail("", "the file is empty")
	}
	var v any
	// No pickle starts with these (they are not opcodes); JSON always
	// does, for a snapshot.
	if trimmed[0] == '{' || trimmed[0] == '[' || trimmed[0] == '"' {
		if n, limit := jsonContainers(data), int64(len(data))/jsonBytesPerContainer+1<<12; n > limit {
			return nil, r.fail("", "the JSON holds %d objects and arrays in %d bytes, more than %d: a snapshot's are hundreds of bytes each, and a file of empty ones would take gigabytes to read", n, len(data), limit)
		}
		var err error
		if v, err = decodeJSON(data); err != nil {
			return nil, r.jsonError(data, err)
		}
	} else {
		return decodePickle(name, func() io.Reader { return bytes.NewReader(data) }, int64(len(data)))
	}
	return r.snapshot(v)
}

// decodePickle reads a pickle of size bytes, which each call of src
// reads from the start. First the memo is scanned for the slots the
// pickle reads back (pickle.ScanMemo), so that no other value is kept
// past its use; then the history's entries are read into Events as the
// stream is read, so that the generic tree of a long history never exists
// whole. Anything that attempt cannot handle (an entry shared through the
// memo when the scan could not tell, a walk error) is read again the plain
// way, which names the problem exactly as before.
func decodePickle(name string, src func() io.Reader, size int64) (*Snapshot, error) {
	r := newReader(name, size)
	refs, _ := pickle.ScanMemo(src())
	s, err := decodeStreaming(name, src(), size, refs)
	if err == nil {
		return s, nil
	}
	if !replayable(err) {
		// what the plain read would fail with too, at the same place:
		// reading again would only double the cost of a bad file
		return nil, r.pickleError(err)
	}
	v, err := pickle.UnmarshalReader(src(), size, &pickle.Options{
		MaxElements: size/valuesPerByte + 1<<16,
		MaxMemory:   memoryPerByte*size + memoryFloor,
		Refs:        refs,
	})
	if err != nil {
		return nil, r.pickleError(err)
	}
	return r.snapshot(v)
}

func newReader(name string, size int64) *reader {
	return &reader{file: name, frames: map[*pickle.Dict]Frame{}, lists: map[*any][]Frame{},
		budget: walkPerByte*size + walkFloor, fileSize: int(size)}
}

// replayable reports whether a streaming read's error may be the
// streaming's own doing, so that the file is read again the plain way: a
// GET of a replaced entry, or nesting and recursion found while an entry
// was finished early (where the plain read reports them elsewhere). Walk
// errors (not *pickle.Error) are named by the plain read.
func replayable(err error) bool {
	var pe *pickle.Error
	if !errors.As(err, &pe) {
		return true
	}
	return errors.Is(err, pickle.ErrMemo) || errors.Is(err, pickle.ErrRecursive) ||
		strings.Contains(pe.Msg, "MaxDepth")
}

// readEvent is a history entry read while the pickle was decoded, before
// the reader knew whether the file is headroom's.
type readEvent struct{ e Event }

// readBlock is a segment's block read while the pickle was decoded.
type readBlock struct{ b Block }

// decodeStreaming reads a pickle with Options.Replace turning each
// history entry (a dict with "action") into a *readEvent, and each block
// (a dict with "state") that gives its address into a *readBlock, as it is
// read. Without refs (the memo scan refused the file), the generic values
// of what was replaced are released from the memo as they go.
func decodeStreaming(name string, src io.Reader, size int64, refs *pickle.MemoRefs) (*Snapshot, error) {
	r := newReader(name, size)
	r.streaming = true
	var slab []readEvent
	v, err := pickle.UnmarshalReader(src, size, &pickle.Options{
		MaxElements: size/valuesPerByte + 1<<16,
		MaxMemory:   memoryPerByte*size + memoryFloor,
		Refs:        refs,
		ReplaceKey:  "action",
		ReplaceKeys: []string{"state"},
		Replace: func(d *pickle.Dict) (any, bool) {
			if !d.Has("action") {
				// a segment's block: read now when it says where it is
				// (its address otherwise follows from the blocks before)
				if a, ok := d.Get("address"); !ok || a == nil {
					return nil, false
				}
				b, err := r.block(d, "", 0)
				if err != nil {
					return nil, false
				}
				if refs == nil {
					forgetFrames(r, d)
				}
				return &readBlock{b}, true
			}
			e, err := r.entry(d)
			if err != nil {
				return nil, false
			}
			if refs == nil {
				// the entry's memo slots are released with it: the frames'
				// generic dicts must not stay reachable from the caches
				forgetFrames(r, d)
			}
			// entries are allocated in slabs: one allocation per 1024
			if len(slab) == cap(slab) {
				slab = make([]readEvent, 0, 1024)
			}
			slab = append(slab, readEvent{e})
			return &slab[len(slab)-1], true
		},
	})
	if err != nil {
		return nil, err
	}
	return r.snapshot(v)
}

// forgetFrames drops the caches' hold on the frames of a replaced dict,
// whose memo slots were released (without Refs).
func forgetFrames(r *reader, d *pickle.Dict) {
	if fv, ok := d.Get("frames"); ok {
		if l, ok := fv.([]any); ok && len(l) > 0 {
			delete(r.lists, &l[0])
			for _, f := range l {
				if fd, ok := f.(*pickle.Dict); ok {
					delete(r.frames, fd)
				}
			}
		}
	}
}

func (r *reader) pickleError(err error) error {
	var ce *pickle.ClassError
	switch {
	case errors.As(err, &ce):
		return &FormatError{File: r.file, Err: err, Msg: fmt.Sprintf(
			"the pickle names the Python class %s.%s; a memory snapshot holds only dicts, lists, strings and numbers, so this is not one, and nothing of it was run (%v)",
			ce.Module, ce.Name, err)}
	case errors.Is(err, pickle.ErrTruncated):
		return &FormatError{File: r.file, Err: err, Msg: fmt.Sprintf("the file is truncated (%v)", err)}
	}
	return &FormatError{File: r.file, Err: err, Msg: fmt.Sprintf("neither JSON nor a readable pickle (%v)", err)}
}

func (r *reader) jsonError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		return &FormatError{File: r.file, Err: err, Msg: fmt.Sprintf("invalid JSON at byte %d (line %d): %v", se.Offset, line, err)}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &FormatError{File: r.file, Err: err, Msg: "the JSON ends early: the file is truncated"}
	}
	return &FormatError{File: r.file, Err: err, Msg: fmt.Sprintf("invalid JSON: %v", err)}
}

// jsonBytesPerContainer: headroom's JSON snapshots measure about 300 bytes
// for each object or array, and each costs a few hundred bytes decoded;
// JSON with one for every few bytes ({}, {}, ...) is refused before it is
// decoded, as valuesPerByte refuses such pickles.
const jsonBytesPerContainer = 32

// jsonContainers counts the objects and arrays of JSON text: the '{' and
// '[' outside strings.
func jsonContainers(data []byte) int64 {
	var n int64
	in, esc := false, false
	for _, c := range data {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == '{' || c == '['):
			n++
		}
	}
	return n
}

// decodeJSON reads JSON into the values the pickle reader produces: objects
// become *pickle.Dict (keys sorted), integers int64 (or *big.Int), other
// numbers float64.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the top-level value")
		}
		return nil, err
	}
	return fromJSON(v), nil
}

func fromJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := pickle.NewDict()
		for _, k := range keys {
			d.Set(k, fromJSON(v[k]))
		}
		return d
	case []any:
		for i := range v {
			v[i] = fromJSON(v[i])
		}
		return v
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		if b, ok := new(big.Int).SetString(string(v), 10); ok {
			return b
		}
		f, _ := v.Float64()
		return f
	}
	return v
}

// The walk of a decoded snapshot is charged to a budget proportional to
// the file: every list element and dict entry visited costs one, a dict
// one more. A pickle shares values through its memo, and a reader that
// walked each reference afresh would let an 8 KB file stand for a million
// blocks; without sharing, each element visited is at least one byte of
// the file (two for a dict's entry), so walkPerByte never refuses a file
// whose contents are really there. Shared frames, which PyTorch's
// snapshots do share, are walked once and cost one per reference.
const (
	walkPerByte = 2
	walkFloor   = 1 << 12
)

// valuesPerByte: a snapshot's pickle holds one value for every three bytes
// or more (dicts of keys referenced through the memo and numbers; PyTorch's
// and headroom's files measure 3 to 6 bytes a value), so a pickle that
// makes more than one value for every valuesPerByte bytes is refused
// before it is built: a flood of one-byte values cannot take gigabytes.
const valuesPerByte = 2

// memoryPerByte bounds what the decoded values hold (pickle's
// Options.MaxMemory) by the file's size: PyTorch's and headroom's snapshots
// measure 3 to 8 bytes of decoded values per byte of pickle, while a dict
// of distinct int keys or a long list of Nones holds 16 to 20 times its
// input, and would take gigabytes for a 50 MB file.
const (
	memoryPerByte = 16
	memoryFloor   = 16 << 20
)

// reader walks decoded values, naming the path of whatever is wrong.
type reader struct {
	file     string
	headroom bool
	frames   map[*pickle.Dict]Frame
	lists    map[*any][]Frame // shared frames lists, by their first element
	budget   int64            // what the walk may still visit
	fileSize int              // for the budget's error

	// streaming: entries are read as the pickle is decoded, so the
	// caches by pointer above are bounded (they would keep every entry's
	// frames alive), and frames are shared by content instead (stacks
	// repeat by the million).
	streaming bool
	stacks    map[uint64][]Frame
	synth     map[[3]string][]Frame // headroomFrames, shared
}

// charge pays for visiting n values at p.
func (r *reader) charge(p string, n int) error {
	r.budget -= int64(n)
	if r.budget < 0 {
		return r.fail(p, "the snapshot refers to its shared parts more often than a %d-byte file can hold (more than %d values visited): a file that expands when read", r.fileSize, walkPerByte*int64(r.fileSize)+walkFloor)
	}
	return nil
}

func (r *reader) fail(path, format string, args ...any) error {
	return &FormatError{File: r.file, Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (r *reader) typeError(path, want string, got any) error {
	return r.fail(path, "want %s, got %s", want, pickle.TypeName(got))
}

func (r *reader) snapshot(v any) (*Snapshot, error) {
	s := &Snapshot{Source: SourcePyTorch}
	var segs []any
	switch top := v.(type) {
	case []any:
		// torch.cuda.memory_snapshot(): the segments alone.
		segs = top
	case *pickle.Dict:
		if hv, ok := top.Get("headroom"); ok && hv != nil {
			h, err := r.headroomInfo(hv)
			if err != nil {
				return nil, err
			}
			s.Source, s.Headroom, r.headroom = SourceHeadroom, h, true
		}
		sv, hasSegs := top.Get("segments")
		tv, hasTraces := top.Get("device_traces")
		if !hasSegs && !hasTraces {
			return nil, r.fail("", "a dict without \"segments\" or \"device_traces\": not a memory snapshot (keys %s)", keyList(top))
		}
		var err error
		if hasSegs && sv != nil {
			if segs, err = r.list(sv, "segments"); err != nil {
				return nil, err
			}
		}
		if hasTraces && tv != nil {
			if s.Traces, s.Merged, err = r.traces(tv); err != nil {
				return nil, err
			}
		}
	default:
		return nil, r.fail("", "the top level is a %s; a memory snapshot is a dict with \"segments\" and \"device_traces\" (or a list of segments)", pickle.TypeName(v))
	}
	s.Segments = make([]Segment, 0, len(segs))
	for i, sv := range segs {
		seg, err := r.segment(sv, fmt.Sprintf("segments[%d]", i))
		if err != nil {
			return nil, err
		}
		s.Segments = append(s.Segments, seg)
	}
	if err := r.distinctSegments(s.Segments); err != nil {
		return nil, err
	}
	if s.Traces == nil {
		s.Traces = [][]Event{}
	}
	return s, nil
}

// distinctSegments checks that no two segments of a device share an
// address: each is memory of its own.
func (r *reader) distinctSegments(segs []Segment) error {
	order := make([]int, len(segs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(x, y int) bool {
		a, b := &segs[order[x]], &segs[order[y]]
		if a.Device != b.Device {
			return a.Device < b.Device
		}
		return a.Address < b.Address
	})
	for k := 1; k < len(order); k++ {
		prev, cur := &segs[order[k-1]], &segs[order[k]]
		if prev.Device == cur.Device && (cur.Address == prev.Address || cur.Address-prev.Address < prev.TotalSize) {
			i, j := min(order[k-1], order[k]), max(order[k-1], order[k])
			return r.fail(fmt.Sprintf("segments[%d]", j), "segment at %#x of %d bytes overlaps segments[%d] (device %d)",
				segs[j].Address, segs[j].TotalSize, i, cur.Device)
		}
	}
	return nil
}

func keyList(d *pickle.Dict) string {
	keys := d.Keys()
	return "[" + elide.Items(len(keys), func(i int) string { return fmt.Sprint(keys[i]) }, ", ") + "]"
}

func (r *reader) headroomInfo(v any) (*device.SnapshotInfo, error) {
	const p = "headroom"
	d, err := r.dict(v, p)
	if err != nil {
		return nil, err
	}
	h := &device.SnapshotInfo{MemoryFraction: 1}
	var version int64
	if version, _, err = r.int(d, p, "version", false); err != nil {
		return nil, err
	}
	h.Version = int(version)
	if h.Device, _, err = r.str(d, p, "device", false); err != nil {
		return nil, err
	}
	if h.Capacity, _, err = r.int(d, p, "capacity", false); err != nil {
		return nil, err
	}
	if h.Limit, _, err = r.int(d, p, "limit", false); err != nil {
		return nil, err
	}
	var n int64
	if n, _, err = r.int(d, p, "history_max_entries", false); err != nil {
		return nil, err
	}
	h.HistoryMaxEntries = int(n)
	if fv, ok := d.Get("memory_fraction"); ok && fv != nil {
		switch f := fv.(type) {
		case float64:
			h.MemoryFraction = f
		case int64:
			h.MemoryFraction = float64(f)
		default:
			return nil, r.typeError(p+".memory_fraction", "float", fv)
		}
	}
	for _, m := range []struct {
		key string
		dst *map[string]int64
	}{{"stats", &h.Stats}, {"category_bytes", &h.CategoryBytes}, {"category_bytes_at_peak", &h.CategoryBytesAtPeak}} {
		mv, ok := d.Get(m.key)
		if !ok || mv == nil {
			continue
		}
		path := p + "." + m.key
		md, err := r.dict(mv, path)
		if err != nil {
			return nil, err
		}
		out := make(map[string]int64, md.Len())
		for _, it := range md.Items() {
			k, ok := it.Key.(string)
			if !ok {
				return nil, r.fail(path, "a key is a %s, want str", pickle.TypeName(it.Key))
			}
			x, ok := it.Value.(int64)
			if !ok {
				return nil, r.typeError(path+"."+k, "int", it.Value)
			}
			out[k] = x
		}
		*m.dst = out
	}
	return h, nil
}

func (r *reader) segment(v any, p string) (Segment, error) {
	var seg Segment
	d, err := r.dict(v, p)
	if err != nil {
		return seg, err
	}
	var dev int64
	if dev, _, err = r.int(d, p, "device", false); err != nil {
		return seg, err
	}
	if dev < 0 || dev > 1<<16 {
		return seg, r.fail(p+".device", "device index %d out of range", dev)
	}
	seg.Device = int(dev)
	if seg.Address, _, err = r.int(d, p, "address", true); err != nil {
		return seg, err
	}
	if seg.TotalSize, _, err = r.size(d, p, "total_size", true); err != nil {
		return seg, err
	}
	if err := r.span(p, seg.Address, seg.TotalSize); err != nil {
		return seg, err
	}
	if seg.Stream, err = r.stream(d, p); err != nil {
		return seg, err
	}
	if seg.Type, _, err = r.str(d, p, "segment_type", false); err != nil {
		return seg, err
	}
	if seg.Expandable, err = r.bool(d, p, "is_expandable"); err != nil {
		return seg, err
	}
	if seg.Frames, err = r.frameField(d, p); err != nil {
		return seg, err
	}
	bv, ok := d.Get("blocks")
	if !ok {
		return seg, r.fail(p, "missing key \"blocks\"")
	}
	blocks, err := r.list(bv, p+".blocks")
	if err != nil {
		return seg, err
	}
	seg.Blocks = make([]Block, 0, len(blocks))
	addr, end := seg.Address, seg.Address+seg.TotalSize
	for i, bv := range blocks {
		bp := func() string { return fmt.Sprintf("%s.blocks[%d]", p, i) }
		var b Block
		if rb, ok := bv.(*readBlock); ok {
			// read as the pickle was decoded
			b = r.finishBlock(rb.b)
		} else if b, err = r.block(bv, bp(), addr); err != nil {
			return seg, err
		}
		if b.Address < seg.Address || b.Address > end || b.Size > end-b.Address {
			return seg, r.fail(bp(), "block at %#x of %d bytes lies outside its segment %#x..%#x (%d bytes)",
				b.Address, b.Size, seg.Address, end, seg.TotalSize)
		}
		// The blocks of a segment tile it in address order (as the
		// allocator lists them): one that starts before the previous one
		// ends, or at the same address, is not a snapshot's.
		if i > 0 && (b.Address < addr || b.Address == seg.Blocks[i-1].Address) {
			return seg, r.fail(bp(), "block at %#x of %d bytes overlaps the block before it, at %#x of %d bytes",
				b.Address, b.Size, seg.Blocks[i-1].Address, seg.Blocks[i-1].Size)
		}
		addr = b.Address + b.Size
		seg.Blocks = append(seg.Blocks, b)
	}
	return seg, nil
}

// block reads a block; at is its address when the block does not say (the
// blocks of a segment tile it, as memory_viz assumes).
func (r *reader) block(v any, p string, at int64) (Block, error) {
	var b Block
	d, err := r.dict(v, p)
	if err != nil {
		return b, err
	}
	var ok bool
	if b.Address, ok, err = r.int(d, p, "address", false); err != nil {
		return b, err
	} else if !ok {
		b.Address = at
	}
	if b.Size, _, err = r.size(d, p, "size", true); err != nil {
		return b, err
	}
	if b.State, _, err = r.str(d, p, "state", true); err != nil {
		return b, err
	}
	var hasReq bool
	if b.Requested, hasReq, err = r.size(d, p, "requested_size", false); err != nil {
		return b, err
	}
	_, hasFrames := d.Get("frames")
	if b.Frames, err = r.frameField(d, p); err != nil {
		return b, err
	}
	// PyTorch 1.13 and 2.0: the allocations made in the block, newest
	// first, instead of frames (and, in 1.13, of requested_size).
	if hv, ok := d.Get("history"); ok && hv != nil {
		hist, err := r.list(hv, p+".history")
		if err != nil {
			return b, err
		}
		if len(hist) > 0 {
			hp := p + ".history[0]"
			h, err := r.dict(hist[0], hp)
			if err != nil {
				return b, err
			}
			real, ok, err := r.size(h, hp, "real_size", false)
			if err != nil {
				return b, err
			}
			if !hasReq && ok {
				b.Requested, hasReq = real, true
			}
			if !hasFrames {
				if b.Frames, err = r.frameField(h, hp); err != nil {
					return b, err
				}
			}
		}
	}
	if !hasReq && b.State != device.StateInactive {
		b.Requested = b.Size
	}
	if b.Category, err = r.category(d, p); err != nil {
		return b, err
	}
	if b.Module, _, err = r.str(d, p, "module", false); err != nil {
		return b, err
	}
	if b.Op, _, err = r.str(d, p, "op", false); err != nil {
		return b, err
	}
	if b.Arena, err = r.bool(d, p, "arena"); err != nil {
		return b, err
	}
	if r.headroom && b.Frames == nil {
		b.Frames = r.synthFrames(b.Category, b.Module, b.Op)
	}
	return b, nil
}

func (r *reader) traces(v any) ([][]Event, []int, error) {
	devs, err := r.list(v, "device_traces")
	if err != nil {
		return nil, nil, err
	}
	out := make([][]Event, 0, len(devs))
	var merged []int // nil when nothing was merged
	for dev, tv := range devs {
		p := fmt.Sprintf("device_traces[%d]", dev)
		if tv == nil {
			out = append(out, nil)
			continue
		}
		l, err := r.list(tv, p)
		if err != nil {
			return nil, nil, err
		}
		evs := make([]Event, 0, len(l))
		for i, ev := range l {
			var e Event
			if re, ok := ev.(*readEvent); ok {
				// read as the pickle was decoded: no path to name
				e = r.finishEvent(re.e)
			} else if e, err = r.event(ev, fmt.Sprintf("%s[%d]", p, i)); err != nil {
				return nil, nil, err
			}
			// memory_viz's merge: a free_requested immediately followed
			// by its free_completed is one free.
			if e.Action == actionFreeCompleted && len(evs) > 0 {
				if prev := &evs[len(evs)-1]; prev.Action == actionFreeRequested && prev.Addr == e.Addr {
					prev.Action = device.ActionFree
					if merged == nil {
						merged = make([]int, len(devs))
					}
					merged[dev]++
					if prev.BlockSize == 0 {
						prev.BlockSize = e.BlockSize
					}
					continue
				}
			}
			evs = append(evs, e)
		}
		out = append(out, evs)
	}
	return out, merged, nil
}

func (r *reader) event(v any, p string) (Event, error) {
	if re, ok := v.(*readEvent); ok {
		return r.finishEvent(re.e), nil
	}
	d, err := r.dict(v, p)
	if err != nil {
		return Event{}, err
	}
	e, err := r.eventFields(d, p)
	if err != nil {
		return e, err
	}
	return r.finishEvent(e), nil
}

// finishBlock is finishEvent for a block: block reads "unknown" as no
// category, and makes headroom's frames, only once the file is known to be
// headroom's.
func (r *reader) finishBlock(b Block) Block {
	if r.headroom {
		if b.Category == categoryUnknown {
			b.Category = ""
		}
		if b.Frames == nil {
			b.Frames = r.synthFrames(b.Category, b.Module, b.Op)
		}
	}
	return b
}

// finishEvent applies what depends on the file being headroom's, which is
// known only once the whole file is read.
func (r *reader) finishEvent(e Event) Event {
	if r.headroom {
		if e.Category == categoryUnknown {
			e.Category = ""
		}
		if e.Frames == nil {
			e.Frames = r.synthFrames(e.Category, e.Module, e.Op)
		}
	}
	return e
}

// eventFields reads an entry's fields, whatever the file's source.
func (r *reader) eventFields(d *pickle.Dict, p string) (Event, error) {
	var e Event
	var err error
	if e.Action, _, err = r.str(d, p, "action", true); err != nil {
		return e, err
	}
	needAddr, needSize := false, false
	switch e.Action {
	case device.ActionAlloc, device.ActionFree, actionFreeRequested, actionFreeCompleted,
		device.ActionSegmentAlloc, device.ActionSegmentFree, actionSegmentMap, actionSegmentUnmap:
		needAddr, needSize = true, true
	case device.ActionOOM:
		needSize = true
	}
	if e.Addr, _, err = r.int(d, p, "addr", needAddr); err != nil {
		return e, err
	}
	if e.Size, _, err = r.size(d, p, "size", needSize); err != nil {
		return e, err
	}
	if err := r.span(p, e.Addr, e.Size); err != nil {
		return e, err
	}
	if e.DeviceFree, _, err = r.int(d, p, "device_free", false); err != nil {
		return e, err
	}
	if e.Stream, err = r.stream(d, p); err != nil {
		return e, err
	}
	if e.TimeUS, _, err = r.int(d, p, "time_us", false); err != nil {
		return e, err
	}
	if e.BlockSize, _, err = r.size(d, p, "block_size", false); err != nil {
		return e, err
	}
	if err := r.span(p, e.Addr, e.BlockSize); err != nil {
		return e, err
	}
	if e.Pool, _, err = r.str(d, p, "pool", false); err != nil {
		return e, err
	}
	if e.Category, _, err = r.str(d, p, "category", false); err != nil {
		return e, err
	}
	if e.Module, _, err = r.str(d, p, "module", false); err != nil {
		return e, err
	}
	if e.Op, _, err = r.str(d, p, "op", false); err != nil {
		return e, err
	}
	if e.Step, _, err = r.int(d, p, "step", false); err != nil {
		return e, err
	}
	if e.Frames, err = r.frameField(d, p); err != nil {
		return e, err
	}
	return e, nil
}

// category reads a category; in headroom's files "unknown" is what the
// pickle writer gave untagged entries for memory_viz's sake, so it reads
// back as none.
func (r *reader) category(d *pickle.Dict, p string) (string, error) {
	c, _, err := r.str(d, p, "category", false)
	if r.headroom && c == categoryUnknown {
		c = ""
	}
	return c, err
}

func (r *reader) frameField(d *pickle.Dict, p string) ([]Frame, error) {
	v, ok := d.Get("frames")
	if !ok || v == nil {
		return nil, nil
	}
	var l []any
	switch x := v.(type) {
	case []any:
		l = x
	case pickle.Tuple:
		l = x
	default:
		return nil, r.typeError(p+".frames", "list", v)
	}
	if len(l) == 0 {
		return nil, nil
	}
	if fs, ok := r.lists[&l[0]]; ok {
		return fs, r.charge(p+".frames", 1)
	}
	if err := r.charge(p+".frames", len(l)); err != nil {
		return nil, err
	}
	fs := make([]Frame, len(l))
	var err error
	for i, fv := range l {
		fd, ok := fv.(*pickle.Dict)
		if !ok {
			return nil, r.typeError(fmt.Sprintf("%s.frames[%d]", p, i), "dict", fv)
		}
		if f, ok := r.frames[fd]; ok {
			fs[i] = f
			continue
		}
		fp := fmt.Sprintf("%s.frames[%d]", p, i)
		if err := r.charge(fp, 1+fd.Len()); err != nil {
			return nil, err
		}
		var f Frame
		if f.Filename, _, err = r.str(fd, fp, "filename", false); err != nil {
			return nil, err
		}
		if f.Line, _, err = r.int(fd, fp, "line", false); err != nil {
			return nil, err
		}
		if f.Name, _, err = r.str(fd, fp, "name", false); err != nil {
			return nil, err
		}
		if r.streaming && len(r.frames) >= maxCachedFrames {
			clear(r.frames)
		}
		r.frames[fd] = f
		fs[i] = f
	}
	if r.streaming {
		fs = r.shareFrames(fs)
		if len(r.lists) >= maxCachedLists {
			clear(r.lists)
		}
	}
	r.lists[&l[0]] = fs
	return fs, nil
}

// While streaming, the caches by pointer hold at most this many frames and
// lists: each keeps a generic value alive, and PyTorch's entries each have
// their own. A stack the pickle shares through its memo is read again
// (and charged again) only once more than this many others came between.
const (
	maxCachedFrames = 1 << 15
	maxCachedLists  = 1 << 12
)

// dict returns v as a dict, charging the walk for its entries.
func (r *reader) dict(v any, p string) (*pickle.Dict, error) {
	d, ok := v.(*pickle.Dict)
	if !ok || d == nil {
		return nil, r.typeError(p, "dict", v)
	}
	return d, r.charge(p, 1+d.Len())
}

// list returns v as a list, charging the walk for its elements.
func (r *reader) list(v any, p string) ([]any, error) {
	switch l := v.(type) {
	case []any:
		return l, r.charge(p, len(l))
	case pickle.Tuple:
		return l, r.charge(p, len(l))
	}
	return nil, r.typeError(p, "list", v)
}

// int reads an int under key; a missing key (or None) is 0, or an error
// when required.
func (r *reader) int(d *pickle.Dict, p, key string, required bool) (int64, bool, error) {
	v, ok := d.Get(key)
	if !ok || v == nil {
		if required {
			return 0, false, r.fail(p, "missing key %q", key)
		}
		return 0, false, nil
	}
	switch x := v.(type) {
	case int64:
		return x, true, nil
	case *big.Int:
		return 0, false, r.fail(p+"."+key, "%v does not fit in 64 bits", x)
	}
	return 0, false, r.typeError(p+"."+key, "int", v)
}

// size reads a byte count, which must not be negative.
func (r *reader) size(d *pickle.Dict, p, key string, required bool) (int64, bool, error) {
	n, ok, err := r.int(d, p, key, required)
	if err == nil && n < 0 {
		err = r.fail(p+"."+key, "negative size %d", n)
	}
	return n, ok, err
}

// span checks that the bytes [addr, addr+size) are addresses: not
// negative, and not past the end of a 64-bit address space.
func (r *reader) span(p string, addr, size int64) error {
	if addr < 0 {
		return r.fail(p, "negative address %d", addr)
	}
	if size > math.MaxInt64-addr {
		return r.fail(p, "%d bytes at %#x run past the end of the address space", size, addr)
	}
	return nil
}

// stream reads a stream id. Some of PyTorch's writers store the stream's
// pointer as an unsigned 64-bit int; it is only an identifier, so its bits
// are kept.
func (r *reader) stream(d *pickle.Dict, p string) (int64, error) {
	if v, ok := d.Get("stream"); ok {
		if b, ok := v.(*big.Int); ok && b.Sign() > 0 && b.BitLen() <= 64 {
			return int64(b.Uint64()), nil
		}
	}
	n, _, err := r.int(d, p, "stream", false)
	return n, err
}

func (r *reader) str(d *pickle.Dict, p, key string, required bool) (string, bool, error) {
	v, ok := d.Get(key)
	if !ok || v == nil {
		if required {
			return "", false, r.fail(p, "missing key %q", key)
		}
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, r.typeError(p+"."+key, "str", v)
	}
	return s, true, nil
}

func (r *reader) bool(d *pickle.Dict, p, key string) (bool, error) {
	v, ok := d.Get(key)
	if !ok || v == nil {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, r.typeError(p+"."+key, "bool", v)
	}
	return b, nil
}
