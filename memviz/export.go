package memviz

import (
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz/internal/pickle"
)

// PickleProtocol is the protocol of the pickles MarshalPickle writes: what
// Python 3.8 to 3.13's pickle.dump (and so torch.cuda.memory._dump_snapshot)
// writes, and the newest that memory_viz's reader accepts.
const PickleProtocol = 4

// Pickle returns headroom's snapshot as the pickle PyTorch's memory_viz page
// (https://pytorch.org/memory_viz) opens. See MarshalPickle.
func Pickle(s *device.Snapshot) ([]byte, error) {
	return FromDevice(s).MarshalPickle()
}

// MarshalPickle writes the snapshot in the layout of PyTorch's
// torch.cuda.memory._dump_snapshot (the dict of
// torch.cuda.memory._snapshot(), protocol 4), readable by memory_viz and by
// Python's pickle with nothing but built-in types:
//
//   - segments: device, address, total_size, allocated_size, active_size,
//     requested_size, stream, segment_type, segment_pool_id (a tuple),
//     is_expandable, frames, blocks (address, size, requested_size, state,
//     frames);
//   - device_traces: one list per device of entries action, addr (device_free
//     for oom), size, stream, time_us, frames; headroom's free is written as
//     free_requested followed by free_completed;
//   - frames are lists of {filename, line, name} dicts; headroom's blocks and
//     entries get one synthesized frame, the module path as the file and the
//     op as the function, so memory_viz shows who asked.
//
// headroom's fields stay on the same objects (category, module, op and arena
// on blocks; block_size, pool, category, module and op on entries) and its
// statistics under the top-level "headroom" key; PyTorch's readers ignore
// them. As memory_viz requires (docs/snapshot-schema.md), when entries carry
// categories every entry gets one, "unknown" where it had none, and some
// entry has "unknown": if none would, a final snapshot entry is added.
// headroom's reserve, release and empty_cache entries, which PyTorch does not
// have, are left out, and so are alloc and free entries without an address
// (device.Allocator.Track), which memory_viz could not place.
func (s *Snapshot) MarshalPickle() ([]byte, error) {
	return pickle.Marshal(s.pickleValue(), PickleProtocol)
}

// pickler shares equal frames between the objects of one pickle, as
// PyTorch's symbolizer does.
type pickler struct {
	empty  []any
	frames map[Frame]*pickle.Dict
	lists  map[*Frame][]any
	single map[Frame][]any
}

func (p *pickler) frameList(fs []Frame) []any {
	switch len(fs) {
	case 0:
		return p.empty
	case 1:
		if l, ok := p.single[fs[0]]; ok {
			return l
		}
	default:
		if l, ok := p.lists[&fs[0]]; ok {
			return l
		}
	}
	l := make([]any, len(fs))
	for i, f := range fs {
		d, ok := p.frames[f]
		if !ok {
			d = pickle.DictOf("filename", f.Filename, "line", f.Line, "name", f.Name)
			p.frames[f] = d
		}
		l[i] = d
	}
	if len(fs) == 1 {
		p.single[fs[0]] = l
	} else {
		p.lists[&fs[0]] = l
	}
	return l
}

