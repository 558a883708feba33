package op_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func convGradCase(name string, x, w tensor.Shape, bias bool, o op.ConvOpts) gradCase {
	shapes := []tensor.Shape{x, w}
	if bias {
		shapes = append(shapes, tensor.Shape{w[0]})
	}
	return gradCase{name: name, shapes: shapes, f: func(xs []*trace.Tensor) *trace.Tensor {
		var b *trace.Tensor
		if bias {
			b = xs[2]
		}
		return op.Conv2d(xs[0], xs[1], b, o)
	}}
}

func TestConvGradients(t *testing.T) {
	s2 := [2]int{2, 2}
	p1 := [2]int{1, 1}
	runGradCases(t, []gradCase{
		convGradCase("basic_bias", tensor.Shape{2, 3, 5, 6}, tensor.Shape{4, 3, 3, 3}, true, op.ConvOpts{}),
		convGradCase("stride2_pad1", tensor.Shape{2, 2, 7, 6}, tensor.Shape{3, 2, 3, 3}, true, op.ConvOpts{Stride: s2, Padding: p1}),
		convGradCase("dilation2_pad2_nobias", tensor.Shape{1, 2, 7, 7}, tensor.Shape{3, 2, 3, 3}, false, op.ConvOpts{Padding: s2, Dilation: s2}),
		convGradCase("groups2", tensor.Shape{2, 4, 5, 5}, tensor.Shape{6, 2, 3, 3}, true, op.ConvOpts{Groups: 2, Padding: p1}),
		convGradCase("depthwise", tensor.Shape{2, 3, 5, 5}, tensor.Shape{3, 1, 3, 3}, false, op.ConvOpts{Groups: 3, Padding: p1}),
		convGradCase("depthwise_multiplier_stride2", tensor.Shape{1, 2, 6, 6}, tensor.Shape{4, 1, 3, 3}, true, op.ConvOpts{Groups: 2, Stride: s2, Padding: p1}),
		convGradCase("nonsquare", tensor.Shape{1, 2, 7, 8}, tensor.Shape{3, 2, 3, 2}, true,
			op.ConvOpts{Stride: [2]int{2, 1}, Padding: [2]int{1, 0}, Dilation: [2]int{1, 2}}),
		convGradCase("pointwise", tensor.Shape{2, 4, 3, 5}, tensor.Shape{3, 4, 1, 1}, true, op.ConvOpts{}),
		convGradCase("pointwise_stride2", tensor.Shape{2, 3, 5, 5}, tensor.Shape{2, 3, 1, 1}, false, op.ConvOpts{Stride: s2}),
		convGradCase("pointwise_groups", tensor.Shape{1, 4, 3, 3}, tensor.Shape{6, 2, 1, 1}, false, op.ConvOpts{Groups: 2}),
		convGradCase("kernel_equals_padded_input", tensor.Shape{2, 2, 3, 4}, tensor.Shape{2, 2, 5, 4}, true, op.ConvOpts{Padding: [2]int{1, 0}}),
		convGradCase("padding_wider_than_stride", tensor.Shape{1, 1, 4, 4}, tensor.Shape{2, 1, 2, 2}, false, op.ConvOpts{Stride: [2]int{3, 3}, Padding: [2]int{2, 2}}),
		convGradCase("unbatched", tensor.Shape{2, 5, 5}, tensor.Shape{3, 2, 3, 3}, true, op.ConvOpts{Padding: p1}),
		{name: "conv_backward_input_double", shapes: []tensor.Shape{{2, 3, 3, 3}, {3, 2, 3, 3}}, f: func(xs []*trace.Tensor) *trace.Tensor {
			o := op.ConvOpts{Stride: s2, Padding: p1}.Normalized()
			return prim.Apply1(&prim.Conv2dBackwardInput{Opts: o, InputShape: tensor.Shape{2, 2, 6, 5}}, xs[0], xs[1])
		}},
		{name: "conv_backward_weight_double", shapes: []tensor.Shape{{2, 4, 3, 3}, {2, 4, 5, 5}}, f: func(xs []*trace.Tensor) *trace.Tensor {
			o := op.ConvOpts{Groups: 2, Padding: p1, Dilation: s2}.Normalized()
			return prim.Apply1(&prim.Conv2dBackwardWeight{Opts: o, WeightShape: tensor.Shape{4, 2, 3, 3}}, xs[0], xs[1])
		}},
	})
}

func poolGradCase(name string, x tensor.Shape, f func(x *trace.Tensor) *trace.Tensor) gradCase {
	return gradCase{name: name, shapes: []tensor.Shape{x}, f: un(f)}
}

