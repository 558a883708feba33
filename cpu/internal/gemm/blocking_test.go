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
				ft, fw := kern.fnTiles, kern.fnWide
				if !v.tiles {
					kern.fnTiles, kern.fnWide = nil, nil
				}
				withKernel(kern, func() {
					Sgemm(s.tA, s.tB, s.m, s.n, s.k, s.alpha, a, lda, b, ldb, s.beta, got, s.n, parallel.NewPool(v.threads))
				})
				kern.fnTiles, kern.fnWide = ft, fw
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

// Products split into column slices (one a thread, each with its own
// packed B) give the one-thread result bit for bit, whether op(B) is
// stored, transposed, packed by a function (by rows or by panels) or
// 16-bit; slices start on panel boundaries, the last may end inside one.
func TestColumnSlicesBitwise(t *testing.T) {
	shapes := []struct {
		m, n, k int
		tA, tB  bool
	}{
		{70, 790, 300, false, false}, // 400 + 390 columns; 272 + 272 + 246
		{37, 1030, 515, true, true},  // 3 slices, K blocks, N edge tile
		{130, 1024, 256, false, true},
	}
	// Slices whether or not they pay (slicesPay) for these shapes.
	forceSlices = true
	defer func() { forceSlices = false }()
	for _, s := range shapes {
		if columnSlices(2, s.n) < 2 || columnSlices(3, s.n) < 3 {
			t.Fatalf("%dx%dx%d: not split into column slices", s.m, s.n, s.k)
		}
		rng := rand.New(rand.NewPCG(uint64(s.n), uint64(s.k)))
		a := make([]float32, s.m*s.k)
		b := make([]float32, s.k*s.n)
		b16 := make([]uint16, s.k*s.n)
		c0 := make([]float32, s.m*s.n)
		for _, x := range [][]float32{a, b, c0} {
			for i := range x {
				x[i] = rng.Float32() - 0.5
			}
		}
		for i := range b16 {
			b16[i] = uint16(rng.Uint32())&0x7fff | 0x3000 // finite bfloat16
		}
		lda, ldb := s.k, s.n
		if s.tA {
			lda = s.m
		}
		if s.tB {
			ldb = s.k
		}
		products := map[string]func(c []float32, pool *parallel.Pool){
			"Sgemm": func(c []float32, pool *parallel.Pool) {
				Sgemm(s.tA, s.tB, s.m, s.n, s.k, 1.5, a, lda, b, ldb, 0.5, c, s.n, pool)
			},
			"SgemmMixed/bf16 B": func(c []float32, pool *parallel.Pool) {
				SgemmMixed(s.tA, s.tB, s.m, s.n, s.k, 1, F32(a), lda, BF16(b16), ldb, 0, c, s.n, pool)
			},
		}
		if !s.tB {
			for _, byRows := range []bool{true, false} {
				products[fmt.Sprintf("SgemmFunc/byRows=%v", byRows)] = func(c []float32, pool *parallel.Pool) {
					SgemmFunc(s.tA, s.m, s.n, s.k, 1, a, lda, packStored(b, s.n, byRows), 1, c, s.n, pool)
				}
			}
		}
		for _, kern := range kernels32() {
			for name, product := range products {
				var want []float32
				for _, threads := range []int{1, 2, 3} {
					got := append([]float32(nil), c0...)
					withKernel(kern, func() { product(got, parallel.NewPool(threads)) })
					if want == nil {
						want = got
						continue
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s %s %dx%dx%d t%d: element %d is %g, %g with one thread", kern.name, name, s.m, s.n, s.k, threads, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

func TestColumnSlices(t *testing.T) {
	for _, c := range []struct{ threads, n, want int }{
		{1, 4096, 1},
		{2, 511, 1}, // a slice would be narrower than minSliceCols
		{2, 512, 2},
		{3, 767, 1},
		{3, 768, 3},
		{2, 64, 1},
	} {
		if got := columnSlices(c.threads, c.n); got != c.want {
			t.Errorf("columnSlices(%d, %d) = %d, want %d", c.threads, c.n, got, c.want)
		}
	}
}

func TestSlicesPay(t *testing.T) {
	for _, c := range []struct {
		threads, m, n, k int
		want             bool
	}{
		{2, 1024, 1024, 1024, false}, // 256×512 B block: 512 KiB
		{2, 1024, 1024, 128, true},   // 128×512: 256 KiB
		{2, 1024, 1024, 784, false},  // K blocks of 196: 392 KiB
		{2, 512, 4096, 576, true},    // 2048 wide
		{2, 2048, 2048, 2048, false},
		{2, 128, 1024, 1152, true}, // 64 rows a thread
		{2, 288, 1024, 1152, false},
		{3, 1000, 1536, 100, true},
	} {
		if got := slicesPay(c.threads, c.m, c.n, c.k); got != c.want {
			t.Errorf("slicesPay(%d, %d, %d, %d) = %v, want %v", c.threads, c.m, c.n, c.k, got, c.want)
		}
	}
}

// The assembly packing of a transposed A into 6-row panels writes what the
// portable one does, the partial last panel included, and nothing past
// the panels.
func TestPackATRows6Asm(t *testing.T) {
	if packATRows6Asm == nil {
		t.Skip("no assembly packing on this CPU")
	}
	defer func(f func(x []float32, lda, off, kc, panels int, dst []float32)) { packATRows6Asm = f }(packATRows6Asm)
	rng := rand.New(rand.NewPCG(9, 10))
	for _, kc := range []int{1, 2, 3, 7, 8, 256, 257} {
		for _, mcur := range []int{1, 5, 6, 7, 12, 13, 144} {
			for _, extra := range []int{0, 3, 1024} {
				lda := mcur + 2 + extra
				const p0, i0 = 1, 2
				a := make([]float32, (p0+kc)*lda)
				for i := range a {
					a[i] = rng.Float32()
				}
				n := roundUp(mcur, 6) * kc
				want := make([]float32, n)
				asm := packATRows6Asm
				packATRows6Asm = nil
				packATRows6F32(a, lda, p0, kc, i0, mcur, want)
				packATRows6Asm = asm
				got := make([]float32, n+16)
				for i := range got {
					got[i] = -1
				}
				packATRows6F32(a, lda, p0, kc, i0, mcur, got[:n])
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("kc=%d mcur=%d lda=%d: element %d is %g, want %g", kc, mcur, lda, i, got[i], want[i])
					}
				}
				for i := n; i < len(got); i++ {
					if got[i] != -1 {
						t.Fatalf("kc=%d mcur=%d lda=%d: wrote element %d past the panels", kc, mcur, lda, i)
					}
				}
			}
		}
	}
}
