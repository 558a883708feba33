package cpu

import (
	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// General (not pointwise) mixed convolutions on bfloat16 operands,
// natively, as the pointwise ones (convbf16_pw.go) with each image's
// plane X[n] replaced by its bf16 im2col matrix col(x[n]) ([C*KH*KW,
// OH*OW], im2colBF16), written a group of images at a time into the
// workspace, the group's matrices side by side:
//
//	forward       Y[n] = W · col(x[n])              MulBatch, in place
//	input grad    x̄[n] = col2im(Wᵀ · Ȳ[n])          MulBatch, float32 col2im
//	              x̄ = conv(ȳ, W̃)                    stride 1: the forward of ȳ
//	weight grad   W̄ = Σ_n Ȳ[n] · col(x[n])ᵀ         MulSumBatch
//
// Where an image's output positions fill the tile kernel's NR-column
// panels badly (ResNet's 2x2 planes: 4 of 16), the group's columns make
// one product instead (convColJoined), into the workspace, copied out.
// The weight gradient's sum runs group by group, each group's
// SumBatchBlocks in order, accumulated (MulSumBatch's acc): the same for
// any thread count.

// convColGroupBytes is about how many bytes a group's im2col matrix (or
// the input gradient's float32 Wᵀ·Ȳ) takes: a few images of a large plane,
// many of a small one. Each group packs the weight again, which for
// ResNet-18's last layers (2.4-4.7 MB of bf16 weight, 2x2 planes) cost
// more than keeping the im2col matrix in cache saved: 4 MB groups ran
// them 1.1-1.4x faster than 1 MB ones, 16 MB little faster again
// (TestConvColPerfReport, Zen 4).
var convColGroupBytes = 4 << 20

// convColCap is the most workspace one image of the im2col paths may take
// for g: the float32 copy of its larger activation operand that the
// widened path would make. An image's im2col matrix is about KH*KW times
// its plane, so at small batches and stride 1 (a 3x3 convolution of fewer
// than 5 images) one image alone would take more, a workspace larger than
// the activations the bf16 values save in a small model: those widen
// (convColFits). Groups still take up to convColGroupBytes: fewer images
// a group cost more than the bytes saved (the weight gradient of
// ResNet-18's 2x2 layer adds each group's sum into its 9 MB of float32:
// 7-image groups ran it 1.6-2.4x slower than one group of 32).
func convColCap(g prim.ConvGeom) int {
	return 4 * g.N * max(g.C*g.H*g.W, g.K*g.OH*g.OW)
}

// convColGroup is the number of images of a group of g when each takes
// per bytes of workspace.
func convColGroup(g prim.ConvGeom, per int) int {
	return max(1, min(g.N, convColGroupBytes/max(1, per)))
}

// convColFits reports whether one image of g's im2col path p for op fits
// convColCap.
func convColFits(op trace.Op, g prim.ConvGeom, p convBF16Path) bool {
	P, kk := g.OH*g.OW, g.ColRows()
	switch {
	case p == convPathFlip:
		gt, _ := convInputGeom(g)
		return 2*gt.ColRows()*gt.OH*gt.OW <= convColCap(gt)
	case p != convPathCol:
		return true
	}
	if _, bwi := op.(*prim.Conv2dBackwardInput); bwi {
		return 4*kk*P <= convColCap(g)
	}
	return 2*kk*P <= convColCap(g)
}

// Where the im2col path runs (convBF16PathOf), by geometry: measured
// against the float32 kernels on the widened values (TestConvColPerfReport,
// ResNet-18 at 64x64, batch 32, and rrdbnet, 2 Zen 4 threads on a shared
// machine, medians of 11 interleaved rounds): it wins where the float32
// kernel is an implicit GEMM of the same arithmetic (strided layers 1.1-1.6x,
// the 1x1 stride-2 shortcut 1.7-2.4x, the 7x7 stem 1.05-1.3x), and loses
// to float32 Winograd, which does a quarter of the products (ResNet-18's
// 16x16 to 4x4 stride-1 layers, rrdbnet: 0.4-0.9x; convNativeCheaper
// keeps those), and, forward only, to the float32 tap-pair kernel where
// padding is most of the products (convPaddingBound).

// convPaddingBound reports whether most of g's (output position, tap)
// pairs fall in the padding on a plane small enough for the float32
// tap-pair kernel (convTapsPlan), which skips them: there the native
// forward, which multiplies them all, is slower (ResNet-18's 2x2 layer,
// 16 valid pairs of 36: 7.8 ms against 6.1). Its input gradient gains
// less from the skipped pairs (col2im 5.5 ms against 7.1).
func convPaddingBound(g prim.ConvGeom) bool {
	if g.OH*g.OW > 64 {
		return false
	}
	var rows, cols int
	for kh := range g.KH {
		lo, hi := convRange(g.H, g.OH, g.SH, g.PH, kh*g.DH)
		rows += hi - lo
	}
	for kw := range g.KW {
		lo, hi := convRange(g.W, g.OW, g.SW, g.PW, kw*g.DW)
		cols += hi - lo
	}
	return 2*rows*cols < g.OH*g.OW*g.KH*g.KW
}

// convColFlip reports whether the native input gradient of g runs as the
// forward of ȳ with the flipped weight rather than by col2im: stride 1,
// on planes of at least 256 positions (ResNet-18's 16x16: 9.8 ms against
// 10.4, rrdbnet's 32x32 1.7-1.9x faster); on smaller ones col2im's
// float32 scatter is the cheaper (8x8 about even, 4x4 1.2x, 2x2 2x).
func convColFlip(g prim.ConvGeom) bool {
	_, flip := convInputGeom(g)
	return flip && g.SH == 1 && g.SW == 1 && g.OH*g.OW >= 256
}

// convColNR is the tile kernel's panel width (16 where there is none:
// the workspace is the same whether or not the kernel is on).
func convColNR() int {
	if t, ok := blas.NativeBF16Tile(); ok {
		return t.NR()
	}
	return 16
}

// convColJoined reports whether the products of a group of images of g
// (OH*OW columns each) run as one, its output copied into place: where
// rounding an image's columns up to whole panels would compute over a
// quarter more columns than it has.
func convColJoined(g prim.ConvGeom) bool {
	P, nr := g.OH*g.OW, convColNR()
	return (P+nr-1)/nr*nr > P+P/4
}

// convColForwardBytes is convForwardBF16's workspace for g: a group's
// im2col matrix, and where joined its product.
func convColForwardBytes(g prim.ConvGeom) int {
	P, kk := g.OH*g.OW, g.ColRows()
	nb := convColGroup(g, 2*kk*P)
	n := align64(2 * kk * nb * P)
	if convColJoined(g) {
		n += 4 * g.K * nb * P
	}
	return n
}

// convForwardBF16 computes y = conv(x, w) + bias natively (Groups 1), with
// ws of convColForwardBytes(g).
func convForwardBF16(pool *parallel.Pool, t blas.BF16Tile, g prim.ConvGeom, x, w []uint16, bias, y []float32, ws []byte) {
	P, kk := g.OH*g.OW, g.ColRows()
	nb := convColGroup(g, 2*kk*P)
	colBuf := convWsU16(ws, 0, kk*nb*P)
	joined := convColJoined(g)
	var prod []float32
	if joined {
		prod = convWsF32(ws, align64(2*len(colBuf)), g.K*nb*P)
	}
	for n0 := 0; n0 < g.N; n0 += nb {
		cnt := min(nb, g.N-n0)
		cols := cnt * P
		col := colBuf[:kk*cols]
		im2colBF16(pool, g, x, n0, cnt, col)
		if joined {
			t.MulBatch(pool, false, g.K, cols, kk, w, kk, 1, col, cols, 0, prod, cols, 0)
			scatterChunk(pool, y, g.K, P, n0, cnt, prod[:g.K*cols])
			continue
		}
		// Image i's matrix at column i*P of the group's, row stride cols.
		t.MulBatch(pool, false, g.K, P, kk, w, kk, cnt, col, cols, P, y[n0*g.K*P:], P, g.K*P)
	}
	convAddBias(pool, g.K, P, bias, y)
}

// convAddBias adds bias (K values, or none) to the channels of y ([N, K,
// P]).
func convAddBias(pool *parallel.Pool, K, P int, bias, y []float32) {
	if bias == nil {
		return
	}
	pool.For(len(y)/P, max(1, 8192/P), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			b := bias[r%K]
			row := y[r*P : (r+1)*P]
			for i := range row {
				row[i] += b
			}
		}
	})
}

