package device

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"unsafe"
)

// The sizes of PyTorch's CUDACachingAllocator, which this allocator follows.
const (
	// MinBlockSize is the allocation granularity: every request is rounded
	// up to a multiple of it (kMinBlockSize).
	MinBlockSize = 512
	// SmallSize is the largest request served by the small pool (kSmallSize).
	SmallSize = 1 << 20
	// SmallBuffer is the size of the small pool's segments (kSmallBuffer).
	SmallBuffer = 2 << 20
	// LargeBuffer is the segment mapped for requests between SmallSize and
	// MinLargeAlloc (kLargeBuffer).
	LargeBuffer = 20 << 20
	// MinLargeAlloc is the request size from which a segment is the request
	// rounded up to RoundLarge (kMinLargeAlloc).
	MinLargeAlloc = 10 << 20
	// RoundLarge is the rounding of large segments (kRoundLarge).
	RoundLarge = 2 << 20
	// tightRound is the rounding of the fallback segment mapped under a
	// capacity when the regular segment size does not fit: a page.
	tightRound = 4096
)

// MaxAllocSize is the largest request the allocator accepts (4 EiB). Larger
// ones are refused with a *SizeError before any arithmetic on them, since
// rounding them to 512 bytes or to a segment would overflow int64.
const MaxAllocSize = 1 << 62

// ErrInvalidSize is matched by errors.Is for every *SizeError.
var ErrInvalidSize = errors.New("invalid allocation size")

// SizeError refuses a request that no device could serve: negative, or
// larger than MaxAllocSize.
type SizeError struct {
	Requested int64
	Tag       Tag
}

func (e *SizeError) Error() string {
	who := ""
	if e.Tag.Op != "" || e.Tag.Module != "" {
		who = fmt.Sprintf(" (%s %s)", e.Tag.Module, e.Tag.Op)
	}
	if e.Requested < 0 {
		return fmt.Sprintf("device: negative allocation size %d%s", e.Requested, who)
	}
	return fmt.Sprintf("device: allocation of %d bytes%s exceeds the largest possible (%d bytes)", e.Requested, who, int64(MaxAllocSize))
}

// Is makes errors.Is(err, ErrInvalidSize) true.
func (e *SizeError) Is(target error) bool { return target == ErrInvalidSize }

// RoundSize is the size a request of n bytes occupies: PyTorch's 512-byte
// granularity, at least 512. (A large-pool block that is not worth
// splitting is handed out whole, so Block.Size can be larger.) n must be at
// most MaxAllocSize.
func RoundSize(n int64) int64 {
	if n <= 0 {
		return MinBlockSize
	}
	return (n + MinBlockSize - 1) / MinBlockSize * MinBlockSize
}

// SegmentSize is the size of the segment mapped for a rounded request of
// size bytes when no cached block fits (PyTorch's get_allocation_size):
// 2 MiB for small requests, 20 MiB for requests up to 10 MiB, and the
// request rounded up to 2 MiB above that. size must be at most
// MaxAllocSize.
func SegmentSize(size int64) int64 {
	switch {
	case size <= SmallSize:
		return SmallBuffer
	case size < MinLargeAlloc:
		return LargeBuffer
	}
	return (size + RoundLarge - 1) / RoundLarge * RoundLarge
}

// IsSmall reports whether a request of n bytes is served by the small pool.
func IsSmall(n int64) bool { return RoundSize(n) <= SmallSize }

type poolKind uint8

const (
	smallPool poolKind = iota
	largePool
)

func (k poolKind) String() string {
	if k == smallPool {
		return "small"
	}
	return "large"
}

type blockID int32

const noBlock blockID = -1

type blockState uint8

const (
	blockFree      blockState = iota // cached, in its pool's free list
	blockAllocated                   // handed out by Allocate
	blockArena                       // handed out by Reserve; its tensors are tracked one by one
)

// block is a piece of a segment. Blocks live by value in Allocator.blocks
// and refer to each other by index; the blocks of a segment form a list in
// address order (prev, next) that tiles it.
type block struct {
	seg        int32
	off        int64 // offset in the segment
	size       int64
	requested  int64
	prev, next blockID
	state      blockState
	dirty      bool   // may hold stale bytes (fresh segments are zero)
	seq        uint64 // allocation number; ties a *Block handle to this block
	tag        Tag
}

