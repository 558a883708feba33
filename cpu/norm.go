package cpu

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/headroom-ml/headroom/cpu/internal/vec"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Normalization kernels. Statistics and reductions accumulate in float64
// (PyTorch's CPU accumulation type for float32 batch norm), whatever T is;
// every loop walks contiguous runs of memory: a channel's H*W plane, a row,
// a group's block.

func init() {
	Floats[*prim.BatchNormOp](batchNormKernel[float32], batchNormKernel[float64])
	RegisterWorkspace[*prim.BatchNormOp](func(n *trace.Node) int64 { return 16 * int64(n.Inputs[0].Dim(1)) })
	Floats[*prim.BatchNormBackward](batchNormBackwardKernel[float32], batchNormBackwardKernel[float64])
	RegisterWorkspace[*prim.BatchNormBackward](func(n *trace.Node) int64 { return 16 * int64(n.Inputs[1].Dim(1)) })
	Floats[*prim.RunningStatsUpdate](runningStatsKernel[float32], runningStatsKernel[float64])
	Register[*prim.Increment](incrementKernel)

	Floats[*prim.LayerNormOp](layerNormKernel[float32], layerNormKernel[float64])
	Floats[*prim.LayerNormBackward](layerNormBackwardKernel[float32], layerNormBackwardKernel[float64])
	RegisterWorkspace[*prim.LayerNormBackward](func(n *trace.Node) int64 {
		o := n.Op.(*prim.LayerNormBackward)
		if !o.HasWeight && !o.HasBias {
			return 0
		}
		_, m := normRows(n.Inputs[1].Shape(), o.Dims)
		return 16 * int64(m)
	})

	Floats[*prim.GroupNormOp](groupNormKernel[float32], groupNormKernel[float64])
	Floats[*prim.GroupNormBackward](groupNormBackwardKernel[float32], groupNormBackwardKernel[float64])
	RegisterWorkspace[*prim.GroupNormBackward](func(n *trace.Node) int64 {
		s := n.Inputs[1].Shape()
		return 16 * int64(s[0]) * int64(s[1])
	})
}

// normScratch views the first n float64s of a kernel's workspace (allocating
// only if the caller passed none, as a direct cpu.Run might).
func normScratch(ws []byte, n int) []float64 {
	if n == 0 {
		return nil
	}
	if len(ws) < 8*n || uintptr(unsafe.Pointer(&ws[0]))%8 != 0 {
		return make([]float64, n)
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(&ws[0])), n)
}

// normGrain is a parallel.For grain for items of the given cost in elements:
// enough items per range to amortize handing it out.
// normColRows is how many rows the layer norm's weight and bias gradient
// sums take down each strip of columns (vec.NormColsRows).
const normColRows = 8

func normGrain(work int) int { return max(1, 32768/max(1, work)) }

// normNCS splits a [N, C, *] shape into N, C and the spatial size.
func normNCS(s tensor.Shape) (n, c, sp int) {
	sp = 1
	for _, d := range s[2:] {
		sp *= d
	}
	return s[0], s[1], sp
}

// sum64 is the sum of x in float64 (four partial sums, so that the
// additions do not wait on each other).
func sum64[T Float](x []T) float64 {
	var s0, s1, s2, s3 float64
	if x32, ok := any(x).([]float32); ok {
		var done int
		s0, done = vec.SumX(x32)
		x = x[done:]
	}
	for len(x) >= 4 {
		s0 += float64(x[0])
		s1 += float64(x[1])
		s2 += float64(x[2])
		s3 += float64(x[3])
		x = x[4:]
	}
	for _, v := range x {
		s0 += float64(v)
	}
	return (s0 + s1) + (s2 + s3)
}

// sumSqDev64 is the sum of (x-m)² in float64.
func sumSqDev64[T Float](x []T, m float64) float64 {
	var s0, s1, s2, s3 float64
	if x32, ok := any(x).([]float32); ok {
		var done int
		s0, done = vec.SumSqDev(x32, m)
		x = x[done:]
	}
	for len(x) >= 4 {
		d0, d1, d2, d3 := float64(x[0])-m, float64(x[1])-m, float64(x[2])-m, float64(x[3])-m
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
		x = x[4:]
	}
	for _, v := range x {
		d := float64(v) - m
		s0 += d * d
	}
	return (s0 + s1) + (s2 + s3)
}

