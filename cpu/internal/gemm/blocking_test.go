package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// Results are bitwise the same for every thread count, with the tile-column
// kernel or tile by tile, whichever K blocks are grouped: every element is
// summed in the same order. The shapes cover several K blocks in one group
// and in several (k·n past maxPackedB), edge tiles in M and N, transposes
// and beta != 0.
func TestBlockingBitwise(t *testing.T) {
	shapes := []struct {
		m, n, k     int
		tA, tB      bool
		alpha, beta float32
		skipInShort bool
		description string
	}{
		{50, 1024, 1100, false, false, 1, 0, false, "k·n over maxPackedB: K groups of 3 and 1"},
		{133, 70, 800, false, true, 0.5, 2, false, "3 K blocks in one group, transposed B, beta"},
		{301, 130, 517, true, false, 1, 1, false, "transposed A, M edge tiles"},
		{600, 2100, 1300, false, false, 1, 0, true, "many groups and M blocks"},
	}
	type variant struct {
		threads int
		tiles   bool
	}
	variants := []variant{{1, true}, {2, true}, {3, true}, {1, false}, {2, false}}
	for _, s := range shapes {
		if s.skipInShort && testing.Short() {
			continue
		}
		rng := rand.New(rand.NewPCG(uint64(s.m), uint64(s.k)))
		a := make([]float32, s.m*s.k)
		b := make([]float32, s.k*s.n)
		c0 := make([]float32, s.m*s.n)
		for _, x := range [][]float32{a, b, c0} {
			for i := range x {
				x[i] = rng.Float32() - 0.5
			}
		}
		lda, ldb := s.k, s.n
		if s.tA {
			lda = s.m
		}
		if s.tB {
			ldb = s.k
		}
		for _, kern := range kernels32() {
			var want []float32
			for _, v := range variants {
				name := fmt.Sprintf("%s/%dx%dx%d/t%d/tiles=%v", kern.name, s.m, s.n, s.k, v.threads, v.tiles)
				got := append([]float32(nil), c0...)
				ft := kern.fnTiles
				if !v.tiles {
					kern.fnTiles = nil
				}
				withKernel(kern, func() {
					Sgemm(s.tA, s.tB, s.m, s.n, s.k, s.alpha, a, lda, b, ldb, s.beta, got, s.n, parallel.NewPool(v.threads))
				})
				kern.fnTiles = ft
				if want == nil {
					want = got
					continue
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s (%s): element %d is %g, %g with one thread and tiles", name, s.description, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// The assembly packing of 6-row A panels writes exactly what the portable
// one does, and nothing past the panel.
func TestPackRows6Asm(t *testing.T) {
	if packRows6F32 == nil {
		t.Skip("no assembly packing on this CPU")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kc := range []int{1, 2, 7, 8, 9, 15, 16, 17, 24, 25, 100, 256, 257} {
		for _, ld := range []int{kc, kc + 3, 1024} {
			ld = max(ld, kc)
			off := 3
			x := make([]float32, off+5*ld+kc)
			for i := range x {
				x[i] = rng.Float32()
			}
			want := make([]float32, 6*kc)
			packRows6(x, ld, off, kc, want)
			got := make([]float32, 6*kc+8)
			for i := range got {
				got[i] = -1
			}
			packRows6F32(x, ld, off, kc, got[:6*kc])
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("kc=%d ld=%d: element %d is %g, want %g", kc, ld, i, got[i], want[i])
				}
			}
			for i := 6 * kc; i < len(got); i++ {
				if got[i] != -1 {
					t.Fatalf("kc=%d ld=%d: wrote element %d past the panel", kc, ld, i)
				}
			}
		}
	}
}