// segment is memory mapped from the source.
type segment struct {
	vaddr int64 // position in the allocator's virtual address space: the order of blocks, identical on every device
	addr  int64 // address reported in snapshots: the real pointer on cpu, vaddr on meta
	size  int64
	pool  poolKind
	data  []byte // nil on meta
	first blockID
	live  bool
}

// pool is a free list: the free blocks of one pool ordered by (size,
// virtual address), so the first block of at least a size is the best fit.
type pool struct {
	free []blockID
}

// tracked is a tensor placed in a step arena.
type tracked struct {
	size, requested int64
	tag             Tag
}

// Block is an allocation handed out by Allocate or Reserve.
type Block struct {
	Size      int64  // bytes the block occupies: the request rounded to 512, or more (an unsplit large block)
	Requested int64  // bytes asked for
	Data      []byte // len Requested, cap Size; nil on the meta device
	Tag       Tag

	owner *Allocator
	id    blockID
	seq   uint64 // 0 once freed
	addr  int64
}

// Address is the block's address: the real pointer on cpu, a synthetic one
// on meta (the same values snapshots show).
func (b *Block) Address() int64 { return b.addr }

// Allocator is a caching allocator modelled on PyTorch's
// CUDACachingAllocator. Requests are rounded to 512 bytes; those of at most
// 1 MiB come from the small pool (2 MiB segments), larger ones and step
// arenas from the large pool (20 MiB segments for requests up to 10 MiB,
// the request rounded to 2 MiB above). The best-fitting cached block is
// split when the rest is worth keeping (at least 512 bytes in the small
// pool, more than 1 MiB in the large one), freed blocks merge with free
// neighbours, and segments stay mapped until EmptyCache, or until a new
// segment does not fit in the limit: then every fully free segment is
// unmapped and the mapping retried once before an *OutOfMemoryError.
//
// Locking rule: mu guards every field below it. Each exported method takes
// mu once and holds it until it returns; methods whose names end in Locked
// expect it held and never take it. Nothing that could call back into the
// allocator runs under mu: the only calls out are to the memory source
// (mmap, munmap, madvise). Zeroing a block's bytes happens after mu is
// released, since the caller owns the block by then.
type Allocator struct {
	src source

	mu        sync.Mutex
	capacity  int64
	fraction  float64
	blocks    []block
	freeIDs   []blockID
	segs      []segment
	freeSegs  []int32
	pools     [2]pool
	arenas    map[blockID]map[int64]tracked // live tensors of each arena block, by offset
	nextVaddr int64
	seq       uint64
	stats     Stats
	hist      history
	mapped    *mappedSet // the segments mapped, for the cleanup (cleanup.go)
}

const vaddrBase = 1 << 36

// errAddressSpace is the cause of an out-of-memory when the allocator's
// virtual address space (int64 offsets) is used up, which only a device
// without memory and without a capacity (meta) can reach.
var errAddressSpace = errors.New("the allocator's address space is used up")

// NewAllocator returns an allocator over src; capacity 0 means unlimited.
func NewAllocator(src source, capacity int64) *Allocator {
	a := &Allocator{src: src, capacity: capacity, fraction: 1, nextVaddr: vaddrBase, arenas: map[blockID]map[int64]tracked{}}
	a.watch()
	return a
}

// Capacity is the device's memory size in bytes (0: unlimited).
func (a *Allocator) Capacity() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.capacity
}

