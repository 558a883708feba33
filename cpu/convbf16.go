package cpu

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/env"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Mixed convolutions (prim.Conv2dOp and its backward ops with Mixed, which
// transform.ReadLow makes under bf16 autocast): operands that may be
// bfloat16 or float16, a float32 output.
//
// Where the CPU multiplies bf16 natively (Caps().NativeBF16) and both
// operands are bfloat16, the products run on the VDPBF16PS tile kernel
// (blas.BF16Tile): pointwise convolutions on the planes as they lie
// (convbf16_pw.go), others over a bf16 im2col matrix (convbf16_col.go),
// the weight gradient of stride-1 convolutions also tiled straight from
// the padded image (convWgradTiledBF16); which of them runs is
// convBF16PathOf's choice, by geometry. Every other case widens the
// 16-bit operands into the workspace and runs the float32 kernels
// (convWinoBF16 reads the bf16 ones in place where it can): bitwise the
// convolution of the widened values, as the float32 copies that ReadLow
// dropped would have given.

// convMixed reports whether a conv node with these inputs is mixed (some
// operand 16-bit).
func convMixed(in []*tensor.Tensor) bool {
	for _, t := range in {
		if t.DType == tensor.BFloat16 || t.DType == tensor.Float16 {
			return true
		}
	}
	return false
}

// convMixedNode is convMixed for a node's inputs.
func convMixedNode(n *trace.Node) bool {
	for _, t := range n.Inputs {
		if d := t.DType(); d == tensor.BFloat16 || d == tensor.Float16 {
			return true
		}
	}
	return false
}

// convBF16Path is the kernel a mixed convolution with both operands
// bfloat16 (not pointwise) runs on.
type convBF16Path int

const (
	convPathWiden convBF16Path = iota // float32 kernels on the widened values
	convPathTiled                     // the tiled weight gradient
	convPathCol                       // products over bf16 im2col (convbf16_col.go)
	convPathFlip                      // the input gradient as that forward of ȳ (stride 1)
)

// convBF16PathOf is the path op takes for geometry g with both operands
// bfloat16, where the native kernel is on: by the geometry and the
// machine alone, so that the workspace planned for it covers it.
func convBF16PathOf(op trace.Op, g prim.ConvGeom) convBF16Path {
	if g.Groups != 1 || g.N == 0 {
		return convPathWiden
	}
	if convPathHook != nil {
		if p, ok := convPathHook(op, g); ok {
			return p
		}
	}
	// Where the float32 Winograd kernel is expected to be faster, it runs
	// on the widened values (convNativeCheaper), unless a benchmark
	// forces the native kernel.
	if !convNativeForce && !convNativeCheaper(op, g) {
		return convPathWiden
	}
	if p := convBF16PathGeom(op, g); convColFits(op, g, p) {
		return p
	}
	return convPathWiden
}

// convBF16PathGeom is convBF16PathOf's choice by the kernels' speed alone.
func convBF16PathGeom(op trace.Op, g prim.ConvGeom) convBF16Path {
	switch op.(type) {
	case *prim.Conv2dOp:
		if convBF16On&convBF16Fwd != 0 && !convPaddingBound(g) {
			return convPathCol
		}
	case *prim.Conv2dBackwardInput:
		if convBF16On&convBF16Bwi != 0 {
			if convColFlip(g) {
				return convPathFlip
			}
			return convPathCol
		}
	case *prim.Conv2dBackwardWeight:
		if convBF16On&convBF16Bww != 0 {
			if convWgradTiled(g) && g.OH*g.OW >= convWgradKC {
				return convPathTiled
			}
			return convPathCol
		}
	}
	return convPathWiden
}

// convPathHook, where set, chooses the path first (tests and
// measurements; ok false leaves it to convBF16PathOf).
var convPathHook func(op trace.Op, g prim.ConvGeom) (p convBF16Path, ok bool)

