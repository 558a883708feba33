package cpu

import (
	"fmt"
	"unsafe"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Convolutions are lowered to matrix products, one image at a time:
//
//	forward      y[n]  = W · col(x[n])                   (per group)
//	input grad   x̄[n]  = col2im(Wᵀ · ȳ[n])
//	weight grad  W̄     = Σn ȳ[n] · col(x[n])ᵀ
//
// col(x[n]) is the im2col matrix [C*KH*KW, OH*OW] of one image, held in the
// node's workspace; a pointwise (1x1, stride 1, unpadded) convolution uses
// x[n] itself and needs none.

func init() {
	Floats[*op.Conv2dOp](convForwardKernel[float32], convForwardKernel[float64])
	Floats[*op.Conv2dBackwardInput](convInputGradKernel[float32], convInputGradKernel[float64])
	Floats[*op.Conv2dBackwardWeight](convWeightGradKernel[float32], convWeightGradKernel[float64])
	RegisterWorkspace[*op.Conv2dOp](convWorkspace)
	RegisterWorkspace[*op.Conv2dBackwardInput](convWorkspace)
	RegisterWorkspace[*op.Conv2dBackwardWeight](convWorkspace)
}

// convNodeGeom returns the forward geometry of any of the three conv ops
// from the shapes of its node's inputs.
func convNodeGeom(n *trace.Node, in0, in1 tensor.Shape) (op.ConvGeom, error) {
	switch o := n.Op.(type) {
	case *op.Conv2dOp:
		return op.ConvGeometry(in0, in1, o.Opts)
	case *op.Conv2dBackwardInput:
		return o.Geom(in1)
	case *op.Conv2dBackwardWeight:
		return o.Geom(in1)
	}
	return op.ConvGeom{}, fmt.Errorf("cpu: %T is not a convolution", n.Op)
}

// convWorkspace is the scratch a conv node needs: one image's im2col matrix
// (none when pointwise), plus, for the weight gradient of a batch, a
// weight-sized buffer for the per-image products being summed. It depends on
// the node's shapes and dtype only.
func convWorkspace(n *trace.Node) int64 {
	g, err := convNodeGeom(n, n.Inputs[0].Shape(), n.Inputs[1].Shape())
	if err != nil {
		return 0
	}
	var elems int64
	if !g.Pointwise() {
		elems = int64(g.ColRows()) * int64(g.OH*g.OW)
	}
	if _, ok := n.Op.(*op.Conv2dBackwardWeight); ok && g.N > 1 {
		elems += int64(g.K) * int64(g.ColRows()/g.Groups)
	}
	return elems * int64(n.Outputs[0].DType().Size())
}

// convScratch views count elements of ws starting at element off as []T.
func convScratch[T Float](ws []byte, off, count int) []T {
	if count == 0 {
		return nil
	}
	var z T
	es := int(unsafe.Sizeof(z))
	if (off+count)*es > len(ws) {
		panic(fmt.Sprintf("cpu: conv workspace of %d bytes is too small for %d elements", len(ws), off+count))
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&ws[off*es])), count)
}

// convRange returns the output positions [lo, hi) whose input position
// o*s - p + off falls inside [0, in), clamped to [0, out).
func convRange(in, out, s, p, off int) (lo, hi int) {
	if a := p - off; a > 0 {
		lo = (a + s - 1) / s
	}
	b := in - 1 + p - off
	if b < 0 {
		return 0, 0
	}
	hi = min(b/s+1, out)
	lo = min(lo, hi)
	return lo, hi
}

// convGrain is how many channels one parallel task handles in im2col/col2im
// so that each does a useful amount of copying.
func convGrain(g op.ConvGeom) int {
	return max(1, 32768/max(1, g.KH*g.KW*g.OH*g.OW))
}

// im2col writes the [C*KH*KW, OH*OW] matrix of image x ([C, H, W]) to col:
// row (c, kh, kw), column (oh, ow) holds x[c, oh*SH-PH+kh*DH, ow*SW-PW+kw*DW],
// zero where that falls in the padding.
func im2col[T Float](g op.ConvGeom, x, col []T) {
	P, plane := g.OH*g.OW, g.H*g.W
	parallel.For(g.C, convGrain(g), func(c0, c1 int) {
		for c := c0; c < c1; c++ {
			xc := x[c*plane : (c+1)*plane]
			for kh := 0; kh < g.KH; kh++ {
				ohLo, ohHi := convRange(g.H, g.OH, g.SH, g.PH, kh*g.DH)
				for kw := 0; kw < g.KW; kw++ {
					owLo, owHi := convRange(g.W, g.OW, g.SW, g.PW, kw*g.DW)
					row := col[((c*g.KH+kh)*g.KW+kw)*P:][:P]
					clear(row[:ohLo*g.OW])
					clear(row[ohHi*g.OW:])
					iw0 := owLo*g.SW - g.PW + kw*g.DW
					cnt := owHi - owLo
					for oh := ohLo; oh < ohHi; oh++ {
						dst := row[oh*g.OW : (oh+1)*g.OW]
						clear(dst[:owLo])
						clear(dst[owHi:])
						src := xc[(oh*g.SH-g.PH+kh*g.DH)*g.W:]
						if cnt <= 0 {
							continue
						}
						if g.SW == 1 {
							copy(dst[owLo:owHi], src[iw0:iw0+cnt])
							continue
						}
						d := dst[owLo:owHi]
						for i, iw := 0, iw0; i < len(d); i, iw = i+1, iw+g.SW {
							d[i] = src[iw]
						}
					}
				}
			}
		}
	})
}