// sumDot64 returns the sum of g and the sum of g*(x-m), in float64.
func sumDot64[T Float](g, x []T, m float64) (sg, sd float64) {
	x = x[:len(g)]
	var a0, a1, d0, d1 float64
	if g32, ok := any(g).([]float32); ok {
		var done int
		a0, d0, done = vec.SumDot(g32, any(x).([]float32), m)
		g, x = g[done:], x[done:]
	}
	for len(g) >= 2 {
		g0, g1 := float64(g[0]), float64(g[1])
		a0 += g0
		a1 += g1
		d0 += g0 * (float64(x[0]) - m)
		d1 += g1 * (float64(x[1]) - m)
		g, x = g[2:], x[2:]
	}
	for j, v := range g {
		a0 += float64(v)
		d0 += float64(v) * (float64(x[j]) - m)
	}
	return a0 + a1, d0 + d1
}

// bnPlanes calls f(off, planes, c) over the planes of channels [c0, c1) of
// an [N, C, S] tensor: planes planes of channel c from offset off, stride
// C*S, after zero(c) for each channel (if not nil). Planes smaller than
// bnPlaneMajor go a channel at a time, all N planes in one call: the
// vector passes over 4×4 and 8×8 planes were mostly call and reduction
// (2-4× faster so; 16×16 1.2-1.5×; Zen 4, 2 threads); larger ones an
// image at a time, in memory order (slightly faster at 32×32).
func bnPlanes(N, C, S, c0, c1 int, f func(off, planes, c int), zero func(c int)) {
	for c := c0; c < c1 && zero != nil; c++ {
		zero(c)
	}
	if S < bnPlaneMajor {
		for c := c0; c < c1; c++ {
			f(c*S, N, c)
		}
		return
	}
	for i := 0; i < N; i++ {
		for c := c0; c < c1; c++ {
			f((i*C+c)*S, 1, c)
		}
	}
}

// bnPlaneMajor is the plane size from which bnPlanes goes image by image.
var bnPlaneMajor = 1024

// bnX is batch norm's input x: values of the kernel's type, or the bits of
// bfloat16 values (a Mixed op reading a bf16 tensor in place, widened
// exactly as it is read: the float32 kernel's results, bit for bit).
type bnX[T Float] struct {
	f []T
	h []uint16
}

// bnInput is t as a bnX.
func bnInput[T Float](t *tensor.Tensor) bnX[T] {
	if t.DType == tensor.BFloat16 {
		return bnX[T]{h: t.U16()}
	}
	return bnX[T]{f: slice[T](t)}
}

// at is element i, widened.
func (x bnX[T]) at(i int) T {
	if x.h != nil {
		return T(math.Float32frombits(uint32(x.h[i]) << 16))
	}
	return x.f[i]
}

// from is x from element off on.
func (x bnX[T]) from(off int) bnX[T] {
	if x.h != nil {
		return bnX[T]{h: x.h[off:]}
	}
	return bnX[T]{f: x.f[off:]}
}

// sumDotPlanes64 is sumDot64 of g (x itself where g is nil) and x summed
// over planes planes of size elements, stride elements apart (a batch norm
// channel's planes): one vector pass over all of them, the planes' tails
// after it.
func sumDotPlanes64[T Float](g []T, x bnX[T], size, stride, planes int, m float64) (sg, sd float64) {
	done := 0
	switch g32, _ := any(g).([]float32); {
	case x.h != nil:
		sg, sd, done = vec.SumDotPlanesBF16(g32, x.h, size, stride, planes, m)
	case g == nil:
		if x32, ok := any(x.f).([]float32); ok {
			sg, sd, done = vec.SumDotPlanes(x32, x32, size, stride, planes, m)
		}
	case g32 != nil:
		sg, sd, done = vec.SumDotPlanes(g32, any(x.f).([]float32), size, stride, planes, m)
	}
	if done == size {
		return sg, sd
	}
	for i := 0; i < planes; i++ {
		off := i * stride
		if x.h == nil {
			gs := g
			if gs == nil {
				gs = x.f
			}
			a, d := sumDot64(gs[off+done:off+size], x.f[off+done:off+size], m)
			sg += a
			sd += d
			continue
		}
		for j := off + done; j < off+size; j++ {
			v := float64(x.at(j))
			gv := v
			if g != nil {
				gv = float64(g[j])
			}
			sg += gv
			sd += gv * (v - m)
		}
	}
	return sg, sd
}

