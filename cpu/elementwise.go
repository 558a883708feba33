package cpu

import (
	"fmt"
	"math"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/cpu/internal/vec"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	Floats[*prim.Binary](binaryKernel[float32], binaryKernel[float64])
	Floats[*prim.Compare](compareKernel[float32], compareKernel[float64])
	Floats[*prim.Unary](unaryKernel[float32], unaryKernel[float64])
	Floats[*prim.UnaryBackward](unaryBackwardKernel[float32], unaryBackwardKernel[float64])
	Register[*prim.Fill](fillKernel)
	Register[*prim.Cast](castKernel)
}

// bstrides returns in's strides aligned to out's rank, 0 on broadcast axes.
func bstrides(in, out tensor.Shape) []int {
	st := make([]int, len(out))
	acc := 1
	for i := len(in) - 1; i >= 0; i-- {
		j := len(out) - len(in) + i
		if in[i] != 1 {
			st[j] = acc
		}
		acc *= in[i]
	}
	return st
}

// elemGrain is the smallest number of elements an elementwise kernel hands
// to one thread: below it, waking a worker costs more than it saves.
const elemGrain = 32768

// forBroadcast2 calls f(o, ia, ib, n, sa, sb) for runs of output elements
// [o, o+n) with the offsets of the two broadcast inputs and their strides
// along the run (the innermost axis), in parallel over disjoint runs.
func forBroadcast2(pool *parallel.Pool, out, a, b tensor.Shape, f func(o, ia, ib, n, sa, sb int)) {
	n := out.NumElements()
	if n == 0 {
		return
	}
	if a.Equal(out) && b.Equal(out) {
		pool.For(n, elemGrain, func(lo, hi int) { f(lo, lo, lo, hi-lo, 1, 1) })
		return
	}
	sa, sb := bstrides(a, out), bstrides(b, out)
	r := len(out)
	if r == 0 {
		f(0, 0, 0, 1, 0, 0)
		return
	}
	inner := out[r-1]
	rows := n / inner
	pool.For(rows, max(1, elemGrain/inner), func(lo, hi int) {
		var buf [8]int
		idx := buf[:0]
		if r-1 > len(buf) {
			idx = make([]int, 0, r-1)
		}
		idx = idx[:r-1]
		// The multi-index of row lo.
		for d, q := r-2, lo; d >= 0; d-- {
			idx[d] = q % out[d]
			q /= out[d]
		}
		for row := lo; row < hi; row++ {
			ia, ib := 0, 0
			for d := 0; d < r-1; d++ {
				ia += idx[d] * sa[d]
				ib += idx[d] * sb[d]
			}
			f(row*inner, ia, ib, inner, sa[r-1], sb[r-1])
			for d := r - 2; d >= 0; d-- {
				idx[d]++
				if idx[d] < out[d] {
					break
				}
				idx[d] = 0
			}
		}
	})
}

func binaryKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	k := n.Op.(*prim.Binary).Kind
	a, b, y := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	forBroadcast2(pool, out[0].Shape, in[0].Shape, in[1].Shape, func(o, ia, ib, cnt, sa, sb int) {
		yy := y[o : o+cnt]
		if sa == 1 && sb == 1 {
			binaryRun(k, a[ia:ia+cnt], b[ib:ib+cnt], yy)
			return
		}
		switch k {
		case prim.AddKind:
			for i := range yy {
				yy[i] = a[ia+i*sa] + b[ib+i*sb]
			}
		case prim.SubKind:
			for i := range yy {
				yy[i] = a[ia+i*sa] - b[ib+i*sb]
			}
		case prim.MulKind:
			for i := range yy {
				yy[i] = a[ia+i*sa] * b[ib+i*sb]
			}
		case prim.DivKind:
			for i := range yy {
				yy[i] = a[ia+i*sa] / b[ib+i*sb]
			}
		case prim.MaxKind:
			for i := range yy {
				yy[i] = maxNaN(a[ia+i*sa], b[ib+i*sb])
			}
		case prim.MinKind:
			for i := range yy {
				yy[i] = minNaN(a[ia+i*sa], b[ib+i*sb])
			}
		}
	})
	return nil
}

