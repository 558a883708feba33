package cpu

import (
	"math"
	"slices"
	"testing"

	"github.com/headroom-ml/headroom/prim"
)

// TestMaxPlaneF32 checks the separable max pooling against PyTorch's
// window scan written out (first maximum in row-major order, -0 and +0
// equal), on planes full of ties, signed zeros and infinities, over
// strides, paddings, dilations and partial windows.
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
	}
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
							if v := x[ih*g.W+iw]; v > best {
								best, at = v, ih*g.W+iw
							}
						}
					}
					o := oh*g.OW + ow
					if idx[o] != int64(at) || math.Float32bits(y[o]) != math.Float32bits(best) {
						t.Fatalf("geometry %d, output (%d, %d): got %v at %d, want %v at %d", gi, oh, ow, y[o], idx[o], best, at)
					}
				}
			}
		}
		x[len(x)/2] = float32(math.NaN())
		if maxPlaneF32(g, new(maxPoolScratch), x, y, idx) {
			t.Errorf("geometry %d: a plane with a NaN taken", gi)
		}
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
