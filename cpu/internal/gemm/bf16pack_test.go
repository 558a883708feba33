package gemm

import (
	"math/rand/v2"
	"testing"
)

// PackLanes8 writes the pairs its definition names, for odd and even
// offsets, panel widths 8, 16 and 24, and several blocks.
func TestPackLanes8(t *testing.T) {
	if !lanesOK {
		t.Skip("no assembly for PackLanes8 on this CPU")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	src := make([]uint16, 4096)
	for i := range src {
		src[i] = uint16(rng.Uint32())
	}
	for _, w := range []int{8, 16, 24} {
		for blocks := 1; blocks <= 3; blocks++ {
			var offs [8]int
			for i := range offs {
				offs[i] = rng.IntN(len(src) - 32*blocks)
			}
			dst := make([]uint32, 16*blocks*w)
			for i := range dst {
				dst[i] = 0xdeadbeef
			}
			if !PackLanes8(src, &offs, blocks, dst, w) {
				t.Fatal("PackLanes8 declined with its assembly present")
			}
			for q := 0; q < 16*blocks; q++ {
				for i := 0; i < w; i++ {
					got := dst[q*w+i]
					want := uint32(0xdeadbeef) // lanes past 8 untouched
					if i < 8 {
						want = uint32(src[offs[i]+2*q]) | uint32(src[offs[i]+2*q+1])<<16
					}
					if got != want {
						t.Fatalf("w %d, %d blocks: dst[%d*w+%d] = %#x, want %#x", w, blocks, q, i, got, want)
					}
				}
			}
		}
	}
}
