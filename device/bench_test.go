package device

import "testing"

func BenchmarkAllocateFree(b *testing.B) {
	for _, c := range []struct {
		name string
		size int64
	}{{"small", 4 << 10}, {"large", 4 << 20}} {
		b.Run(c.name, func(b *testing.B) {
			a := Meta().Alloc
			keep := mustAllocB(b, a, c.size) // keeps the segment split
			for b.Loop() {
				a.Free(mustAllocB(b, a, c.size))
			}
			a.Free(keep)
		})
	}
}

// TrackIn/UntrackIn run for every buffer of every step.
func BenchmarkTrackUntrack(b *testing.B) {
	for _, hist := range []int{0, 4096} {
		name := "history-off"
		if hist > 0 {
			name = "history-on"
		}
		b.Run(name, func(b *testing.B) {
			a := Meta().Alloc
			a.RecordHistory(hist)
			arena, _ := a.Reserve(1<<20, Tag{})
			tag := Tag{Category: Activation, Module: "layer1.0.conv1", Op: "conv2d"}
			for b.Loop() {
				a.TrackIn(arena, 4096, 2048, 2000, tag)
				a.UntrackIn(arena, 4096)
			}
		})
	}
}

func mustAllocB(b *testing.B, a *Allocator, n int64) *Block {
	blk, err := a.Allocate(n, Tag{})
	if err != nil {
		b.Fatal(err)
	}
	return blk
}