// convBF16Native reports whether op, with both operands bfloat16, runs
// natively for geometry g on this CPU (by the geometry alone; the
// workspace covers it whether or not the kernel is on).
func convBF16Native(op trace.Op, g prim.ConvGeom) bool {
	return convBF16PathOf(op, g) != convPathWiden
}

// convNativeForce takes the native kernels wherever they apply, whatever
// the cost: for benchmarks timing both.
var convNativeForce bool

// Which convolutions take the native path (all three by default).
const (
	convBF16Fwd = 1 << iota
	convBF16Bwi
	convBF16Bww
)

// convBF16On selects them: all three, each where convBF16PathOf's
// geometry rules (from TestConvColPerfReport's measurements, Zen 4)
// expect it to beat the float32 kernels; $HEADROOM_CONV_BF16=fwd,bwi,bww
// (internal/env.ConvBF16) narrows the choice for measurements.
var convBF16On = convBF16Fwd | convBF16Bwi | convBF16Bww

func init() {
	// $HEADROOM_CONV_BF16 (internal/env.ConvBF16) overrides the choice,
	// for measurements; a value with an unknown word keeps the default.
	v, ok := env.Lookup(env.ConvBF16)
	if !ok {
		return
	}
	on := 0
	for _, f := range strings.Split(v, ",") {
		switch strings.TrimSpace(f) {
		case "fwd":
			on |= convBF16Fwd
		case "bwi":
			on |= convBF16Bwi
		case "bww":
			on |= convBF16Bww
		case "none":
		default:
			return
		}
	}
	convBF16On = on
}

// align64 rounds a byte count up to 64.
func align64(n int) int { return (n + 63) &^ 63 }

// convBF16Bytes is the workspace of the native path of op for g.
func convBF16Bytes(op trace.Op, g prim.ConvGeom) int {
	switch convBF16PathOf(op, g) {
	case convPathTiled:
		return convWgradTiledBytes(g)
	case convPathFlip:
		gt, _ := convInputGeom(g)
		return align64(2*g.K*g.ColRows()) + convColForwardBytes(gt)
	case convPathCol:
		switch op.(type) {
		case *prim.Conv2dOp:
			return convColForwardBytes(g)
		case *prim.Conv2dBackwardInput:
			return convInputColBytes(g)
		case *prim.Conv2dBackwardWeight:
			return convWgradColBytes(g)
		}
	}
	return 0
}

// convWidenedBytes is the workspace of a mixed conv node's widened path:
// the float32 kernel's and the widened operands.
func convWidenedBytes(n *trace.Node) int {
	ws := align64(int(convFloatWorkspace(n)))
	for _, t := range n.Inputs {
		if t.DType() != tensor.Float32 {
			ws += align64(4 * t.Shape().NumElements())
		}
	}
	return ws
}

// convBF16Runs reports whether a mixed conv node with both operands
// bfloat16 runs natively here: pointwise or on a native path, with the
// native kernel on (decided when the step is planned; a test that turns
// the kernel off plans again).
func convBF16Runs(op trace.Op, g prim.ConvGeom) bool {
	_, tile := blas.NativeBF16Tile()
	return tile && (convPwBF16(op, g) || convBF16PathOf(op, g) != convPathWiden)
}

// convMixedWorkspace is the workspace of a mixed conv node: the native
// path's where it runs natively (convBF16Runs), else the larger of the
// native path's and the widening path's (the float32 kernel's workspace
// and the widened operands).
func convMixedWorkspace(n *trace.Node) int64 {
	ws := convWidenedBytes(n)
	d0, d1 := n.Inputs[0].DType(), n.Inputs[1].DType()
	g, err := convNodeGeom(n, n.Inputs[0].Shape(), n.Inputs[1].Shape())
	if err != nil {
		return int64(ws)
	}
	switch {
	case d0 == tensor.BFloat16 && d1 == tensor.BFloat16 && convBF16Runs(n.Op, g):
		// Exactly the native path's: reserving the widened operands too
		// (a 3×3 512-channel weight: 9 MiB) made reading bf16 cost memory.
		return int64(convBF16Bytes(n.Op, g))
	case d0 == tensor.BFloat16 && d1 == tensor.BFloat16:
		ws = max(ws, convBF16Bytes(n.Op, g))
	case d0 == tensor.Float32 && d1 == tensor.BFloat16 && convBF16PathOf(n.Op, g) == convPathTiled:
		ws = max(ws, convWgradTiledBytes(g))
	}
	return int64(ws)
}