// convInputColBytes is convInputGradColBF16's workspace for g: a group's
// Wᵀ·Ȳ (float32), and where joined and a group has several images its ȳ
// side by side.
func convInputColBytes(g prim.ConvGeom) int {
	P, kk := g.OH*g.OW, g.ColRows()
	nb := convColGroup(g, 4*kk*P)
	n := align64(4 * kk * nb * P)
	if convColJoined(g) && nb > 1 {
		n += 2 * g.K * nb * P
	}
	return n
}

// convInputGradColBF16 computes x̄ = col2im(Wᵀ·ȳ) natively (any stride),
// with ws of convInputColBytes(g): the products in float32, scattered by
// col2im (each x̄ value summed over its taps in col2im's order).
func convInputGradColBF16(pool *parallel.Pool, t blas.BF16Tile, g prim.ConvGeom, gy, w []uint16, gx []float32, ws []byte) {
	P, kk := g.OH*g.OW, g.ColRows()
	nb := convColGroup(g, 4*kk*P)
	colBuf := convWsF32(ws, 0, kk*nb*P)
	joined := convColJoined(g)
	var gyBuf []uint16
	if joined && nb > 1 {
		gyBuf = convWsU16(ws, align64(4*len(colBuf)), g.K*nb*P)
	}
	plane := g.C * g.H * g.W
	for n0 := 0; n0 < g.N; n0 += nb {
		cnt := min(nb, g.N-n0)
		cols := cnt * P
		col := colBuf[:kk*cols]
		// Image i's Wᵀ·Ȳ at column i*P of col (row stride cols), as
		// col2im reads it.
		if joined && cnt > 1 {
			gatherChunk(pool, gy, g.K, P, n0, cnt, gyBuf[:g.K*cols])
			t.MulBatch(pool, true, kk, cols, g.K, w, kk, 1, gyBuf, cols, 0, col, cols, 0)
		} else {
			t.MulBatch(pool, true, kk, P, g.K, w, kk, cnt, gy[n0*g.K*P:], P, g.K*P, col, cols, P)
		}
		col2im(pool, g, col, cols, cnt, gx[n0*plane:(n0+cnt)*plane])
	}
}

