package cpu

import (
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { Floats[*prim.MaskedFillOp](maskedFill[float32], maskedFill[float64]) }

// maskedFill writes value where the mask (repeated over the leading axes)
// is set and x elsewhere; out may be x's buffer.
func maskedFill[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	v := T(n.Op.(*prim.MaskedFillOp).Value)
	x, y, mask := slice[T](in[0]), slice[T](out[0]), in[1].Data
	m := len(mask)
	if m == 0 {
		return nil
	}
	pool.For(len(x)/m, max(1, 1<<14/m), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xs, ys := x[r*m:(r+1)*m], y[r*m:(r+1)*m]
			for i, on := range mask {
				if on != 0 {
					ys[i] = v
				} else {
					ys[i] = xs[i]
				}
			}
		}
	})
	return nil
}
