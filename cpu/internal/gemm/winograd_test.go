package gemm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// WinoGradA against A s computed from the matrix: exactly (bitwise) on
// small integers, whose sums are exact in any order, and within a few
// units of the last place of Σ|terms| on random values. Two blocks of 16
// columns with row and block strides, so both halves of a block and the
// strides are used; the rows past s_3 are overwritten and the values
// between the rows left alone.
func TestWinoGradA(t *testing.T) {
	if !WinoOK() || winoGradA == nil {
		t.Skip("no vector Winograd kernels on this CPU")
	}
	A := [6][4]float64{
		{1, 0, 0, 0},
		{1, 1, 1, 1},
		{1, -1, 1, -1},
		{1, 2, 4, 8},
		{1, -2, 4, -8},
		{0, 0, 0, 1},
	}
	r := rand.New(rand.NewPCG(3, 4))
	const rs, ps, n16, off = 40, 7 * 40, 2, 5
	for _, ints := range []bool{true, false} {
		p := make([]float32, off+(n16-1)*ps+6*rs+16+8)
		for i := range p {
			if ints {
				p[i] = float32(r.IntN(201) - 100)
			} else {
				p[i] = float32(r.NormFloat64())
			}
		}
		orig := append([]float32(nil), p...)
		WinoGradA(n16, p, off, rs, ps)
		for i, v := range p {
			rel := i - off
			b, rr, col := rel/ps, rel%ps/rs, rel%ps%rs
			if rel < 0 || b >= n16 || rr >= 6 || col >= 16 {
				if math.Float32bits(v) != math.Float32bits(orig[i]) {
					t.Fatalf("ints %v: element %d outside the rows changed: %g, was %g", ints, i, v, orig[i])
				}
				continue
			}
			var want, mag float64
			for k := 0; k < 4; k++ {
				x := A[rr][k] * float64(orig[off+b*ps+k*rs+col])
				want += x
				mag += math.Abs(x)
			}
			if ints {
				if float64(v) != want {
					t.Errorf("integers: block %d row %d column %d: %g, want %g", b, rr, col, v, want)
				}
			} else if math.Abs(float64(v)-want) > 4*mag*0x1p-24 {
				t.Errorf("random: block %d row %d column %d: %g, want %g (Σ|terms| %g)", b, rr, col, v, want, mag)
			}
		}
	}
}

// KernelPackedTiles gives KernelPacked's results bitwise, tile by tile,
// with and without accumulation, and leaves the columns past the tiles
// alone.
func TestKernelPackedTiles(t *testing.T) {
	mr, nr := Tile()
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range []int{1, 7, 64, 192} {
		for _, tiles := range []int{1, 3, 6} {
			for _, acc := range []bool{false, true} {
				a := make([]float32, tiles*mr*k)
				b := make([]float32, nr*k)
				for i := range a {
					a[i] = float32(r.NormFloat64())
				}
				for i := range b {
					b[i] = float32(r.NormFloat64())
				}
				ldc := nr + 5
				c := make([]float32, tiles*mr*ldc)
				for i := range c {
					c[i] = float32(r.NormFloat64())
				}
				want := append([]float32(nil), c...)
				for ti := 0; ti < tiles; ti++ {
					KernelPacked(k, a[ti*mr*k:], b, want[ti*mr*ldc:], ldc, acc)
				}
				KernelPackedTiles(k, tiles, a, b, c, ldc, acc)
				for i := range c {
					if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
						t.Fatalf("k %d, %d tiles, acc %v: element %d = %g, want %g", k, tiles, acc, i, c[i], want[i])
					}
				}
			}
		}
	}
}

// WinoGatherRows against its definition, on planes with the patches
// overlapping every edge, on the one-call kernel and on the fallback
// (WinoGather a row at a time): the lanes it writes, zeros outside the
// plane, and nothing else of p changed.
func TestWinoGatherRows(t *testing.T) {
	if !WinoOK() {
		t.Skip("no vector Winograd kernels on this CPU")
	}
	paths := []string{"fallback"}
	if WinoGatherRowsOK() {
		paths = append(paths, "one call")
	}
	t.Logf("paths: %v", paths)
	r := rand.New(rand.NewPCG(7, 8))
	const rs = 11
	for _, path := range paths {
		saved := winoGathRows
		if path == "fallback" {
			winoGathRows = nil
		}
		for _, hw := range [][2]int{{1, 1}, {3, 5}, {6, 6}, {9, 32}, {32, 35}, {5, 70}} {
			h, w := hw[0], hw[1]
			plane := make([]float32, h*w)
			for i := range plane {
				plane[i] = float32(r.NormFloat64())
			}
			for range 40 {
				n, nrows := 1+r.IntN(8), 1+r.IntN(6)
				ih0, iw0 := r.IntN(h+8)-4, r.IntN(w+8)-6
				off := r.IntN(5)
				p := make([]float32, off+36*rs+4)
				for i := range p {
					p[i] = float32(math.NaN())
				}
				WinoGatherRows(n, plane, ih0, h, w, iw0, p, off, rs, nrows)
				want := make([]float32, len(p))
				copy(want, p)
				for rr := 0; rr < nrows; rr++ {
					for j := 0; j < 6; j++ {
						for i := 0; i < n; i++ {
							ih, iw := ih0+rr, iw0+4*i+j
							var v float32
							if ih >= 0 && ih < h && iw >= 0 && iw < w {
								v = plane[ih*w+iw]
							}
							want[off+(6*j+rr)*rs+i] = v
						}
					}
				}
				for i := range p {
					if math.Float32bits(p[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: %d×%d plane, n %d, rows %d, at (%d, %d): p[%d] = %g, want %g", path, h, w, n, nrows, ih0, iw0, i, p[i], want[i])
					}
				}
			}
		}
		winoGathRows = saved
	}
}

// WinoGatherRowsBF16's vector kernel against its definition
// (winoGatherRowsBF16Ref), bit for bit on random bf16 bit patterns (NaNs,
// infinities and subnormals included), with patches overlapping every
// edge: the lanes it writes and nothing else.
func TestWinoGatherRowsBF16(t *testing.T) {
	if !WinoGatherRowsBF16OK() {
		t.Skip("no AVX-512 BW bf16 gather on this CPU")
	}
	r := rand.New(rand.NewPCG(9, 10))
	const rs = 13
	for _, hw := range [][2]int{{1, 1}, {3, 5}, {6, 6}, {9, 32}, {32, 35}, {5, 70}} {
		h, w := hw[0], hw[1]
		plane := make([]uint16, h*w)
		for i := range plane {
			plane[i] = uint16(r.Uint32())
		}
		for range 60 {
			n, nrows := 1+r.IntN(8), 1+r.IntN(6)
			ih0, iw0 := r.IntN(h+8)-4, r.IntN(w+8)-6
			off := r.IntN(5)
			p := make([]float32, off+36*rs+4)
			for i := range p {
				p[i] = float32(math.NaN())
			}
			want := make([]float32, len(p))
			copy(want, p)
			WinoGatherRowsBF16(n, plane, ih0, h, w, iw0, p, off, rs, nrows)
			winoGatherRowsBF16Ref(n, plane, ih0, h, w, iw0, want, off, rs, nrows)
			for i := range p {
				if math.Float32bits(p[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d×%d plane, n %d, rows %d, at (%d, %d): p[%d] = %#x, want %#x", h, w, n, nrows, ih0, iw0, i, math.Float32bits(p[i]), math.Float32bits(want[i]))
				}
			}
		}
	}
}
