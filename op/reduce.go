package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Sum over axes (all when none are given).
func Sum(x *trace.Tensor, keepDim bool, axes ...int) *trace.Tensor {
	return prim.Sum(x, keepDim, axes...)
}

// Mean over axes (all when none are given).
func Mean(x *trace.Tensor, keepDim bool, axes ...int) *trace.Tensor {
	return reduce(prim.MeanKind, x, keepDim, axes)
}

// Amax is the maximum over axes (all when none are given), like torch.amax.
func Amax(x *trace.Tensor, keepDim bool, axes ...int) *trace.Tensor {
	return reduce(prim.AmaxKind, x, keepDim, axes)
}

// SumTo sums x down to shape, undoing a broadcast (the gradient of one).
func SumTo(x *trace.Tensor, shape tensor.Shape) *trace.Tensor { return prim.SumTo(x, shape) }

// BroadcastTo expands x to shape (a copy; x itself when already that shape).
func BroadcastTo(x *trace.Tensor, shape tensor.Shape) *trace.Tensor {
	return prim.BroadcastTo(x, shape)
}
