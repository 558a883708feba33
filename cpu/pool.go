package cpu

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/headroom-ml/headroom/cpu/internal/vec"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Pooling kernels follow PyTorch's CPU kernels (MaxPoolKernel.cpp,
// AvgPoolKernel.cpp, AdaptiveAvgPoolKernel.cpp) loop for loop, so that
// window bounds, tie-breaking, divisors and summation order are the same.
// Every (n, c) plane is independent; planes are split across threads.

func init() {
	Floats[*prim.MaxPool2dOp](maxPoolKernel[float32], maxPoolKernel[float64])
	Floats[*prim.MaxPool2dBackward](maxPoolBackwardKernel[float32], maxPoolBackwardKernel[float64])
	Floats[*prim.AvgPool2dOp](avgPoolKernel[float32], avgPoolKernel[float64])
	Floats[*prim.AvgPool2dBackward](avgPoolBackwardKernel[float32], avgPoolBackwardKernel[float64])
	Floats[*prim.AdaptiveAvgPool2dOp](adaptivePoolKernel[float32], adaptivePoolKernel[float64])
	Floats[*prim.AdaptiveAvgPool2dBackward](adaptivePoolBackwardKernel[float32], adaptivePoolBackwardKernel[float64])
}

// poolPlanes runs f over planes [lo, hi) of n planes in parallel, each plane
// costing about work element operations.
func poolPlanes(pool *parallel.Pool, n, work int, f func(lo, hi int)) {
	pool.For(n, max(1, 16384/max(1, work)), f)
}

func maxPoolKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	g, err := n.Op.(*prim.MaxPool2dOp).Geom(in[0].Shape)
	if err != nil {
		return err
	}
	x, y, idx := slice[T](in[0]), slice[T](out[0]), out[1].I64()
	inPlane, outPlane := g.H*g.W, g.OH*g.OW
	negInf := T(math.Inf(-1))
	x32, _ := any(x).([]float32)
	poolPlanes(pool, g.N*g.C, outPlane*g.KH*g.KW, func(p0, p1 int) {
		var mp *maxPoolScratch
		if x32 != nil {
			mp = maxPoolScratchPool.Get().(*maxPoolScratch)
			defer maxPoolScratchPool.Put(mp)
		}
		for p := p0; p < p1; p++ {
			xp := x[p*inPlane : (p+1)*inPlane]
			yp := y[p*outPlane : (p+1)*outPlane]
			ip := idx[p*outPlane : (p+1)*outPlane]
			if x32 != nil && stem3s2(g) && maxPlane3s2(g, x32[p*inPlane:(p+1)*inPlane], any(yp).([]float32), ip) {
				continue
			}
			if x32 != nil && maxPlaneF32(g, mp, x32[p*inPlane:(p+1)*inPlane], any(yp).([]float32), ip) {
				continue
			}
			for oh := 0; oh < g.OH; oh++ {
				ih0 := oh*g.SH - g.PH
				ih1 := min(ih0+(g.KH-1)*g.DH+1, g.H)
				for ih0 < 0 {
					ih0 += g.DH
				}
				for ow := 0; ow < g.OW; ow++ {
					iw0 := ow*g.SW - g.PW
					iw1 := min(iw0+(g.KW-1)*g.DW+1, g.W)
					for iw0 < 0 {
						iw0 += g.DW
					}
					best, at := negInf, ih0*g.W+iw0
					if x32, ok := any(xp).([]float32); ok {
						// Branch-free: on real data "v > best" is a coin flip
						// the branch predictor loses.
						b, a := maxWindowF32(x32, g.W, ih0, ih1, g.DH, iw0, iw1, g.DW)
						best, at = T(b), a
					} else {
						for ih := ih0; ih < ih1; ih += g.DH {
							row := xp[ih*g.W:]
							for iw := iw0; iw < iw1; iw += g.DW {
								if v := row[iw]; v > best || v != v {
									best, at = v, ih*g.W+iw
								}
							}
						}
					}
					yp[oh*g.OW+ow] = best
					ip[oh*g.OW+ow] = int64(at)
				}
			}
		}
	})
	return nil
}

// stem3s2 reports whether g is max pooling 3×3 at stride 2 with padding
// 1 (ResNets' stem), which maxPlane3s2 runs.
func stem3s2(g prim.PoolGeom) bool {
	return g.KH == 3 && g.KW == 3 && g.SH == 2 && g.SW == 2 && g.PH == 1 && g.PW == 1 && g.DH == 1 && g.DW == 1
}

