package cpu

import (
	"fmt"
	"unsafe"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Slicing kernels move bytes, so they serve every dtype (float, int64
// indices, masks).
func init() {
	Register[*prim.SliceOp](sliceKernel)
	Register[*prim.SliceBackward](sliceBackwardKernel)
	Register[*prim.CatOp](catKernel)
	Register[*prim.SplitOp](splitKernel)
	Register[*prim.SplitAdd](splitAddKernel)
	Register[*prim.CatWiden](catWidenKernel)
}

// sliceBlocks describes a copy repeated over outer rows: in each row o, n
// blocks of blk bytes go from src[o*srcRow+srcOff+k*srcStep] to
// dst[o*dstRow+dstOff+k*dstStep], k < n.
type sliceBlocks struct {
	outer, n, blk           int
	srcRow, srcOff, srcStep int
	dstRow, dstOff, dstStep int
}

func (c sliceBlocks) run(pool *parallel.Pool, dst, src []byte) {
	if c.outer == 0 || c.n == 0 || c.blk == 0 {
		return
	}
	rowBytes := c.n * c.blk
	grain := max(1, (64<<10)/rowBytes)
	pool.For(c.outer, grain, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			s := src[o*c.srcRow+c.srcOff:]
			d := dst[o*c.dstRow+c.dstOff:]
			switch {
			case c.n == 1:
				copy(d[:c.blk], s[:c.blk])
			case c.blk == 8 && c.srcStep%8 == 0 && c.dstStep%8 == 0:
				sliceWords[uint64](d, s, c.n, c.srcStep/8, c.dstStep/8)
			case c.blk == 4 && c.srcStep%4 == 0 && c.dstStep%4 == 0:
				sliceWords[uint32](d, s, c.n, c.srcStep/4, c.dstStep/4)
			default:
				for k := 0; k < c.n; k++ {
					copy(d[k*c.dstStep:k*c.dstStep+c.blk], s[k*c.srcStep:k*c.srcStep+c.blk])
				}
			}
		}
	})
}

// sliceWords copies n single elements of type W with element strides ss and
// ds. The arena keeps every buffer aligned to its element size.
func sliceWords[W uint32 | uint64](d, s []byte, n, ss, ds int) {
	var w W
	size := int(unsafe.Sizeof(w))
	sn, dn := ((n-1)*ss + 1), ((n-1)*ds + 1)
	if len(s) < sn*size || len(d) < dn*size {
		panic("cpu: slice copy out of range")
	}
	sw := unsafe.Slice((*W)(unsafe.Pointer(&s[0])), sn)
	dw := unsafe.Slice((*W)(unsafe.Pointer(&d[0])), dn)
	for k := 0; k < n; k++ {
		dw[k*ds] = sw[k*ss]
	}
}

// sliceLayout is outer (axes before axis) and the bytes of one index of axis.
func sliceLayout(s tensor.Shape, axis int, esize int) (outer, innerBytes int) {
	outer, inner := 1, esize
	for _, d := range s[:axis] {
		outer *= d
	}
	for _, d := range s[axis+1:] {
		inner *= d
	}
	return outer, inner
}

// sliceCopy returns the copy from the full tensor (shape s) to its slice.
func sliceCopy(o *prim.SliceOp, s tensor.Shape, esize int) sliceBlocks {
	outer, ib := sliceLayout(s, o.Axis, esize)
	n := (o.End - o.Start + o.Step - 1) / o.Step
	if o.End <= o.Start {
		n = 0
	}
	c := sliceBlocks{outer: outer, n: n, blk: ib,
		srcRow: s[o.Axis] * ib, srcOff: o.Start * ib, srcStep: o.Step * ib,
		dstRow: n * ib, dstStep: ib}
	if o.Step == 1 && n > 0 {
		c.n, c.blk = 1, n*ib
	}
	return c
}

func sliceKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.SliceOp)
	sliceCopy(o, in[0].Shape, in[0].DType.Size()).run(pool, out[0].Data, in[0].Data)
	return nil
}

func sliceBackwardKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.SliceBackward)
	c := sliceCopy(&prim.SliceOp{Axis: o.Axis, Start: o.Start, End: o.End, Step: o.Step}, out[0].Shape, out[0].DType.Size())
	// Same blocks, the other way round.
	c.srcRow, c.dstRow = c.dstRow, c.srcRow
	c.srcOff, c.dstOff = c.dstOff, c.srcOff
	c.srcStep, c.dstStep = c.dstStep, c.srcStep
	clear(out[0].Data)
	c.run(pool, out[0].Data, in[0].Data)
	return nil
}

func catKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	axis := n.Op.(*prim.CatOp).Axis
	esize := out[0].DType.Size()
	outer, ib := sliceLayout(out[0].Shape, axis, esize)
	dstRow := out[0].Shape[axis] * ib
	off := 0
	for _, t := range in {
		k := t.Shape[axis] * ib
		sliceBlocks{outer: outer, n: 1, blk: k, srcRow: k, dstRow: dstRow, dstOff: off}.run(pool, out[0].Data, t.Data)
		off += k
	}
	return nil
}

func splitKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	axis := n.Op.(*prim.SplitOp).Axis
	esize := in[0].DType.Size()
	outer, ib := sliceLayout(in[0].Shape, axis, esize)
	srcRow := in[0].Shape[axis] * ib
	off := 0
	for _, t := range out {
		k := t.Shape[axis] * ib
		sliceBlocks{outer: outer, n: 1, blk: k, srcRow: srcRow, srcOff: off, dstRow: k}.run(pool, t.Data, in[0].Data)
		off += k
	}
	return nil
}

// splitAddKernel is splitKernel with the pieces prim.SplitAdd accumulates
// added to their inputs on the way (binaryRun, the add kernel's loop, in
// the add's operand order): each such piece is read once from the split
// tensor and never written on its own.
func splitAddKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.SplitAdd)
	src := in[0]
	esize := src.DType.Size()
	outer, ib := sliceLayout(src.Shape, o.Axis, esize)
	srcRow := src.Shape[o.Axis] * ib
	off, k := 0, 1
	for i, t := range out {
		blk := t.Shape[o.Axis] * ib
		if o.Acc[i] == prim.AccNone {
			sliceBlocks{outer: outer, n: 1, blk: blk, srcRow: srcRow, srcOff: off, dstRow: blk}.run(pool, t.Data, src.Data)
			off += blk
			continue
		}
		acc := in[k]
		k++
		switch src.DType {
		case tensor.Float32:
			splitAddRows(pool, slice[float32](t), slice[float32](acc), slice[float32](src), outer, blk/esize, srcRow/esize, off/esize, o.Acc[i])
		case tensor.Float64:
			splitAddRows(pool, slice[float64](t), slice[float64](acc), slice[float64](src), outer, blk/esize, srcRow/esize, off/esize, o.Acc[i])
		default:
			return fmt.Errorf("cpu: %s: adds of %v are not supported", n.Label(), src.DType)
		}
		off += blk
	}
	return nil
}

// splitAddRows sets y = acc + piece (AccBefore) or piece + acc, where row
// r of the piece (row elements) starts at src[r*srcRow+off].
func splitAddRows[T Float](pool *parallel.Pool, y, acc, src []T, outer, row, srcRow, off int, order prim.AccOrder) {
	pool.For(outer*row, elemGrain, func(lo, hi int) {
		for lo < hi {
			r, c := lo/row, lo%row
			m := min(hi-lo, row-c)
			p := src[r*srcRow+off+c:][:m]
			a, yy := acc[lo:lo+m], y[lo:lo+m]
			if order == prim.AccBefore {
				binaryRun(prim.AddKind, a, p, yy)
			} else {
				binaryRun(prim.AddKind, p, a, yy)
			}
			lo += m
		}
	})
}

// catWidenKernel is catKernel of 16-bit inputs that also writes the
// concatenation widened (castKernel's conversions), each input row read
// once for both outputs.
func catWidenKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	axis := n.Op.(*prim.CatWiden).Axis
	lo, wide := out[0].U16(), out[1].F32()
	outer, inner := sliceLayout(out[0].Shape, axis, 1)
	dstRow := out[0].Shape[axis] * inner
	offs := make([]int, len(in))
	off := 0
	for i, t := range in {
		offs[i] = off
		off += t.Shape[axis] * inner
	}
	half := out[0].DType == tensor.Float16
	pool.For(outer*len(in), 1, func(a, b int) {
		for r := a; r < b; r++ {
			o, i := r/len(in), r%len(in)
			k := in[i].Shape[axis] * inner
			src := in[i].U16()[o*k : (o+1)*k]
			at := o*dstRow + offs[i]
			copy(lo[at:at+k], src)
			d := wide[at : at+k]
			if half {
				for j, v := range src {
					d[j] = tensor.Float16ToFloat32(v)
				}
			} else {
				blas.Widen(blas.BFloat16, d, src)
			}
		}
	})
	return nil
}
