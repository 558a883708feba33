package cpu

import (
	"math"

	"github.com/headroom-ml/headroom/cpu/internal/vec"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	Floats[*prim.Reduce](reduceKernel[float32], reduceKernel[float64])
	Floats[*prim.AmaxBackward](amaxBackwardKernel[float32], amaxBackwardKernel[float64])
	Register[*prim.Expand](expandKernel)
	Register[*prim.Permute](permuteKernel)
}

// reduceLayout splits an input shape into kept and reduced axes and returns,
// for each, the input strides; it lets every reduction be written as
// "for each kept position, combine the reduced positions".
type reduceLayout struct {
	keptShape, redShape     tensor.Shape
	keptStrides, redStrides []int
}

func newReduceLayout(s tensor.Shape, reduced []bool) reduceLayout {
	st := s.Strides()
	var l reduceLayout
	for i, d := range s {
		if reduced[i] {
			l.redShape = append(l.redShape, d)
			l.redStrides = append(l.redStrides, st[i])
		} else {
			l.keptShape = append(l.keptShape, d)
			l.keptStrides = append(l.keptStrides, st[i])
		}
	}
	return l
}

// offsets enumerates the input offsets of a (shape, strides) index space.
func offsets(shape tensor.Shape, strides []int) []int {
	n := shape.NumElements()
	out := make([]int, n)
	idx := make([]int, len(shape))
	for k := 0; k < n; k++ {
		o := 0
		for d := range idx {
			o += idx[d] * strides[d]
		}
		out[k] = o
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out
}

func reducedAxes(o *prim.Reduce, rank int) []bool {
	r := make([]bool, rank)
	if len(o.Axes) == 0 {
		for i := range r {
			r[i] = true
		}
	}
	for _, a := range o.Axes {
		r[a] = true
	}
	return r
}

// reduceSplit reports whether the reduced axes are a leading or a trailing
// block of the shape (so x is a [rows, cols] matrix reduced along columns
// or rows), and the matrix's size.
func reduceSplit(s tensor.Shape, reduced []bool) (leading, trailing bool, rows, cols int) {
	k := 0
	for k < len(s) && reduced[k] {
		k++
	}
	lead := k
	for k < len(s) && !reduced[k] {
		k++
	}
	kept := k
	for k < len(s) && reduced[k] {
		k++
	}
	if k != len(s) {
		return false, false, 0, 0
	}
	switch {
	case kept == len(s): // reduced axes lead (or none at all)
		return true, false, s[:lead].NumElements(), s[lead:].NumElements()
	case lead == 0: // kept axes lead, reduced trail
		return false, true, s[:kept].NumElements(), s[kept:].NumElements()
	}
	return false, false, 0, 0
}

// reduceMiddle reports whether the kept axes are one contiguous block with
// reduced axes on both sides, and the sizes A, K, B of [A, K, B].
func reduceMiddle(s tensor.Shape, reduced []bool) (a, k, b int, ok bool) {
	i := 0
	for i < len(s) && reduced[i] {
		i++
	}
	j := i
	for j < len(s) && !reduced[j] {
		j++
	}
	for q := j; q < len(s); q++ {
		if !reduced[q] {
			return 0, 0, 0, false
		}
	}
	if i == 0 || j == len(s) || j == i {
		return 0, 0, 0, false
	}
	a, k, b = s[:i].NumElements(), s[i:j].NumElements(), s[j:].NumElements()
	return a, k, b, a*k*b > 0
}

func reduceKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.Reduce)
	x, y := slice[T](in[0]), slice[T](out[0])
	reduced := reducedAxes(o, len(in[0].Shape))
	if a, k, b, ok := reduceMiddle(in[0].Shape, reduced); ok && (o.Kind == prim.SumKind || o.Kind == prim.MeanKind) {
		// Kept axes in the middle ([A, K, B] summed over A and B, as a
		// convolution's bias gradient): contiguous rows of B.
		cnt := float64(a * b)
		pool.For(k, max(1, elemGrain/(a*b)), func(k0, k1 int) {
			for kk := k0; kk < k1; kk++ {
				var s float64
				for i := 0; i < a; i++ {
					s += sum64(x[(i*k+kk)*b : (i*k+kk+1)*b])
				}
				if o.Kind == prim.MeanKind {
					s /= cnt
				}
				y[kk] = T(s)
			}
		})
		return nil
	}
	if leading, trailing, rows, cols := reduceSplit(in[0].Shape, reduced); (leading || trailing) && rows*cols > 0 {
		if trailing {
			reduceRows(pool, o.Kind, x, y, rows, cols)
		} else {
			reduceCols(pool, o.Kind, x, y, rows, cols)
		}
		return nil
	}
	l := newReduceLayout(in[0].Shape, reduced)
	kept := offsets(l.keptShape, l.keptStrides)
	red := offsets(l.redShape, l.redStrides)
	cnt := float64(len(red))
	// Contiguous trailing reduction (softmax-like rows, global sums) is the
	// common case: walk memory in order.
	contiguous := len(red) > 0 && red[len(red)-1] == len(red)-1
	for k, base := range kept {
		switch o.Kind {
		case prim.SumKind, prim.MeanKind:
			var s float64
			if contiguous {
				for _, v := range x[base : base+len(red)] {
					s += float64(v)
				}
			} else {
				for _, r := range red {
					s += float64(x[base+r])
				}
			}
			if o.Kind == prim.MeanKind {
				s /= cnt
			}
			y[k] = T(s)
		case prim.AmaxKind:
			m := x[base+red[0]]
			for _, r := range red[1:] {
				v := x[base+r]
				if v > m || v != v {
					m = v
				}
			}
			y[k] = m
		}
	}
	return nil
}