// SetCapacity changes the device's memory size (0: unlimited). Segments
// already mapped stay; the new limit applies to the next mapping.
func (a *Allocator) SetCapacity(n int64) error {
	if n < 0 {
		return fmt.Errorf("device: negative capacity %d", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.capacity = n
	return nil
}

// SetMemoryFraction limits the allocator to fraction of the capacity, as
// torch.cuda.set_per_process_memory_fraction. On a device without a
// capacity the fraction applies to the machine's physical memory.
func (a *Allocator) SetMemoryFraction(fraction float64) error {
	if !(fraction >= 0 && fraction <= 1) {
		return fmt.Errorf("device: invalid memory fraction %v (allowed range: 0 to 1)", fraction)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fraction = fraction
	return nil
}

// MemoryFraction is the fraction set by SetMemoryFraction (1 by default).
func (a *Allocator) MemoryFraction() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fraction
}

// Limit is the most bytes the allocator may reserve: capacity times the
// memory fraction (0: unlimited).
func (a *Allocator) Limit() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limitLocked()
}

func (a *Allocator) limitLocked() int64 {
	total := a.capacity
	if a.fraction >= 1 {
		return total
	}
	if total == 0 {
		total = physicalMemory()
	}
	return int64(float64(total) * a.fraction)
}

// ErrOutOfMemory is matched by errors.Is for every *OutOfMemoryError.
var ErrOutOfMemory = errors.New("out of memory")

// Allocate returns a zeroed block of at least size bytes, counted as one
// allocation of tag's category.
func (a *Allocator) Allocate(size int64, tag Tag) (*Block, error) {
	return a.malloc(size, tag, false)
}

// Reserve returns a zeroed block of at least size bytes from the large pool
// that counts as reserved memory but not as an allocation: the arena of a
// step, whose tensors are counted one by one with TrackIn as they come
// alive. Release gives it back to the cache.
func (a *Allocator) Reserve(size int64, tag Tag) (*Block, error) {
	return a.malloc(size, tag, true)
}

func (a *Allocator) malloc(req int64, tag Tag, arena bool) (*Block, error) {
	// Refused before the lock and before any rounding: nothing below can
	// overflow for a request of at most MaxAllocSize.
	if req < 0 || req > MaxAllocSize {
		return nil, &SizeError{Requested: req, Tag: tag}
	}
	out, dirty, err := a.mallocLocked(req, tag, arena)
	if err != nil {
		return nil, err
	}
	if dirty {
		clear(out.Data)
	}
	return out, nil
}

// mallocLocked takes mu itself and releases it by defer, so that even a
// panic cannot leave the allocator locked. It reports whether the block may
// hold stale bytes; the caller zeroes them outside the lock.
func (a *Allocator) mallocLocked(req int64, tag Tag, arena bool) (*Block, bool, error) {
	size := RoundSize(req)
	k := largePool
	if !arena && size <= SmallSize {
		k = smallPool
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	id := a.bestFitLocked(k, size)
	if id == noBlock {
		segSize := SegmentSize(size)
		var err error
		id, err = a.mapSegmentLocked(segSize, k, false)
		if id == noBlock {
			// Free every fully cached segment and retry once
			// (PyTorch's release_cached_blocks + alloc_block(isRetry)).
			a.releaseCachedLocked()
			id, err = a.mapSegmentLocked(segSize, k, true)
		}
		if id == noBlock && a.limitLocked() > 0 {
			// Under a capacity, a segment just as large as the request
			// may fit where PyTorch's fixed segment sizes (2 and 20 MiB)
			// do not, so budgets smaller than a segment still work. This
			// is headroom's one departure from PyTorch's sizing.
			if tight := (size + tightRound - 1) / tightRound * tightRound; tight < segSize {
				id, err = a.mapSegmentLocked(tight, k, false)
			}
		}
		if id == noBlock {
			return nil, false, a.oomLocked(req, size, segSize, k, tag, err)
		}
	}
	a.allocFoundLocked(id, size, req, tag, arena)
	b := &a.blocks[id]
	seg := &a.segs[b.seg]
	out := &Block{Size: b.size, Requested: req, Tag: tag, owner: a, id: id, seq: b.seq, addr: seg.addr + b.off}
	if seg.data != nil {
		out.Data = seg.data[b.off : b.off+req : b.off+b.size]
	}
	dirty := b.dirty
	b.dirty = true // the caller writes it from here on
	return out, dirty, nil
}

// Free gives a block from Allocate back to the cache. Freeing nil or an
// already freed block does nothing.
func (a *Allocator) Free(b *Block) {
	if b == nil || b.seq == 0 {
		return
	}
	a.mu.Lock()
	id, ok := a.lookupLocked(b, blockAllocated)
	if !ok {
		a.mu.Unlock()
		panic("device: Free of a block that is not a live allocation of this allocator (from Reserve? use Release)")
	}
	blk := &a.blocks[id]
	k := a.segs[blk.seg].pool
	a.countFreeLocked(k, blk.size, blk.requested, blk.tag.Category)
	if a.hist.on {
		a.recordLocked(TraceEntry{Action: ActionFree, Addr: a.addrLocked(id), Size: blk.requested, BlockSize: blk.size, Pool: k.String()}, &blk.tag)
	}
	a.freeBlockLocked(id)
	a.mu.Unlock()
	b.seq, b.Data = 0, nil
}

// Release gives a block from Reserve back to the cache; tensors still
// tracked in it are counted as freed.
func (a *Allocator) Release(b *Block) {
	if b == nil || b.seq == 0 {
		return
	}
	a.mu.Lock()
	id, ok := a.lookupLocked(b, blockArena)
	if !ok {
		a.mu.Unlock()
		panic("device: Release of a block that is not a live reservation of this allocator (from Allocate? use Free)")
	}
	if m := a.arenas[id]; len(m) > 0 {
		offs := make([]int64, 0, len(m))
		for off := range m {
			offs = append(offs, off)
		}
		slices.Sort(offs)
		for _, off := range offs {
			a.untrackLocked(id, off)
		}
	}
	delete(a.arenas, id)
	if a.hist.on {
		blk := &a.blocks[id]
		a.recordLocked(TraceEntry{Action: ActionRelease, Addr: a.addrLocked(id), Size: blk.requested, BlockSize: blk.size, Pool: largePool.String()}, &blk.tag)
	}
	a.freeBlockLocked(id)
	a.mu.Unlock()
	b.seq, b.Data = 0, nil
}

// TrackIn counts a tensor placed at offset in an arena from Reserve as an
// allocation of size bytes (requested of them asked for) in the arena's
// pool, as PyTorch counts tensors; UntrackIn ends it. Offsets of live
// tensors of one arena must differ.
func (a *Allocator) TrackIn(arena *Block, offset, size, requested int64, tag Tag) {
	a.mu.Lock()
	id, ok := a.lookupLocked(arena, blockArena)
	// Written so that a huge offset plus size cannot wrap past the check.
	if !ok || offset < 0 || size < 0 || offset > a.blocks[id].size || size > a.blocks[id].size-offset {
		a.mu.Unlock()
		panic(fmt.Sprintf("device: TrackIn of %d bytes at offset %d outside a live arena", size, offset))
	}
	m := a.arenas[id]
	if m == nil {
		m = map[int64]tracked{}
		a.arenas[id] = m
	}
	if _, dup := m[offset]; dup {
		a.mu.Unlock()
		panic(fmt.Sprintf("device: TrackIn at offset %d, which holds a live tensor", offset))
	}
	m[offset] = tracked{size: size, requested: requested, tag: tag}
	a.countAllocLocked(largePool, size, requested, tag.Category)
	if a.hist.on {
		a.recordLocked(TraceEntry{Action: ActionAlloc, Addr: a.addrLocked(id) + offset, Size: requested, BlockSize: size, Pool: largePool.String()}, &tag)
	}
	a.mu.Unlock()
}

// UntrackIn ends the TrackIn at offset in arena.
func (a *Allocator) UntrackIn(arena *Block, offset int64) {
	a.mu.Lock()
	id, ok := a.lookupLocked(arena, blockArena)
	if ok {
		_, ok = a.arenas[id][offset]
	}
	if !ok {
		a.mu.Unlock()
		panic(fmt.Sprintf("device: UntrackIn at offset %d, which holds no tracked tensor", offset))
	}
	a.untrackLocked(id, offset)
	a.mu.Unlock()
}

func (a *Allocator) untrackLocked(id blockID, offset int64) {
	m := a.arenas[id]
	t := m[offset]
	delete(m, offset)
	a.countFreeLocked(largePool, t.size, t.requested, t.tag.Category)
	if a.hist.on {
		a.recordLocked(TraceEntry{Action: ActionFree, Addr: a.addrLocked(id) + offset, Size: t.requested, BlockSize: t.size, Pool: largePool.String()}, &t.tag)
	}
}

// Track counts a sub-allocation of an arena whose position is not known as
// an allocation of the large pool (the pool arenas come from). It has no
// address, so snapshots cannot place it; prefer TrackIn.
func (a *Allocator) Track(size, requested int64, c Category) {
	a.mu.Lock()
	a.countAllocLocked(largePool, size, requested, c)
	if a.hist.on {
		a.recordLocked(TraceEntry{Action: ActionAlloc, Size: requested, BlockSize: size, Pool: largePool.String()}, &Tag{Category: c})
	}
	a.mu.Unlock()
}

// Untrack ends a Track.
func (a *Allocator) Untrack(size, requested int64, c Category) {
	a.mu.Lock()
	a.countFreeLocked(largePool, size, requested, c)
	if a.hist.on {
		a.recordLocked(TraceEntry{Action: ActionFree, Size: requested, BlockSize: size, Pool: largePool.String()}, &Tag{Category: c})
	}
	a.mu.Unlock()
}

// EmptyCache unmaps every segment that holds no allocated block
// (torch.cuda.empty_cache). On the cpu device it also returns to the OS the
// whole pages inside free blocks of segments that stay, so the process's
// resident memory falls by every cached byte.
func (a *Allocator) EmptyCache() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hist.on {
		a.recordLocked(TraceEntry{Action: ActionEmptyCache}, nil)
	}
	a.releaseCachedLocked()
	d, ok := a.src.(discarder)
	if !ok {
		return
	}
	for k := range a.pools {
		for _, id := range a.pools[k].free {
			b := &a.blocks[id]
			seg := &a.segs[b.seg]
			if seg.data == nil {
				continue
			}
			lo := (b.off + osPage - 1) / osPage * osPage
			hi := (b.off + b.size) / osPage * osPage
			if hi > lo {
				_ = d.Discard(seg.data[lo:hi])
			}
		}
	}
}

const osPage = 4096

func (a *Allocator) lookupLocked(b *Block, want blockState) (blockID, bool) {
	if b == nil || b.owner != a || b.seq == 0 || int(b.id) >= len(a.blocks) {
		return noBlock, false
	}
	blk := &a.blocks[b.id]
	if blk.seq != b.seq || blk.state != want {
		return noBlock, false
	}
	return b.id, true
}

func (a *Allocator) addrLocked(id blockID) int64 {
	b := &a.blocks[id]
	return a.segs[b.seg].addr + b.off
}

func (a *Allocator) vaddrLocked(id blockID) int64 {
	b := &a.blocks[id]
	return a.segs[b.seg].vaddr + b.off
}

// lessLocked orders free blocks by size, then virtual address.
func (a *Allocator) lessLocked(x, y blockID) bool {
	sx, sy := a.blocks[x].size, a.blocks[y].size
	if sx != sy {
		return sx < sy
	}
	return a.vaddrLocked(x) < a.vaddrLocked(y)
}

func (a *Allocator) poolOfLocked(id blockID) *pool {
	return &a.pools[a.segs[a.blocks[id].seg].pool]
}

func (a *Allocator) poolInsertLocked(id blockID) {
	p := a.poolOfLocked(id)
	i := sort.Search(len(p.free), func(i int) bool { return !a.lessLocked(p.free[i], id) })
	p.free = slices.Insert(p.free, i, id)
}

func (a *Allocator) poolRemoveLocked(id blockID) {
	p := a.poolOfLocked(id)
	i := sort.Search(len(p.free), func(i int) bool { return !a.lessLocked(p.free[i], id) })
	if i == len(p.free) || p.free[i] != id {
		panic("device: internal error: free block missing from its pool")
	}
	p.free = slices.Delete(p.free, i, i+1)
}

// bestFitLocked takes the smallest free block of at least size bytes (the
// lowest address among equals) out of pool k.
func (a *Allocator) bestFitLocked(k poolKind, size int64) blockID {
	p := &a.pools[k]
	i := sort.Search(len(p.free), func(i int) bool { return a.blocks[p.free[i]].size >= size })
	if i == len(p.free) {
		return noBlock
	}
	id := p.free[i]
	p.free = slices.Delete(p.free, i, i+1)
	return id
}

func (a *Allocator) newBlockLocked() blockID {
	if n := len(a.freeIDs); n > 0 {
		id := a.freeIDs[n-1]
		a.freeIDs = a.freeIDs[:n-1]
		return id
	}
	a.blocks = append(a.blocks, block{})
	return blockID(len(a.blocks) - 1)
}

func (a *Allocator) dropBlockLocked(id blockID) {
	a.blocks[id] = block{seg: -1, prev: noBlock, next: noBlock}
	a.freeIDs = append(a.freeIDs, id)
}

// mapSegmentLocked maps a segment of size bytes for pool k and returns its
// single free block (not in the pool), or noBlock if the limit or the
// source refuses (with the source's error).
func (a *Allocator) mapSegmentLocked(size int64, k poolKind, retry bool) (blockID, error) {
	if retry {
		a.stats.NumAllocRetries++
	}
	// Both checks are written as subtractions so that they cannot wrap:
	// the limit, and the virtual address space (which also bounds the
	// reserved bytes and every statistic below them).
	if lim := a.limitLocked(); lim > 0 && size > lim-a.stats.ReservedBytes.Current {
		return noBlock, nil
	}
	if size > math.MaxInt64-a.nextVaddr {
		return noBlock, errAddressSpace
	}
	data, err := a.src.Map(size)
	if err != nil {
		return noBlock, err
	}
	a.mapped.add(data)
	a.stats.NumDeviceAlloc++
	var si int32
	if n := len(a.freeSegs); n > 0 {
		si = a.freeSegs[n-1]
		a.freeSegs = a.freeSegs[:n-1]
	} else {
		a.segs = append(a.segs, segment{})
		si = int32(len(a.segs) - 1)
	}
	vaddr := a.nextVaddr
	a.nextVaddr += size
	addr := vaddr
	if data != nil {
		addr = int64(uintptr(unsafe.Pointer(unsafe.SliceData(data))))
	}
	id := a.newBlockLocked()
	a.blocks[id] = block{seg: si, size: size, prev: noBlock, next: noBlock}
	a.segs[si] = segment{vaddr: vaddr, addr: addr, size: size, pool: k, data: data, first: id, live: true}
	a.stats.Segment.add(k, 1)
	a.stats.ReservedBytes.add(k, size)
	if a.hist.on {
		a.recordLocked(TraceEntry{Action: ActionSegmentAlloc, Addr: addr, Size: size, Pool: k.String()}, nil)
	}
	return id, nil
}

// releaseCachedLocked unmaps every segment whose only block is free
// (PyTorch's release_cached_blocks), smallest first.
func (a *Allocator) releaseCachedLocked() {
	for k := range a.pools {
		var whole []blockID
		for _, id := range a.pools[k].free {
			if b := &a.blocks[id]; b.prev == noBlock && b.next == noBlock {
				whole = append(whole, id)
			}
		}
		for _, id := range whole {
			a.poolRemoveLocked(id)
			a.unmapSegmentLocked(id)
		}
	}
}

func (a *Allocator) unmapSegmentLocked(id blockID) {
	si := a.blocks[id].seg
	seg := a.segs[si]
	if seg.data != nil {
		a.mapped.remove(seg.data)
		_ = a.src.Unmap(seg.data)
	}
	a.stats.NumDeviceFree++
	a.stats.Segment.sub(seg.pool, 1)
	a.stats.ReservedBytes.sub(seg.pool, seg.size)
	if a.hist.on {
		a.recordLocked(TraceEntry{Action: ActionSegmentFree, Addr: seg.addr, Size: seg.size, Pool: seg.pool.String()}, nil)
	}
	a.segs[si] = segment{first: noBlock}
	a.freeSegs = append(a.freeSegs, si)
	a.dropBlockLocked(id)
}

func shouldSplit(k poolKind, blockSize, size int64) bool {
	rest := blockSize - size
	if k == smallPool {
		return rest >= MinBlockSize
	}
	return rest > SmallSize
}

// allocFoundLocked hands out free block id (already out of its pool) for a
// rounded request of size bytes, splitting off the rest when worth it, and
// keeps the inactive-split statistics as PyTorch's alloc_found_block.
func (a *Allocator) allocFoundLocked(id blockID, size, req int64, tag Tag, arena bool) {
	b := &a.blocks[id]
	k := a.segs[b.seg].pool
	alreadySplit := b.prev != noBlock || b.next != noBlock
	if shouldSplit(k, b.size, size) {
		rem := a.newBlockLocked()
		b = &a.blocks[id] // newBlockLocked may have moved the slice
		a.blocks[rem] = block{seg: b.seg, off: b.off + size, size: b.size - size, prev: id, next: b.next, dirty: b.dirty}
		if b.next != noBlock {
			a.blocks[b.next].prev = rem
		}
		b.next = rem
		b.size = size
		a.poolInsertLocked(rem)
		if alreadySplit {
			// A free block of a split segment shrank by size bytes.
			a.stats.InactiveSplitBytes.sub(k, size)
		} else {
			// A whole segment became split: its rest is inactive.
			a.stats.InactiveSplit.add(k, 1)
			a.stats.InactiveSplitBytes.add(k, a.blocks[rem].size)
		}
	} else if alreadySplit {
		a.stats.InactiveSplit.sub(k, 1)
		a.stats.InactiveSplitBytes.sub(k, b.size)
	}
	a.seq++
	b.seq, b.requested, b.tag = a.seq, req, tag
	if arena {
		b.state = blockArena
		if a.hist.on {
			a.recordLocked(TraceEntry{Action: ActionReserve, Addr: a.addrLocked(id), Size: req, BlockSize: b.size, Pool: k.String()}, &tag)
		}
		return
	}
	b.state = blockAllocated
	a.countAllocLocked(k, b.size, req, tag.Category)
	if a.hist.on {
		a.recordLocked(TraceEntry{Action: ActionAlloc, Addr: a.addrLocked(id), Size: req, BlockSize: b.size, Pool: k.String()}, &tag)
	}
}

// freeBlockLocked returns an allocated or arena block to its pool, merging
// it with free neighbours, and keeps the inactive-split statistics as
// PyTorch's free_block.
func (a *Allocator) freeBlockLocked(id blockID) {
	k := a.segs[a.blocks[id].seg].pool
	var netBlocks, netBytes int64
	for _, c := range [2]blockID{a.blocks[id].prev, a.blocks[id].next} {
		if c != noBlock && a.blocks[c].state == blockFree {
			netBlocks--
			netBytes -= a.mergeLocked(id, c)
		}
	}
	b := &a.blocks[id]
	b.state, b.requested, b.tag, b.seq = blockFree, 0, Tag{}, 0
	a.poolInsertLocked(id)
	if b.prev != noBlock || b.next != noBlock {
		netBlocks++
		netBytes += b.size
	}
	switch {
	case netBlocks > 0:
		a.stats.InactiveSplit.add(k, netBlocks)
	case netBlocks < 0:
		a.stats.InactiveSplit.sub(k, -netBlocks)
	}
	switch {
	case netBytes > 0:
		a.stats.InactiveSplitBytes.add(k, netBytes)
	case netBytes < 0:
		a.stats.InactiveSplitBytes.sub(k, -netBytes)
	}
}

// mergeLocked absorbs free neighbour src into dst and returns src's size.
func (a *Allocator) mergeLocked(dst, src blockID) int64 {
	a.poolRemoveLocked(src)
	d, s := &a.blocks[dst], a.blocks[src]
	if d.prev == src {
		d.off = s.off
		d.prev = s.prev
		if d.prev != noBlock {
			a.blocks[d.prev].next = dst
		} else {
			a.segs[d.seg].first = dst
		}
	} else {
		d.next = s.next
		if d.next != noBlock {
			a.blocks[d.next].prev = dst
		}
	}
	d.size += s.size
	d.dirty = d.dirty || s.dirty
	a.dropBlockLocked(src)
	return s.size
}

func (a *Allocator) countAllocLocked(k poolKind, size, requested int64, c Category) {
	s := &a.stats
	s.Allocation.add(k, 1)
	s.AllocatedBytes.add(k, size)
	s.Active.add(k, 1)
	s.ActiveBytes.add(k, size)
	s.RequestedBytes.add(k, requested)
	if c < numCategories {
		s.ByCategory[c] += size
	}
	if s.AllocatedBytes.Current == s.AllocatedBytes.Peak {
		s.ByCategoryAtPeak = s.ByCategory
	}
}

func (a *Allocator) countFreeLocked(k poolKind, size, requested int64, c Category) {
	s := &a.stats
	s.Allocation.sub(k, 1)
	s.AllocatedBytes.sub(k, size)
	s.Active.sub(k, 1)
	s.ActiveBytes.sub(k, size)
	s.RequestedBytes.sub(k, requested)
	if c < numCategories {
		s.ByCategory[c] -= size
	}
}
