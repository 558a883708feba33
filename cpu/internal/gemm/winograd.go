package gemm

import (
	"fmt"
	"math"
)

// Vector transforms of Winograd convolution F(4×4, 3×3), in place on rows
// of 16 floats: the columns of a block of rows are independent tiles, so
// one instruction transforms 8 tiles. A call covers n16 blocks of 16
// tiles; row r of block b starts at p[off + b*ps + r*rs].

var (
	winoIn, winoOut func(n16 int, p *float32, rs, ps int) // nil: no assembly
	winoWeight      func(n16 int, p *float32, rs, ps int)
	winoWOut        func(n16 int, p *float32, rs, ps int)
	winoGradA       func(n16 int, p *float32, rs, ps int)
	winoGathRows    func(n int, plane *float32, ih0, h, w, iw0 int, dst *float32, rs, nrows int)
	winoGathRowsB   func(n int, plane *uint16, ih0, h, w, iw0 int, dst *float32, rs, nrows int)
	winoGath        func(n int, row *float32, iw0, w int, dst *float32, rs int)
	winoScat        func(n int, m *float32, rs int, b float32, y *float32, ldy, rows, cols int)
	winoWGath       func(n8 int, wt *float32, idx *int32, dst *float32, rs int, flip int)
)

// WinoOK reports whether WinoInput and WinoOutput have assembly kernels.
func WinoOK() bool { return winoIn != nil }

// WinoInput replaces rows s_0..s_5 by Bᵀ s, where
//
//	Bᵀ = [4  0 -5  0 1 0]
//	     [0 -4 -4  1 1 0]
//	     [0  4 -4 -1 1 0]
//	     [0 -2 -1  2 1 0]
//	     [0  2 -1 -2 1 0]
//	     [0  4  0 -5 0 1]
func WinoInput(n16 int, p []float32, off, rs, ps int) {
	winoCall(winoIn, "WinoInput", n16, p, off, rs, ps)
}

// WinoOutput replaces rows s_0..s_3 by Aᵀ s (rows s_4, s_5 are read only),
// where
//
//	Aᵀ = [1 1  1 1  1 0]
//	     [0 1 -1 2 -2 0]
//	     [0 1  1 4  4 0]
//	     [0 1 -1 8 -8 1]
func WinoOutput(n16 int, p []float32, off, rs, ps int) {
	winoCall(winoOut, "WinoOutput", n16, p, off, rs, ps)
}

// WinoWeight replaces rows g_0..g_2 by the 6 rows of G g, where
//
//	G = [ 1/4     0    0 ]
//	    [-1/6  -1/6 -1/6 ]
//	    [-1/6   1/6 -1/6 ]
//	    [1/24  1/12  1/6 ]
//	    [1/24 -1/12  1/6 ]
//	    [   0     0    1 ]
func WinoWeight(n16 int, p []float32, off, rs, ps int) {
	winoCall(winoWeight, "WinoWeight", n16, p, off, rs, ps)
}

// WinoWgradOutput replaces rows s_0..s_2 by Gᵀ s (rows s_3..s_5 are read
// only), where
//
//	Gᵀ = [1/4  -1/6 -1/6 1/24  1/24 0]
//	     [  0  -1/6  1/6 1/12 -1/12 0]
//	     [  0  -1/6 -1/6  1/6   1/6 1]
func WinoWgradOutput(n16 int, p []float32, off, rs, ps int) {
	winoCall(winoWOut, "WinoWgradOutput", n16, p, off, rs, ps)
}

// WinoGradA replaces rows s_0..s_3 by the 6 rows of A s (the transform of
// the output gradient in the Winograd weight gradient), where
//
//	A = [1  0 0  0]
//	    [1  1 1  1]
//	    [1 -1 1 -1]
//	    [1  2 4  8]
//	    [1 -2 4 -8]
//	    [0  0 0  1]
func WinoGradA(n16 int, p []float32, off, rs, ps int) {
	winoCall(winoGradA, "WinoGradA", n16, p, off, rs, ps)
}

func winoCall(f func(int, *float32, int, int), name string, n16 int, p []float32, off, rs, ps int) {
	if n16 <= 0 {
		return
	}
	if f == nil {
		panic("gemm: " + name + " without an assembly kernel")
	}
	if off < 0 || rs < 16 || ps < 16 || off+(n16-1)*ps+5*rs+16 > len(p) {
		panic(fmt.Sprintf("gemm: %s: bad arguments (n16 %d, len %d, off %d, rs %d, ps %d)", name, n16, len(p), off, rs, ps))
	}
	f(n16, &p[off], rs, ps)
}