// convWsU16 views count uint16s of ws from byte off.
func convWsU16(ws []byte, off, count int) []uint16 {
	if count == 0 {
		return nil
	}
	if off+2*count > len(ws) {
		panic(fmt.Sprintf("cpu: conv workspace of %d bytes is too small for %d bytes", len(ws), off+2*count))
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&ws[off])), count)
}

// convWsF32 views count float32s of ws from byte off.
func convWsF32(ws []byte, off, count int) []float32 {
	if count == 0 {
		return nil
	}
	if off+4*count > len(ws) {
		panic(fmt.Sprintf("cpu: conv workspace of %d bytes is too small for %d bytes", len(ws), off+4*count))
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&ws[off])), count)
}

// convMixedKernel runs a mixed conv node: natively or widened.
func convMixedKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte, float Kernel) error {
	g, err := convNodeGeom(n, in[0].Shape, in[1].Shape)
	if err != nil {
		return err
	}
	t, tile := blas.NativeBF16Tile()
	path := convPathWiden
	if tile {
		path = convBF16PathOf(n.Op, g)
	}
	if in[0].DType == tensor.Float32 && in[1].DType == tensor.BFloat16 && path == convPathTiled {
		// The weight gradient of ȳ widened by other readers' cast:
		// native if its values are bf16 numbers (the cast's), packed
		// from their high halves.
		if convWgradTiledBF16(pool, t, g, nil, in[0].F32(), in[1].U16(), out[0].F32(), ws) {
			return nil
		}
	}
	if tile && in[0].DType == tensor.BFloat16 && in[1].DType == tensor.BFloat16 {
		a, b, y := in[0].U16(), in[1].U16(), out[0].F32()
		if convPwBF16(n.Op, g) {
			// Pointwise: products of the planes as they lie.
			switch n.Op.(type) {
			case *prim.Conv2dOp:
				convPwForwardBF16(pool, t, g, a, b, convBias(pool, in), y)
			case *prim.Conv2dBackwardInput:
				convPwInputGradBF16(pool, t, g, a, b, y)
			case *prim.Conv2dBackwardWeight:
				convPwWeightGradBF16(pool, t, g, a, b, y)
			}
			return nil
		}
		switch path {
		case convPathTiled:
			convWgradTiledBF16(pool, t, g, a, nil, b, y, ws)
			return nil
		case convPathFlip:
			convInputGradBF16(pool, t, g, a, b, y, ws)
			return nil
		case convPathCol:
			switch n.Op.(type) {
			case *prim.Conv2dOp:
				convForwardBF16(pool, t, g, a, b, convBias(pool, in), y, ws)
			case *prim.Conv2dBackwardInput:
				convInputGradColBF16(pool, t, g, a, b, y, ws)
			case *prim.Conv2dBackwardWeight:
				convWgradColBF16(pool, t, g, a, b, y, ws)
			}
			return nil
		}
	}
	if convWinoBF16(pool, n, g, in, out, ws) {
		return nil
	}
	// Widened: the float32 kernel on float32 copies.
	off := align64(int(convFloatWorkspace(n)))
	if need := convWidenedBytes(n); len(ws) < need {
		return fmt.Errorf("cpu: %s: %d workspace bytes, the widened path needs %d: planned with the native bf16 kernels on, run with them off (plan the step again)", n.Label(), len(ws), need)
	}
	wide := make([]*tensor.Tensor, len(in))
	for i, t := range in {
		if t.DType == tensor.Float32 {
			wide[i] = t
			continue
		}
		cnt := t.Shape.NumElements()
		w := &tensor.Tensor{DType: tensor.Float32, Shape: t.Shape, Data: ws[off : off+4*cnt]}
		convWidenInto(pool, t, w.F32())
		wide[i] = w
		off += align64(4 * cnt)
	}
	return float(pool, n, wide, out, ws[:convFloatWorkspace(n)])
}

