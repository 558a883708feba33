package cpu

import (
	"math"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	Floats[*prim.SoftmaxOp](softmaxKernel[float32], softmaxKernel[float64])
	Floats[*prim.SoftmaxBackward](softmaxBackwardKernel[float32], softmaxBackwardKernel[float64])
}

// softmaxLayout splits shape around axis: outer (axes before), dim (the axis),
// inner (axes after). Element (o, d, i) is at (o*dim+d)*inner+i. A scalar is
// one row of one element.
func softmaxLayout(s tensor.Shape, axis int) (outer, dim, inner int) {
	if len(s) == 0 {
		return 1, 1, 1
	}
	outer, inner = 1, 1
	for _, d := range s[:axis] {
		outer *= d
	}
	for _, d := range s[axis+1:] {
		inner *= d
	}
	return outer, s[axis], inner
}

// softmaxColBlock is how many strided columns (inner positions) are reduced
// together when the softmax axis is not the last one: enough to walk memory
// contiguously, few enough for the accumulators to live on the stack.
const softmaxColBlock = 64

// softmaxForRows runs row (contiguous rows, inner == 1) or block (a block of
// up to softmaxColBlock columns starting at column j0 of outer index o) over all of
// a layout in parallel.
func softmaxForRows(pool *parallel.Pool, outer, dim, inner int, row func(r int), block func(o, j0, jb int)) {
	grain := max(1, 8192/max(1, dim))
	if inner == 1 {
		pool.For(outer, grain, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				row(r)
			}
		})
		return
	}
	nb := (inner + softmaxColBlock - 1) / softmaxColBlock
	pool.For(outer*nb, max(1, grain/softmaxColBlock), func(lo, hi int) {
		for u := lo; u < hi; u++ {
			o, b := u/nb, u%nb
			j0 := b * softmaxColBlock
			block(o, j0, min(softmaxColBlock, inner-j0))
		}
	})
}

// softmaxRowMax is the maximum of a row (NaNs are skipped here and propagate
// through the exponentials instead).
func softmaxRowMax[T Float](x []T) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		if f := float64(v); f > m {
			m = f
		}
	}
	return m
}

// softmaxRow writes softmax (or log_softmax) of x into y and returns the
// row's logsumexp.
func softmaxRow[T Float](x, y []T, log bool) float64 {
	y = y[:len(x)]
	m := softmaxRowMax(x)
	var s float64
	if log {
		for _, v := range x {
			s += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(s)
		for i, v := range x {
			y[i] = T(float64(v) - lse)
		}
		return lse
	}
	for i, v := range x {
		e := math.Exp(float64(v) - m)
		y[i] = T(e)
		s += e
	}
	inv := 1 / s
	for i := range y {
		y[i] = T(float64(y[i]) * inv)
	}
	return m + math.Log(s)
}

func softmaxKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.SoftmaxOp)
	x, y := slice[T](in[0]), slice[T](out[0])
	outer, dim, inner := softmaxLayout(in[0].Shape, o.Axis)
	if outer*dim*inner == 0 {
		return nil
	}
	softmaxForRows(pool, outer, dim, inner, func(r int) {
		softmaxRow(x[r*dim:(r+1)*dim], y[r*dim:(r+1)*dim], o.Log)
	}, func(ob, j0, jb int) {
		var mx, sm [softmaxColBlock]float64
		base := ob*dim*inner + j0
		for j := 0; j < jb; j++ {
			mx[j] = math.Inf(-1)
		}
		for d := 0; d < dim; d++ {
			xr := x[base+d*inner : base+d*inner+jb]
			for j, v := range xr {
				if f := float64(v); f > mx[j] {
					mx[j] = f
				}
			}
		}
		for d := 0; d < dim; d++ {
			xr := x[base+d*inner : base+d*inner+jb]
			yr := y[base+d*inner : base+d*inner+jb]
			for j, v := range xr {
				e := math.Exp(float64(v) - mx[j])
				if !o.Log {
					yr[j] = T(e)
				}
				sm[j] += e
			}
		}
		for j := 0; j < jb; j++ {
			if o.Log {
				sm[j] = mx[j] + math.Log(sm[j]) // logsumexp
			} else {
				sm[j] = 1 / sm[j]
			}
		}
		for d := 0; d < dim; d++ {
			xr := x[base+d*inner : base+d*inner+jb]
			yr := y[base+d*inner : base+d*inner+jb]
			if o.Log {
				for j, v := range xr {
					yr[j] = T(float64(v) - sm[j])
				}
			} else {
				for j := range yr {
					yr[j] = T(float64(yr[j]) * sm[j])
				}
			}
		}
	})
	return nil
}

func softmaxBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.SoftmaxBackward)
	gy, y, gx := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	outer, dim, inner := softmaxLayout(in[0].Shape, o.Axis)
	if outer*dim*inner == 0 {
		return nil
	}
	softmaxForRows(pool, outer, dim, inner, func(r int) {
		g, yy, dx := gy[r*dim:(r+1)*dim], y[r*dim:(r+1)*dim], gx[r*dim:(r+1)*dim]
		var s float64
		if o.Log {
			for _, v := range g {
				s += float64(v)
			}
			for i, v := range yy {
				dx[i] = T(float64(g[i]) - math.Exp(float64(v))*s)
			}
			return
		}
		for i, v := range yy {
			s += float64(g[i]) * float64(v)
		}
		for i, v := range yy {
			dx[i] = T(float64(v) * (float64(g[i]) - s))
		}
	}, func(ob, j0, jb int) {
		var sm [softmaxColBlock]float64
		base := ob*dim*inner + j0
		for d := 0; d < dim; d++ {
			g := gy[base+d*inner : base+d*inner+jb]
			yy := y[base+d*inner : base+d*inner+jb]
			if o.Log {
				for j, v := range g {
					sm[j] += float64(v)
				}
			} else {
				for j, v := range g {
					sm[j] += float64(v) * float64(yy[j])
				}
			}
		}
		for d := 0; d < dim; d++ {
			g := gy[base+d*inner : base+d*inner+jb]
			yy := y[base+d*inner : base+d*inner+jb]
			dx := gx[base+d*inner : base+d*inner+jb]
			if o.Log {
				for j, v := range yy {
					dx[j] = T(float64(g[j]) - math.Exp(float64(v))*sm[j])
				}
			} else {
				for j, v := range yy {
					dx[j] = T(float64(v) * (float64(g[j]) - sm[j]))
				}
			}
		}
	})
	return nil
}
