package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Conv2d is torch.nn.functional.conv2d: x [N, C, H, W] (or unbatched
// [C, H, W]), w [out_channels, C/groups, kH, kW], b [out_channels] or nil.
func Conv2d(x, w, b *trace.Tensor, o ConvOpts) *trace.Tensor {
	ins := []*trace.Tensor{x, w}
	if b != nil {
		ins = append(ins, b)
	}
	o = o.Normalized()
	if err := o.Validate(); err != nil {
		x.Graph().Errorf("conv2d", ins, "%v", err)
	}
	if r := len(x.Shape()); r != 3 && r != 4 {
		x.Graph().Errorf("conv2d", ins, "expected input with 4 dims [N, C, H, W] (or 3 dims [C, H, W] unbatched), got %d dims", r)
	}
	unbatched := len(x.Shape()) == 3
	if unbatched {
		ins[0] = prim.Reshape(x, append(tensor.Shape{1}, x.Shape()...))
	}
	y := x.Graph().Apply1(&prim.Conv2dOp{Opts: o}, ins...)
	if unbatched {
		y = prim.Reshape(y, y.Shape()[1:].Clone())
	}
	return y
}