func TestPoolGradients(t *testing.T) {
	k2, k3 := [2]int{2, 2}, [2]int{3, 3}
	s2, p1 := [2]int{2, 2}, [2]int{1, 1}
	maxp := func(o op.PoolOpts) func(x *trace.Tensor) *trace.Tensor {
		return func(x *trace.Tensor) *trace.Tensor { return op.MaxPool2d(x, o) }
	}
	avgp := func(o op.PoolOpts) func(x *trace.Tensor) *trace.Tensor {
		return func(x *trace.Tensor) *trace.Tensor { return op.AvgPool2d(x, o) }
	}
	adapt := func(h, w int) func(x *trace.Tensor) *trace.Tensor {
		return func(x *trace.Tensor) *trace.Tensor { return op.AdaptiveAvgPool2d(x, [2]int{h, w}) }
	}
	runGradCases(t, []gradCase{
		poolGradCase("max_k2", tensor.Shape{2, 2, 4, 6}, maxp(op.PoolOpts{Kernel: k2})),
		poolGradCase("max_k3_s2_p1", tensor.Shape{1, 2, 7, 6}, maxp(op.PoolOpts{Kernel: k3, Stride: s2, Padding: p1})),
		poolGradCase("max_overlapping_s1", tensor.Shape{1, 2, 5, 5}, maxp(op.PoolOpts{Kernel: k3, Stride: [2]int{1, 1}})),
		poolGradCase("max_ceil", tensor.Shape{1, 2, 7, 8}, maxp(op.PoolOpts{Kernel: k3, Stride: s2, CeilMode: true})),
		poolGradCase("max_dilation", tensor.Shape{1, 2, 8, 9}, maxp(op.PoolOpts{Kernel: k3, Stride: [2]int{1, 2}, Padding: p1, Dilation: s2})),
		poolGradCase("max_nonsquare", tensor.Shape{2, 1, 7, 6}, maxp(op.PoolOpts{Kernel: [2]int{3, 2}, Stride: [2]int{2, 1}, Padding: [2]int{1, 0}, CeilMode: true})),
		poolGradCase("max_unbatched", tensor.Shape{2, 4, 4}, maxp(op.PoolOpts{Kernel: k2})),
		poolGradCase("avg_k2", tensor.Shape{2, 2, 4, 6}, avgp(op.PoolOpts{Kernel: k2})),
		poolGradCase("avg_k3_s2_p1", tensor.Shape{1, 2, 7, 6}, avgp(op.PoolOpts{Kernel: k3, Stride: s2, Padding: p1})),
		poolGradCase("avg_exclude_pad", tensor.Shape{1, 2, 7, 6}, avgp(op.PoolOpts{Kernel: k3, Stride: s2, Padding: p1, ExcludePad: true})),
		poolGradCase("avg_ceil", tensor.Shape{1, 2, 8, 7}, avgp(op.PoolOpts{Kernel: k3, Stride: s2, CeilMode: true})),
		poolGradCase("avg_ceil_pad_exclude", tensor.Shape{1, 2, 6, 7}, avgp(op.PoolOpts{Kernel: k3, Stride: s2, Padding: p1, CeilMode: true, ExcludePad: true})),
		poolGradCase("avg_nonsquare", tensor.Shape{2, 1, 6, 7}, avgp(op.PoolOpts{Kernel: [2]int{3, 2}, Stride: [2]int{1, 2}, Padding: [2]int{1, 1}})),
		poolGradCase("avg_divisor_override", tensor.Shape{1, 2, 5, 5}, avgp(op.PoolOpts{Kernel: k2, Stride: [2]int{1, 1}, DivisorOverride: 3})),
		poolGradCase("adaptive_1x1", tensor.Shape{2, 3, 5, 4}, adapt(1, 1)),
		poolGradCase("adaptive_divisible", tensor.Shape{1, 2, 6, 4}, adapt(3, 2)),
		poolGradCase("adaptive_nondivisible", tensor.Shape{1, 2, 7, 5}, adapt(3, 4)),
		poolGradCase("adaptive_larger", tensor.Shape{1, 2, 3, 2}, adapt(5, 3)),
		{name: "avg_backward_double", shapes: []tensor.Shape{{1, 2, 4, 4}}, f: un(func(gy *trace.Tensor) *trace.Tensor {
			o := op.PoolOpts{Kernel: k3, Stride: s2, Padding: p1, CeilMode: true}
			return prim.Apply1(&prim.AvgPool2dBackward{Opts: o, InputShape: tensor.Shape{1, 2, 7, 6}}, gy)
		})},
		{name: "adaptive_backward_double", shapes: []tensor.Shape{{1, 2, 3, 4}}, f: un(func(gy *trace.Tensor) *trace.Tensor {
			return prim.Apply1(&prim.AdaptiveAvgPool2dBackward{InputShape: tensor.Shape{1, 2, 7, 5}}, gy)
		})},
	})
}

