package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// poolAddBatch gives an unbatched [C, H, W] input a batch axis; other ranks are
// left for Infer to reject.
func poolAddBatch(x *trace.Tensor) (*trace.Tensor, bool) {
	if len(x.Shape()) == 3 {
		return prim.Reshape(x, append(tensor.Shape{1}, x.Shape()...)), true
	}
	return x, false
}

func poolDropBatch(y *trace.Tensor) *trace.Tensor { return prim.Reshape(y, y.Shape()[1:].Clone()) }

// MaxPool2dWithIndices is torch.nn.functional.max_pool2d with
// return_indices=True on x [N, C, H, W] (or unbatched [C, H, W]): the
// maxima and the int64 flat index of each within its input plane.
func MaxPool2dWithIndices(x *trace.Tensor, o PoolOpts) (values, indices *trace.Tensor) {
	x4, unbatched := poolAddBatch(x)
	out := x.Graph().Apply(&prim.MaxPool2dOp{Opts: o.Normalized()}, x4)
	values, indices = out[0], out[1]
	if unbatched {
		values, indices = poolDropBatch(values), poolDropBatch(indices)
	}
	return values, indices
}

// MaxPool2d is torch.nn.functional.max_pool2d on x [N, C, H, W] (or
// unbatched [C, H, W]).
func MaxPool2d(x *trace.Tensor, o PoolOpts) *trace.Tensor {
	v, _ := MaxPool2dWithIndices(x, o)
	return v
}

// AvgPool2d is torch.nn.functional.avg_pool2d on x [N, C, H, W] (or
// unbatched [C, H, W]).
func AvgPool2d(x *trace.Tensor, o PoolOpts) *trace.Tensor {
	x4, unbatched := poolAddBatch(x)
	y := x.Graph().Apply1(&prim.AvgPool2dOp{Opts: o.Normalized()}, x4)
	if unbatched {
		y = poolDropBatch(y)
	}
	return y
}

// AdaptiveAvgPool2d is torch.nn.functional.adaptive_avg_pool2d on x
// [N, C, H, W] (or unbatched [C, H, W]) to an output of size[0] x size[1].
func AdaptiveAvgPool2d(x *trace.Tensor, size [2]int) *trace.Tensor {
	x4, unbatched := poolAddBatch(x)
	y := x.Graph().Apply1(&prim.AdaptiveAvgPool2dOp{Size: size}, x4)
	if unbatched {
		y = poolDropBatch(y)
	}
	return y
}