// convBias is the forward's bias widened (nil where there is none).
func convBias(pool *parallel.Pool, in []*tensor.Tensor) []float32 {
	if len(in) < 3 {
		return nil
	}
	bias := make([]float32, in[2].Shape.NumElements()) // K values: not worth planning
	convWidenInto(pool, in[2], bias)
	return bias
}

// convWinoBF16 runs a mixed convolution that takes float32 Winograd on
// its widened operands with its bf16 inputs (x; ȳ of the input gradient;
// ȳ and x of the weight gradient) read as they are, gathered and widened tile by tile by the input
// transform (blas.WinoGatherRowsBF16), the other operands widened into
// the workspace as the widened path does: bitwise that path's result,
// without writing and reading a float32 copy of the largest operand
// (widening was 4-5% of rrdbnet's forward layers' time, one thread, Zen
// 4). Within the widened path's workspace. False where it does not apply
// (no AVX-512 BW gather, no Winograd plan, the portable transforms, no
// such input in bf16): the caller widens.
func convWinoBF16(pool *parallel.Pool, n *trace.Node, g prim.ConvGeom, in, out []*tensor.Tensor, ws []byte) bool {
	if convWinoBF16Off || !blas.WinoGatherRowsBF16OK() || !blas.WinoOK() || winogradScalar {
		return false
	}
	var wf winograd
	var ww winoWgrad
	readBF16 := make([]bool, len(in)) // the inputs read as bf16
	switch n.Op.(type) {
	case *prim.Conv2dOp:
		w, ok := winogradFor(g)
		if !ok || !w.vec() {
			return false
		}
		wf, readBF16[0] = w, in[0].DType == tensor.BFloat16
	case *prim.Conv2dBackwardInput:
		w, ok := winogradInputGrad(g)
		if !ok || !w.vec() {
			return false
		}
		wf, readBF16[0] = w, in[0].DType == tensor.BFloat16
	case *prim.Conv2dBackwardWeight:
		w, ok := winogradWgrad(g)
		if !ok {
			return false
		}
		ww = w
		readBF16[0], readBF16[1] = in[0].DType == tensor.BFloat16, in[1].DType == tensor.BFloat16
	default:
		return false
	}
	if !readBF16[0] && !readBF16[1] {
		return false
	}
	fws := ws[:convFloatWorkspace(n)]
	off := align64(len(fws))
	wide := make([][]float32, len(in))
	bf := make([][]uint16, len(in))
	for i, t := range in {
		switch {
		case readBF16[i]:
			bf[i] = t.U16()
		case t.DType == tensor.Float32:
			wide[i] = t.F32()
		default:
			cnt := t.Shape.NumElements()
			wide[i] = convWsF32(ws, off, cnt)
			convWidenInto(pool, t, wide[i])
			off += align64(4 * cnt)
		}
	}
	y := out[0].F32()
	switch n.Op.(type) {
	case *prim.Conv2dOp:
		var bias []float32
		if len(in) == 3 {
			bias = wide[2]
		}
		wf.runSrc(pool, wide[0], bf[0], wide[1], false, bias, y, convScratch[float32](fws, 0, wf.scratch()))
	case *prim.Conv2dBackwardInput:
		wf.runSrc(pool, wide[0], bf[0], wide[1], true, nil, y, convScratch[float32](fws, 0, wf.scratch()))
	case *prim.Conv2dBackwardWeight:
		ww.weightGradSrc(pool, wide[0], bf[0], wide[1], bf[1], y, convScratch[float32](fws, 0, ww.scratch()))
	}
	return true
}

