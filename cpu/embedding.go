package cpu

import (
	"fmt"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	Register[*prim.EmbeddingOp](embeddingKernel)
	Floats[*prim.EmbeddingBackward](embeddingBackwardKernel[float32], embeddingBackwardKernel[float64])
}

// embCheckIndices returns an error naming the first index outside [0, rows)
// and where it is.
func embCheckIndices(idx []int64, shape tensor.Shape, rows int) error {
	for i, v := range idx {
		if v < 0 || v >= int64(rows) {
			pos := make([]int, len(shape))
			rem := i
			for d := len(shape) - 1; d >= 0; d-- {
				pos[d] = rem % shape[d]
				rem /= shape[d]
			}
			return fmt.Errorf("index %d at position %v is out of range for an embedding table of %d rows (valid indices: 0 to %d)",
				v, tensor.Shape(pos), rows, rows-1)
		}
	}
	return nil
}

// embeddingKernel copies whole rows, so it serves every weight dtype.
func embeddingKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	idx, w := in[0].I64(), in[1]
	rows := w.Shape[0]
	if err := embCheckIndices(idx, in[0].Shape, rows); err != nil {
		return err
	}
	row := w.Shape[1] * w.DType.Size()
	src, dst := w.Data, out[0].Data
	pool.For(len(idx), max(1, 65536/max(1, row)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			r := int(idx[i]) * row
			copy(dst[i*row:(i+1)*row], src[r:r+row])
		}
	})
	return nil
}

// embeddingBackwardKernel zeroes the weight gradient and adds each output
// gradient row into the row of its index, in index order (as PyTorch's
// index_add_). Ranges of columns run in parallel: no two workers touch the
// same element.
func embeddingBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.EmbeddingBackward)
	gy, idx, gw := slice[T](in[0]), in[1].I64(), slice[T](out[0])
	rows, D := out[0].Shape[0], out[0].Shape[1]
	if err := embCheckIndices(idx, in[1].Shape, rows); err != nil {
		return err
	}
	pad := int64(o.PaddingIdx)
	pool.For(D, max(64, normGrain(len(idx))), func(d0, d1 int) {
		for r := 0; r < rows; r++ {
			clear(gw[r*D+d0 : r*D+d1])
		}
		for i, v := range idx {
			if v == pad {
				continue
			}
			dst := gw[int(v)*D+d0 : int(v)*D+d1]
			for j, g := range gy[i*D+d0 : i*D+d1] {
				dst[j] += g
			}
		}
	})
	return nil
}
