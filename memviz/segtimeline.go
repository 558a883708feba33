package memviz

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/headroom-ml/headroom/device"
)

// The cached-segment timeline: the memory the allocator reserved (mapped
// segments, cudaMalloc'ed for PyTorch) after every event, stacked by
// segment, as memory_viz's Active Cached Segment Timeline shows it. The
// gap between it and the active timeline is the cache.

// segSpan is a segment (or, for expandable segments, a mapped range) alive
// over [start, end) of the events; start -1: mapped before the history.
type segSpan struct {
	addr, size int64
	typ        string
	start, end int
}

// segmentSpans finds every segment's life by undoing the segment events
// from the final state, as segmentsAt does for one moment.
func (a *Analysis) segmentSpans() []segSpan {
	np := a.points()
	var pending []segSpan // alive at the point being undone; start not yet known
	for _, g := range a.snap.Segments {
		if g.Device == a.device {
			pending = append(pending, segSpan{addr: g.Address, size: g.TotalSize, typ: g.Type, start: -1, end: np})
		}
	}
	var done []segSpan
	for j := len(a.events) - 1; j >= 0; j-- {
		e := &a.events[j]
		switch e.Action {
		case device.ActionSegmentFree, actionSegmentUnmap:
			pending = append(pending, segSpan{addr: e.Addr, size: e.Size, typ: e.Pool, start: -1, end: j})
		case device.ActionSegmentAlloc, actionSegmentMap:
			// The range [addr, addr+size) was mapped here: the pending
			// spans it overlaps start here (split where it covers part).
			lo, hi := e.Addr, e.Addr+e.Size
			for k := 0; k < len(pending); k++ {
				p := pending[k]
				plo, phi := p.addr, p.addr+p.size
				if phi <= lo || plo >= hi {
					continue
				}
				olo, ohi := max(lo, plo), min(hi, phi)
				done = append(done, segSpan{addr: olo, size: ohi - olo, typ: cmp.Or(p.typ, e.Pool), start: j, end: p.end})
				pending = slices.Delete(pending, k, k+1)
				k--
				if plo < olo {
					pending = append(pending, segSpan{addr: plo, size: olo - plo, typ: p.typ, start: -1, end: p.end})
				}
				if ohi < phi {
					pending = append(pending, segSpan{addr: ohi, size: phi - ohi, typ: p.typ, start: -1, end: p.end})
				}
			}
		}
	}
	done = append(done, pending...)
	slices.SortFunc(done, func(x, y segSpan) int { return cmp.Or(cmp.Compare(x.start, y.start), cmp.Compare(x.addr, y.addr)) })
	return done
}

// sweepReserved computes the reserved bytes after every event and gives
// the largest segments bands of their own.
func (a *Analysis) sweepReserved() {
	np := a.points()
	a.segs = a.segmentSpans()
	delta := make([]int64, np+1)
	var base int64
	for _, s := range a.segs {
		if s.start >= s.end {
			continue
		}
		if s.start < 0 {
			base += s.size
		} else {
			delta[s.start] += s.size
		}
		if s.end < np {
			delta[s.end] -= s.size
		}
	}
	a.reserved = make([]int64, np)
	cur := base
	for i := range np {
		cur += delta[i]
		a.reserved[i] = cur
	}
	order := make([]int, len(a.segs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(a.segs[y].size, a.segs[x].size) })
	own := order[:min(len(order), MaxAllocationSeries)]
	slices.Sort(own) // in the order they were mapped
	a.segOf = make([]int, len(a.segs))
	for i := range a.segOf {
		a.segOf[i] = len(own)
	}
	a.segSeries = nil
	for k, j := range own {
		a.segOf[j] = k
		s := a.segs[j]
		when := "before the history"
		if s.start >= 0 {
			when = fmt.Sprintf("at event %d", s.start)
		}
		if s.end < np {
			when += fmt.Sprintf(", unmapped at event %d", s.end)
		}
		a.segSeries = append(a.segSeries, seriesInfo{key: fmt.Sprintf("s%d", j), color: palette[k%len(palette)],
			label: fmt.Sprintf("segment %#x (%s): %s, mapped %s", s.addr, cmp.Or(clipText(s.typ), "pool unknown"), device.FormatBytes(s.size), when)})
	}
	if len(own) < len(a.segs) {
		a.segSeries = append(a.segSeries, seriesInfo{key: "other", color: colorOther,
			label: fmt.Sprintf("%d smaller segments", len(a.segs)-len(own))})
	}
}

// reservedAt is the cached-segment timeline at the given (increasing)
// event indices, swept as seriesAt sweeps allocations.
func (a *Analysis) reservedAt(idx []int) *Timeline {
	np := a.points()
	cur := make([]int64, len(a.segSeries))
	var byStart, byEnd []int
	for i, s := range a.segs {
		if s.start >= s.end {
			continue
		}
		if s.start < 0 {
			cur[a.segOf[i]] += s.size
		} else {
			byStart = append(byStart, i)
		}
		if s.end < np {
			byEnd = append(byEnd, i)
		}
	}
	slices.SortStableFunc(byStart, func(x, y int) int { return cmp.Compare(a.segs[x].start, a.segs[y].start) })
	slices.SortStableFunc(byEnd, func(x, y int) int { return cmp.Compare(a.segs[x].end, a.segs[y].end) })
	t := &Timeline{Index: idx, Total: make([]int64, len(idx)), Series: make([]Series, len(a.segSeries))}
	for s, si := range a.segSeries {
		t.Series[s] = Series{Key: si.key, Label: si.label, Color: si.color, Values: make([]int64, 0, len(idx))}
	}
	ps, pe := 0, 0
	for k, i := range idx {
		for ; ps < len(byStart) && a.segs[byStart[ps]].start <= i; ps++ {
			cur[a.segOf[byStart[ps]]] += a.segs[byStart[ps]].size
		}
		for ; pe < len(byEnd) && a.segs[byEnd[pe]].end <= i; pe++ {
			cur[a.segOf[byEnd[pe]]] -= a.segs[byEnd[pe]].size
		}
		for s := range t.Series {
			t.Series[s].Values = append(t.Series[s].Values, cur[s])
		}
		t.Total[k] = a.reserved[i]
	}
	return t
}