// convWinoBF16Off turns convWinoBF16 off: tests compare it with the
// widened path.
var convWinoBF16Off bool

// convWidenInto converts t (float32, bfloat16 or float16) into dst.
func convWidenInto(pool *parallel.Pool, t *tensor.Tensor, dst []float32) {
	var typ blas.Type
	switch t.DType {
	case tensor.Float32:
		copy(dst, t.F32())
		return
	case tensor.BFloat16:
		typ = blas.BFloat16
	case tensor.Float16:
		typ = blas.Float16
	default:
		panic(fmt.Sprintf("cpu: mixed convolution operand of type %v", t.DType))
	}
	src := t.U16()
	const grain = 1 << 14
	pool.For((len(src)+grain-1)/grain, 1, func(lo, hi int) {
		a, b := lo*grain, min(len(src), hi*grain)
		blas.Widen(typ, dst[a:b], src[a:b])
	})
}

// im2colBF16 writes the im2col matrices of images [n0, n0+cnt) of x
// side by side into col: row (c, kh, kw), column i*OH*OW+oh*OW+ow for
// image n0+i, row stride cnt*OH*OW; zero in the padding. Groups 1.
func im2colBF16(pool *parallel.Pool, g prim.ConvGeom, x []uint16, n0, cnt int, col []uint16) {
	P := g.OH * g.OW
	cols := cnt * P
	khw := g.KH * g.KW
	plane := g.H * g.W
	// Stride 1 with rows as long as the input's: a tap's values are one
	// run of x, shifted, but for the columns its rows would wrap into.
	run := g.SH == 1 && g.SW == 1 && g.OW == g.W
	// Short or strided rows: each tap's source offsets listed once (-1 in
	// the padding), so that a value costs a load, not a row's bounds
	// (ResNet-18's 2x2 and 4x4 planes, its stride-2 layers).
	var offs []int32
	if !run && (g.OW < 16 || g.SW != 1) && khw*P <= 1<<14 {
		buf := getInt32s(khw * P) // pooled: a call a convolution a step
		defer convGatherPool.Put(buf)
		offs = *buf
		for t := range khw {
			kh, kw := t/g.KW, t%g.KW
			for oh := range g.OH {
				for ow := range g.OW {
					ih, iw := oh*g.SH-g.PH+kh*g.DH, ow*g.SW-g.PW+kw*g.DW
					o := int32(-1)
					if ih >= 0 && ih < g.H && iw >= 0 && iw < g.W {
						o = int32(ih*g.W + iw)
					}
					offs[t*P+oh*g.OW+ow] = o
				}
			}
		}
	}
	pool.For(g.C*khw, max(1, 8192/cols), func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			c, t := r/khw, r%khw
			kh, kw := t/g.KW, t%g.KW
			ohLo, ohHi := convRange(g.H, g.OH, g.SH, g.PH, kh*g.DH)
			owLo, owHi := convRange(g.W, g.OW, g.SW, g.PW, kw*g.DW)
			ih0, iw0 := ohLo*g.SH-g.PH+kh*g.DH, owLo*g.SW-g.PW+kw*g.DW
			for i := range cnt {
				d := col[r*cols+i*P : r*cols+(i+1)*P]
				xc := x[((n0+i)*g.C+c)*plane : ((n0+i)*g.C+c+1)*plane]
				if offs != nil {
					for q, o := range offs[t*P : (t+1)*P] {
						var v uint16
						if o >= 0 {
							v = xc[o]
						}
						d[q] = v
					}
					continue
				}
				if ohLo >= ohHi || owLo >= owHi {
					clear(d)
					continue
				}
				clear(d[:ohLo*g.OW])
				clear(d[ohHi*g.OW:])
				if run {
					lo, hi := ohLo*g.OW+owLo, (ohHi-1)*g.OW+owHi
					copy(d[lo:hi], xc[ih0*g.W+iw0:])
					for oh := ohLo; oh < ohHi; oh++ {
						for q := oh * g.OW; q < oh*g.OW+owLo; q++ {
							d[q] = 0
						}
						for q := oh*g.OW + owHi; q < (oh+1)*g.OW; q++ {
							d[q] = 0
						}
					}
					continue
				}
				for oh, ih := ohLo, ih0; oh < ohHi; oh, ih = oh+1, ih+g.SH {
					dr := d[oh*g.OW : (oh+1)*g.OW]
					row := xc[ih*g.W : (ih+1)*g.W]
					for q := 0; q < owLo; q++ {
						dr[q] = 0
					}
					for q := owHi; q < g.OW; q++ {
						dr[q] = 0
					}
					if g.SW == 1 {
						copy(dr[owLo:owHi], row[iw0:])
						continue
					}
					for q, iw := owLo, iw0; q < owHi; q, iw = q+1, iw+g.SW {
						dr[q] = row[iw]
					}
				}
			}
		}
	})
}

