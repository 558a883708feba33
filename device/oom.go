package device

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// OutOfMemoryError is returned when an allocation does not fit, after the
// allocator has unmapped every fully cached segment and retried. The
// numbers are those after that retry.
type OutOfMemoryError struct {
	Device    string // "cpu" or "meta"
	Tag       Tag    // who asked
	Requested int64  // bytes asked for
	Size      int64  // the request rounded (RoundSize)
	Pool      string // "small" or "large": the pool that serves the request
	// SegmentSize is the segment the request needed, none of the cached
	// blocks being large enough.
	SegmentSize int64

	Allocated int64 // bytes of live allocations
	Reserved  int64 // bytes of mapped segments
	// ReservedButUnallocated is Reserved - Allocated, as PyTorch's message
	// says; it includes idle space of step arenas.
	ReservedButUnallocated int64
	// FreeCached is the bytes of free cached blocks in the request's pool,
	// and LargestFreeBlock the largest of them.
	FreeCached       int64
	LargestFreeBlock int64

	Capacity int64   // device capacity (0: unlimited)
	Fraction float64 // memory fraction
	Limit    int64   // Capacity x Fraction (0: unlimited)
	// ByCategory is the allocated bytes by category name.
	ByCategory map[string]int64

	// Fragmented reports that the free cached blocks of the pool add up to
	// the request, but none is large enough and no new segment fits.
	Fragmented bool
	// Suggested is the smallest limit at which this request would have
	// succeeded (the segments still held plus the new one), rounded up to a
	// MiB; the capacity to ask for is Suggested / Fraction (SuggestedCapacity).
	Suggested int64
	// Cause is the operating system's error when the limit allowed the new
	// segment but mapping it failed; nil when the limit refused it.
	Cause error
}

// SuggestedCapacity is the device capacity at which the request would have
// fit, given the memory fraction, rounded up to a MiB.
func (e *OutOfMemoryError) SuggestedCapacity() int64 {
	f := e.Fraction
	if f <= 0 || f > 1 {
		f = 1
	}
	// Saturated: a float64 past MaxInt64 does not convert.
	cf := float64(e.Suggested)/f + 0.5
	if cf >= float64(math.MaxInt64-(1<<20)) {
		return math.MaxInt64
	}
	c := int64(cf)
	return (c + (1<<20 - 1)) >> 20 << 20
}

func (e *OutOfMemoryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "out of memory on the %s device: tried to allocate %s for %s", e.Device, FormatBytes(e.Requested), e.Tag.Category)
	if e.Tag.Module != "" || e.Tag.Op != "" {
		fmt.Fprintf(&b, " (%s)", strings.TrimSpace(e.Tag.Module+" "+e.Tag.Op))
	}
	if e.Limit > 0 {
		fmt.Fprintf(&b, ". Limit %s", FormatBytes(e.Limit))
		if e.Fraction < 1 && e.Capacity > 0 {
			fmt.Fprintf(&b, " (capacity %s x memory fraction %.3g)", FormatBytes(e.Capacity), e.Fraction)
		}
		b.WriteString(";")
	} else {
		b.WriteString(".")
	}
	fmt.Fprintf(&b, " %s allocated", FormatBytes(e.Allocated))
	if len(e.ByCategory) > 0 {
		keys := make([]string, 0, len(e.ByCategory))
		for k := range e.ByCategory {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if e.ByCategory[keys[i]] != e.ByCategory[keys[j]] {
				return e.ByCategory[keys[i]] > e.ByCategory[keys[j]]
			}
			return keys[i] < keys[j]
		})
		b.WriteString(" (")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s", k, FormatBytes(e.ByCategory[k]))
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, ", %s reserved but unallocated, %s in free blocks of the %s pool (the largest %s).",
		FormatBytes(e.ReservedButUnallocated), FormatBytes(e.FreeCached), e.Pool, FormatBytes(e.LargestFreeBlock))
	capHint := func() string {
		if e.Capacity == 0 && e.Limit > 0 {
			return fmt.Sprintf("raise the memory fraction so that the limit is at least %s", FormatBytes(e.Suggested))
		}
		c := e.SuggestedCapacity()
		return fmt.Sprintf("set a capacity of at least %s (%s:mem=%dMiB)", FormatBytes(c), e.Device, c>>20)
	}
	switch {
	case e.Cause != nil:
		fmt.Fprintf(&b, " The operating system refused a new %s segment (%v): free memory on the machine, lower the batch size, or use --budget to let headroom plan recomputation.", FormatBytes(e.SegmentSize), e.Cause)
	case e.Fragmented:
		fmt.Fprintf(&b, " Fragmentation is the cause: the free blocks add up to the %s requested but none is large enough, and the %s segment it needs does not fit. Allocate long-lived tensors before short-lived ones, call EmptyCache between phases, or %s.",
			FormatBytes(e.Size), FormatBytes(e.SegmentSize), capHint())
	default:
		fmt.Fprintf(&b, " To fit, %s: that holds the %s of segments in use and the new %s segment this request needs. Or lower the batch size, or use --budget to let headroom plan recomputation.",
			capHint(), FormatBytes(e.Reserved), FormatBytes(e.SegmentSize))
	}
	return b.String()
}

// Is lets errors.Is(err, ErrOutOfMemory) match.
func (e *OutOfMemoryError) Is(t error) bool { return t == ErrOutOfMemory }

// oomLocked counts and records an out-of-memory and describes it.
func (a *Allocator) oomLocked(req, size, segSize int64, k poolKind, tag Tag, cause error) *OutOfMemoryError {
	a.stats.NumOOMs++
	lim := a.limitLocked()
	e := &OutOfMemoryError{
		Device: a.src.Name(), Tag: tag, Requested: req, Size: size, Pool: k.String(), SegmentSize: segSize,
		Allocated: a.stats.AllocatedBytes.Current, Reserved: a.stats.ReservedBytes.Current,
		Capacity: a.capacity, Fraction: a.fraction, Limit: lim, ByCategory: map[string]int64{}, Cause: cause,
	}
	e.ReservedButUnallocated = e.Reserved - e.Allocated
	for _, id := range a.pools[k].free {
		s := a.blocks[id].size
		e.FreeCached += s
		e.LargestFreeBlock = max(e.LargestFreeBlock, s)
	}
	for c, v := range a.stats.ByCategory {
		if v != 0 {
			e.ByCategory[Category(c).String()] = v
		}
	}
	e.Fragmented = e.FreeCached >= size
	// Saturated rather than wrapped when the request used up the address
	// space (segSize is at most MaxAllocSize rounded, Reserved below 2^63).
	if segSize > math.MaxInt64-(1<<20)-e.Reserved {
		e.Suggested = math.MaxInt64
	} else {
		e.Suggested = (e.Reserved + segSize + (1<<20 - 1)) >> 20 << 20
	}
	if a.hist.on {
		free := int64(-1)
		if lim > 0 {
			free = lim - e.Reserved
		}
		a.recordLocked(TraceEntry{Action: ActionOOM, Size: size, DeviceFree: free, Pool: k.String()}, &tag)
	}
	return e
}
