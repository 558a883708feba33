package cpu

import (
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	Floats[*prim.DropoutOp](dropoutKernel[float32], dropoutKernel[float64])
	Floats[*prim.DropoutBackward](dropoutBackwardKernel[float32], dropoutBackwardKernel[float64])
}

// dropGrain is the number of mask bytes (8 elements each) per parallel range.
const dropGrain = 2048

// dropoutKernel draws each element's keep bit from the op's counter-based
// stream and writes y = x*scale (kept) or x*0 (dropped, so NaN and Inf
// propagate as in PyTorch's x*mask*scale) and the bit-packed mask.
func dropoutKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.DropoutOp)
	x, y, mask := slice[T](in[0]), slice[T](out[0]), out[1].Data
	cnt := len(x)
	seed := o.Seed
	if len(in) == 2 {
		seed = prim.DropoutStepSeed(seed, in[1].I64()[0])
	}
	s := prim.NewDropoutStream(seed)
	thr := prim.DropoutThreshold(o.P)
	all := o.P >= 1
	scale := T(prim.DropoutScale(o.P))
	pool.For(len(mask), dropGrain, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			var m byte
			for k := 0; k < 8; k++ {
				i := b*8 + k
				if i >= cnt {
					break
				}
				if !all && s.Bits(uint64(i)) >= thr {
					m |= 1 << k
					y[i] = x[i] * scale
				} else {
					y[i] = x[i] * 0
				}
			}
			mask[b] = m
		}
	})
	return nil
}

func dropoutBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.DropoutBackward)
	gy, mask, gx := slice[T](in[0]), in[1].Data, slice[T](out[0])
	cnt := len(gy)
	scale := T(prim.DropoutScale(o.P))
	pool.For(len(mask), dropGrain, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			m := mask[b]
			for k := 0; k < 8; k++ {
				i := b*8 + k
				if i >= cnt {
					break
				}
				if m&(1<<k) != 0 {
					gx[i] = gy[i] * scale
				} else {
					gx[i] = gy[i] * 0
				}
			}
		}
	})
	return nil
}