func (s *Snapshot) pickleValue() *pickle.Dict {
	p := &pickler{empty: []any{}, frames: map[Frame]*pickle.Dict{}, lists: map[*Frame][]any{}, single: map[Frame][]any{}}
	headroom := s.Source == SourceHeadroom
	segs := make([]any, 0, len(s.Segments))
	for _, seg := range s.Segments {
		var allocated, active, requested int64
		blocks := make([]any, 0, len(seg.Blocks))
		for _, b := range seg.Blocks {
			switch b.State {
			case device.StateActiveAllocated:
				allocated += b.Size
				active += b.Size
				requested += b.Requested
			case statePendingFree:
				active += b.Size
			}
			d := pickle.DictOf("address", b.Address, "size", b.Size, "requested_size", b.Requested,
				"state", b.State, "frames", p.frameList(b.Frames))
			setString(d, "category", b.Category)
			setString(d, "module", b.Module)
			setString(d, "op", b.Op)
			if b.Arena {
				d.Set("arena", true)
			}
			blocks = append(blocks, d)
		}
		typ := seg.Type
		if typ == "" {
			typ = "large"
		}
		segs = append(segs, pickle.DictOf(
			"device", seg.Device, "address", seg.Address, "total_size", seg.TotalSize,
			"allocated_size", allocated, "active_size", active, "requested_size", requested,
			"stream", seg.Stream, "segment_type", typ, "segment_pool_id", pickle.Tuple{int64(0), int64(0)},
			"is_expandable", seg.Expandable, "frames", p.frameList(seg.Frames), "blocks", blocks))
	}

	categories := headroom
	for _, tr := range s.Traces {
		for i := range tr {
			if tr[i].Category != "" {
				categories = true
			}
		}
	}
	traces := make([]any, 0, len(s.Traces))
	wrote, unknown := false, false
	var lastTime int64
	for _, tr := range s.Traces {
		out := make([]any, 0, len(tr)+len(tr)/2)
		for i := range tr {
			e := &tr[i]
			switch e.Action {
			case device.ActionReserve, device.ActionRelease, device.ActionEmptyCache:
				continue
			case device.ActionAlloc, device.ActionFree, actionFreeRequested, actionFreeCompleted:
				if e.Addr == 0 {
					continue
				}
			}
			entry := func(action string) *pickle.Dict {
				d := pickle.NewDict()
				d.Set("action", action)
				if action == device.ActionOOM {
					d.Set("device_free", e.DeviceFree)
				} else {
					d.Set("addr", e.Addr)
				}
				d.Set("size", e.Size)
				d.Set("stream", e.Stream)
				d.Set("time_us", e.TimeUS)
				d.Set("frames", p.frameList(e.Frames))
				if e.BlockSize != 0 {
					d.Set("block_size", e.BlockSize)
				}
				setString(d, "pool", e.Pool)
				if categories {
					c := e.Category
					if c == "" {
						c = categoryUnknown
					}
					wrote, unknown = true, unknown || c == categoryUnknown
					d.Set("category", c)
				}
				setString(d, "module", e.Module)
				setString(d, "op", e.Op)
				if e.Step != 0 {
					d.Set("step", e.Step)
				}
				lastTime = max(lastTime, e.TimeUS)
				return d
			}
			if e.Action == device.ActionFree {
				out = append(out, entry(actionFreeRequested), entry(actionFreeCompleted))
			} else {
				out = append(out, entry(e.Action))
			}
		}
		traces = append(traces, out)
	}
	if wrote && !unknown {
		// memory_viz appends "unknown" to its category list through a
		// misspelt property (snapshot.categores) unless some entry already
		// has that category, and then throws: give one entry that category.
		traces[0] = append(traces[0].([]any), pickle.DictOf("action", device.ActionSnapshot, "addr", int64(0),
			"size", int64(0), "stream", int64(0), "time_us", lastTime, "frames", p.empty, "category", categoryUnknown))
	}

	top := pickle.DictOf("segments", segs, "device_traces", traces)
	if s.Headroom != nil {
		h := s.Headroom
		top.Set("headroom", pickle.DictOf(
			"version", h.Version, "device", h.Device, "capacity", h.Capacity, "memory_fraction", h.MemoryFraction,
			"limit", h.Limit, "history_max_entries", h.HistoryMaxEntries, "stats", intMap(h.Stats),
			"category_bytes", intMap(h.CategoryBytes), "category_bytes_at_peak", intMap(h.CategoryBytesAtPeak)))
	}
	return top
}

// intMap keeps a nil map a dict (as encoding/json writes it null, readers
// expect a dict).
func intMap(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}

func setString(d *pickle.Dict, key, v string) {
	if v != "" {
		d.Set(key, v)
	}
}
