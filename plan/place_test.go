package plan

import (
	"math/rand"
	"slices"
	"sort"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/trace"
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
		offs := make([]int64, n)
		if x, y := placeBySort(a), place(b, offs); x != y {
			t.Fatalf("trial %d: arena %d, want %d", trial, y, x)
		}
		for i := range a {
			if a[i].Offset != offs[i] {
				t.Fatalf("trial %d: buffer %d at %d, want %d", trial, i, offs[i], a[i].Offset)
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
	offs := make([]int64, len(bufs))
	for b.Loop() {
		place(bufs, offs)
	}
}

// The orders are placed a batch of threads at a time; the plan must be the
// one a single thread makes, on a problem loose enough that the jittered
// orders run too.
func TestAssignOffsetsIndependentOfThreads(t *testing.T) {
	for _, n := range []int{7, 300, 2000} {
		r := rand.New(rand.NewSource(int64(n)))
		steps := n / 3
		bufs := make([]*Buffer, n)
		for i := range bufs {
			s := r.Intn(steps)
			bufs[i] = &Buffer{ID: i, Start: s, End: min(steps-1, s+r.Intn(1+r.Intn(steps))), Size: int64(Align * (1 + r.Intn(1+r.Intn(256))))}
		}
		var want []int64
		for _, threads := range []int{1, 2, 3, 8} {
			p := &Plan{Order: make([]*trace.Node, steps), Buffers: bufs}
			pool := parallel.NewPool(threads)
			p.assignOffsets(pool)
			pool.Close()
			got := make([]int64, len(p.Buffers))
			for _, b := range p.Buffers {
				got[b.ID] = b.Offset
			}
			if lb := p.peakLowerBound(); p.ArenaBytes < lb {
				t.Fatalf("%d buffers: arena %d below the live peak %d", n, p.ArenaBytes, lb)
			}
			if threads == 1 {
				want = got
				if n > 7 && p.ArenaBytes <= p.peakLowerBound()*101/100 {
					t.Fatalf("%d buffers: arena %d within 1%% of the live peak %d: the jittered orders do not run", n, p.ArenaBytes, p.peakLowerBound())
				}
				continue
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%d buffers: offsets with %d threads differ from one thread's", n, threads)
			}
		}
	}
}