// convInputGradBF16 computes x̄ from ȳ and w natively, for stride 1 with
// convInputGeom's flipped weight: a forward convolution of ȳ.
func convInputGradBF16(pool *parallel.Pool, t blas.BF16Tile, g prim.ConvGeom, gy, w []uint16, gx []float32, ws []byte) {
	gt, _ := convInputGeom(g)
	khw := g.KH * g.KW
	wt := convWsU16(ws, 0, len(w))
	// wt[c][k][kh][kw] = W[k][c][KH-1-kh][KW-1-kw]
	pool.For(g.K, max(1, 4096/(g.C*khw)), func(k0, k1 int) {
		for k := k0; k < k1; k++ {
			for c := 0; c < g.C; c++ {
				src := w[(k*g.C+c)*khw:][:khw]
				dst := wt[(c*g.K+k)*khw:][:khw]
				for i, v := range src {
					dst[khw-1-i] = v
				}
			}
		}
	})
	convForwardBF16(pool, t, gt, gy, wt, nil, gx, ws[align64(2*len(w)):])
}

// The tiled weight gradient. W̄ᵀ [C*KH*KW, K] is a product over output
// positions, k = positions in pairs: an A panel holds, per pair of
// positions (p, p+1), the dwords col(x)[r, p] | col(x)[r, p+1]<<16 of
// MR rows r = (c, kh, kw); for stride 1 and dilation 1 that is the two
// adjacent values x[c, oh+kh-PH, ow+kw-PW .. +1] (OW even: a pair never
// leaves its output row), read straight from a zero-padded copy of the
// image, so col(x) is never written out. B panels hold pairs of ȳ, NR
// channels each, packed once per image. Positions are summed image by
// image in blocks of convWgradKC, each block's sum from +0 added to the
// previous blocks' (the first stored): the same order for any thread
// count, threads splitting the A panels (rows of W̄ᵀ).

// convWgradKC is the number of positions (even) of a K block.
const convWgradKC = 512

// convWgradTiled reports whether the tiled weight gradient applies.
func convWgradTiled(g prim.ConvGeom) bool {
	return g.SH == 1 && g.SW == 1 && g.DH == 1 && g.DW == 1 && g.OW%2 == 0 && g.Groups == 1
}

// convWgradTiledDims are the tiled weight gradient's sizes: the padded
// image's plane and row, the K blocks of an image, the B panels, and the
// padded product's rows and columns.
func convWgradTiledDims(g prim.ConvGeom, mr, nr int) (hp, wp, blocks, panB, mPad, nPad int) {
	hp, wp = g.H+2*g.PH, g.W+2*g.PW
	blocks = (g.OH*g.OW + convWgradKC - 1) / convWgradKC
	panB = (g.K + nr - 1) / nr
	kk := g.C * g.KH * g.KW
	mPad = (kk + mr - 1) / mr * mr
	return hp, wp, blocks, panB, mPad, panB * nr
}

