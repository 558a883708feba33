package device

import (
	"fmt"
	"sort"
)

// check verifies the allocator's structure against its statistics: blocks
// tile their segments in address order with consistent links, no two free
// blocks are neighbours, the free lists hold exactly the free blocks in
// (size, address) order, arena tensors lie inside their arena without
// overlapping, and every current statistic equals the sum recomputed from
// the blocks (per pool, and all = small + large). Legacy Track counts are
// not modelled: callers must not mix them in.
func (a *Allocator) check() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	type sums struct{ allocs, allocBytes, requested, segs, reserved, inactive, inactiveBytes int64 }
	var by [2]sums
	var cats [numCategories]int64
	nfree := 0
	isFree := map[blockID]bool{}
	for si := range a.segs {
		seg := &a.segs[si]
		if !seg.live {
			continue
		}
		s := &by[seg.pool]
		s.segs++
		s.reserved += seg.size
		n := 0
		for id := seg.first; id != noBlock; id = a.blocks[id].next {
			n++
		}
		var off int64
		prev := noBlock
		for id := seg.first; id != noBlock; id = a.blocks[id].next {
			b := &a.blocks[id]
			if int(b.seg) != si || b.off != off || b.prev != prev {
				return fmt.Errorf("segment %d: block %d at offset %d (want %d), seg %d, prev %d (want %d)", si, id, b.off, off, b.seg, b.prev, prev)
			}
			if b.size <= 0 || b.size%MinBlockSize != 0 {
				return fmt.Errorf("block %d has size %d", id, b.size)
			}
			switch b.state {
			case blockFree:
				if prev != noBlock && a.blocks[prev].state == blockFree {
					return fmt.Errorf("segment %d: free blocks %d and %d are neighbours", si, prev, id)
				}
				nfree++
				isFree[id] = true
				if n > 1 {
					s.inactive++
					s.inactiveBytes += b.size
				}
			case blockAllocated:
				s.allocs++
				s.allocBytes += b.size
				s.requested += b.requested
				cats[b.tag.Category] += b.size
				if b.size < RoundSize(b.requested) {
					return fmt.Errorf("block %d of %d bytes holds a request of %d", id, b.size, b.requested)
				}
			case blockArena:
				var offs []int64
				for o := range a.arenas[id] {
					offs = append(offs, o)
				}
				sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
				end := int64(0)
				for _, o := range offs {
					t := a.arenas[id][o]
					if o < end || o+t.size > b.size {
						return fmt.Errorf("arena %d: tensor at %d+%d overlaps or leaves the arena (%d bytes)", id, o, t.size, b.size)
					}
					end = o + t.size
					s.allocs++
					s.allocBytes += t.size
					s.requested += t.requested
					cats[t.tag.Category] += t.size
				}
			}
			off += b.size
			prev = id
		}
		if off != seg.size {
			return fmt.Errorf("segment %d: blocks cover %d of %d bytes", si, off, seg.size)
		}
	}
	for k := range a.pools {
		p := a.pools[k].free
		for i, id := range p {
			if !isFree[id] || a.segs[a.blocks[id].seg].pool != poolKind(k) {
				return fmt.Errorf("pool %d lists block %d, which is not free in that pool", k, id)
			}
			if i > 0 && !a.lessLocked(p[i-1], id) {
				return fmt.Errorf("pool %d out of order at %d", k, i)
			}
		}
		nfree -= len(p)
	}
	if nfree != 0 {
		return fmt.Errorf("%d free blocks missing from the free lists", nfree)
	}
	st := &a.stats
	for _, c := range []struct {
		name string
		p    PoolStat
		f    func(sums) int64
	}{
		{"allocation", st.Allocation, func(s sums) int64 { return s.allocs }},
		{"active", st.Active, func(s sums) int64 { return s.allocs }},
		{"allocated_bytes", st.AllocatedBytes, func(s sums) int64 { return s.allocBytes }},
		{"active_bytes", st.ActiveBytes, func(s sums) int64 { return s.allocBytes }},
		{"requested_bytes", st.RequestedBytes, func(s sums) int64 { return s.requested }},
		{"segment", st.Segment, func(s sums) int64 { return s.segs }},
		{"reserved_bytes", st.ReservedBytes, func(s sums) int64 { return s.reserved }},
		{"inactive_split", st.InactiveSplit, func(s sums) int64 { return s.inactive }},
		{"inactive_split_bytes", st.InactiveSplitBytes, func(s sums) int64 { return s.inactiveBytes }},
	} {
		small, large := c.f(by[smallPool]), c.f(by[largePool])
		if c.p.Small.Current != small || c.p.Large.Current != large || c.p.Current != small+large {
			return fmt.Errorf("%s: stats all/small/large %d/%d/%d, recomputed %d/%d/%d", c.name, c.p.Current, c.p.Small.Current, c.p.Large.Current, small+large, small, large)
		}
		for _, s := range []Stat{c.p.Stat, c.p.Small, c.p.Large} {
			if s.Current != s.Allocated-s.Freed || s.Peak < s.Current {
				return fmt.Errorf("%s: inconsistent counter %+v", c.name, s)
			}
		}
	}
	if cats != st.ByCategory {
		return fmt.Errorf("by category %v, recomputed %v", st.ByCategory, cats)
	}
	return nil
}

// liveSegments returns, for every mapped segment, whether it holds a block
// that is not free.
func (a *Allocator) liveSegments() []bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []bool
	for si := range a.segs {
		if !a.segs[si].live {
			continue
		}
		used := false
		for id := a.segs[si].first; id != noBlock; id = a.blocks[id].next {
			used = used || a.blocks[id].state != blockFree
		}
		out = append(out, used)
	}
	return out
}
