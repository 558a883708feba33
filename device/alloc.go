package device

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Category says what an allocation is for.
type Category uint8

const (
	Parameter Category = iota
	Gradient
	OptimizerState
	Activation
	Input
	Temporary
	Workspace
	numCategories
)

var categoryNames = [...]string{"parameter", "gradient", "optimizer state", "activation", "input", "temporary", "workspace"}

func (c Category) String() string { return categoryNames[c] }

// Categories lists every category in display order.
func Categories() []Category {
	out := make([]Category, numCategories)
	for i := range out {
		out[i] = Category(i)
	}
	return out
}

// ParseCategory maps a plan or user category name to a Category.
func ParseCategory(s string) (Category, error) {
	for i, n := range categoryNames {
		if n == s {
			return Category(i), nil
		}
	}
	switch s {
	case "constant":
		return Input, nil
	case "buffer":
		return Parameter, nil
	}
	return 0, fmt.Errorf("unknown memory category %q (valid: %s)", s, strings.Join(categoryNames[:], ", "))
}

// Tag says who asked for an allocation.
type Tag struct {
	Category Category
	Module   string // module path, "" at top level
	Op       string
}

// Block is an allocation.
type Block struct {
	Size      int64 // rounded
	Requested int64
	Data      []byte // nil on the meta device
	Tag       Tag
}

// Stat is a current/peak/allocated/freed counter, as PyTorch's.
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

// Stats are the allocator's counters.
type Stats struct {
	AllocatedBytes Stat
	ReservedBytes  Stat
	RequestedBytes Stat
	Allocations    Stat
	Segments       Stat
	NumOOMs        int64
	ByCategory     [numCategories]int64
	// ByCategoryAtPeak is the category breakdown when AllocatedBytes peaked.
	ByCategoryAtPeak [numCategories]int64
}

// Allocator hands out blocks and keeps statistics. One mutex guards
// everything; no method calls out while holding it.
type Allocator struct {
	mu       sync.Mutex
	src      source
	capacity int64
	stats    Stats
}

// NewAllocator returns an allocator over src; capacity 0 means unlimited.
func NewAllocator(src source, capacity int64) *Allocator {
	return &Allocator{src: src, capacity: capacity}
}

// Capacity is the device's memory limit in bytes (0: unlimited).
func (a *Allocator) Capacity() int64 { return a.capacity }

// ErrOutOfMemory is matched by errors.Is for every *OutOfMemoryError.
var ErrOutOfMemory = errors.New("out of memory")

// OutOfMemoryError is returned when an allocation does not fit.
type OutOfMemoryError struct {
	Requested  int64
	Allocated  int64
	Reserved   int64
	Capacity   int64
	Tag        Tag
	ByCategory map[string]int64
}

func (e *OutOfMemoryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "out of memory: tried to allocate %s for %s", FormatBytes(e.Requested), e.Tag.Category)
	if e.Tag.Module != "" || e.Tag.Op != "" {
		fmt.Fprintf(&b, " (%s %s)", e.Tag.Module, e.Tag.Op)
	}
	fmt.Fprintf(&b, "; capacity %s, %s allocated, %s reserved", FormatBytes(e.Capacity), FormatBytes(e.Allocated), FormatBytes(e.Reserved))
	if len(e.ByCategory) > 0 {
		keys := make([]string, 0, len(e.ByCategory))
		for k := range e.ByCategory {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(" [")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s", k, FormatBytes(e.ByCategory[k]))
		}
		b.WriteString("]")
	}
	fmt.Fprintf(&b, ". A capacity of at least %s would fit; or lower the batch size or use --budget to let headroom plan recomputation", FormatBytes(e.Allocated+e.Requested))
	return b.String()
}

// Is lets errors.Is(err, ErrOutOfMemory) match.
func (e *OutOfMemoryError) Is(t error) bool { return t == ErrOutOfMemory }

const pageSize = 4096

// RoundSize is the size statistics count for a request: PyTorch's 512-byte
// granularity, at least 512.
func RoundSize(n int64) int64 {
	if n <= 0 {
		return 512
	}
	return (n + 511) / 512 * 512
}