// convWgradTiledBytes is the workspace of the tiled weight gradient (for
// the native kernel's tile; 24x16 where there is none).
func convWgradTiledBytes(g prim.ConvGeom) int {
	mr, nr := 24, 16
	if t, ok := blas.NativeBF16Tile(); ok {
		mr, nr = t.MR(), t.NR()
	}
	hp, wp, blocks, panB, mPad, nPad := convWgradTiledDims(g, mr, nr)
	return align64(2*(g.C*hp*wp+2)) + align64(4*blocks*panB*nr*convWgradKC/2) + 4*mPad*nPad
}

var convPanels = sync.Pool{New: func() any { return new([]uint32) }}

// convWgradTiledBF16 is the tiled weight gradient of ȳ given as bf16 gy
// or as float32 gy32. It reports false, having written nothing to gw,
// when some value of gy32 is not a bfloat16 number (the caller widens).
func convWgradTiledBF16(pool *parallel.Pool, t blas.BF16Tile, g prim.ConvGeom, gy []uint16, gy32 []float32, x []uint16, gw []float32, ws []byte) bool {
	mr, nr := t.MR(), t.NR()
	hp, wp, blocks, panB, mPad, nPad := convWgradTiledDims(g, mr, nr)
	P := g.OH * g.OW
	kk := g.C * g.KH * g.KW
	khw := g.KH * g.KW
	kpMax := convWgradKC / 2
	xp := convWsU16(ws, 0, g.C*hp*wp+2)
	off := align64(2 * len(xp))
	bp := unsafe.Slice((*uint32)(unsafe.Pointer(&ws[off])), blocks*panB*nr*kpMax)
	off += align64(4 * len(bp))
	sum := convWsF32(ws, off, mPad*nPad)
	plane := g.H * g.W
	if gy32 != nil && !bf16Exact(gy32) {
		return false
	}
	for n := 0; n < g.N; n++ {
		// The padded image (zero border) a channel per task, and ȳ's B
		// panels, in one parallel loop.
		xp[g.C*hp*wp], xp[g.C*hp*wp+1] = 0, 0
		pool.For(g.C+blocks*panB, 1, func(lo, hi int) {
			for u := lo; u < hi; u++ {
				if c := u; c < g.C {
					dst := xp[c*hp*wp : (c+1)*hp*wp]
					clear(dst[:g.PH*wp])
					clear(dst[(g.PH+g.H)*wp:])
					src := x[(n*g.C+c)*plane : (n*g.C+c+1)*plane]
					for h := 0; h < g.H; h++ {
						row := dst[(g.PH+h)*wp : (g.PH+h+1)*wp]
						clear(row[:g.PW])
						copy(row[g.PW:g.PW+g.W], src[h*g.W:(h+1)*g.W])
						clear(row[g.PW+g.W:])
					}
					continue
				}
				v := u - g.C
				b, jp := v/panB, v%panB
				p0 := b * convWgradKC
				kcur := min(convWgradKC, P-p0)
				k0 := jp * nr
				dst := bp[v*nr*kpMax : v*nr*kpMax+nr*((kcur+1)/2)]
				if gy32 != nil {
					packPairsHigh(dst, nr, gy32, (n*g.K+k0)*P+p0, P, min(nr, g.K-k0), kcur)
					continue
				}
				blas.PackPairsRows(dst, nr, gy, (n*g.K+k0)*P+p0, P, min(nr, g.K-k0), kcur)
			}
		})
		pool.For(mPad/mr, 1, func(lo, hi int) {
			ap := convPanels.Get().(*[]uint32)
			defer convPanels.Put(ap)
			if len(*ap) < mr*kpMax {
				*ap = make([]uint32, mr*kpMax)
			}
			a := (*ap)[:mr*kpMax]
			bases := make([]int, mr)
			for ip := lo; ip < hi; ip++ {
				lanes := min(mr, kk-ip*mr)
				for i := range lanes {
					r := ip*mr + i
					c, kh, kw := r/khw, r%khw/g.KW, r%g.KW
					bases[i] = c*hp*wp + kh*wp + kw
				}
				for b := 0; b < blocks; b++ {
					p0 := b * convWgradKC
					kp := min(convWgradKC, P-p0) / 2
					packWgradA(a[:mr*kp], mr, lanes, bases, xp, p0, kp, g.OW, wp)
					for jp := 0; jp < panB; jp++ {
						u := b*panB + jp
						t.Run(kp, a[:mr*kp], bp[u*nr*kpMax:u*nr*kpMax+nr*kp], sum[ip*mr*nPad+jp*nr:], nPad, n == 0 && b == 0)
					}
				}
			}
		})
	}
	pool.For(g.K, max(1, 4096/kk), func(k0, k1 int) {
		for k := k0; k < k1; k++ {
			dst := gw[k*kk : (k+1)*kk]
			for r := range dst {
				dst[r] = sum[r*nPad+k]
			}
		}
	})
	return true
}