// col2im is im2col's adjoint: it sets image x ([C, H, W]) to the sum of the
// entries of col that im2col would have read from each position.
func col2im[T Float](g op.ConvGeom, col, x []T) {
	P, plane := g.OH*g.OW, g.H*g.W
	parallel.For(g.C, convGrain(g), func(c0, c1 int) {
		for c := c0; c < c1; c++ {
			xc := x[c*plane : (c+1)*plane]
			clear(xc)
			for kh := 0; kh < g.KH; kh++ {
				ohLo, ohHi := convRange(g.H, g.OH, g.SH, g.PH, kh*g.DH)
				for kw := 0; kw < g.KW; kw++ {
					owLo, owHi := convRange(g.W, g.OW, g.SW, g.PW, kw*g.DW)
					if owLo >= owHi {
						continue
					}
					row := col[((c*g.KH+kh)*g.KW+kw)*P:][:P]
					iw0 := owLo*g.SW - g.PW + kw*g.DW
					for oh := ohLo; oh < ohHi; oh++ {
						s := row[oh*g.OW+owLo : oh*g.OW+owHi]
						dst := xc[(oh*g.SH-g.PH+kh*g.DH)*g.W:]
						if g.SW == 1 {
							d := dst[iw0 : iw0+len(s)]
							for i, v := range s {
								d[i] += v
							}
							continue
						}
						for i, iw := 0, iw0; i < len(s); i, iw = i+1, iw+g.SW {
							dst[iw] += s[i]
						}
					}
				}
			}
		}
	})
}

func convForwardKernel[T Float](n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	g, err := convNodeGeom(n, in[0].Shape, in[1].Shape)
	if err != nil {
		return err
	}
	x, w, y := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	var bias []T
	if len(in) == 3 {
		bias = slice[T](in[2])
	}
	P := g.OH * g.OW
	kg, cg := g.K/g.Groups, g.C/g.Groups
	kk := cg * g.KH * g.KW // columns of one group's weight matrix
	var col []T
	if !g.Pointwise() {
		col = convScratch[T](ws, 0, g.ColRows()*P)
	}
	for ni := 0; ni < g.N; ni++ {
		src := x[ni*g.C*g.H*g.W : (ni+1)*g.C*g.H*g.W]
		yn := y[ni*g.K*P : (ni+1)*g.K*P]
		if col != nil {
			im2col(g, src, col)
			src = col
		}
		for gi := 0; gi < g.Groups; gi++ {
			gemm(false, false, kg, P, kk, w[gi*kg*kk:], kk, src[gi*kk*P:], P, yn[gi*kg*P:], P)
		}
		for k, bv := range bias {
			row := yn[k*P : (k+1)*P]
			for i := range row {
				row[i] += bv
			}
		}
	}
	return nil
}

func convInputGradKernel[T Float](n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	g, err := convNodeGeom(n, in[0].Shape, in[1].Shape)
	if err != nil {
		return err
	}
	gy, w, gx := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	P := g.OH * g.OW
	kg, cg := g.K/g.Groups, g.C/g.Groups
	kk := cg * g.KH * g.KW
	var col []T
	if !g.Pointwise() {
		col = convScratch[T](ws, 0, g.ColRows()*P)
	}
	for ni := 0; ni < g.N; ni++ {
		gyn := gy[ni*g.K*P : (ni+1)*g.K*P]
		gxn := gx[ni*g.C*g.H*g.W : (ni+1)*g.C*g.H*g.W]
		dst := gxn // pointwise: P == H*W and the product is the gradient
		if col != nil {
			dst = col
		}
		for gi := 0; gi < g.Groups; gi++ {
			gemm(true, false, kk, P, kg, w[gi*kg*kk:], kk, gyn[gi*kg*P:], P, dst[gi*kk*P:], P)
		}
		if col != nil {
			col2im(g, col, gxn)
		}
	}
	return nil
}

func convWeightGradKernel[T Float](n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	g, err := convNodeGeom(n, in[0].Shape, in[1].Shape)
	if err != nil {
		return err
	}
	gy, x, gw := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	P := g.OH * g.OW
	kg, cg := g.K/g.Groups, g.C/g.Groups
	kk := cg * g.KH * g.KW
	var col, tmp []T
	off := 0
	if !g.Pointwise() {
		off = g.ColRows() * P
		col = convScratch[T](ws, 0, off)
	}
	if g.N > 1 {
		tmp = convScratch[T](ws, off, len(gw))
	}
	if g.N == 0 {
		clear(gw)
	}
	for ni := 0; ni < g.N; ni++ {
		gyn := gy[ni*g.K*P : (ni+1)*g.K*P]
		src := x[ni*g.C*g.H*g.W : (ni+1)*g.C*g.H*g.W]
		if col != nil {
			im2col(g, src, col)
			src = col
		}
		dst := gw
		if ni > 0 {
			dst = tmp
		}
		for gi := 0; gi < g.Groups; gi++ {
			gemm(false, true, kg, kk, P, gyn[gi*kg*P:], P, src[gi*kk*P:], P, dst[gi*kg*kk:], kk)
		}
		if ni > 0 {
			for i, v := range tmp {
				gw[i] += v
			}
		}
	}
	return nil
}
