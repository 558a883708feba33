package memviz

import (
	"github.com/headroom-ml/headroom/device"
)

// Sources of a snapshot.
const (
	SourceHeadroom = "headroom" // device.Snapshot, as JSON or as the pickle Pickle writes
	SourcePyTorch  = "pytorch"  // torch.cuda.memory._dump_snapshot, or torch.cuda.memory_snapshot()
)

// Snapshot is a memory snapshot read from any supported file: headroom's
// JSON or pickle, or PyTorch's pickle. It keeps PyTorch's layout (segments
// of blocks, one trace per device) with headroom's fields where the file
// has them.
type Snapshot struct {
	Source   string
	Segments []Segment // in the order of the file (address order for both writers)
	// Traces holds one history per device, oldest entry first. A
	// free_requested immediately followed by the free_completed of the same
	// address is merged into one "free" entry, as memory_viz does.
	Traces [][]Event
	// Merged counts, per device, the free_requested and free_completed
	// pairs merged into one free: the file has Merged[d] more entries than
	// Traces[d]. Nil when nothing was merged.
	Merged []int
	// Headroom is headroom's own part of the snapshot (statistics,
	// capacity, categories at the peak); nil for PyTorch's files.
	Headroom *device.SnapshotInfo
}

// Segment is memory the allocator mapped (cudaMalloc'ed, for PyTorch).
type Segment struct {
	Device     int
	Address    int64
	TotalSize  int64
	Stream     int64
	Type       string // "small", "large", or "" when the file does not say
	Expandable bool
	Blocks     []Block // in address order; they tile the segment
	Frames     []Frame // where the segment was mapped from, when recorded
}

// Block is a piece of a segment.
type Block struct {
	Address   int64
	Size      int64  // bytes the block occupies
	Requested int64  // bytes asked for (the block's size when the file does not say)
	State     string // "active_allocated", "active_pending_free" or "inactive"
	Category  string // headroom's tags; empty for PyTorch's blocks
	Module    string
	Op        string
	Arena     bool    // the block is part of a headroom step arena
	Frames    []Frame // the stack that allocated it, innermost first
}

// Event is one entry of a device's allocator history.
type Event struct {
	Action string // alloc, free, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot; headroom adds reserve, release, empty_cache
	Addr   int64
	// Size is the requested bytes of alloc and free entries, the segment
	// (or mapped range) size of segment entries, the request of an oom.
	Size       int64
	Stream     int64
	TimeUS     int64 // microseconds since the Unix epoch; 0 when not recorded
	DeviceFree int64 // oom: bytes the device had free

	// headroom's fields (zero in PyTorch's files).
	BlockSize int64 // bytes the block occupies (allocated_bytes changed by this)
	Pool      string
	Category  string
	Module    string
	Op        string
	Step      int64 // step_begin, step_end: the training step marked

	Frames []Frame // innermost first
}

// Frame is one frame of a stack trace ({filename, line, name} in PyTorch's
// files).
type Frame struct {
	Filename string `json:"filename"`
	Line     int64  `json:"line"`
	Name     string `json:"name"`
}

// bytes is what the event changed the active bytes by: the block's size
// where the file records it (headroom), else the requested size (PyTorch's
// traces have nothing else; memory_viz uses the same).
func (e *Event) bytes() int64 {
	if e.BlockSize > 0 {
		return e.BlockSize
	}
	return e.Size
}

// topLevel is the module name shown for a headroom allocation at the top
// level (an empty module path), in frames and in the viewer.
const topLevel = "(top level)"

// headroomFrames synthesizes the one-frame stack of a headroom allocation,
// so that memory_viz (which shows stacks) says who asked: the module path
// as the file and the op (or, without one, the category) as the function.
func headroomFrames(category, module, op string) []Frame {
	if category == "" && module == "" && op == "" {
		return nil
	}
	if module == "" {
		module = topLevel
	}
	name := op
	if name == "" {
		name = category
	}
	return []Frame{{Filename: module, Line: 0, Name: name}}
}

// FromDevice converts headroom's snapshot into the model, synthesizing a
// frame for every tagged block and entry (see headroomFrames).
func FromDevice(s *device.Snapshot) *Snapshot {
	out := &Snapshot{Source: SourceHeadroom, Segments: make([]Segment, 0, len(s.Segments))}
	info := s.Headroom
	out.Headroom = &info
	for _, seg := range s.Segments {
		ms := Segment{Device: seg.Device, Address: seg.Address, TotalSize: seg.TotalSize, Stream: seg.Stream,
			Type: seg.SegmentType, Blocks: make([]Block, 0, len(seg.Blocks))}
		for _, b := range seg.Blocks {
			req := b.RequestedSize
			ms.Blocks = append(ms.Blocks, Block{Address: b.Address, Size: b.Size, Requested: req, State: b.State,
				Category: b.Category, Module: b.Module, Op: b.Op, Arena: b.Arena,
				Frames: headroomFrames(b.Category, b.Module, b.Op)})
		}
		out.Segments = append(out.Segments, ms)
	}
	out.Traces = make([][]Event, len(s.DeviceTraces))
	for d, tr := range s.DeviceTraces {
		evs := make([]Event, 0, len(tr))
		for _, e := range tr {
			evs = append(evs, Event{Action: e.Action, Addr: e.Addr, Size: e.Size, Stream: e.Stream, TimeUS: e.TimeUS,
				DeviceFree: e.DeviceFree, BlockSize: e.BlockSize, Pool: e.Pool, Category: e.Category, Module: e.Module,
				Op: e.Op, Step: e.Step, Frames: headroomFrames(e.Category, e.Module, e.Op)})
		}
		out.Traces[d] = evs
	}
	return out
}

// PyTorch's names that headroom's allocator never writes.
const (
	actionFreeRequested = "free_requested"
	actionFreeCompleted = "free_completed"
	actionSegmentMap    = "segment_map"
	actionSegmentUnmap  = "segment_unmap"
	statePendingFree    = "active_pending_free"
	categoryUnknown     = "unknown"
)