// packWgradA packs the A panel of kp position pairs from p0 on: lane i <
// lanes reads the pairs of the padded image from bases[i], zero lanes
// past them. A full panel's runs of 16 pairs within an output row are
// transposed 8 lanes at a time (blas.PackLanes8), the rest read pair by
// pair.
func packWgradA(a []uint32, mr, lanes int, bases []int, xp []uint16, p0, kp, ow, wp int) {
	_ = xp[len(xp)-1]
	xb := unsafe.Pointer(unsafe.SliceData(xp))
	bases = bases[:lanes]
	for q := 0; q < kp; {
		p := p0 + 2*q
		oh, w := p/ow, p%ow
		seg := min(kp-q, (ow-w)/2) // pairs left in this output row
		ro := oh*wp + w
		if n16 := seg / 16; n16 > 0 && lanes == mr && mr%8 == 0 {
			var offs [8]int
			ok := true
			for g8 := 0; g8 < mr && ok; g8 += 8 {
				for i := range offs {
					offs[i] = bases[g8+i] + ro
				}
				ok = blas.PackLanes8(xp, &offs, n16, a[q*mr+g8:], mr)
			}
			if ok {
				q += 16 * n16
				seg -= 16 * n16
				ro += 32 * n16
			}
		}
		for ; seg > 0; seg, q, ro = seg-1, q+1, ro+2 {
			d := a[q*mr : q*mr+mr]
			for i, b := range bases {
				// Two adjacent bf16 values, the first low (little endian).
				d[i] = *(*uint32)(unsafe.Add(xb, 2*(b+ro)))
			}
			clear(d[lanes:])
		}
	}
}

// bf16Exact reports whether every value of v is a bfloat16 number (its
// low 16 bits zero), so that its high halves are it exactly.
func bf16Exact(v []float32) bool {
	var a, b uint64
	i := 0
	for ; i+4 <= len(v); i += 4 {
		a |= *(*uint64)(unsafe.Pointer(&v[i]))
		b |= *(*uint64)(unsafe.Pointer(&v[i+2]))
	}
	for ; i < len(v); i++ {
		a |= uint64(math.Float32bits(v[i]))
	}
	return (a|b)&0x0000ffff0000ffff == 0
}

// packPairsHigh is blas.PackPairsRows from float32 rows (kcur even) of
// bf16 numbers: their high halves.
func packPairsHigh(dst []uint32, w int, src []float32, off, ld, lanes, kcur int) {
	kp := kcur / 2
	for r := 0; r < lanes; r++ {
		s := src[off+r*ld : off+r*ld+2*kp]
		d := dst[r : r+(kp-1)*w+1]
		for q := 0; q < kp; q++ {
			// Two floats, the first low (little endian).
			u := *(*uint64)(unsafe.Pointer(&s[2*q]))
			d[q*w] = uint32(u>>16)&0xffff | uint32(u>>32)&0xffff0000
		}
	}
	for q := 0; q < kp; q++ {
		clear(dst[q*w+lanes : q*w+w])
	}
}