// WinoGather gathers one input row of the 6×6 patches of n <= 8
// consecutive tiles (4 columns apart) into the rows of V: for i < n and
// j < 6, p[off + 6*j*rs + i] = row[iw0 + 4i + j], zero where that column
// is outside row (the image's padding). Only columns inside row are read.
func WinoGather(n int, row []float32, iw0 int, p []float32, off, rs int) {
	if n <= 0 {
		return
	}
	if winoGath == nil {
		panic("gemm: WinoGather without an assembly kernel")
	}
	if n > 8 || len(row) == 0 || off < 0 || rs < 8 || off+30*rs+n > len(p) {
		panic(fmt.Sprintf("gemm: WinoGather: bad arguments (n %d, row %d, p %d at %d, rs %d)", n, len(row), len(p), off, rs))
	}
	winoGath(n, &row[0], iw0, len(row), &p[off], rs)
}

// WinoGatherRows is WinoGather for the first nrows <= 6 rows of the
// patches of n <= 8 consecutive tiles of an h×w plane, whose top left
// corner is at (ih0, iw0): for r < nrows, i < n and j < 6,
// p[off + (6j+r)*rs + i] = plane[(ih0+r)*w + iw0 + 4i + j], zero outside
// the plane. Only elements inside the plane are read, and only those of p
// written (lanes past n are left alone).
func WinoGatherRows(n int, plane []float32, ih0, h, w, iw0 int, p []float32, off, rs, nrows int) {
	if n <= 0 || nrows <= 0 {
		return
	}
	if n > 8 || nrows > 6 || h <= 0 || w <= 0 || len(plane) < h*w || off < 0 || rs < 8 || off+(30+nrows-1)*rs+n > len(p) {
		panic(fmt.Sprintf("gemm: WinoGatherRows: bad arguments (n %d, plane %d of %d×%d, p %d at %d, rs %d, rows %d)", n, len(plane), h, w, len(p), off, rs, nrows))
	}
	if f := winoGathRows; f != nil {
		f(n, &plane[0], ih0, h, w, iw0, &p[off], rs, nrows)
		return
	}
	// One row at a time on the AVX2 gather (n lanes: it writes whole
	// groups of 8 only when n is 8).
	for r := 0; r < nrows; r++ {
		ih := ih0 + r
		if uint(ih) >= uint(h) {
			for j := 0; j < 6; j++ {
				clear(p[off+(6*j+r)*rs:][:n])
			}
			continue
		}
		WinoGather(n, plane[ih*w:(ih+1)*w], iw0, p, off+r*rs, rs)
	}
}

// WinoGatherRowsOK reports whether WinoGatherRows has its one-call kernel.
func WinoGatherRowsOK() bool { return winoGathRows != nil }

// WinoGatherRowsBF16 is WinoGatherRows on a bfloat16 plane, each value
// widened (exactly) to float32: a bf16 convolution's input read as it is,
// without a widened copy of the whole tensor first.
func WinoGatherRowsBF16(n int, plane []uint16, ih0, h, w, iw0 int, p []float32, off, rs, nrows int) {
	if n <= 0 || nrows <= 0 {
		return
	}
	if n > 8 || nrows > 6 || h <= 0 || w <= 0 || len(plane) < h*w || off < 0 || rs < 8 || off+(30+nrows-1)*rs+n > len(p) {
		panic(fmt.Sprintf("gemm: WinoGatherRowsBF16: bad arguments (n %d, plane %d of %d×%d, p %d at %d, rs %d, rows %d)", n, len(plane), h, w, len(p), off, rs, nrows))
	}
	if f := winoGathRowsB; f != nil {
		f(n, &plane[0], ih0, h, w, iw0, &p[off], rs, nrows)
		return
	}
	winoGatherRowsBF16Ref(n, plane, ih0, h, w, iw0, p, off, rs, nrows)
}

// winoGatherRowsBF16Ref is WinoGatherRowsBF16 by its definition.
func winoGatherRowsBF16Ref(n int, plane []uint16, ih0, h, w, iw0 int, p []float32, off, rs, nrows int) {
	for r := 0; r < nrows; r++ {
		ih := ih0 + r
		for j := 0; j < 6; j++ {
			for i := 0; i < n; i++ {
				var v float32
				if iw := iw0 + 4*i + j; uint(ih) < uint(h) && uint(iw) < uint(w) {
					v = math.Float32frombits(uint32(plane[ih*w+iw]) << 16)
				}
				p[off+(6*j+r)*rs+i] = v
			}
		}
	}
}

