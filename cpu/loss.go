package cpu

import (
	"fmt"
	"math"

	"github.com/headroom-ml/headroom/cpu/internal/vec"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	Floats[*prim.CrossEntropyOp](crossEntropyKernel[float32], crossEntropyKernel[float64])
	Floats[*prim.CrossEntropyBackward](crossEntropyBackwardKernel[float32], crossEntropyBackwardKernel[float64])
	Floats[*prim.PointwiseLoss](pointwiseLossKernel[float32], pointwiseLossKernel[float64])
	Floats[*prim.PointwiseLossBackward](pointwiseLossBackwardKernel[float32], pointwiseLossBackwardKernel[float64])
}

// lossBlock is the number of elements summed per partial sum. Reductions add
// fixed blocks in parallel and then the partials in order, so the result does
// not depend on the thread count.
const lossBlock = 1024

// lossSum returns the sum over [0, n) of f's block sums, in float64.
func lossSum(pool *parallel.Pool, n int, f func(lo, hi int) float64) float64 {
	nb := (n + lossBlock - 1) / lossBlock
	if nb <= 1 {
		return f(0, n)
	}
	partial := make([]float64, nb) // one float per block, not per element
	pool.For(nb, 1, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			partial[b] = f(b*lossBlock, min((b+1)*lossBlock, n))
		}
	})
	var s float64
	for _, v := range partial {
		s += v
	}
	return s
}

// ceLayout is logits [N, C, d...] (or [C]) seen as outer x C x inner; a
// position (one target) is (o, j), numbered o*inner+j.
func ceLayout(s tensor.Shape) (outer, classes, inner int) {
	if len(s) == 1 {
		return 1, s[0], 1
	}
	return softmaxLayout(s, 1)
}

// ceCheckTargets reports the first target outside [0, C) that is not the
// ignore index.
func ceCheckTargets(t []int64, classes int, ignore int64) error {
	for _, v := range t {
		if v != ignore && (v < 0 || v >= int64(classes)) {
			return fmt.Errorf("target %d is out of bounds: expected a class index in [0, %d) for %d classes, or ignore_index %d", v, classes, classes, ignore)
		}
	}
	return nil
}

func crossEntropyKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.CrossEntropyOp)
	x, tgt := slice[T](in[0]), in[1].I64()
	loss, lseOut := slice[T](out[0]), slice[T](out[1])
	outer, classes, inner := ceLayout(in[0].Shape)
	if err := ceCheckTargets(tgt, classes, o.IgnoreIndex); err != nil {
		return err
	}
	npos := outer * inner
	ls := o.LabelSmoothing
	x32, rows32 := any(x).([]float32)
	rows32 = rows32 && inner == 1 && classes > 0 && vec.Enabled()
	// posLoss computes position p's logsumexp (stored) and returns its loss;
	// buf holds classes float32s (the row's exponentials with rows32).
	posLoss := func(p int, buf []float32) float64 {
		ob, j := p/inner, p%inner
		base := ob*classes*inner + j
		var lse, sumx float64
		if rows32 {
			// Contiguous float32 rows (a language model's logits): the
			// exponentials in float32, vectorized, as PyTorch's float32
			// log_softmax computes them (math.Exp in float64 was 16 ns a
			// logit: gpt's 2048x256 took ~9 ms), summed in float64.
			row := x32[base : base+classes]
			m := max32(row)
			expShifted(buf, row, -m)
			lse = float64(m) + math.Log(sum64(buf))
			if ls != 0 {
				sumx = sum64(row)
			}
		} else if classes > 0 {
			m := math.Inf(-1)
			for c := 0; c < classes; c++ {
				v := float64(x[base+c*inner])
				sumx += v
				if v > m {
					m = v
				}
			}
			var s float64
			for c := 0; c < classes; c++ {
				s += math.Exp(float64(x[base+c*inner]) - m)
			}
			lse = m + math.Log(s)
		} else {
			lse = math.Inf(-1)
		}
		lseOut[p] = T(lse)
		t := tgt[p]
		if t == o.IgnoreIndex {
			return 0
		}
		l := lse - float64(x[base+int(t)*inner])
		if ls != 0 {
			smooth := float64(classes)*lse - sumx
			l = (1-ls)*l + ls/float64(classes)*smooth
		}
		return l
	}
	if o.Reduction == prim.ReductionNone {
		pool.For(npos, max(1, 4096/max(1, classes)), func(lo, hi int) {
			buf := ceBuf(rows32, classes)
			for p := lo; p < hi; p++ {
				loss[p] = T(posLoss(p, buf))
			}
		})
		return nil
	}
	total := lossSum(pool, npos, func(lo, hi int) float64 {
		buf := ceBuf(rows32, classes)
		var s float64
		for p := lo; p < hi; p++ {
			s += posLoss(p, buf)
		}
		return s
	})
	if o.Reduction == prim.ReductionMean {
		total /= float64(ceCount(tgt, o.IgnoreIndex)) // 0/0 = NaN when all are ignored, as PyTorch
	}
	loss[0] = T(total)
	return nil
}

// ceBuf is a row of classes float32s for the float32 row path, else nil.
func ceBuf(rows32 bool, classes int) []float32 {
	if !rows32 {
		return nil
	}
	return make([]float32, classes)
}

