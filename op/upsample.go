package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// UpsampleNearest is F.interpolate(x, scale_factor=scale, mode='nearest')
// for x [N, C, H, W] and a positive integer scale: each pixel becomes a
// scale x scale block.
func UpsampleNearest(x *trace.Tensor, scale int) *trace.Tensor {
	if scale <= 0 {
		x.Graph().Errorf("upsample_nearest2d", []*trace.Tensor{x}, "scale factor must be a positive integer, got %d", scale)
	}
	if len(x.Shape()) != 4 {
		x.Graph().Errorf("upsample_nearest2d", []*trace.Tensor{x}, "expected input with 4 dims [N, C, H, W], got %d dims", len(x.Shape()))
	}
	size := [2]int{x.Dim(2) * scale, x.Dim(3) * scale}
	s := float64(scale)
	return x.Graph().Apply1(&prim.UpsampleNearest2dOp{Size: size, Scale: [2]float64{s, s}}, x)
}

// UpsampleNearestSize is F.interpolate(x, size=(h, w), mode='nearest') for
// x [N, C, H, W]: output (i, j) reads input (floor(i*H/h), floor(j*W/w)).
func UpsampleNearestSize(x *trace.Tensor, h, w int) *trace.Tensor {
	return x.Graph().Apply1(&prim.UpsampleNearest2dOp{Size: [2]int{h, w}}, x)
}