// WinoGatherRowsBF16OK reports whether WinoGatherRowsBF16 has its vector
// kernel (else it runs portable Go, for tests: the convolutions widen
// the whole input instead).
func WinoGatherRowsBF16OK() bool { return winoGathRowsB != nil }

// WinoScatter writes the outputs of n <= 8 consecutive tiles of one tile
// row, after WinoOutput, plus b: for rows i < rows <= 4, tiles t < n and
// columns j < 4 with 4t+j < cols, y[off + i*ldy + 4t + j] =
// m[moff + (6j+i)*rs + t] + b. It reads 8 tiles' values of m whatever n.
func WinoScatter(n int, m []float32, moff, rs int, b float32, y []float32, off, ldy, rows, cols int) {
	if n <= 0 || rows <= 0 || cols <= 0 {
		return
	}
	if winoScat == nil {
		panic("gemm: WinoScatter without an assembly kernel")
	}
	w := min(4*n, cols)
	if n > 8 || rows > 4 || moff < 0 || rs < 8 || moff+21*rs+8 > len(m) || off < 0 || off+(rows-1)*ldy+w > len(y) {
		panic(fmt.Sprintf("gemm: WinoScatter: bad arguments (n %d, m %d at %d, rs %d, y %d at %d, ldy %d, rows %d, cols %d)", n, len(m), moff, rs, len(y), off, ldy, rows, cols))
	}
	winoScat(n, &m[moff], rs, b, &y[off], ldy, rows, cols)
}

// WinoWeightGather gathers the 3×3 kernels of 8·n8 lanes into the 9 rows
// WinoWeight transforms: for lanes l < 8·n8, with x = idx[l] and element
// e = 3kh+kw of a kernel, p[off + (6kw+kh)*rs + l] = wt[x+e] (flip: the
// kernel mirrored, wt[x+8-e]), and zero where x < 0.
func WinoWeightGather(n8 int, wt []float32, idx []int32, flip bool, p []float32, off, rs int) {
	if n8 <= 0 {
		return
	}
	if winoWGath == nil {
		panic("gemm: WinoWeightGather without an assembly kernel")
	}
	if len(idx) < 8*n8 || off < 0 || rs < 8*n8 || off+14*rs+8*n8 > len(p) {
		panic(fmt.Sprintf("gemm: WinoWeightGather: bad arguments (n8 %d, idx %d, p %d at %d, rs %d)", n8, len(idx), len(p), off, rs))
	}
	for _, x := range idx[:8*n8] {
		if int(x)+9 > len(wt) {
			panic(fmt.Sprintf("gemm: WinoWeightGather: index %d past the weights (%d)", x, len(wt)))
		}
	}
	f := 0
	if flip {
		f = 1
	}
	winoWGath(n8, &wt[0], &idx[0], &p[off], rs, f)
}

// KernelPackedTiles is KernelPacked for a column of tiles one above the
// other: tile t multiplies the A panel at a[t*MR*k:] by b into the tile at
// c[t*MR*ldc:], with KernelPacked's sums (the tile-column micro-kernel
// where there is one, else one call a tile). One call for the blocks of
// output channels of a Winograd product saves a call and its checks per
// tile.
func KernelPackedTiles(k, tiles int, a, b, c []float32, ldc int, acc bool) {
	kern := sgemmKern
	mr, nr := kern.mr, kern.nr
	if tiles <= 0 {
		return
	}
	if k <= 0 || kern.fnTiles == nil {
		for t := 0; t < tiles; t++ {
			KernelPacked(k, a[t*mr*max(k, 0):], b, c[t*mr*ldc:], ldc, acc)
		}
		return
	}
	if len(a) < tiles*mr*k || len(b) < nr*k || ldc < nr || len(c) < (tiles*mr-1)*ldc+nr {
		panic(fmt.Sprintf("gemm: KernelPackedTiles: buffers too short (k %d, tiles %d, a %d, b %d, c %d, ldc %d)", k, tiles, len(a), len(b), len(c), ldc))
	}
	var beta float32
	if acc {
		beta = 1
	}
	kern.fnTiles(k, tiles, a, b, c, ldc, 1, beta, !acc, nil)
}
