package plan

import (
	"math/rand"
	"sort"
	"testing"
)

// placeBySort is place as first written: the conflicting buffers of each
// new one collected and sorted by offset. place keeps the placed buffers
// sorted instead; the offsets must be the same.
func placeBySort(bufs []*Buffer) int64 {
	var placed []*Buffer
	var size int64
	for _, b := range bufs {
		var conflicts []*Buffer
		for _, o := range placed {
			if o.Start <= b.End && b.Start <= o.End {
				conflicts = append(conflicts, o)
			}
		}
		sort.Slice(conflicts, func(i, j int) bool { return conflicts[i].Offset < conflicts[j].Offset })
		off, best, bestGap := int64(0), int64(-1), int64(-1)
		for _, o := range conflicts {
			if o.Offset >= off+b.Size {
				if gap := o.Offset - off; bestGap < 0 || gap < bestGap {
					best, bestGap = off, gap
				}
			}
			off = max(off, o.Offset+o.Size)
		}
		if best < 0 {
			best = off
		}
		b.Offset = best
		size = max(size, b.Offset+b.Size)
		placed = append(placed, b)
	}
	return size
}

func TestPlaceMatchesSortedConflicts(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for trial := 0; trial < 500; trial++ {
		n, steps := 1+r.Intn(200), 1+r.Intn(100)
		a, b := make([]*Buffer, n), make([]*Buffer, n)
		for i := range a {
			s := r.Intn(steps)
			a[i] = &Buffer{ID: i, Start: s, End: s + r.Intn(1+r.Intn(steps)), Size: int64(Align * (1 + r.Intn(1+r.Intn(64))))}
			c := *a[i]
			b[i] = &c
		}
		if x, y := placeBySort(a), place(b); x != y {
			t.Fatalf("trial %d: arena %d, want %d", trial, y, x)
		}
		for i := range a {
			if a[i].Offset != b[i].Offset {
				t.Fatalf("trial %d: buffer %d at %d, want %d", trial, i, b[i].Offset, a[i].Offset)
			}
		}
	}
}

// trainingBuffers is a step-shaped placement problem: n buffers over a
// forward and backward pass of steps nodes, half of them saved activations
// (made in the forward pass, freed at the mirror step of the backward
// pass) and half temporaries living a few steps, in the largest-first
// order of Make's first attempt.
func trainingBuffers(n, steps int) []*Buffer {
	r := rand.New(rand.NewSource(1))
	bufs := make([]*Buffer, n)
	for i := range bufs {
		s := r.Intn(steps)
		e := s + 1 + r.Intn(4)
		if i%2 == 0 {
			s = r.Intn(steps / 2)
			e = steps - 1 - s + r.Intn(3)
		}
		bufs[i] = &Buffer{ID: i, Start: s, End: min(e, steps-1), Size: int64(Align * (1 + r.Intn(2048)))}
	}
	sort.SliceStable(bufs, func(i, j int) bool { return bufs[i].Size > bufs[j].Size })
	return bufs
}

// BenchmarkPlace is one placement of an RRDBNet-sized step (4000
// buffers); the budget planner runs hundreds of them.
func BenchmarkPlace(b *testing.B) {
	bufs := trainingBuffers(4000, 6000)
	for b.Loop() {
		place(bufs)
	}
}
