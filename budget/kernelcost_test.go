package budget_test

import (
	"math"
	"testing"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/backend/ref"
	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/internal/env"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/transform"
)

// A node's time is charged the arithmetic of the kernel that runs it, as
// the backend reports it: a Winograd-eligible convolution at Winograd's
// count on the cpu, at its declared (direct) count without a backend's
// account; under a native bf16 kernel, the cheaper of the direct count at
// the bf16 rate and Winograd's (float32 only, on the widened values) at
// the float32 rate, as the cpu backend chooses; bf16
// conversions at the emulation's measured rate, or at memory speed where a
// native bf16 kernel converts with instructions.
func TestNodeCostFromBackend(t *testing.T) {
	if on, err := env.Bool(env.Winograd, true); err != nil || !on {
		t.Skip("Winograd is off ($" + env.Winograd + ")")
	}
	g := trace.New()
	x := g.Input("x", tensor.Float32, tensor.Shape{2, 64, 32, 32})
	w := g.Input("w", tensor.Float32, tensor.Shape{64, 64, 3, 3})
	conv := g.Apply1(&prim.Conv2dOp{Opts: prim.ConvOpts{Padding: [2]int{1, 1}}.Normalized()}, x, w).Node
	// The convolution with a ReLU fused after it (transform.Fuse's node).
	y := conv.Outputs[0]
	fused := g.Apply1(&prim.Fused{Producer: conv.Op, NProd: 2, NProdOut: 1, Elems: y.Shape().NumElements(),
		Prog: []prim.FusedInstr{{Op: &prim.Unary{Kind: prim.ReLUKind}, Args: []int{0}}},
		Outs: []prim.FusedOut{{Value: 1, Shape: y.Shape()}}}, x, w).Node
	relu := 2.0 * float64(y.Shape().NumElements())
	v := g.Input("v", tensor.Float32, tensor.Shape{1 << 20})
	cast := g.Apply1(&prim.Cast{To: tensor.BFloat16}, v).Node
	quant := g.Apply(&prim.Quantize{Axis: -1}, v)[0].Node
	// rrdbnet's 64→32 weight gradient at batch 2: no Winograd kernel for
	// it, the native one under bf16-mixed (cpu.TestConvNativeCheaper).
	dy := g.Input("dy", tensor.Float32, tensor.Shape{2, 32, 32, 32})
	wgrad := g.Apply1(&prim.Conv2dBackwardWeight{Opts: prim.ConvOpts{Padding: [2]int{1, 1}}.Normalized(), WeightShape: tensor.Shape{32, 64, 3, 3}, Mixed: true}, dy, x).Node
	const wgradFlops = 2.0 * (2 * 32 * 32 * 32) * (64 * 9)

	d := budget.DefaultCost
	native := d
	native.BF16FLOPS = 2 * d.FLOPS
	fast := d // a native kernel that would beat Winograd
	fast.BF16FLOPS = 10 * d.FLOPS
	slowConv := native // native convolutions slower than the products
	slowConv.BF16ConvFLOPS = 1.5 * d.FLOPS
	const (
		direct = 2.0 * (2 * 64 * 32 * 32) * (64 * 9)
		// 128 tiles: products, input, output and weight transforms
		// (cpu.TestWinogradFlops).
		winograd = 2*36*64*64*128 + 12*19*64*128 + 10*13*64*128 + 9*17*64*64
		elems    = 1 << 20
	)
	for _, c := range []struct {
		name string
		cm   budget.CostModel
		n    *trace.Node
		want float64 // seconds, without the per-node overhead
	}{
		{"conv, declarations alone", d, conv, direct / d.FLOPS},
		{"conv on the cpu: Winograd", d.On(cpu.Backend()), conv, winograd / d.FLOPS},
		{"conv on the cpu under bf16-mixed, emulated", d.On(cpu.Backend()).ForPrecision(transform.BF16Mixed), conv, winograd / d.FLOPS},
		{"conv on the reference backend (no account)", d.On(ref.New()), conv, direct / d.FLOPS},
		{"conv on the cpu, fp32, native bf16 CPU", native.On(cpu.Backend()), conv, winograd / d.FLOPS},
		{"conv on the cpu under bf16-mixed, native bf16 kernel", native.On(cpu.Backend()).ForPrecision(transform.BF16Mixed), conv, winograd / d.FLOPS},
		{"conv on the cpu under bf16-mixed, faster native bf16 kernel (the cpu runs Winograd)", fast.On(cpu.Backend()).ForPrecision(transform.BF16Mixed), conv, winograd / d.FLOPS},
		{"conv under bf16-mixed, faster native bf16 kernel, a backend that does not say which runs", fast.On(winogradOnly{cpu.Backend()}).ForPrecision(transform.BF16Mixed), conv, direct / fast.BF16FLOPS},
		{"weight gradient on the cpu under bf16-mixed, native", native.On(cpu.Backend()).ForPrecision(transform.BF16Mixed), wgrad, wgradFlops / native.BF16FLOPS},
		{"weight gradient on the cpu under bf16-mixed, native at the convolution rate", slowConv.On(cpu.Backend()).ForPrecision(transform.BF16Mixed), wgrad, wgradFlops / slowConv.BF16ConvFLOPS},
		{"weight gradient on the cpu, fp32", native.On(cpu.Backend()), wgrad, wgradFlops / d.FLOPS},
		{"conv on the cpu under fp16-mixed, native bf16 CPU", native.On(cpu.Backend()).ForPrecision(transform.FP16Mixed), conv, winograd / d.FLOPS},
		{"fused conv+relu on the cpu", d.On(cpu.Backend()), fused, (winograd + relu) / d.FLOPS},
		{"fused conv+relu, declarations alone", d, fused, (direct + relu) / d.FLOPS},
		{"fused conv+relu under bf16-mixed, native bf16 kernel", native.On(cpu.Backend()).ForPrecision(transform.BF16Mixed), fused, (winograd + relu) / d.FLOPS},
		{"fused conv+relu under bf16-mixed, faster native bf16 kernel (the cpu runs Winograd)", fast.On(cpu.Backend()).ForPrecision(transform.BF16Mixed), fused, (winograd + relu) / d.FLOPS},
		{"fused conv+relu under bf16-mixed, faster native bf16 kernel, a backend that does not say", fast.On(winogradOnly{cpu.Backend()}).ForPrecision(transform.BF16Mixed), fused, (direct + relu) / fast.BF16FLOPS},
		{"cast to bf16, emulated", d, cast, elems / d.Convert},
		{"cast to bf16, native", native, cast, 6 * elems / d.Bandwidth},
		{"int8 quantization, native bf16 CPU", native, quant, 3 * elems / d.Convert},
	} {
		got := c.cm.Node(c.n) - c.cm.Overhead
		if math.Abs(got-c.want) > 1e-9*c.want {
			t.Errorf("%s: %.6g s, want %.6g", c.name, got, c.want)
		}
	}
}

// winogradOnly is the cpu backend as a Coster that does not say which of
// its kernels run natively in bf16 (no backend.LowCoster).
type winogradOnly struct{ backend.Backend }

func (b winogradOnly) Flops(o trace.Op, in, out []trace.Meta) (float64, bool) {
	return b.Backend.(backend.Coster).Flops(o, in, out)
}