// Allocate returns a zeroed block of at least size bytes, counted as one
// allocation.
func (a *Allocator) Allocate(size int64, tag Tag) (*Block, error) {
	b, err := a.Reserve(size, tag)
	if err != nil {
		return nil, err
	}
	a.Track(RoundSize(size), size, tag.Category)
	return b, nil
}

// Reserve maps a segment without counting an allocation: the arena of a
// step, whose tensors are counted one by one with Track as they come alive.
func (a *Allocator) Reserve(size int64, tag Tag) (*Block, error) {
	rounded := (max(size, 1) + pageSize - 1) / pageSize * pageSize
	a.mu.Lock()
	if a.capacity > 0 && a.stats.ReservedBytes.Current+rounded > a.capacity {
		a.stats.NumOOMs++
		err := a.oomLocked(size, tag)
		a.mu.Unlock()
		return nil, err
	}
	a.mu.Unlock()
	data, err := a.src.Map(rounded)
	if err != nil {
		return nil, err
	}
	b := &Block{Size: rounded, Requested: size, Data: data, Tag: tag}
	if data != nil {
		b.Data = data[:size]
	}
	a.mu.Lock()
	a.stats.ReservedBytes.add(rounded)
	a.stats.Segments.add(1)
	a.mu.Unlock()
	return b, nil
}

func (a *Allocator) oomLocked(size int64, tag Tag) error {
	by := map[string]int64{}
	for c, v := range a.stats.ByCategory {
		if v > 0 {
			by[Category(c).String()] = v
		}
	}
	return &OutOfMemoryError{Requested: size, Allocated: a.stats.AllocatedBytes.Current, Reserved: a.stats.ReservedBytes.Current, Capacity: a.capacity, Tag: tag, ByCategory: by}
}

// Free releases a block from Allocate.
func (a *Allocator) Free(b *Block) {
	if b == nil {
		return
	}
	a.Untrack(RoundSize(b.Requested), b.Requested, b.Tag.Category)
	a.Release(b)
}

// Release returns a segment from Reserve to the OS.
func (a *Allocator) Release(b *Block) {
	if b == nil {
		return
	}
	if b.Data != nil {
		_ = a.src.Unmap(b.Data[:cap(b.Data)])
	}
	a.mu.Lock()
	a.stats.ReservedBytes.sub(b.Size)
	a.stats.Segments.sub(1)
	a.mu.Unlock()
	b.Data = nil
}

// Track counts a sub-allocation inside a block (a tensor placed in a step's
// arena) as an allocation, as PyTorch counts tensors.
func (a *Allocator) Track(size, requested int64, c Category) {
	a.mu.Lock()
	a.stats.AllocatedBytes.add(size)
	a.stats.RequestedBytes.add(requested)
	a.stats.Allocations.add(1)
	a.stats.ByCategory[c] += size
	if a.stats.AllocatedBytes.Current == a.stats.AllocatedBytes.Peak {
		a.stats.ByCategoryAtPeak = a.stats.ByCategory
	}
	a.mu.Unlock()
}

// Untrack ends a Track.
func (a *Allocator) Untrack(size, requested int64, c Category) {
	a.mu.Lock()
	a.stats.AllocatedBytes.sub(size)
	a.stats.RequestedBytes.sub(requested)
	a.stats.Allocations.sub(1)
	a.stats.ByCategory[c] -= size
	a.mu.Unlock()
}

// Stats returns a copy of the counters.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// ResetPeak sets every peak to its current value.
func (a *Allocator) ResetPeak() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range []*Stat{&a.stats.AllocatedBytes, &a.stats.ReservedBytes, &a.stats.RequestedBytes, &a.stats.Allocations, &a.stats.Segments} {
		s.Peak = s.Current
	}
	a.stats.ByCategoryAtPeak = a.stats.ByCategory
}

// MemoryAllocated is torch.cuda.memory_allocated.
func (a *Allocator) MemoryAllocated() int64 { return a.Stats().AllocatedBytes.Current }

// MaxMemoryAllocated is torch.cuda.max_memory_allocated.
func (a *Allocator) MaxMemoryAllocated() int64 { return a.Stats().AllocatedBytes.Peak }

// MemoryReserved is torch.cuda.memory_reserved.
func (a *Allocator) MemoryReserved() int64 { return a.Stats().ReservedBytes.Current }