// binaryRun is y = a op b over slices of one length (the fused kernels
// share it, so fused and unfused results agree bit for bit).
func binaryRun[T Float](k prim.BinaryKind, a, b, y []T) {
	a, b = a[:len(y)], b[:len(y)]
	switch k {
	case prim.AddKind:
		if a32, ok := any(a).([]float32); ok {
			done := vec.Add(a32, any(b).([]float32), any(y).([]float32))
			a, b, y = a[done:], b[done:], y[done:]
		}
		for i := range y {
			y[i] = a[i] + b[i]
		}
	case prim.SubKind:
		for i := range y {
			y[i] = a[i] - b[i]
		}
	case prim.MulKind:
		for i := range y {
			y[i] = a[i] * b[i]
		}
	case prim.DivKind:
		for i := range y {
			y[i] = a[i] / b[i]
		}
	case prim.MaxKind:
		for i := range y {
			y[i] = maxNaN(a[i], b[i])
		}
	case prim.MinKind:
		for i := range y {
			y[i] = minNaN(a[i], b[i])
		}
	}
}

// maxNaN is torch.maximum: x if x is NaN or larger, else z.
func maxNaN[T Float](x, z T) T {
	if x != x || x > z {
		return x
	}
	return z
}

// minNaN is torch.minimum: x if x is NaN or smaller, else z.
func minNaN[T Float](x, z T) T {
	if x != x || x < z {
		return x
	}
	return z
}

func compareKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	c := n.Op.(*prim.Compare)
	a, b, y := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	forBroadcast2(pool, out[0].Shape, in[0].Shape, in[1].Shape, func(o, ia, ib, cnt, sa, sb int) {
		for i := 0; i < cnt; i++ {
			// p is the input whose share this is, q the other one.
			p, q := a[ia+i*sa], b[ib+i*sb]
			if c.Second {
				p, q = q, p
			}
			switch {
			case p == q:
				y[o+i] = 0.5
			case c.Kind == prim.MaxKind && p < q, c.Kind == prim.MinKind && p > q:
				y[o+i] = 0
			default: // wins, or a NaN is involved
				y[o+i] = 1
			}
		}
	})
	return nil
}

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

const sqrt2overPi = 0.7978845608028654

func unaryKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.Unary)
	x, y := slice[T](in[0]), slice[T](out[0])
	grain := elemGrain
	if o.Kind != prim.NegKind && o.Kind != prim.ReLUKind && o.Kind != prim.ScaleKind && o.Kind != prim.AddConstKind &&
		o.Kind != prim.SquareKind && o.Kind != prim.LeakyReLUKind && o.Kind != prim.AbsKind {
		grain = elemGrain / 16 // transcendental: more work per element
	}
	pool.For(len(x), grain, func(lo, hi int) { unaryRange(o, x[lo:hi], y[lo:hi]) })
	return nil
}

func unaryRange[T Float](o *prim.Unary, x, y []T) {
	y = y[:len(x)]
	c := T(o.C)
	if x32, ok := any(x).([]float32); ok {
		// Branch-free float32 versions of the hot activations.
		y32 := any(y).([]float32)
		switch o.Kind {
		case prim.GELUKind:
			geluF32(x32, y32)
			return
		case prim.ReLUKind:
			reluF32(x32, y32)
			return
		case prim.LeakyReLUKind:
			leakyReLUF32(x32, y32, float32(o.C))
			return
		}
	}
	switch o.Kind {
	case prim.NegKind:
		for i, v := range x {
			y[i] = -v
		}
	case prim.ReLUKind:
		for i, v := range x {
			if v > 0 || v != v {
				y[i] = v
			} else {
				y[i] = 0
			}
		}
	case prim.ScaleKind:
		for i, v := range x {
			y[i] = v * c
		}
	case prim.AddConstKind:
		for i, v := range x {
			y[i] = v + c
		}
	case prim.SquareKind:
		for i, v := range x {
			y[i] = v * v
		}
	case prim.LeakyReLUKind:
		for i, v := range x {
			if v > 0 {
				y[i] = v
			} else {
				y[i] = v * c
			}
		}
	case prim.AbsKind:
		for i, v := range x {
			if v < 0 {
				y[i] = -v
			} else {
				y[i] = v
			}
		}
	case prim.SignKind:
		for i, v := range x {
			switch {
			case v > 0:
				y[i] = 1
			case v < 0:
				y[i] = -1
			default:
				y[i] = 0
			}
		}
	case prim.ReciprocalKind:
		for i, v := range x {
			y[i] = 1 / v
		}
	default:
		f := unaryFunc(o.Kind, o.C)
		for i, v := range x {
			y[i] = T(f(float64(v)))
		}
	}
}