// normRows splits a shape into rows and the size of its last dims
// dimensions.
func normRows(s tensor.Shape, dims int) (rows, m int) {
	k := len(s) - dims
	return s[:k].NumElements(), s[k:].NumElements()
}

// normAffine returns the optional weight and bias inputs starting at input
// k, and the index of the next input.
func normAffine[T Float](in []*tensor.Tensor, k int, hasWeight, hasBias bool) (w, b []T, next int) {
	if hasWeight {
		w = slice[T](in[k])
		k++
	}
	if hasBias {
		b = slice[T](in[k])
		k++
	}
	return w, b, k
}

// normGradOutputs returns gx and the optional gweight and gbias outputs.
func normGradOutputs[T Float](out []*tensor.Tensor, hasWeight, hasBias bool) (gx, gw, gb []T) {
	gx = slice[T](out[0])
	k := 1
	if hasWeight {
		gw = slice[T](out[k])
		k++
	}
	if hasBias {
		gb = slice[T](out[k])
	}
	return gx, gw, gb
}

// ---------------------------------------------------------------- batch norm

func batchNormKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	return batchNorm[T](pool, n, in, out, ws, nil)
}

// batchNorm is the batch norm kernel; epi, when not nil, is called on each
// part of y as soon as it is written (a fused epilogue, see fused.go).
func batchNorm[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte, epi func(lo, hi int)) error {
	o := n.Op.(*prim.BatchNormOp)
	N, C, S := normNCS(in[0].Shape)
	x, y := bnInput[T](in[0]), slice[T](out[0])
	if err := bnInputType[T](in[0]); err != nil {
		return err
	}
	meanOut, invOut := slice[T](out[1]), slice[T](out[2])
	w, b, k := normAffine[T](in, 1, o.HasWeight, o.HasBias)
	acc := normScratch(ws, 2*C)
	mean, inv := acc[:C], acc[C:]
	grain := normGrain(N * S)
	if !o.Training {
		rm, rv := slice[T](in[k]), slice[T](in[k+1])
		for c := 0; c < C; c++ {
			meanOut[c] = rm[c]
			invOut[c] = T(1 / math.Sqrt(float64(rv[c])+o.Eps))
			mean[c], inv[c] = float64(meanOut[c]), float64(invOut[c])
		}
	}
	// Training statistics of a range of channels are computed in the pass
	// that normalizes them: one parallel loop, not two, and the range's x
	// is read again from the core's own cache.
	cnt := float64(N * S)
	stats := func(c0, c1 int) {
		// One pass for the sum and the sum of squares, in float64:
		// Σ(x-m)² = Σx² - m·Σx loses to cancellation only the bits
		// below float64's 2⁻⁵³·(1+m²/var) of it, far below the
		// float32 statistics' rounding for any activation (a second
		// pass over x for Σ(x-m)² cost a quarter of the kernel).
		bnPlanes(N, C, S, c0, c1, func(off, planes, c int) {
			s, q := sumDotPlanes64(nil, x.from(off), S, C*S, planes, 0)
			mean[c] += s
			inv[c] += q
		}, func(c int) { mean[c], inv[c] = 0, 0 })
		for c := c0; c < c1; c++ {
			s := mean[c]
			mean[c] = s / cnt
			inv[c] = max(0, inv[c]-mean[c]*s)
		}
		for c := c0; c < c1; c++ {
			// Normalize with the saved (rounded) statistics, as PyTorch
			// does, so forward and backward see the same values.
			meanOut[c] = T(mean[c])
			invOut[c] = T(1 / math.Sqrt(inv[c]/cnt+o.Eps))
			mean[c], inv[c] = float64(meanOut[c]), float64(invOut[c])
		}
	}
	pool.For(C, grain, func(c0, c1 int) {
		if o.Training {
			stats(c0, c1)
		}
		for c := c0; c < c1; c++ {
			// y = x*alpha + beta with alpha = invstd*weight and beta =
			// bias - mean*alpha, in T, as PyTorch's
			// batch_norm_cpu_transform_input computes it (kept in
			// mean and inv, exactly: T values).
			alpha, beta := T(inv[c]), T(0)
			if w != nil {
				alpha *= w[c]
			}
			if b != nil {
				beta = b[c]
			}
			beta -= T(mean[c]) * alpha
			mean[c], inv[c] = float64(alpha), float64(beta)
		}
		bnPlanes(N, C, S, c0, c1, func(off, planes, c int) {
			alpha, beta := T(mean[c]), T(inv[c])
			done := 0
			if y32, ok := any(y).([]float32); ok {
				if x.h != nil {
					done = vec.AffinePlanesBF16(x.h[off:], y32[off:], S, C*S, planes, float32(alpha), float32(beta))
				} else {
					done = vec.AffinePlanes(any(x.f).([]float32)[off:], y32[off:], S, C*S, planes, float32(alpha), float32(beta))
				}
			}
			for i := 0; i < planes && done < S; i++ {
				o := off + i*C*S
				ys := y[o+done : o+S]
				for j := range ys {
					ys[j] = x.at(o+done+j)*alpha + beta
				}
			}
		}, nil)
		if epi != nil {
			for i := 0; i < N; i++ {
				// Channels [c0, c1) of image i are contiguous.
				epi((i*C+c0)*S, (i*C+c1)*S)
			}
		}
	})
	return nil
}

