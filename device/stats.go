package device

// Stat is a current/peak/allocated/freed counter, as PyTorch's: Allocated
// is the total ever added and Freed the total ever removed, so Current =
// Allocated - Freed, and Peak is the largest Current since the last
// ResetPeak.
type Stat struct {
	Current, Peak, Allocated, Freed int64
}

func (s *Stat) add(n int64) {
	s.Current += n
	s.Allocated += n
	s.Peak = max(s.Peak, s.Current)
}

func (s *Stat) sub(n int64) {
	s.Current -= n
	s.Freed += n
}

// PoolStat is a Stat for all pools together (PyTorch's "all", promoted
// here, so s.AllocatedBytes.Peak is allocated_bytes.all.peak) and for each
// pool.
type PoolStat struct {
	Stat       // all pools
	Small Stat // the small pool (requests of at most 1 MiB)
	Large Stat // the large pool (larger requests and step arenas)
}

func (p *PoolStat) add(k poolKind, n int64) {
	p.Stat.add(n)
	p.pool(k).add(n)
}

func (p *PoolStat) sub(k poolKind, n int64) {
	p.Stat.sub(n)
	p.pool(k).sub(n)
}

func (p *PoolStat) pool(k poolKind) *Stat {
	if k == smallPool {
		return &p.Small
	}
	return &p.Large
}

func (p *PoolStat) resetPeak() {
	for _, s := range []*Stat{&p.Stat, &p.Small, &p.Large} {
		s.Peak = s.Current
	}
}

func (p *PoolStat) resetAccumulated() {
	for _, s := range []*Stat{&p.Stat, &p.Small, &p.Large} {
		s.Allocated, s.Freed = s.Current, 0
	}
}

// Stats are the allocator's counters, with the meanings of PyTorch's
// torch.cuda.memory_stats (each field's key there is in its comment).
//
// On this allocator a block is active exactly while it is allocated (there
// are no streams to wait for), so Active equals Allocation and ActiveBytes
// equals AllocatedBytes. Tensors placed in a step arena (TrackIn) count as
// allocations of the arena's pool; the arena itself counts only as
// reserved memory.
type Stats struct {
	Allocation         PoolStat // "allocation": allocations handed out
	Segment            PoolStat // "segment": segments mapped from the OS
	Active             PoolStat // "active": active blocks
	InactiveSplit      PoolStat // "inactive_split": free blocks in segments that also hold other blocks (not releasable)
	AllocatedBytes     PoolStat // "allocated_bytes": bytes of allocated blocks
	ReservedBytes      PoolStat // "reserved_bytes": bytes of mapped segments
	ActiveBytes        PoolStat // "active_bytes"
	InactiveSplitBytes PoolStat // "inactive_split_bytes"
	RequestedBytes     PoolStat // "requested_bytes": bytes asked for, before rounding

	OversizeAllocations Stat // "oversize_allocations": always 0 (no max_split_size)
	OversizeSegments    Stat // "oversize_segments": always 0

	NumAllocRetries int64 // "num_alloc_retries": cache flushes to retry a failed segment mapping
	NumOOMs         int64 // "num_ooms": out-of-memory errors returned
	NumDeviceAlloc  int64 // "num_device_alloc": segments mapped
	NumDeviceFree   int64 // "num_device_free": segments unmapped

	// ByCategory is the allocated bytes of each category now, and
	// ByCategoryAtPeak the same when AllocatedBytes last reached its peak.
	ByCategory       [numCategories]int64
	ByCategoryAtPeak [numCategories]int64
}

// statNames pairs each PoolStat with its PyTorch name.
func (s *Stats) poolStats() []struct {
	name string
	st   *PoolStat
} {
	return []struct {
		name string
		st   *PoolStat
	}{
		{"allocation", &s.Allocation},
		{"segment", &s.Segment},
		{"active", &s.Active},
		{"inactive_split", &s.InactiveSplit},
		{"allocated_bytes", &s.AllocatedBytes},
		{"reserved_bytes", &s.ReservedBytes},
		{"active_bytes", &s.ActiveBytes},
		{"inactive_split_bytes", &s.InactiveSplitBytes},
		{"requested_bytes", &s.RequestedBytes},
	}
}