func unaryFunc(k prim.UnaryKind, c float64) func(float64) float64 {
	switch k {
	case prim.ExpKind:
		return math.Exp
	case prim.LogKind:
		return math.Log
	case prim.SqrtKind:
		return math.Sqrt
	case prim.RsqrtKind:
		return func(v float64) float64 { return 1 / math.Sqrt(v) }
	case prim.TanhKind:
		return math.Tanh
	case prim.SigmoidKind:
		return sigmoid
	case prim.PowKind:
		return func(v float64) float64 { return math.Pow(v, c) }
	case prim.SiLUKind:
		return func(v float64) float64 { return v * sigmoid(v) }
	case prim.GELUKind:
		return func(v float64) float64 { return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) }
	case prim.GELUTanhKind:
		return func(v float64) float64 { return 0.5 * v * (1 + math.Tanh(sqrt2overPi*(v+0.044715*v*v*v))) }
	case prim.SinKind:
		return math.Sin
	case prim.CosKind:
		return math.Cos
	}
	panic("cpu: unhandled unary kind")
}

func unaryBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.UnaryBackward)
	g, s, y := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	grain := elemGrain
	if o.Kind != prim.ReLUKind && o.Kind != prim.TanhKind && o.Kind != prim.SigmoidKind && o.Kind != prim.LeakyReLUKind {
		grain = elemGrain / 16
	}
	pool.For(len(s), grain, func(lo, hi int) { unaryBackwardRange(o, g[lo:hi], s[lo:hi], y[lo:hi]) })
	return nil
}

func unaryBackwardRange[T Float](o *prim.UnaryBackward, g, s, y []T) {
	g, y = g[:len(s)], y[:len(s)]
	if s32, ok := any(s).([]float32); ok {
		g32, y32 := any(g).([]float32), any(y).([]float32)
		switch o.Kind {
		case prim.GELUKind:
			geluBackwardF32(g32, s32, y32)
			return
		case prim.ReLUKind:
			reluBackwardF32(g32, s32, y32)
			return
		case prim.LeakyReLUKind:
			leakyReLUBackwardF32(g32, s32, y32, float32(o.C))
			return
		}
	}
	switch o.Kind {
	case prim.ReLUKind: // s is the output
		for i, v := range s {
			// A NaN output passes the gradient, as in PyTorch's
			// threshold_backward (zero only where output <= 0).
			if v > 0 || v != v {
				y[i] = g[i]
			} else {
				y[i] = 0
			}
		}
	case prim.TanhKind: // s is the output
		for i, v := range s {
			y[i] = g[i] * (1 - v*v)
		}
	case prim.SigmoidKind: // s is the output
		for i, v := range s {
			y[i] = g[i] * v * (1 - v)
		}
	case prim.LeakyReLUKind: // s is the output (slope >= 0) or the input
		c := T(o.C)
		for i, v := range s {
			if v > 0 {
				y[i] = g[i]
			} else {
				y[i] = g[i] * c
			}
		}
	case prim.SiLUKind:
		for i, v := range s {
			sg := sigmoid(float64(v))
			y[i] = T(float64(g[i]) * sg * (1 + float64(v)*(1-sg)))
		}
	case prim.GELUKind:
		for i, v := range s {
			x := float64(v)
			cdf := 0.5 * (1 + math.Erf(x/math.Sqrt2))
			pdf := math.Exp(-0.5*x*x) / math.Sqrt(2*math.Pi)
			y[i] = T(float64(g[i]) * (cdf + x*pdf))
		}
	case prim.GELUTanhKind:
		for i, v := range s {
			x := float64(v)
			inner := sqrt2overPi * (x + 0.044715*x*x*x)
			t := math.Tanh(inner)
			d := sqrt2overPi * (1 + 3*0.044715*x*x)
			y[i] = T(float64(g[i]) * (0.5*(1+t) + 0.5*x*(1-t*t)*d))
		}
	default:
		panic("cpu: unhandled unary backward kind")
	}
}

func fillKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	v := n.Op.(*prim.Fill).Value
	t := out[0]
	switch t.DType {
	case tensor.Float32:
		s := t.F32()
		for i := range s {
			s[i] = float32(v)
		}
	case tensor.Float64:
		s := t.F64()
		for i := range s {
			s[i] = v
		}
	case tensor.Int64:
		s := t.I64()
		for i := range s {
			s[i] = int64(v)
		}
	default:
		c := tensor.FromFloat64(t.Shape, constSlice(t.Shape.NumElements(), v)).Convert(t.DType)
		copy(t.Data, c.Data)
	}
	return nil
}

func constSlice(n int, v float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func castKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	src, dst := in[0], out[0]
	switch {
	// The 16-bit casts (autocast's, every step) split across the pool.
	case src.DType == tensor.Float32 && dst.DType == tensor.BFloat16:
		s, d := src.F32(), dst.U16()
		pool.For(len(s), elemGrain, func(lo, hi int) {
			blas.NarrowBF16(d[lo:hi], s[lo:hi]) // tensor.Float32ToBFloat16's bits, vectorized
		})
	case src.DType == tensor.Float32 && dst.DType == tensor.Float16:
		s, d := src.F32(), dst.U16()
		pool.For(len(s), elemGrain, func(lo, hi int) {
			for i, v := range s[lo:hi] {
				d[lo+i] = tensor.Float32ToFloat16(v)
			}
		})
	case src.DType == tensor.BFloat16 && dst.DType == tensor.Float32:
		s, d := src.U16(), dst.F32()
		pool.For(len(s), elemGrain, func(lo, hi int) {
			blas.Widen(blas.BFloat16, d[lo:hi], s[lo:hi]) // exact, vectorized
		})
	case src.DType == tensor.Float16 && dst.DType == tensor.Float32:
		s, d := src.U16(), dst.F32()
		pool.For(len(s), elemGrain, func(lo, hi int) {
			for i, v := range s[lo:hi] {
				d[lo+i] = tensor.Float16ToFloat32(v)
			}
		})
	default:
		copy(dst.Data, src.Convert(dst.DType).Data)
	}
	return nil
}

func init() { Register[*prim.Accumulate](accumulateKernel) }

func accumulateKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	dst, src := in[0], in[1]
	if !n.Op.(*prim.Accumulate).Add {
		copy(dst.Data, src.Data)
		return nil
	}
	switch dst.DType {
	case tensor.Float32:
		d, s := dst.F32(), src.F32()
		pool.For(len(d), elemGrain, func(lo, hi int) {
			dd, ss := d[lo:hi], s[lo:hi]
			done := vec.Add(dd, ss, dd)
			dd, ss = dd[done:], ss[done:]
			for i := range dd {
				dd[i] += ss[i]
			}
		})
	case tensor.Float64:
		d, s := dst.F64(), src.F64()
		pool.For(len(d), elemGrain, func(lo, hi int) {
			dd, ss := d[lo:hi], s[lo:hi]
			for i := range dd {
				dd[i] += ss[i]
			}
		})
	default:
		return fmt.Errorf("cpu: %s: accumulation into %v is not supported", n.Label(), dst.DType)
	}
	return nil
}