// reduceRows reduces each row of x ([rows, cols]) into y[row], in the
// order and precision of the general loop below.
func reduceRows[T Float](pool *parallel.Pool, k prim.ReduceKind, x, y []T, rows, cols int) {
	pool.For(rows, max(1, elemGrain/cols), func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			row := x[r*cols : (r+1)*cols]
			switch k {
			case prim.SumKind, prim.MeanKind:
				var s float64
				for _, v := range row {
					s += float64(v)
				}
				if k == prim.MeanKind {
					s /= float64(cols)
				}
				y[r] = T(s)
			case prim.AmaxKind:
				m := row[0]
				for _, v := range row[1:] {
					if v > m || v != v {
						m = v
					}
				}
				y[r] = m
			}
		}
	})
}

// reduceCols reduces each column of x ([rows, cols]) into y[col], adding
// the rows in order (as the general loop does) but walking memory row by
// row; threads take disjoint ranges of columns.
func reduceCols[T Float](pool *parallel.Pool, k prim.ReduceKind, x, y []T, rows, cols int) {
	// One range of columns a thread: a range walks down all the rows, so
	// narrow ranges (the pool's default of 8 a thread, 96 of gpt's 1536
	// columns) read a few lines of each row a page apart.
	t := max(1, pool.Threads())
	grain := max(64, elemGrain/rows, ((cols+t-1)/t+15)&^15)
	pool.For(cols, grain, func(c0, c1 int) {
		ys := y[c0:c1]
		switch k {
		case prim.SumKind, prim.MeanKind:
			// Sums of up to 2048 columns (16 KiB, in L1): a block's
			// rows read whole (512 read gpt's 1536 columns in three
			// strided passes, at a third of the speed).
			var buf [2048]float64
			for b0 := c0; b0 < c1; b0 += len(buf) {
				b1 := min(c1, b0+len(buf))
				acc := buf[:b1-b0]
				clear(acc)
				colSums64(acc, x[b0:], cols, rows)
				for j, s := range acc {
					if k == prim.MeanKind {
						s /= float64(rows)
					}
					y[b0+j] = T(s)
				}
			}
		case prim.AmaxKind:
			copy(ys, x[c0:c1])
			for r := 1; r < rows; r++ {
				for j, v := range x[r*cols+c0 : r*cols+c1] {
					if m := ys[j]; v > m || v != v {
						ys[j] = v
					}
				}
			}
		}
	})
}

func amaxBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.AmaxBackward)
	gy, x, ym, gx := slice[T](in[0]), slice[T](in[1]), slice[T](in[2]), slice[T](out[0])
	l := newReduceLayout(in[1].Shape, reducedAxes(&prim.Reduce{Axes: o.Axes}, len(in[1].Shape)))
	kept := offsets(l.keptShape, l.keptStrides)
	red := offsets(l.redShape, l.redStrides)
	for k, base := range kept {
		if m := ym[k]; m != m {
			// A NaN maximum: PyTorch divides by a tie count of zero and
			// gives the whole group a NaN gradient.
			nan := T(math.NaN())
			for _, r := range red {
				gx[base+r] = nan
			}
			continue
		}
		ties := 0
		for _, r := range red {
			if x[base+r] == ym[k] {
				ties++
			}
		}
		for _, r := range red {
			if x[base+r] == ym[k] {
				gx[base+r] = gy[k] / T(ties)
			} else {
				gx[base+r] = 0
			}
		}
	}
	return nil
}