func TestUpsampleGradients(t *testing.T) {
	up := func(s int) func(x *trace.Tensor) *trace.Tensor {
		return func(x *trace.Tensor) *trace.Tensor { return op.UpsampleNearest(x, s) }
	}
	size := func(h, w int) func(x *trace.Tensor) *trace.Tensor {
		return func(x *trace.Tensor) *trace.Tensor { return op.UpsampleNearestSize(x, h, w) }
	}
	runGradCases(t, []gradCase{
		poolGradCase("nearest_x2", tensor.Shape{2, 2, 3, 4}, up(2)),
		poolGradCase("nearest_x3", tensor.Shape{1, 2, 3, 2}, up(3)),
		poolGradCase("nearest_x4", tensor.Shape{1, 1, 2, 3}, up(4)),
		poolGradCase("nearest_size_up", tensor.Shape{1, 2, 3, 4}, size(5, 7)),
		poolGradCase("nearest_size_down", tensor.Shape{1, 2, 7, 6}, size(3, 4)),
		{name: "nearest_backward_double", shapes: []tensor.Shape{{1, 2, 5, 7}}, f: un(func(gy *trace.Tensor) *trace.Tensor {
			return prim.Apply1(&prim.UpsampleNearest2dBackward{InputShape: tensor.Shape{1, 2, 3, 4}}, gy)
		})},
	})
}

func TestConvPoolShapeErrors(t *testing.T) {
	f32 := tensor.Float32
	cases := []struct {
		name string
		f    func(g *trace.Graph)
		want string
	}{
		{"conv_input_rank", func(g *trace.Graph) {
			op.Conv2d(g.Input("x", f32, tensor.Shape{3, 4}), g.Input("w", f32, tensor.Shape{2, 3, 3, 3}), nil, op.ConvOpts{})
		}, "expected input with 4 dims [N, C, H, W]"},
		{"conv_weight_rank", func(g *trace.Graph) {
			op.Conv2d(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), g.Input("w", f32, tensor.Shape{2, 3, 3}), nil, op.ConvOpts{})
		}, "expected weight with 4 dims"},
		{"conv_channels", func(g *trace.Graph) {
			op.Conv2d(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), g.Input("w", f32, tensor.Shape{4, 3, 3, 3}), nil, op.ConvOpts{Groups: 2})
		}, "expected input channels 3 to equal weight in_channels*groups = 6"},
		{"conv_out_groups", func(g *trace.Graph) {
			op.Conv2d(g.Input("x", f32, tensor.Shape{1, 4, 4, 4}), g.Input("w", f32, tensor.Shape{3, 2, 3, 3}), nil, op.ConvOpts{Groups: 2})
		}, "expected weight out_channels 3 to be divisible by groups 2"},
		{"conv_kernel_too_big", func(g *trace.Graph) {
			op.Conv2d(g.Input("x", f32, tensor.Shape{1, 3, 2, 2}), g.Input("w", f32, tensor.Shape{4, 3, 3, 3}), nil, op.ConvOpts{})
		}, "kernel size can't be greater than padded input size: padded input 2x2, dilated kernel 3x3"},
		{"conv_dilated_kernel_too_big", func(g *trace.Graph) {
			op.Conv2d(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), g.Input("w", f32, tensor.Shape{4, 3, 3, 3}), nil, op.ConvOpts{Dilation: [2]int{2, 2}})
		}, "padded input 4x4, dilated kernel 5x5"},
		{"conv_bias", func(g *trace.Graph) {
			op.Conv2d(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), g.Input("w", f32, tensor.Shape{4, 3, 3, 3}), g.Input("b", f32, tensor.Shape{3}), op.ConvOpts{})
		}, "expected bias of shape [4], got [3]"},
		{"conv_stride", func(g *trace.Graph) {
			op.Conv2d(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), g.Input("w", f32, tensor.Shape{4, 3, 3, 3}), nil, op.ConvOpts{Stride: [2]int{-1, 1}})
		}, "stride should be greater than zero"},
		{"conv_dtype", func(g *trace.Graph) {
			op.Conv2d(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), g.Input("w", tensor.Float64, tensor.Shape{4, 3, 3, 3}), nil, op.ConvOpts{})
		}, "dtype mismatch"},
		{"pool_pad", func(g *trace.Graph) {
			op.MaxPool2d(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), op.PoolOpts{Kernel: [2]int{2, 2}, Padding: [2]int{2, 2}})
		}, "pad should be smaller than or equal to half of kernel size"},
		{"pool_too_small", func(g *trace.Graph) {
			op.AvgPool2d(g.Input("x", f32, tensor.Shape{1, 3, 2, 2}), op.PoolOpts{Kernel: [2]int{3, 3}})
		}, "output size is too small"},
		{"pool_rank", func(g *trace.Graph) {
			op.MaxPool2d(g.Input("x", f32, tensor.Shape{4, 4}), op.PoolOpts{Kernel: [2]int{2, 2}})
		}, "expected input with 4 dims [N, C, H, W]"},
		{"avg_dilation", func(g *trace.Graph) {
			op.AvgPool2d(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), op.PoolOpts{Kernel: [2]int{2, 2}, Dilation: [2]int{2, 2}})
		}, "avg_pool2d has no dilation"},
		{"max_divisor", func(g *trace.Graph) {
			op.MaxPool2d(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), op.PoolOpts{Kernel: [2]int{2, 2}, DivisorOverride: 2})
		}, "not max_pool2d's"},
		{"adaptive_size", func(g *trace.Graph) {
			op.AdaptiveAvgPool2d(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), [2]int{0, 1})
		}, "output size must be positive"},
		{"upsample_scale", func(g *trace.Graph) {
			op.UpsampleNearest(g.Input("x", f32, tensor.Shape{1, 3, 4, 4}), 0)
		}, "scale factor must be a positive integer"},
		{"upsample_rank", func(g *trace.Graph) {
			op.UpsampleNearestSize(g.Input("x", f32, tensor.Shape{3, 4, 4}), 8, 8)
		}, "expected input with 4 dims"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := trace.New()
			err := trace.Capture(func() { g.WithModule("net", func() { c.f(g) }) })
			if err == nil {
				t.Fatal("expected a shape error")
			}
			if !errors.Is(err, trace.ErrShape) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "module net: ") {
				t.Fatalf("got %q, want a shape error in module net containing %q", err, c.want)
			}
		})
	}
}

