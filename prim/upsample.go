package prim

import (
	"fmt"
	"math"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&UpsampleNearest2dOp{}, &UpsampleNearest2dBackward{}) }

// NearestSourceIndex is PyTorch's nearest-neighbour rule (nearest_idx): the
// input index that output index dst reads along an axis resized from in to
// out. scale is the scale factor the user gave (0 when an output size was
// given); as in PyTorch, the ratio is computed in float32:
// min(floor(dst * s), in-1) with s = 1/scale, or in/out.
func NearestSourceIndex(dst, in, out int, scale float64) int {
	switch out {
	case in:
		return dst
	case 2 * in:
		return dst >> 1
	}
	var s float32
	if scale > 0 {
		s = float32(1.0 / scale)
	} else {
		s = float32(in) / float32(out)
	}
	src := int(math.Floor(float64(float32(float32(dst) * s))))
	return min(src, in-1)
}

func upsampleCheck(x tensor.Shape, size [2]int, scale [2]float64) error {
	if len(x) != 4 {
		return fmt.Errorf("expected input with 4 dims [N, C, H, W], got %d dims %v", len(x), x)
	}
	if x[2] <= 0 || x[3] <= 0 {
		return fmt.Errorf("expected input with non-zero spatial size, got %v", x)
	}
	if size[0] <= 0 || size[1] <= 0 {
		return fmt.Errorf("output size must be positive, got %v", size)
	}
	if scale[0] < 0 || scale[1] < 0 {
		return fmt.Errorf("scale factor must be positive, got %v", scale)
	}
	return nil
}

// UpsampleNearest2dOp resizes [N, C, H, W] to [N, C, Size[0], Size[1]] by
// nearest neighbour (PyTorch's upsample_nearest2d). Scale holds the scale
// factors the user gave, or zeros when an output size was given; they
// select the index rule (see NearestSourceIndex).
type UpsampleNearest2dOp struct {
	Size  [2]int
	Scale [2]float64
}

func (o *UpsampleNearest2dOp) Name() string { return "upsample_nearest2d" }

func (o *UpsampleNearest2dOp) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *UpsampleNearest2dOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *UpsampleNearest2dOp) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *UpsampleNearest2dOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	x := in[0].Shape
	if err := upsampleCheck(x, o.Size, o.Scale); err != nil {
		return nil, err
	}
	return metas1(in[0].DType, tensor.Shape{x[0], x[1], o.Size[0], o.Size[1]}), nil
}

func (o *UpsampleNearest2dOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{Apply1(&UpsampleNearest2dBackward{InputShape: n.Inputs[0].Shape().Clone(), Scale: o.Scale}, gouts[0])}
}

// UpsampleNearest2dBackward sums the output gradient (input 0) back onto
// the input positions each output read, into a tensor of InputShape.
type UpsampleNearest2dBackward struct {
	InputShape tensor.Shape
	Scale      [2]float64
}

func (o *UpsampleNearest2dBackward) Name() string { return "upsample_nearest2d_backward" }

func (o *UpsampleNearest2dBackward) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *UpsampleNearest2dBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *UpsampleNearest2dBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *UpsampleNearest2dBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	gy, x := in[0].Shape, o.InputShape
	if len(gy) != 4 {
		return nil, fmt.Errorf("expected output gradient with 4 dims, got %v", gy)
	}
	if err := upsampleCheck(x, [2]int{gy[2], gy[3]}, o.Scale); err != nil {
		return nil, err
	}
	if gy[0] != x[0] || gy[1] != x[1] {
		return nil, fmt.Errorf("output gradient %v does not match input shape %v", gy, x)
	}
	return metas1(in[0].DType, x.Clone()), nil
}

// Grad: the backward is linear and its adjoint is the forward resize.
func (o *UpsampleNearest2dBackward) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	s := n.Inputs[0].Shape()
	return []*trace.Tensor{Apply1(&UpsampleNearest2dOp{Size: [2]int{s[2], s[3]}, Scale: o.Scale}, gouts[0])}
}