// maxPlane3s2 is max pooling of one plane for stem3s2 geometries: the
// windows inside the plane 8 at a time (vec.MaxPool3s2, the scan's
// comparisons on vectors), those on its border by maxWindowF32. It
// reports false, leaving y and idx to be rewritten, where the vector
// kernel does not apply (no AVX2, a plane too narrow) or read a NaN (the
// caller's scan then places it as PyTorch does). The scalar scan of
// resnet18's stem pool (32×64×32×32) took 6.4 ms of a 190 ms step (Zen 4).
func maxPlane3s2(g prim.PoolGeom, x, y []float32, idx []int64) bool {
	const lo = 1                   // the first output column whose window is inside
	hi := min(g.OW, (g.W-2)/2+1)   // past the last one
	ohHi := min(g.OH, (g.H-2)/2+1) // past the last output row whose window is inside
	if hi-lo < 8 || ohHi <= 1 || len(x) < g.H*g.W {
		return false
	}
	n := (hi - lo) / 8
	for oh := 1; oh < ohHi; oh++ {
		yr, ir := y[oh*g.OW:(oh+1)*g.OW], idx[oh*g.OW:(oh+1)*g.OW]
		if !vec.MaxPool3s2(x, g.W, oh, lo, n, yr[lo:], ir[lo:]) {
			return false
		}
		// The columns left over: a last group ending at hi, overlapping
		// the one before it (the shared windows get the same results).
		if lo+8*n < hi && !vec.MaxPool3s2(x, g.W, oh, hi-8, 1, yr[hi-8:], ir[hi-8:]) {
			return false
		}
	}
	window := func(oh, ow int) {
		ih0, iw0 := oh*g.SH-g.PH, ow*g.SW-g.PW
		ih1, iw1 := min(ih0+3, g.H), min(iw0+3, g.W)
		ih0, iw0 = max(ih0, 0), max(iw0, 0)
		b, at := maxWindowF32(x, g.W, ih0, ih1, 1, iw0, iw1, 1)
		y[oh*g.OW+ow], idx[oh*g.OW+ow] = b, int64(at)
	}
	for oh := 0; oh < g.OH; oh++ {
		if oh >= 1 && oh < ohHi {
			for ow := 0; ow < lo; ow++ {
				window(oh, ow)
			}
			for ow := hi; ow < g.OW; ow++ {
				window(oh, ow)
			}
			continue
		}
		for ow := 0; ow < g.OW; ow++ {
			window(oh, ow)
		}
	}
	return true
}

// maxPoolScratch holds maxPlaneF32's row maxima.
type maxPoolScratch struct {
	keys []int32 // per input row and output column: the key of the row's maximum
	cols []int32 // and its column
}

var maxPoolScratchPool = sync.Pool{New: func() any { return new(maxPoolScratch) }}