// convWgradColGroup is the number of images of the weight gradient's
// groups (MulSumBatch calls).
func convWgradColGroup(g prim.ConvGeom) int {
	return convColGroup(g, 2*g.ColRows()*g.OH*g.OW)
}

// convWgradColBytes is convWgradColBF16's workspace for g: a group's
// im2col matrix.
func convWgradColBytes(g prim.ConvGeom) int {
	return 2 * g.ColRows() * convWgradColGroup(g) * g.OH * g.OW
}

// convWgradColBF16 computes W̄ = Σ ȳ·col(x)ᵀ natively (Groups 1), with ws
// of convWgradColBytes(g): group by group, each summed onto the groups
// before it.
func convWgradColBF16(pool *parallel.Pool, t blas.BF16Tile, g prim.ConvGeom, gy, x []uint16, gw []float32, ws []byte) {
	P, kk := g.OH*g.OW, g.ColRows()
	nb := convWgradColGroup(g)
	colBuf := convWsU16(ws, 0, kk*nb*P)
	for n0 := 0; n0 < g.N; n0 += nb {
		cnt := min(nb, g.N-n0)
		cols := cnt * P
		col := colBuf[:kk*cols]
		im2colBF16(pool, g, x, n0, cnt, col)
		// B_n = col(x[n]) [kk, P] at column i*P, row stride cols.
		t.MulSumBatch(pool, g.K, kk, P, cnt, gy[n0*g.K*P:], P, g.K*P, col, cols, P, gw, kk, n0 > 0)
	}
}