// bnInputType checks a batch norm kernel's x: of its own type T, or
// bfloat16 for a float32 kernel (a Mixed op).
func bnInputType[T Float](x *tensor.Tensor) error {
	if _, f32 := any(T(0)).(float32); x.DType == tensor.BFloat16 && !f32 {
		return fmt.Errorf("cpu: batch norm reads bfloat16 input only into float32")
	}
	return nil
}

func batchNormBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	o := n.Op.(*prim.BatchNormBackward)
	N, C, S := normNCS(in[1].Shape)
	gy, x := slice[T](in[0]), bnInput[T](in[1])
	if err := bnInputType[T](in[1]); err != nil {
		return err
	}
	meanT, invT := slice[T](in[2]), slice[T](in[3])
	var w []T
	if o.HasWeight {
		w = slice[T](in[4])
	}
	gx, gw, gb := normGradOutputs[T](out, o.HasWeight, o.HasBias)
	acc := normScratch(ws, 2*C)
	sg, sgx := acc[:C], acc[C:] // per channel: sum(gy), sum(gy*(x-mean))
	cnt := float64(N * S)
	needSums := o.Training || gw != nil || gb != nil
	pool.For(C, normGrain(N*S), func(c0, c1 int) {
		if needSums {
			bnPlanes(N, C, S, c0, c1, func(off, planes, c int) {
				a, d := sumDotPlanes64(gy[off:], x.from(off), S, C*S, planes, float64(meanT[c]))
				sg[c] += a
				sgx[c] += d
			}, func(c int) { sg[c], sgx[c] = 0, 0 })
			for c := c0; c < c1; c++ {
				if gw != nil {
					gw[c] = T(sgx[c] * float64(invT[c]))
				}
				if gb != nil {
					gb[c] = T(sg[c])
				}
			}
		}
		bnPlanes(N, C, S, c0, c1, func(off, planes, c int) {
			inv, m := float64(invT[c]), meanT[c]
			scale := invT[c]
			if w != nil {
				scale *= w[c]
			}
			if !o.Training {
				for i := 0; i < planes; i++ {
					o := off + i*C*S
					gxs := gx[o : o+S]
					for j, g := range gy[o : o+S] {
						gxs[j] = g * scale
					}
				}
				return
			}
			// gx = w*invstd*(gy - mean(gy) - xhat*mean(gy*xhat)), the
			// sums in float64, the rest in T as in PyTorch's
			// batch_norm_backward_cpu_template.
			gmean := T(sg[c] / cnt)
			k := T(sgx[c] * inv * inv / cnt)
			done := 0
			if g32, ok := any(gy).([]float32); ok {
				gx32 := any(gx).([]float32)
				if x.h != nil {
					done = vec.NormGradPlanesBF16(g32[off:], x.h[off:], gx32[off:], S, C*S, planes,
						float32(gmean), float32(m), float32(k), float32(scale))
				} else {
					done = vec.NormGradPlanes(g32[off:], any(x.f).([]float32)[off:], gx32[off:], S, C*S, planes,
						float32(gmean), float32(m), float32(k), float32(scale))
				}
			}
			for i := 0; i < planes && done < S; i++ {
				o := off + i*C*S
				gs, gxs := gy[o+done:o+S], gx[o+done:o+S]
				for j, g := range gs {
					gxs[j] = (g - gmean - (x.at(o+done+j)-m)*k) * scale
				}
			}
		}, nil)
	})
	return nil
}

func runningStatsKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.RunningStatsUpdate)
	run, batch := slice[T](in[0]), slice[T](in[1])
	mom := o.Momentum
	bessel := 1.0
	if o.Count > 1 {
		bessel = float64(o.Count) / float64(o.Count-1)
	}
	for c, s := range batch {
		v := float64(s)
		if o.Var {
			// batch holds invstd = 1/sqrt(var+eps).
			v = max(0, 1/(v*v)-o.Eps) * bessel
		}
		run[c] = T((1-mom)*float64(run[c]) + mom*v)
	}
	return nil
}

func incrementKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	c := in[0].I64()
	for i := range c {
		c[i]++
	}
	return nil
}

// ---------------------------------------------------------------- layer norm

func layerNormKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.LayerNormOp)
	R, M := normRows(in[0].Shape, o.Dims)
	x, y := slice[T](in[0]), slice[T](out[0])
	meanOut, rstdOut := slice[T](out[1]), slice[T](out[2])
	w, b, _ := normAffine[T](in, 1, o.HasWeight, o.HasBias)
	cnt := float64(M)
	pool.For(R, normGrain(M), func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			xs, ys := x[r*M:(r+1)*M], y[r*M:(r+1)*M]
			mean := sum64(xs) / cnt
			q := sumSqDev64(xs, mean)
			meanOut[r] = T(mean)
			rstdOut[r] = T(1 / math.Sqrt(q/cnt+o.Eps))
			// y = (x*rstd - mean*rstd)*w + b in T, as PyTorch's
			// LayerNormKernelImpl computes it.
			rs := rstdOut[r]
			sh := -meanOut[r] * rs
			switch {
			case w != nil && b != nil:
				w, b := w[:len(xs)], b[:len(xs)]
				if x32, ok := any(xs).([]float32); ok {
					// The same operations, each rounded to float32.
					j := vec.LayerNormAffine(x32, any(w).([]float32), any(b).([]float32), any(ys).([]float32), float32(rs), float32(sh))
					xs, ys, w, b = xs[j:], ys[j:], w[j:], b[j:]
				}
				for j, v := range xs {
					ys[j] = (v*rs+sh)*w[j] + b[j]
				}
			case w != nil:
				w := w[:len(xs)]
				for j, v := range xs {
					ys[j] = (v*rs + sh) * w[j]
				}
			case b != nil:
				b := b[:len(xs)]
				for j, v := range xs {
					ys[j] = (v*rs + sh) + b[j]
				}
			default:
				for j, v := range xs {
					ys[j] = v*rs + sh
				}
			}
		}
	})
	return nil
}

func layerNormBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	o := n.Op.(*prim.LayerNormBackward)
	R, M := normRows(in[1].Shape, o.Dims)
	gy, x := slice[T](in[0]), slice[T](in[1])
	meanT, rstdT := slice[T](in[2]), slice[T](in[3])
	var w []T
	if o.HasWeight {
		w = slice[T](in[4])
	}
	gx, gw, gb := normGradOutputs[T](out, o.HasWeight, o.HasBias)
	cnt := float64(M)
	// gx = rstd*(g - mean(g) - xhat*mean(g*xhat)) with g = gy*w.
	pool.For(R, normGrain(M), func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			xs, gs, gxs := x[r*M:(r+1)*M], gy[r*M:(r+1)*M], gx[r*M:(r+1)*M]
			m, rs := float64(meanT[r]), float64(rstdT[r])
			var a, d float64
			if w != nil {
				w := w[:len(xs)]
				gs := gs[:len(xs)]
				var a1, d1 float64
				j := 0
				if x32, ok := any(xs).([]float32); ok {
					// The same four chains, two in each vector.
					var s [4]float64
					j = vec.LayerNormRowSums(any(gs).([]float32), any(w).([]float32), x32, m, &s)
					a, a1, d, d1 = s[0], s[1], s[2], s[3]
				}
				for ; j+1 < len(xs); j += 2 {
					g0, g1 := float64(gs[j])*float64(w[j]), float64(gs[j+1])*float64(w[j+1])
					a += g0
					a1 += g1
					d += g0 * (float64(xs[j]) - m)
					d1 += g1 * (float64(xs[j+1]) - m)
				}
				for ; j < len(xs); j++ {
					g := float64(gs[j]) * float64(w[j])
					a += g
					d += g * (float64(xs[j]) - m)
				}
				a, d = a+a1, d+d1
			} else {
				a, d = sumDot64(gs, xs, m)
			}
			// The sums in float64, the rest in T.
			ca, cb := T(a/cnt), T(d*rs*rs/cnt)
			mt, rt := meanT[r], rstdT[r]
			gs, gxs = gs[:len(xs)], gxs[:len(xs)]
			if w != nil {
				w := w[:len(xs)]
				if gx32, ok := any(gxs).([]float32); ok {
					// (g*w - ca - (x-mt)*cb)*rt vectorized: the same
					// operations, each rounded to float32.
					j := vec.LayerNormGrad(any(gs).([]float32), any(w).([]float32), any(xs).([]float32), gx32, float32(ca), float32(mt), float32(cb), float32(rt))
					xs, gs, gxs, w = xs[j:], gs[j:], gxs[j:], w[j:]
				}
				for j, v := range xs {
					gxs[j] = rt * (gs[j]*w[j] - ca - (v-mt)*cb)
				}
			} else {
				for j, v := range xs {
					gxs[j] = rt * (gs[j] - ca - (v-mt)*cb)
				}
			}
		}
	})
	if gw == nil && gb == nil {
		return nil
	}
	acc := normScratch(ws, 2*M)
	aw, ab := acc[:M], acc[M:]
	// Column sums over all rows: threads take wide column ranges, so that
	// each row contributes one long contiguous run.
	pool.For(M, max(64, M/pool.Threads()), func(j0, j1 int) {
		for j := j0; j < j1; j++ {
			aw[j], ab[j] = 0, 0
		}
		sw, sb := aw[j0:j1], ab[j0:j1]
		// done is how many of the range's columns NormColsRows has
		// summed over the rows so far; mr the block's means and scales.
		done := 0
		var mr [2 * normColRows]float64
		g32, f32 := any(gy).([]float32)
		for r := 0; r < R; r++ {
			m, rs := float64(meanT[r]), float64(rstdT[r])
			if f32 && r%normColRows == 0 {
				// Blocks of rows down 8-column strips, the sums in
				// registers (a row at a time through memory was 2.6%
				// of gpt's bf16-mixed step).
				nr := min(normColRows, R-r)
				for i := range nr {
					mr[2*i], mr[2*i+1] = float64(meanT[r+i]), float64(rstdT[r+i])
				}
				done = vec.NormColsRows(sw, sb, g32[r*M+j0:], any(x).([]float32)[r*M+j0:], M, nr, mr[:2*nr])
			}
			xs, gs := x[r*M+j0+done:r*M+j1], gy[r*M+j0+done:r*M+j1]
			xs, sw, sb := xs[:len(gs)], sw[done:done+len(gs)], sb[done:done+len(gs)]
			j := 0
			if g32, ok := any(gs).([]float32); ok {
				// Each column a vector lane, its rows in order.
				j = vec.NormCols(sw, sb, g32, any(xs).([]float32), m, rs)
			}
			for ; j < len(gs); j++ {
				gd := float64(gs[j])
				sw[j] += gd * (float64(xs[j]) - m) * rs
				sb[j] += gd
			}
		}
		for j := j0; j < j1; j++ {
			if gw != nil {
				gw[j] = T(aw[j])
			}
			if gb != nil {
				gb[j] = T(ab[j])
			}
		}
	})
	return nil
}

