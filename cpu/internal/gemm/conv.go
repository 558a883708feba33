package gemm

import "fmt"

// ConvTileRows and ConvTileCols are the shape of the direct-convolution
// tile: ConvTile computes 6 output channels × 16 consecutive output
// positions.
const (
	ConvTileRows = 6
	ConvTileCols = 16
)

// ConvTile4 is ConvTile for 4 rows: a holds 4 values per step and the tile
// is 4×16.
func ConvTile4(k int, a []float32, b []float32, boff int, offs []int32, maxOff int, c []float32, coff, ldc int) {
	if k <= 0 {
		return
	}
	if convTile4 == nil {
		panic("gemm: ConvTile4 without an assembly kernel")
	}
	if len(a) < 4*k || len(offs) < k || boff < 0 || boff+maxOff+16 > len(b) || coff < 0 || coff+3*ldc+16 > len(c) {
		panic(fmt.Sprintf("gemm: ConvTile4: buffers too short (k %d, a %d, b %d at %d+%d, c %d at %d, ldc %d)", k, len(a), len(b), boff, maxOff, len(c), coff, ldc))
	}
	convTile4(k, &a[0], &b[boff], &offs[0], &c[coff], ldc)
}

// ConvTileOK reports whether ConvTile has an assembly kernel on this CPU
// (AVX2+FMA); without one the caller uses another method.
func ConvTileOK() bool { return convTile != nil }

// ConvTile is the micro-kernel of a direct convolution: for the 6×16 tile
// of c at coff (row stride ldc),
//
//	c[coff+i*ldc+j] += Σ_{r<k} a[6r+i] * b[boff+offs[r]+j]
//
// a is a packed panel of 6 rows (6 values per step); b is read in place, 16
// consecutive floats per step at an offset per step (an input row of a
// convolution at one kernel tap), so the input needs no im2col or packing.
// maxOff is the largest of offs[:k] (checked against b).
func ConvTile(k int, a []float32, b []float32, boff int, offs []int32, maxOff int, c []float32, coff, ldc int) {
	if k <= 0 {
		return
	}
	if convTile == nil {
		panic("gemm: ConvTile without an assembly kernel")
	}
	if len(a) < 6*k || len(offs) < k || boff < 0 || boff+maxOff+16 > len(b) || coff < 0 || coff+5*ldc+16 > len(c) {
		panic(fmt.Sprintf("gemm: ConvTile: buffers too short (k %d, a %d, b %d at %d+%d, c %d at %d, ldc %d)", k, len(a), len(b), boff, maxOff, len(c), coff, ldc))
	}
	convTile(k, &a[0], &b[boff], &offs[0], &c[coff], ldc)
}

// ConvWgradOK reports whether ConvWgrad has an assembly kernel.
func ConvWgradOK() bool { return convWgrad != nil }

// ConvWgrad is the weight-gradient kernel of a direct convolution with
// kernel rows 3 taps wide: for k < 4 and t < 3,
//
//	out[3k+t] += Σ_{o<oh, j<ow} gy[gyOff + k*ldk + o*ow + j] * x[xOff + o*wp + j + t*dw]
//
// ow must be a positive multiple of 8. x is a zero-padded input plane (row
// stride wp) at the kernel row's offset, gy the output gradient rows of 4
// output channels.
func ConvWgrad(gy []float32, gyOff, ldk int, x []float32, xOff, dw, wp, ow, oh int, out []float32) {
	convWgradRows("ConvWgrad", convWgrad, 4, gy, gyOff, ldk, x, xOff, dw, wp, ow, oh, out)
}

// ConvWgrad8OK reports whether ConvWgrad8 has an assembly kernel (AVX-512:
// its 24 sums need 32 vector registers).
func ConvWgrad8OK() bool { return convWgrad8 != nil }

// ConvWgrad8 is ConvWgrad for 8 output channels: out[3k+t] for k < 8.
func ConvWgrad8(gy []float32, gyOff, ldk int, x []float32, xOff, dw, wp, ow, oh int, out []float32) {
	convWgradRows("ConvWgrad8", convWgrad8, 8, gy, gyOff, ldk, x, xOff, dw, wp, ow, oh, out)
}

// convWgradRows checks the arguments of weight-gradient kernel fn, for
// rows output channels, and runs it.
func convWgradRows(name string, fn func(gy *float32, ldk int, x *float32, dw, wp, ow, oh int, out *float32), rows int, gy []float32, gyOff, ldk int, x []float32, xOff, dw, wp, ow, oh int, out []float32) {
	if oh <= 0 {
		return
	}
	if fn == nil {
		panic("gemm: " + name + " without an assembly kernel")
	}
	if ow <= 0 || ow%8 != 0 || len(out) < 3*rows || gyOff < 0 || gyOff+(rows-1)*ldk+oh*ow > len(gy) || xOff < 0 || xOff+(oh-1)*wp+ow+2*dw > len(x) {
		panic(fmt.Sprintf("gemm: %s: bad arguments (gy %d at %d ldk %d, x %d at %d, dw %d wp %d ow %d oh %d)", name, len(gy), gyOff, ldk, len(x), xOff, dw, wp, ow, oh))
	}
	fn(&gy[gyOff], ldk, &x[xOff], dw, wp, ow, oh, &out[0])
}
