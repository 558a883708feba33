package cpu

import (
	"math"
	"slices"
	"testing"

	"github.com/headroom-ml/headroom/cpu/internal/vec"
	"github.com/headroom-ml/headroom/prim"
)

// TestMaxPlaneF32 checks the separable max pooling, and the vector one of
// the 3×3 stride-2 stem pool (maxPlane3s2), against PyTorch's window scan
// written out (first maximum in row-major order, -0 and +0 equal), on
// planes full of ties, signed zeros and infinities, over strides,
// paddings, dilations and partial windows.
func TestMaxPlaneF32(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	inf := float32(math.Inf(1))
	vals := []float32{0, negZero, 1, -1, 2, inf, -inf, 1, 0, 3}
	geoms := []prim.PoolGeom{
		{H: 32, W: 32, OH: 16, OW: 16, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1},
		{H: 7, W: 9, OH: 4, OW: 5, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1},
		{H: 8, W: 8, OH: 4, OW: 4, KH: 2, KW: 2, SH: 2, SW: 2, DH: 1, DW: 1},
		{H: 9, W: 10, OH: 5, OW: 6, KH: 2, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1}, // ceil mode: a last window past the edge
		{H: 11, W: 12, OH: 7, OW: 8, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 2, DW: 2},
		{H: 5, W: 6, OH: 5, OW: 6, KH: 1, KW: 1, SH: 1, SW: 1, DH: 1, DW: 1},
		// Stem pools of several widths: one vector group a row (18), a
		// last group overlapping the one before (19, 35), groups that
		// end at the last column (33), odd heights.
		{H: 5, W: 18, OH: 3, OW: 9, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1},
		{H: 19, W: 19, OH: 10, OW: 10, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1},
		{H: 8, W: 33, OH: 4, OW: 17, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1},
		{H: 13, W: 35, OH: 7, OW: 18, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1},
		{H: 64, W: 64, OH: 32, OW: 32, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1},
	}
	stem := 0 // planes maxPlane3s2 took
	vecOK := vec.Enabled()
	s := uint32(12345)
	for gi, g := range geoms {
		x := make([]float32, g.H*g.W)
		y, idx := make([]float32, g.OH*g.OW), make([]int64, g.OH*g.OW)
		for trial := 0; trial < 200; trial++ {
			for i := range x {
				s = s*1664525 + 1013904223
				x[i] = vals[s>>28%uint32(len(vals))]
			}
			if !maxPlaneF32(g, new(maxPoolScratch), x, y, idx) {
				t.Fatalf("geometry %d: a plane without NaNs refused", gi)
			}
			check(t, gi, g, x, y, idx)
			if stem3s2(g) {
				clear(y)
				clear(idx)
				// Planes with a full group of 8 windows inside are taken.
				want := vecOK && min(g.OW, (g.W-2)/2+1)-1 >= 8 && min(g.OH, (g.H-2)/2+1) > 1
				if ok := maxPlane3s2(g, x, y, idx); ok != want {
					t.Fatalf("geometry %d: maxPlane3s2 took the plane: %v", gi, ok)
				} else if ok {
					stem++
					check(t, gi, g, x, y, idx)
				}
			}
		}
		x[len(x)/2] = float32(math.NaN())
		if maxPlaneF32(g, new(maxPoolScratch), x, y, idx) {
			t.Errorf("geometry %d: a plane with a NaN taken", gi)
		}
		if stem3s2(g) {
			// A NaN the vector windows read sends the plane back; one only
			// border windows read is placed by their scan, as PyTorch does.
			x[len(x)/2] = 0
			for _, at := range [][2]int{{g.H / 2, g.W / 2}, {g.H / 2, 0}, {0, g.W / 2}} {
				x[at[0]*g.W+at[1]] = float32(math.NaN())
				ok := maxPlane3s2(g, x, y, idx)
				if at[0] > 0 && at[1] > 0 && ok {
					t.Errorf("geometry %d: maxPlane3s2 took a plane with a NaN at %v", gi, at)
				}
				if ok {
					check(t, gi, g, x, y, idx)
				}
				x[at[0]*g.W+at[1]] = 1
			}
		}
	}
	if vecOK && stem == 0 {
		t.Error("maxPlane3s2 ran on no plane")
	}
	// A NaN in no window (the last row and column of a 5x5 plane pooled
	// 2x2, stride 2) changes no output: the plane is taken.
	g := prim.PoolGeom{H: 5, W: 5, OH: 2, OW: 2, KH: 2, KW: 2, SH: 2, SW: 2, DH: 1, DW: 1}
	x := []float32{
		1, 2, 3, 4, 0,
		5, 6, 7, 0, 0,
		0, 9, 1, 2, 0,
		3, 4, 5, 6, 0,
		0, 0, 0, 0, float32(math.NaN()),
	}
	y, idx := make([]float32, 4), make([]int64, 4)
	if !maxPlaneF32(g, new(maxPoolScratch), x, y, idx) {
		t.Fatal("a NaN in no window refused")
	}
	if want, wantIdx := []float32{6, 7, 9, 6}, []int64{6, 7, 11, 18}; !slices.Equal(y, want) || !slices.Equal(idx, wantIdx) {
		t.Fatalf("got %v at %v, want %v at %v", y, idx, want, wantIdx)
	}
}

// check compares y and idx with PyTorch's window scan of x.
func check(t *testing.T, gi int, g prim.PoolGeom, x, y []float32, idx []int64) {
	t.Helper()
	for oh := 0; oh < g.OH; oh++ {
		for ow := 0; ow < g.OW; ow++ {
			ih0 := oh*g.SH - g.PH
			ih1 := min(ih0+(g.KH-1)*g.DH+1, g.H)
			for ih0 < 0 {
				ih0 += g.DH
			}
			iw0 := ow*g.SW - g.PW
			iw1 := min(iw0+(g.KW-1)*g.DW+1, g.W)
			for iw0 < 0 {
				iw0 += g.DW
			}
			best, at := float32(math.Inf(-1)), ih0*g.W+iw0
			for ih := ih0; ih < ih1; ih += g.DH {
				for iw := iw0; iw < iw1; iw += g.DW {
					if v := x[ih*g.W+iw]; v > best || v != v {
						best, at = v, ih*g.W+iw
					}
				}
			}
			o := oh*g.OW + ow
			if idx[o] != int64(at) || math.Float32bits(y[o]) != math.Float32bits(best) && !(y[o] != y[o] && best != best) {
				t.Fatalf("geometry %d, output (%d, %d): got %v at %d, want %v at %d", gi, oh, ow, y[o], idx[o], best, at)
			}
		}
	}
}