func putStat(m map[string]int64, prefix string, s Stat) {
	m[prefix+".current"] = s.Current
	m[prefix+".peak"] = s.Peak
	m[prefix+".allocated"] = s.Allocated
	m[prefix+".freed"] = s.Freed
}

// Map flattens the statistics into torch.cuda.memory_stats's keys:
// "allocated_bytes.all.current", "segment.large_pool.peak",
// "num_alloc_retries", ... (max_split_size is -1: blocks of any size are
// split, as PyTorch's default).
func (s Stats) Map() map[string]int64 {
	m := make(map[string]int64, 9*12+16)
	for _, p := range s.poolStats() {
		putStat(m, p.name+".all", p.st.Stat)
		putStat(m, p.name+".small_pool", p.st.Small)
		putStat(m, p.name+".large_pool", p.st.Large)
	}
	putStat(m, "oversize_allocations", s.OversizeAllocations)
	putStat(m, "oversize_segments", s.OversizeSegments)
	m["num_alloc_retries"] = s.NumAllocRetries
	m["num_ooms"] = s.NumOOMs
	m["num_sync_all_streams"] = 0
	m["num_device_alloc"] = s.NumDeviceAlloc
	m["num_device_free"] = s.NumDeviceFree
	m["max_split_size"] = -1
	return m
}

// MemoryStats is torch.cuda.memory_stats: the statistics under PyTorch's
// flattened key names (see Stats.Map).
func (a *Allocator) MemoryStats() map[string]int64 {
	s := a.Stats()
	return s.Map()
}

// Stats returns a copy of the counters.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// ResetPeak sets every peak to its current value
// (torch.cuda.reset_peak_memory_stats), and the category breakdown at the
// peak to the current one.
func (a *Allocator) ResetPeak() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.stats.poolStats() {
		p.st.resetPeak()
	}
	a.stats.OversizeAllocations.Peak = a.stats.OversizeAllocations.Current
	a.stats.OversizeSegments.Peak = a.stats.OversizeSegments.Current
	a.stats.ByCategoryAtPeak = a.stats.ByCategory
}

// ResetAccumulated clears the accumulated counters
// (torch.cuda.reset_accumulated_memory_stats): every Allocated becomes the
// current value, every Freed 0, and the retry, OOM and device call counts 0.
func (a *Allocator) ResetAccumulated() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.stats.poolStats() {
		p.st.resetAccumulated()
	}
	a.stats.NumAllocRetries, a.stats.NumOOMs = 0, 0
	a.stats.NumDeviceAlloc, a.stats.NumDeviceFree = 0, 0
}

// MemoryAllocated is torch.cuda.memory_allocated: bytes of live allocations.
func (a *Allocator) MemoryAllocated() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats.AllocatedBytes.Current
}

// MaxMemoryAllocated is torch.cuda.max_memory_allocated.
func (a *Allocator) MaxMemoryAllocated() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats.AllocatedBytes.Peak
}

// MemoryReserved is torch.cuda.memory_reserved: bytes of mapped segments.
func (a *Allocator) MemoryReserved() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats.ReservedBytes.Current
}

// MaxMemoryReserved is torch.cuda.max_memory_reserved.
func (a *Allocator) MaxMemoryReserved() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats.ReservedBytes.Peak
}

// CategoryBytes is the allocated bytes of each category now and when the
// allocated bytes last peaked, keyed by category name; categories with no
// bytes at either moment are left out.
func (s Stats) CategoryBytes() (now, atPeak map[string]int64) {
	now, atPeak = map[string]int64{}, map[string]int64{}
	for c := range numCategories {
		if s.ByCategory[c] != 0 {
			now[c.String()] = s.ByCategory[c]
		}
		if s.ByCategoryAtPeak[c] != 0 {
			atPeak[c.String()] = s.ByCategoryAtPeak[c]
		}
	}
	return now, atPeak
}
