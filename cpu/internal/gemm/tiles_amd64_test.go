//go:build amd64 && !purego

package gemm

import (
	"math"
	"testing"
)

// The tile-column kernel gives the single-tile kernel's results bitwise,
// with and without a next panel to prefetch (the prefetching loop is a
// separate copy of the k loop, taken by the last 4 tiles of a column).
func TestTilesPrefetchBitwise(t *testing.T) {
	if !hasAVX2FMA() {
		t.Skip("no AVX2+FMA")
	}
	for _, k := range []int{1, 3, 4, 5, 9, 64, 257} {
		for _, tiles := range []int{1, 3, 4, 5, 9} {
			a := make([]float32, 6*k*tiles)
			b := make([]float32, 16*k)
			next := make([]float32, 16*k)
			for i := range a {
				a[i] = float32(i%13)*0.37 - 2
			}
			for i := range b {
				b[i] = float32(i%11)*0.21 - 1
			}
			const ldc = 20
			c0 := make([]float32, 6*tiles*ldc)
			for i := range c0 {
				c0[i] = float32(i%7) - 3
			}
			want := append([]float32(nil), c0...)
			for tt := 0; tt < tiles; tt++ {
				sgemmKernel6x16(k, &a[6*k*tt], &b[0], &want[6*ldc*tt], ldc, 1.5, 0.5, 0)
			}
			for _, bn := range [][]float32{nil, next} {
				got := append([]float32(nil), c0...)
				kernAVX2.fnTiles(k, tiles, a, b, got, ldc, 1.5, 0.5, false, bn)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("k=%d tiles=%d next=%v: c[%d] = %v, want %v", k, tiles, bn != nil, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// The AVX-512 6x64 tile-column kernel gives the 6x16 kernel's results
// bitwise on each of its 4 column panels, for beta = 0 (C not read: NaNs
// in it must not show) and beta != 0, at a C stride past the tile's width.
func TestWideTilesBitwise(t *testing.T) {
	if !hasAVX512() {
		t.Skip("no AVX-512")
	}
	kern := kernAVX512
	q, p := kern.wideQ, kern.wideP
	rows, cols := q*kern.mr, p*kern.nr
	// k from 24 on takes both copies of the k loop (the last 6 iterations
	// of 4 steps prefetch C); below, only the second.
	for _, k := range []int{1, 3, 4, 5, 9, 24, 27, 28, 64, 257} {
		for _, tiles := range []int{1, 2, 5} {
			for _, beta0 := range []bool{false, true} {
				a := make([]float32, rows*k*tiles)
				b := make([]float32, cols*k)
				for i := range a {
					a[i] = float32(i%13)*0.37 - 2
				}
				for i := range b {
					b[i] = float32(i%11)*0.21 - 1
				}
				ldc := cols + 7
				c0 := make([]float32, rows*tiles*ldc)
				for i := range c0 {
					c0[i] = float32(i%7) - 3
					if beta0 && i%5 == 0 {
						c0[i] = float32(math.NaN())
					}
				}
				want := append([]float32(nil), c0...)
				z := 0
				if beta0 {
					z = 1
				}
				for tt := 0; tt < tiles*q; tt++ {
					for j := 0; j < p; j++ {
						sgemmKernel6x16(k, &a[6*k*tt], &b[16*k*j], &want[6*ldc*tt+16*j], ldc, 1.5, 0.5, z)
					}
				}
				got := append([]float32(nil), c0...)
				kern.fnWide(k, tiles, a, b, got, ldc, 1.5, 0.5, beta0)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("k=%d tiles=%d beta0=%v: c[%d] = %v, want %v", k, tiles, beta0, i, got[i], want[i])
					}
				}
			}
		}
	}
}
