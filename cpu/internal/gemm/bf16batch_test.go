package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// bf16BatchShapes are MulBatch's and MulSumBatch's cases: m, n, k not
// multiples of the tiles, k across K blocks (and odd), one image and
// several, planes of 16, 64 and 256 positions (ResNet's 1x1 layers),
// and chunks of images that end inside the batch (n*batch above bf16NC).
var bf16BatchShapes = []struct{ m, n, k, batch int }{
	{1, 1, 1, 1},
	{25, 17, 30, 3},
	{40, 16, 70, 8},
	{50, 64, 33, 2},
	{30, 256, 40, 5},
	{13, 33, 1100, 2},
	{70, 520, 9, 9},
	{200, 16, 513, 1},
}

// MulBatch gives each C_b bitwise as SgemmMixed on the same kernel does
// (A shared, B_b and C_b at their strides, padding between images left
// alone), for each kernel, A transposed or not, on 1 and 2 threads.
func TestMulBatch(t *testing.T) {
	kerns := bf16Kernels()
	if len(kerns) == 0 {
		t.Skip("no native bf16 kernel")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, kern := range kerns {
		if kern.amx {
			continue
		}
		tile := BF16Tile{kern}
		defer useBF16Kern(kern)()
		for _, s := range bf16BatchShapes {
			for _, transA := range []bool{false, true} {
				ar, ac := s.m, s.k
				if transA {
					ar, ac = s.k, s.m
				}
				lda := ac + 3
				a := randBF16s(rng, ar*lda, false)
				ldb, ldc := s.n+1, s.n+2
				strideB, strideC := s.k*ldb+5, s.m*ldc+7
				b := randBF16s(rng, s.batch*strideB, false)
				want := make([]float32, s.batch*strideC)
				for bi := range s.batch {
					SgemmMixed(transA, false, s.m, s.n, s.k, 1, BF16(a), lda, BF16(b[bi*strideB:]), ldb, 0, want[bi*strideC:], ldc)
				}
				for _, threads := range []int{1, 2} {
					name := fmt.Sprintf("%s %dx%dx%d batch %d transA=%v t%d", kern.name, s.m, s.n, s.k, s.batch, transA, threads)
					pool := parallel.NewPool(threads)
					got := make([]float32, len(want))
					for i := range got {
						got[i] = -7 // outside the C_b: must stay
					}
					tile.MulBatch(pool, transA, s.m, s.n, s.k, a, lda, s.batch, b, ldb, strideB, got, ldc, strideC)
					pool.Close()
					for bi := range s.batch {
						for i := range strideC {
							g, w := got[bi*strideC+i], want[bi*strideC+i]
							if i/ldc >= s.m || i%ldc >= s.n {
								w = -7
							}
							if !sameBits(g, w) {
								t.Fatalf("%s: C_%d[%d] = %g, want %g", name, bi, i, g, w)
							}
						}
					}
				}
			}
		}
	}
}

// MulSumBatch sums A_b·B_bᵀ over the batch as the reference arithmetic
// does over SumBatchBlocks' blocks (an image's odd last position paired
// with zero), bitwise, for each kernel, on 1 and 2 threads; accumulated
// onto that sum, as the blocks of the batch twice over.
func TestMulSumBatch(t *testing.T) {
	kerns := bf16Kernels()
	if len(kerns) == 0 {
		t.Skip("no native bf16 kernel")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, s := range bf16BatchShapes {
		lda, ldb, ldc := s.k+1, s.k+3, s.n+2
		strideA, strideB := s.m*lda+5, s.n*ldb+1
		a := randBF16s(rng, s.batch*strideA, false)
		b := randBF16s(rng, s.batch*strideB, false)
		want := make([]float32, s.m*ldc)
		accWant := make([]float32, s.m*ldc) // the sum added to want
		blocks := SumBatchBlocks(s.k, s.batch)
		var av, bv []uint16
		for i := range s.m {
			for j := range s.n {
				var c float32
				for bi, bl := range append(blocks, blocks...) {
					av, bv = av[:0], bv[:0]
					for img := bl.B0; img < bl.B1; img++ {
						p0, p1 := 0, s.k
						if bl.B1-bl.B0 == 1 {
							p0, p1 = bl.P0, bl.P1
						}
						av = append(av, a[img*strideA+i*lda+p0:img*strideA+i*lda+p1]...)
						bv = append(bv, b[img*strideB+j*ldb+p0:img*strideB+j*ldb+p1]...)
						if (p1-p0)%2 != 0 && img+1 < bl.B1 {
							av, bv = append(av, 0), append(bv, 0)
						}
					}
					if len(av) > bf16KC {
						t.Fatalf("%+v: block %+v of %d positions", s, bl, len(av))
					}
					beta := float32(1)
					if bi == 0 {
						beta = 0
					}
					c = RefDotBF16(av, bv, 1, beta, c)
					if bi == len(blocks)-1 {
						want[i*ldc+j] = c
					}
				}
				accWant[i*ldc+j] = c
			}
		}
		for _, kern := range kerns {
			if kern.amx {
				continue
			}
			for _, threads := range []int{1, 2} {
				name := fmt.Sprintf("%s %dx%dx%d batch %d t%d", kern.name, s.m, s.n, s.k, s.batch, threads)
				pool := parallel.NewPool(threads)
				got := make([]float32, len(want))
				for i := range got {
					got[i] = -7
				}
				BF16Tile{kern}.MulSumBatch(pool, s.m, s.n, s.k, s.batch, a, lda, strideA, b, ldb, strideB, got, ldc, false)
				for i := range want {
					w := want[i]
					if i%ldc >= s.n {
						w = -7
					}
					if !sameBits(got[i], w) {
						t.Fatalf("%s: C[%d] = %g, want %g", name, i, got[i], w)
					}
				}
				// Accumulated: the batch again, its first block added
				// to the sum so far as the following blocks are.
				BF16Tile{kern}.MulSumBatch(pool, s.m, s.n, s.k, s.batch, a, lda, strideA, b, ldb, strideB, got, ldc, true)
				pool.Close()
				for i := range want {
					w := want[i]
					if i%ldc >= s.n {
						w = -7
					} else {
						w = accWant[i]
					}
					if !sameBits(got[i], w) {
						t.Fatalf("%s accumulated: C[%d] = %g, want %g", name, i, got[i], w)
					}
				}
			}
		}
	}
}

// SumBatchBlocks covers every position once, in order, each block within
// bf16KC positions (pairs).
func TestSumBatchBlocks(t *testing.T) {
	for _, c := range []struct{ k, batch int }{{16, 8}, {64, 8}, {256, 8}, {1024, 8}, {1, 3}, {257, 5}, {513, 2}, {600, 1}} {
		next := [2]int{0, 0} // image, position
		for _, bl := range SumBatchBlocks(c.k, c.batch) {
			if bl.Pairs(c.k) > bf16KC/2 {
				t.Errorf("%+v: block %+v holds %d pairs", c, bl, bl.Pairs(c.k))
			}
			if bl.B0 != next[0] || bl.P0 != next[1] || bl.B1 <= bl.B0 {
				t.Fatalf("%+v: block %+v after %v", c, bl, next)
			}
			if bl.B1-bl.B0 > 1 && (bl.P0 != 0 || bl.P1 != c.k) {
				t.Fatalf("%+v: block %+v of several images not whole", c, bl)
			}
			next = [2]int{bl.B1, 0}
			if bl.P1 < c.k {
				next = [2]int{bl.B0, bl.P1}
			}
		}
		if next != [2]int{c.batch, 0} {
			t.Errorf("%+v: blocks end at %v", c, next)
		}
	}
}