// ---------------------------------------------------------------- group norm

func groupNormKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.GroupNormOp)
	N, C, S := normNCS(in[0].Shape)
	G := o.Groups
	cg := C / G
	B := cg * S // a group's block: contiguous
	x, y := slice[T](in[0]), slice[T](out[0])
	meanOut, rstdOut := slice[T](out[1]), slice[T](out[2])
	w, b, _ := normAffine[T](in, 1, o.HasWeight, o.HasBias)
	cnt := float64(B)
	pool.For(N*G, normGrain(B), func(q0, q1 int) {
		for q := q0; q < q1; q++ {
			xs := x[q*B : (q+1)*B]
			var s float64
			for _, v := range xs {
				s += float64(v)
			}
			mean := s / cnt
			var sq float64
			for _, v := range xs {
				d := float64(v) - mean
				sq += d * d
			}
			meanOut[q] = T(mean)
			rstdOut[q] = T(1 / math.Sqrt(sq/cnt+o.Eps))
			m, rs := float64(meanOut[q]), float64(rstdOut[q])
			g := q % G
			for cc := 0; cc < cg; cc++ {
				c := g*cg + cc
				scale, shift := rs, 0.0
				if w != nil {
					scale *= float64(w[c])
				}
				if b != nil {
					shift = float64(b[c])
				}
				off := q*B + cc*S
				ys := y[off : off+S]
				for j, v := range x[off : off+S] {
					ys[j] = T((float64(v)-m)*scale + shift)
				}
			}
		}
	})
	return nil
}

func groupNormBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	o := n.Op.(*prim.GroupNormBackward)
	N, C, S := normNCS(in[1].Shape)
	G := o.Groups
	cg := C / G
	B := cg * S
	gy, x := slice[T](in[0]), slice[T](in[1])
	meanT, rstdT := slice[T](in[2]), slice[T](in[3])
	var w []T
	if o.HasWeight {
		w = slice[T](in[4])
	}
	gx, gw, gb := normGradOutputs[T](out, o.HasWeight, o.HasBias)
	acc := normScratch(ws, 2*N*C)
	db, ds := acc[:N*C], acc[N*C:] // per (n, c): sum(gy), sum(gy*(x-mean))
	pool.For(N*C, normGrain(S), func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			q := p/C*G + p%C/cg
			m := float64(meanT[q])
			gs := gy[p*S : (p+1)*S]
			var a, d float64
			for j, v := range x[p*S : (p+1)*S] {
				g := float64(gs[j])
				a += g
				d += g * (float64(v) - m)
			}
			db[p], ds[p] = a, d
		}
	})
	for c := 0; c < C; c++ {
		var sw, sb float64
		for i := 0; i < N; i++ {
			sw += ds[i*C+c] * float64(rstdT[i*G+c/cg])
			sb += db[i*C+c]
		}
		if gw != nil {
			gw[c] = T(sw)
		}
		if gb != nil {
			gb[c] = T(sb)
		}
	}
	cnt := float64(B)
	pool.For(N*G, normGrain(B), func(q0, q1 int) {
		for q := q0; q < q1; q++ {
			i, g := q/G, q%G
			m, rs := float64(meanT[q]), float64(rstdT[q])
			// Sums over the block of gy*w and gy*w*(x-mean).
			var a, d float64
			for cc := 0; cc < cg; cc++ {
				c := g*cg + cc
				wc := 1.0
				if w != nil {
					wc = float64(w[c])
				}
				a += wc * db[i*C+c]
				d += wc * ds[i*C+c]
			}
			ca, cb := a/cnt, d*rs*rs/cnt
			for cc := 0; cc < cg; cc++ {
				c := g*cg + cc
				wc := 1.0
				if w != nil {
					wc = float64(w[c])
				}
				off := q*B + cc*S
				gs, gxs := gy[off:off+S], gx[off:off+S]
				for j, v := range x[off : off+S] {
					gxs[j] = T(rs * (float64(gs[j])*wc - ca - (float64(v)-m)*cb))
				}
			}
		}
	})
	return nil
}