// expShifted sets y[j] = exp(float32(x[j]+b)) (the argument rounded to
// float32), vectorized (vec.ExpAffine) where it can; arguments the vector
// code clamps (below -87.3, a NaN, +-Inf) go through expf, which gives 0,
// NaN and +Inf as math.Exp does.
func expShifted(y, x []float32, b float32) {
	j := vec.ExpAffine(x, y, 1, b)
	for i, v := range x[:j] {
		if a := v + b; !(a >= -87 && a <= 88) {
			y[i] = expf(a)
		}
	}
	for ; j < len(x); j++ {
		y[j] = expf(x[j] + b)
	}
}

// ceCount is the number of targets that are not ignored.
func ceCount(t []int64, ignore int64) int {
	c := 0
	for _, v := range t {
		if v != ignore {
			c++
		}
	}
	return c
}

func crossEntropyBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.CrossEntropyBackward)
	gy, x, tgt, lse, gx := slice[T](in[0]), slice[T](in[1]), in[2].I64(), slice[T](in[3]), slice[T](out[0])
	outer, classes, inner := ceLayout(in[1].Shape)
	if err := ceCheckTargets(tgt, classes, o.IgnoreIndex); err != nil {
		return err
	}
	npos := outer * inner
	ls := o.LabelSmoothing
	off := ls / float64(classes)
	x32, rows32 := any(x).([]float32)
	rows32 = rows32 && inner == 1 && classes > 0 && vec.Enabled()
	var scale float64
	switch o.Reduction {
	case prim.ReductionMean:
		// Ignored positions get no gradient, so a zero count never divides.
		scale = float64(gy[0]) / float64(max(1, ceCount(tgt, o.IgnoreIndex)))
	case prim.ReductionSum:
		scale = float64(gy[0])
	}
	pool.For(npos, max(1, 4096/max(1, classes)), func(lo, hi int) {
		for p := lo; p < hi; p++ {
			ob, j := p/inner, p%inner
			base := ob*classes*inner + j
			t := tgt[p]
			if t == o.IgnoreIndex {
				for c := 0; c < classes; c++ {
					gx[base+c*inner] = 0
				}
				continue
			}
			w := scale
			if o.Reduction == prim.ReductionNone {
				w = float64(gy[p])
			}
			l := float64(lse[p])
			if rows32 {
				// As the forward: float32 exponentials, vectorized.
				// The argument's rounding to float32 is put back to first
				// order (exp(hi+lo) = exp(hi)*(1+lo), lo exact in float64),
				// so that the gradient follows the logits smoothly, as the
				// float64 exponential's does (rounded arguments made tensor
				// parallel and one device's Adam steps drift apart).
				g32, xr, l32 := any(gx).([]float32)[base:base+classes], x32[base:base+classes], float32(l)
				expShifted(g32, xr, -l32)
				for c, e := range g32 {
					ef := float64(e)
					if e != 0 { // 0: a -Inf logit, whose lo is NaN
						ef *= 1 + ((float64(xr[c]) - l) - float64(xr[c]-l32))
					}
					g32[c] = float32(w * (ef - off))
				}
			} else {
				for c := 0; c < classes; c++ {
					gx[base+c*inner] = T(w * (math.Exp(float64(x[base+c*inner])-l) - off))
				}
			}
			ti := base + int(t)*inner
			gx[ti] = T(w * (math.Exp(float64(x[ti])-l) - off - (1 - ls)))
		}
	})
	return nil
}

func pointwiseLossKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.PointwiseLoss)
	x, t, y := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	cnt := len(x)
	if o.Reduction == prim.ReductionNone {
		pool.For(cnt, 16384, func(lo, hi int) {
			xs, ts, ys := x[lo:hi], t[lo:hi], y[lo:hi]
			if o.Kind == prim.MSEKind {
				for i, v := range xs {
					d := v - ts[i]
					ys[i] = d * d
				}
			} else {
				for i, v := range xs {
					d := v - ts[i]
					if d < 0 {
						d = -d
					}
					ys[i] = d
				}
			}
		})
		return nil
	}
	total := lossSum(pool, cnt, func(lo, hi int) float64 {
		var s float64
		xs, ts := x[lo:hi], t[lo:hi]
		if o.Kind == prim.MSEKind {
			for i, v := range xs {
				d := float64(v) - float64(ts[i])
				s += d * d
			}
		} else {
			for i, v := range xs {
				s += math.Abs(float64(v) - float64(ts[i]))
			}
		}
		return s
	})
	if o.Reduction == prim.ReductionMean {
		total /= float64(cnt) // NaN for an empty input, as PyTorch
	}
	y[0] = T(total)
	return nil
}

func pointwiseLossBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.PointwiseLossBackward)
	gy, x, t, gx := slice[T](in[0]), slice[T](in[1]), slice[T](in[2]), slice[T](out[0])
	cnt := len(x)
	var w T
	switch o.Reduction {
	case prim.ReductionMean:
		w = T(float64(gy[0]) / float64(max(1, cnt)))
	case prim.ReductionSum:
		w = gy[0]
	}
	pool.For(cnt, 16384, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			wi := w
			if o.Reduction == prim.ReductionNone {
				wi = gy[i]
			}
			d := x[i] - t[i]
			if o.Kind == prim.MSEKind {
				gx[i] = 2 * d * wi
				continue
			}
			switch {
			case d > 0:
				gx[i] = wi
			case d < 0:
				gx[i] = -wi
			default:
				gx[i] = 0
			}
		}
	})
	return nil
}