func TestConvPoolShapes(t *testing.T) {
	g := trace.New()
	f32 := tensor.Float32
	cases := []struct {
		y    *trace.Tensor
		want tensor.Shape
	}{
		// ResNet stem: conv 7x7/2 pad 3 then max pool 3x3/2 pad 1.
		{op.Conv2d(g.Input("a", f32, tensor.Shape{2, 3, 224, 224}), g.Input("wa", f32, tensor.Shape{64, 3, 7, 7}), nil,
			op.ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{3, 3}}), tensor.Shape{2, 64, 112, 112}},
		{op.MaxPool2d(g.Input("b", f32, tensor.Shape{2, 64, 112, 112}), op.PoolOpts{Kernel: [2]int{3, 3}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}),
			tensor.Shape{2, 64, 56, 56}},
		{op.MaxPool2d(g.Input("c", f32, tensor.Shape{1, 1, 5, 5}), op.PoolOpts{Kernel: [2]int{2, 2}, CeilMode: true}), tensor.Shape{1, 1, 3, 3}},
		// ceil mode must not start a window in the right padding.
		{op.MaxPool2d(g.Input("d", f32, tensor.Shape{1, 1, 5, 5}), op.PoolOpts{Kernel: [2]int{2, 2}, Padding: [2]int{1, 1}, CeilMode: true}), tensor.Shape{1, 1, 3, 3}},
		{op.AdaptiveAvgPool2d(g.Input("e", f32, tensor.Shape{2, 512, 7, 7}), [2]int{1, 1}), tensor.Shape{2, 512, 1, 1}},
		{op.UpsampleNearest(g.Input("f", f32, tensor.Shape{1, 64, 32, 24}), 2), tensor.Shape{1, 64, 64, 48}},
		{op.Conv2d(g.Input("h", f32, tensor.Shape{3, 9, 9}), g.Input("wh", f32, tensor.Shape{4, 3, 3, 3}), nil, op.ConvOpts{}), tensor.Shape{4, 7, 7}},
	}
	for i, c := range cases {
		if !c.y.Shape().Equal(c.want) {
			t.Errorf("case %d: shape %v, want %v", i, c.y.Shape(), c.want)
		}
	}
	_, idx := op.MaxPool2dWithIndices(g.Input("i", f32, tensor.Shape{1, 2, 4, 4}), op.PoolOpts{Kernel: [2]int{2, 2}})
	if idx.DType() != tensor.Int64 || !idx.Shape().Equal(tensor.Shape{1, 2, 2, 2}) {
		t.Errorf("indices %v, want int64[1, 2, 2, 2]", idx.Meta)
	}
}