// maxPlaneF32 is max pooling of one plane without NaNs (it reports false,
// computing nothing, for a plane with one): PyTorch's window scan, rows
// then columns, keeping the first maximum, is the first maximum over the
// window's rows of each row's first maximum, so each input row's maxima
// over the output columns' windows are found once and shared by the KH
// windows that cover the row. Values are compared as orderKey keys (-0 and
// +0 equal, as "v > best" has them), with no branches on the data.
func maxPlaneF32(g prim.PoolGeom, mp *maxPoolScratch, x, y []float32, idx []int64) bool {
	n := g.H * g.OW
	if cap(mp.keys) < n {
		mp.keys, mp.cols = make([]int32, n), make([]int32, n)
	}
	keys, cols := mp.keys[:n], mp.cols[:n]
	// The maxima are kept with masks, not branches: whether a value beats
	// the best so far is a coin flip on real data, which the branch
	// predictor lost (3–4× slower, Zen 4). A NaN in any window sends the
	// plane to the general scan (one in no window changes no output).
	var nan int64
	for ih := 0; ih < g.H; ih++ {
		row := x[ih*g.W : (ih+1)*g.W]
		kr, cr := keys[ih*g.OW:(ih+1)*g.OW], cols[ih*g.OW:(ih+1)*g.OW]
		lo, hi := 0, 0 // output columns [lo, hi) done by the 3-wide form
		if g.KW == 3 && g.DW == 1 && g.SW == 2 {
			lo, hi, nan = maxRow3s2(row, kr, cr, g.PW, nan)
		}
		for ow := 0; ow < len(kr); ow++ {
			if ow == lo && hi > lo {
				ow = hi - 1
				continue
			}
			iw0 := ow*g.SW - g.PW
			iw1 := min(iw0+(g.KW-1)*g.DW+1, g.W)
			for iw0 < 0 {
				iw0 += g.DW
			}
			bk, bc := int64(math.MinInt32), int64(iw0)
			for iw := iw0; iw < iw1; iw += g.DW {
				b := math.Float32bits(row[iw])
				nan |= (0x7f800000 - int64(b&0x7fffffff)) >> 63
				a := int64(b & 0x7fffffff)
				sg := int64(int32(b)) >> 31
				k := (a ^ sg) - sg  // orderKey
				m := (bk - k) >> 63 // all ones when k > bk
				bk ^= (bk ^ k) & m
				bc ^= (bc ^ int64(iw)) & m
			}
			kr[ow], cr[ow] = int32(bk), int32(bc)
		}
	}
	if nan != 0 {
		return false
	}
	for oh := 0; oh < g.OH; oh++ {
		ih0 := oh*g.SH - g.PH
		ih1 := min(ih0+(g.KH-1)*g.DH+1, g.H)
		for ih0 < 0 {
			ih0 += g.DH
		}
		yr, ir := y[oh*g.OW:(oh+1)*g.OW], idx[oh*g.OW:(oh+1)*g.OW]
		for ow := range yr {
			iw0 := ow*g.SW - g.PW
			for iw0 < 0 {
				iw0 += g.DW
			}
			bk, at := int64(math.MinInt32), int64(ih0*g.W+iw0)
			for ih := ih0; ih < ih1; ih += g.DH {
				k := int64(keys[ih*g.OW+ow])
				a := int64(ih*g.W) + int64(cols[ih*g.OW+ow])
				m := (bk - k) >> 63
				bk ^= (bk ^ k) & m
				at ^= (at ^ a) & m
			}
			if bk == math.MinInt32 {
				// An empty window (every value's key is larger, -Inf's
				// included): -Inf at its first position, as the scan
				// leaves it.
				yr[ow] = float32(math.Inf(-1))
			} else {
				yr[ow] = x[at]
			}
			ir[ow] = at
		}
	}
	return true
}

// maxRow3s2 is maxPlaneF32's row pass for windows 3 wide at stride 2
// (ResNets' stem pool), on the output columns whose windows lie inside the
// row, [lo, hi), which it returns with nan updated: each value's key
// computed once, and three keys compared with two masked selections.
func maxRow3s2(row []float32, kr, cr []int32, pw int, nan int64) (lo, hi int, _ int64) {
	if len(row)-3+pw < 0 {
		return 0, 0, nan
	}
	lo = (pw + 1) / 2                      // the first window starting at column >= 0
	hi = min(len(kr), (len(row)-3+pw)/2+1) // past the last one ending inside the row
	if lo >= hi {
		return 0, 0, nan
	}
	key := func(v float32) int64 {
		b := math.Float32bits(v)
		nan |= (0x7f800000 - int64(b&0x7fffffff)) >> 63
		a := int64(b & 0x7fffffff)
		sg := int64(int32(b)) >> 31
		return (a ^ sg) - sg
	}
	iw := 2*lo - pw
	k2 := key(row[iw])
	for ow := lo; ow < hi; ow++ {
		w := row[iw : iw+3]
		k0, k1 := k2, key(w[1])
		k2 = key(w[2])
		// The first maximum of k0, k1, k2: k1 replaces k0 if greater, then
		// k2 the winner if greater.
		m := (k0 - k1) >> 63
		bk := k0 ^ (k0^k1)&m
		bc := int64(iw) + 1&m
		m = (bk - k2) >> 63
		bk ^= (bk ^ k2) & m
		bc ^= (bc ^ int64(iw+2)) & m
		kr[ow], cr[ow] = int32(bk), int32(bc)
		iw += 2
	}
	return lo, hi, nan
}

