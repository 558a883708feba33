package cpu

import (
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	Floats[*prim.UpsampleNearest2dOp](upsampleNearestKernel[float32], upsampleNearestKernel[float64])
	Floats[*prim.UpsampleNearest2dBackward](upsampleNearestBackwardKernel[float32], upsampleNearestBackwardKernel[float64])
}

// nearestIndices returns, for each of out output positions, the input
// position it reads (prim.NearestSourceIndex), computed once per call.
func nearestIndices(in, out int, scale float64) []int {
	idx := make([]int, out)
	for i := range idx {
		idx[i] = prim.NearestSourceIndex(i, in, out, scale)
	}
	return idx
}

func upsampleNearestKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.UpsampleNearest2dOp)
	x, y := slice[T](in[0]), slice[T](out[0])
	s := in[0].Shape
	H, W, OH, OW := s[2], s[3], o.Size[0], o.Size[1]
	hi, wi := nearestIndices(H, OH, o.Scale[0]), nearestIndices(W, OW, o.Scale[1])
	inPlane, outPlane := H*W, OH*OW
	poolPlanes(pool, s[0]*s[1], outPlane, func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			xp := x[p*inPlane : (p+1)*inPlane]
			for oh, ih := range hi {
				src := xp[ih*W : (ih+1)*W]
				dst := y[p*outPlane+oh*OW : p*outPlane+(oh+1)*OW]
				if oh > 0 && hi[oh-1] == ih {
					copy(dst, y[p*outPlane+(oh-1)*OW:p*outPlane+oh*OW])
					continue
				}
				for ow, iw := range wi {
					dst[ow] = src[iw]
				}
			}
		}
	})
	return nil
}

func upsampleNearestBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.UpsampleNearest2dBackward)
	gy, gx := slice[T](in[0]), slice[T](out[0])
	s, ys := out[0].Shape, in[0].Shape
	H, W, OH, OW := s[2], s[3], ys[2], ys[3]
	hi, wi := nearestIndices(H, OH, o.Scale[0]), nearestIndices(W, OW, o.Scale[1])
	inPlane, outPlane := H*W, OH*OW
	poolPlanes(pool, s[0]*s[1], outPlane, func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			gxp := gx[p*inPlane : (p+1)*inPlane]
			clear(gxp)
			for oh, ih := range hi {
				dst := gxp[ih*W : (ih+1)*W]
				src := gy[p*outPlane+oh*OW : p*outPlane+(oh+1)*OW]
				for ow, iw := range wi {
					dst[iw] += src[ow]
				}
			}
		}
	})
	return nil
}
