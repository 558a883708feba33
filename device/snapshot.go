package device

import (
	"cmp"
	"slices"
)

// Block states in snapshots (PyTorch's names).
const (
	StateActiveAllocated = "active_allocated"
	StateInactive        = "inactive"
)

// SnapshotVersion is the version of the snapshot layout
// (docs/snapshot-schema.md).
const SnapshotVersion = 1

// Snapshot is the allocator's state and history as plain data, laid out as
// PyTorch's torch.cuda.memory._snapshot() dict with headroom's fields
// added, so that it can be written as JSON or as the pickle PyTorch's
// memory_viz reads. See docs/snapshot-schema.md.
type Snapshot struct {
	Segments []SegmentInfo `json:"segments"`
	// DeviceTraces holds one history per device; headroom's allocators
	// have one device, so it has one element.
	DeviceTraces [][]TraceEntry `json:"device_traces"`
	Headroom     SnapshotInfo   `json:"headroom"`
}

// SegmentInfo is a mapped segment.
type SegmentInfo struct {
	Device        int      `json:"device"`
	Address       int64    `json:"address"`
	TotalSize     int64    `json:"total_size"`
	Stream        int64    `json:"stream"`
	SegmentType   string   `json:"segment_type"` // "small" or "large"
	SegmentPoolID [2]int64 `json:"segment_pool_id"`
	// AllocatedSize, ActiveSize and RequestedSize sum the segment's
	// active_allocated blocks.
	AllocatedSize int64       `json:"allocated_size"`
	ActiveSize    int64       `json:"active_size"`
	RequestedSize int64       `json:"requested_size"`
	Blocks        []BlockInfo `json:"blocks"`
}

// BlockInfo is a piece of a segment. A segment's blocks are in address
// order and tile it. A step arena shows as its live tensors
// (active_allocated) and the space between them (inactive), all with Arena
// set: that space is held by the arena, not free for other allocations.
type BlockInfo struct {
	Address       int64  `json:"address"`
	Size          int64  `json:"size"`
	RequestedSize int64  `json:"requested_size"`
	State         string `json:"state"` // "active_allocated" or "inactive"
	Category      string `json:"category,omitempty"`
	Module        string `json:"module,omitempty"`
	Op            string `json:"op,omitempty"`
	Arena         bool   `json:"arena,omitempty"`
}

// SnapshotInfo is headroom's part of a snapshot.
type SnapshotInfo struct {
	Version        int     `json:"version"`
	Device         string  `json:"device"` // "cpu" or "meta"
	Capacity       int64   `json:"capacity"`
	MemoryFraction float64 `json:"memory_fraction"`
	Limit          int64   `json:"limit"`
	// HistoryMaxEntries is the ring buffer's size (0: history was never
	// recorded).
	HistoryMaxEntries int `json:"history_max_entries"`
	// Stats are torch.cuda.memory_stats's keys (Allocator.MemoryStats).
	Stats map[string]int64 `json:"stats"`
	// CategoryBytes is the allocated bytes by category now, and
	// CategoryBytesAtPeak when allocated bytes last peaked.
	CategoryBytes       map[string]int64 `json:"category_bytes"`
	CategoryBytesAtPeak map[string]int64 `json:"category_bytes_at_peak"`
}

// Snapshot returns the allocator's segments, blocks and recorded history
// (torch.cuda.memory._snapshot()). While history is recorded, taking a
// snapshot adds a "snapshot" entry.
func (a *Allocator) Snapshot() *Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hist.on {
		a.recordLocked(TraceEntry{Action: ActionSnapshot}, nil)
	}
	s := &Snapshot{Segments: []SegmentInfo{}, DeviceTraces: [][]TraceEntry{a.hist.entries()}}
	order := make([]int32, 0, len(a.segs))
	for i := range a.segs {
		if a.segs[i].live {
			order = append(order, int32(i))
		}
	}
	slices.SortFunc(order, func(x, y int32) int { return cmp.Compare(a.segs[x].addr, a.segs[y].addr) })
	for _, si := range order {
		seg := &a.segs[si]
		info := SegmentInfo{Address: seg.addr, TotalSize: seg.size, SegmentType: seg.pool.String(), Blocks: []BlockInfo{}}
		for id := seg.first; id != noBlock; id = a.blocks[id].next {
			b := &a.blocks[id]
			addr := seg.addr + b.off
			switch b.state {
			case blockFree:
				info.Blocks = append(info.Blocks, BlockInfo{Address: addr, Size: b.size, State: StateInactive})
			case blockAllocated:
				info.Blocks = append(info.Blocks, blockInfo(addr, b.size, b.requested, b.tag, false))
				info.AllocatedSize += b.size
				info.RequestedSize += b.requested
			case blockArena:
				m := a.arenas[id]
				offs := make([]int64, 0, len(m))
				for off := range m {
					offs = append(offs, off)
				}
				slices.Sort(offs)
				at := int64(0)
				for _, off := range offs {
					t := m[off]
					if off > at {
						info.Blocks = append(info.Blocks, BlockInfo{Address: addr + at, Size: off - at, State: StateInactive, Arena: true})
					}
					info.Blocks = append(info.Blocks, blockInfo(addr+off, t.size, t.requested, t.tag, true))
					info.AllocatedSize += t.size
					info.RequestedSize += t.requested
					at = off + t.size
				}
				if at < b.size {
					info.Blocks = append(info.Blocks, BlockInfo{Address: addr + at, Size: b.size - at, State: StateInactive, Arena: true})
				}
			}
		}
		info.ActiveSize = info.AllocatedSize
		s.Segments = append(s.Segments, info)
	}
	stats := a.stats
	now, peak := stats.CategoryBytes()
	s.Headroom = SnapshotInfo{
		Version: SnapshotVersion, Device: a.src.Name(), Capacity: a.capacity, MemoryFraction: a.fraction,
		Limit: a.limitLocked(), HistoryMaxEntries: a.hist.max, Stats: stats.Map(),
		CategoryBytes: now, CategoryBytesAtPeak: peak,
	}
	return s
}

func blockInfo(addr, size, requested int64, tag Tag, arena bool) BlockInfo {
	return BlockInfo{Address: addr, Size: size, RequestedSize: requested, State: StateActiveAllocated,
		Category: tag.Category.String(), Module: tag.Module, Op: tag.Op, Arena: arena}
}