// orderKey maps a float32 to an integer with the same order, -0 and +0
// both to 0 (NaNs get arbitrary keys; callers mask them).
func orderKey(v float32) int64 {
	b := math.Float32bits(v)
	a := int64(b & 0x7fffffff)
	s := int64(int32(b)) >> 31
	return (a ^ s) - s
}

// maxWindowF32 is the max-pooling window scan without branches on the
// data: the first maximum of rows [ih0, ih1) (step dh) and columns
// [iw0, iw1) (step dw) of the plane x (row length w), or the last NaN, and
// its index in the plane, as PyTorch's loop "val > maxval || isnan(val)"
// finds them.
func maxWindowF32(x []float32, w, ih0, ih1, dh, iw0, iw1, dw int) (float32, int) {
	best, at := float32(math.Inf(-1)), ih0*w+iw0
	kb := orderKey(best)
	for ih := ih0; ih < ih1; ih += dh {
		row := x[ih*w : ih*w+iw1]
		for iw := iw0; iw < iw1; iw += dw {
			v := row[iw]
			kv := orderKey(v)
			// All ones where v should replace best: greater (unless best
			// is already a NaN), or a NaN.
			m := int64(uint32((kb-kv)>>63)&^nanMask(best)|nanMask(v)) << 32 >> 32
			best = selectF32(uint32(m), v, best)
			kb ^= (kb ^ kv) & m
			at ^= (at ^ (ih*w + iw)) & int(m)
		}
	}
	return best, at
}

func maxPoolBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	gy, idx, gx := slice[T](in[0]), in[1].I64(), slice[T](out[0])
	s := out[0].Shape
	planes, inPlane := s[0]*s[1], s[2]*s[3]
	outPlane := in[0].Shape[2] * in[0].Shape[3]
	var bad atomic.Int64
	bad.Store(-1)
	poolPlanes(pool, planes, outPlane, func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			gxp := gx[p*inPlane : (p+1)*inPlane]
			clear(gxp)
			ip := idx[p*outPlane : (p+1)*outPlane]
			for o, v := range gy[p*outPlane : (p+1)*outPlane] {
				i := ip[o]
				if i < 0 || i >= int64(inPlane) {
					bad.Store(i)
					continue
				}
				gxp[i] += v
			}
		}
	})
	if i := bad.Load(); i != -1 {
		return fmt.Errorf("max_pool2d index %d out of range for an input plane of %d elements", i, inPlane)
	}
	return nil
}

// avgWindow is PyTorch's avg_pool2d window for output (oh, ow): the
// in-bounds rows [ih0, ih1), columns [iw0, iw1), and the divisor.
func avgWindow(g prim.PoolGeom, o prim.PoolOpts, oh, ow int) (ih0, ih1, iw0, iw1, div int) {
	ih0, iw0 = oh*g.SH-g.PH, ow*g.SW-g.PW
	ih1, iw1 = min(ih0+g.KH, g.H+g.PH), min(iw0+g.KW, g.W+g.PW)
	poolSize := (ih1 - ih0) * (iw1 - iw0)
	ih0, iw0 = max(ih0, 0), max(iw0, 0)
	ih1, iw1 = min(ih1, g.H), min(iw1, g.W)
	switch {
	case o.DivisorOverride > 0:
		div = o.DivisorOverride
	case o.ExcludePad:
		div = (ih1 - ih0) * (iw1 - iw0)
	default:
		div = poolSize
	}
	return
}

func avgPoolKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.AvgPool2dOp)
	g, err := o.Geom(in[0].Shape)
	if err != nil {
		return err
	}
	x, y := slice[T](in[0]), slice[T](out[0])
	inPlane, outPlane := g.H*g.W, g.OH*g.OW
	poolPlanes(pool, g.N*g.C, outPlane*g.KH*g.KW, func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			xp := x[p*inPlane : (p+1)*inPlane]
			yp := y[p*outPlane : (p+1)*outPlane]
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					ih0, ih1, iw0, iw1, div := avgWindow(g, o.Opts, oh, ow)
					if ih0 >= ih1 || iw0 >= iw1 {
						yp[oh*g.OW+ow] = 0
						continue
					}
					var sum T
					for ih := ih0; ih < ih1; ih++ {
						for _, v := range xp[ih*g.W+iw0 : ih*g.W+iw1] {
							sum += v
						}
					}
					yp[oh*g.OW+ow] = sum / T(div)
				}
			}
		}
	})
	return nil
}

func avgPoolBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.AvgPool2dBackward)
	g, err := o.Geom()
	if err != nil {
		return err
	}
	gy, gx := slice[T](in[0]), slice[T](out[0])
	inPlane, outPlane := g.H*g.W, g.OH*g.OW
	poolPlanes(pool, g.N*g.C, outPlane*g.KH*g.KW, func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			gxp := gx[p*inPlane : (p+1)*inPlane]
			gyp := gy[p*outPlane : (p+1)*outPlane]
			clear(gxp)
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					ih0, ih1, iw0, iw1, div := avgWindow(g, o.Opts, oh, ow)
					if ih0 >= ih1 || iw0 >= iw1 {
						continue
					}
					d := gyp[oh*g.OW+ow] / T(div)
					for ih := ih0; ih < ih1; ih++ {
						row := gxp[ih*g.W+iw0 : ih*g.W+iw1]
						for i := range row {
							row[i] += d
						}
					}
				}
			}
		}
	})
	return nil
}

// adaptiveBin is PyTorch's adaptive pooling bin of output i of out along an
// axis of in: [floor(i*in/out), ceil((i+1)*in/out)).
func adaptiveBin(i, out, in int) (lo, hi int) {
	lo = (i/out)*in + (i%out)*in/out
	hi = 1 + ((i+1)*in-1)/out
	return lo, hi
}

func adaptivePoolKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	x, y := slice[T](in[0]), slice[T](out[0])
	s, ys := in[0].Shape, out[0].Shape
	H, W, OH, OW := s[2], s[3], ys[2], ys[3]
	inPlane, outPlane := H*W, OH*OW
	if outPlane == 1 {
		// PyTorch computes a 1x1 adaptive pooling as a mean over H and W.
		poolPlanes(pool, s[0]*s[1], inPlane, func(p0, p1 int) {
			for p := p0; p < p1; p++ {
				var sum float64
				for _, v := range x[p*inPlane : (p+1)*inPlane] {
					sum += float64(v)
				}
				y[p] = T(sum) / T(inPlane)
			}
		})
		return nil
	}
	poolPlanes(pool, s[0]*s[1], inPlane+outPlane, func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			xp := x[p*inPlane : (p+1)*inPlane]
			yp := y[p*outPlane : (p+1)*outPlane]
			for oh := 0; oh < OH; oh++ {
				ih0, ih1 := adaptiveBin(oh, OH, H)
				for ow := 0; ow < OW; ow++ {
					iw0, iw1 := adaptiveBin(ow, OW, W)
					var sum T
					for ih := ih0; ih < ih1; ih++ {
						for _, v := range xp[ih*W+iw0 : ih*W+iw1] {
							sum += v
						}
					}
					yp[oh*OW+ow] = sum / T(ih1-ih0) / T(iw1-iw0)
				}
			}
		}
	})
	return nil
}

func adaptivePoolBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	gy, gx := slice[T](in[0]), slice[T](out[0])
	s, ys := out[0].Shape, in[0].Shape
	H, W, OH, OW := s[2], s[3], ys[2], ys[3]
	inPlane, outPlane := H*W, OH*OW
	if outPlane == 1 {
		// The gradient of PyTorch's mean: one division by H*W.
		poolPlanes(pool, s[0]*s[1], inPlane, func(p0, p1 int) {
			for p := p0; p < p1; p++ {
				d := gy[p] / T(inPlane)
				gxp := gx[p*inPlane : (p+1)*inPlane]
				for i := range gxp {
					gxp[i] = d
				}
			}
		})
		return nil
	}
	poolPlanes(pool, s[0]*s[1], inPlane+outPlane, func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			gxp := gx[p*inPlane : (p+1)*inPlane]
			gyp := gy[p*outPlane : (p+1)*outPlane]
			clear(gxp)
			for oh := 0; oh < OH; oh++ {
				ih0, ih1 := adaptiveBin(oh, OH, H)
				for ow := 0; ow < OW; ow++ {
					iw0, iw1 := adaptiveBin(ow, OW, W)
					d := gyp[oh*OW+ow] / T(ih1-ih0) / T(iw1-iw0)
					for ih := ih0; ih < ih1; ih++ {
						row := gxp[ih*W+iw0 : ih*W+iw1]
						for i := range row {
							row[i] += d
						}
					}
				}
			}
		}
	})
	return nil
}