// gatherStrided copies src (viewed through strides aligned to out's shape)
// into dst contiguously, for any element size.
func gatherStrided(dst, src []byte, esize int, shape tensor.Shape, strides []int) {
	n := shape.NumElements()
	if n == 0 {
		return
	}
	r := len(shape)
	if r == 0 {
		copy(dst[:esize], src[:esize])
		return
	}
	inner, is := shape[r-1], strides[r-1]
	idx := make([]int, r)
	for o := 0; o < n; o += inner {
		base := 0
		for d := 0; d < r-1; d++ {
			base += idx[d] * strides[d]
		}
		if is == 1 {
			copy(dst[o*esize:(o+inner)*esize], src[base*esize:(base+inner)*esize])
		} else {
			for i := 0; i < inner; i++ {
				s := (base + i*is) * esize
				copy(dst[(o+i)*esize:(o+i+1)*esize], src[s:s+esize])
			}
		}
		for d := r - 2; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

func expandKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	gatherStrided(out[0].Data, in[0].Data, in[0].DType.Size(), out[0].Shape, bstrides(in[0].Shape, out[0].Shape))
	return nil
}

func permuteKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	perm := n.Op.(*prim.Permute).Perm
	st := in[0].Shape.Strides()
	ps := make([]int, len(perm))
	for i, p := range perm {
		ps[i] = st[p]
	}
	gatherStrided(out[0].Data, in[0].Data, in[0].DType.Size(), out[0].Shape, ps)
	return nil
}

// colSums64 adds rows [0, rows) of the len(acc) columns of x (row stride
// ld) to acc, each column's rows in order in float64: the sums of the
// plain loop, bit for bit. float32 rows with the vector code (vec.ColAdd)
// go a row at a time; otherwise rows go in blocks whose lines stay in L1 while
// strips of 8 columns, their sums in registers, run down them (a bias
// gradient's [2048, 1536] column sums ran at a few cycles an element
// through acc in memory).
func colSums64[T Float](acc []float64, x []T, ld, rows int) {
	w := len(acc)
	if x32, ok := any(x).([]float32); ok && vec.Enabled() && w >= 8 {
		// Blocks of 8 rows go down 16-column strips with the sums in
		// registers (vec.ColAddRows: acc is loaded and stored once a
		// block, not once a row; 2 threads, [2048,1536]: 1.2-1.4 ms CPU
		// a call against 2.7-3.0 a row at a time); the last columns, if
		// w is not a multiple of 16, a row at a time.
		const colRowBlock = 8
		for r0 := 0; r0 < rows; r0 += colRowBlock {
			nr := min(colRowBlock, rows-r0)
			done := vec.ColAddRows(acc, x32[r0*ld:], ld, nr)
			for r := r0; r < r0+nr; r++ {
				row := x32[r*ld+done : r*ld+w]
				tail := acc[done:]
				for j := vec.ColAdd(tail, row); j < len(tail); j++ {
					tail[j] += float64(row[j])
				}
			}
		}
		return
	}
	const rowBlock = 128
	for r0 := 0; r0 < rows; r0 += rowBlock {
		r1 := min(rows, r0+rowBlock)
		j := 0
		for ; j+8 <= w; j += 8 {
			a := (*[8]float64)(acc[j : j+8])
			s0, s1, s2, s3, s4, s5, s6, s7 := a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
			for r := r0; r < r1; r++ {
				v := (*[8]T)(x[r*ld+j : r*ld+j+8])
				s0 += float64(v[0])
				s1 += float64(v[1])
				s2 += float64(v[2])
				s3 += float64(v[3])
				s4 += float64(v[4])
				s5 += float64(v[5])
				s6 += float64(v[6])
				s7 += float64(v[7])
			}
			a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = s0, s1, s2, s3, s4, s5, s6, s7
		}
		for ; j < w; j++ {
			s := acc[j]
			for r := r0; r < r1; r++ {
				s += float64(x[r*ld+j])
			}
			acc[j] = s
		}
	}
}
