package transform_test

import (
	"math"
	"testing"

	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// Matmuls reading 16-bit operands in place (ReadLow) change memory, never
// numbers: loss and every gradient are bit-identical to the emulation's
// float32 copies, in every low-precision mode, and the planned peak does not
// grow. The native bf16 kernel (AVX512-BF16 CPUs) is off here: it sums in
// its instruction's order, which its own tests check (cpu/internal/gemm's
// bf16 tests, cpu's TestMixedMatMulMatchesCast).
func TestReadLowIsExact(t *testing.T) {
	defer cpu.SetNativeBF16(cpu.SetNativeBF16(false))
	for _, c := range []struct {
		model string
		batch int
		remat transform.Policy
	}{
		{"mlp", 8, nil},
		{"cnn", 8, nil},
		{"mlp", 8, transform.CheapOps},
		{"gpt-shakespeare-char", 1, nil},
		{"gpt-bytes", 1, nil}, // fused attention
	} {
		if testing.Short() && (c.model == "gpt-shakespeare-char" || c.model == "gpt-bytes") {
			continue
		}
		spec := mustSpec(t, c.model)
		for _, p := range []transform.Precision{transform.BF16Mixed, transform.FP16Mixed, transform.BF16True} {
			s := setup{precision: p, remat: c.remat}
			old := transform.SetReadLow(false)
			base := step(t, spec, c.batch, s)
			transform.SetReadLow(true)
			got := step(t, spec, c.batch, s)
			transform.SetReadLow(old)
			what := c.model + " " + p.String()
			sameGrads(t, what, got, base)
			mixed, f32mm, lowAttn, attn := 0, 0, 0, 0
			for _, n := range got.prog.Nodes {
				if mm, ok := n.Op.(*prim.MatMul); ok && mm.Mixed {
					mixed++
				}
				if _, ok := n.Op.(*prim.MatMul); ok && n.Outputs[0].DType() == tensor.Float32 && (n.Inputs[0].DType() == tensor.Float32 || n.Inputs[1].DType() == tensor.Float32) {
					f32mm++
				}
				switch n.Op.(type) {
				case *prim.AttentionOp, *prim.AttentionBackward:
					attn++
					if n.Inputs[1].DType() == tensor.BFloat16 {
						lowAttn++
					}
				}
			}
			if mixed == 0 {
				t.Errorf("%s: no matmul reads 16-bit operands", what)
			}
			// Under bf16-mixed every product of a GPT with fused
			// attention reads bfloat16 operands: attention's output
			// reaches its projection as bfloat16 (its permutation moved
			// before the widening), and attention reads its operands (and
			// its backward its output gradient) in bfloat16.
			if p == transform.BF16Mixed && attn > 0 && (f32mm > 0 || lowAttn != attn) {
				t.Errorf("%s: %d matmuls read a float32 operand, %d of %d attention ops read bfloat16", what, f32mm, lowAttn, attn)
			}
			if got.plan.Activations > base.plan.Activations {
				t.Errorf("%s: activations %d with ReadLow, %d without", what, got.plan.Activations, base.plan.Activations)
			}
			t.Logf("%s: %d mixed matmuls, activations %d -> %d bytes", what, mixed, base.plan.Activations, got.plan.Activations)
		}
	}
}

// Batch norms reading their bfloat16 input in place (forward and backward,
// widened as loaded) change nothing but memory and passes: a ResNet's
// bf16-mixed step gives the loss and every gradient bit for bit, its batch
// norms read bfloat16, casts go and the planned activations do not grow.
func TestBatchNormReadsLowIsExact(t *testing.T) {
	spec := mustSpec(t, "resnet18-64")
	s := setup{precision: transform.BF16Mixed}
	old := transform.SetNormReadsLow(false)
	base := step(t, spec, 2, s)
	transform.SetNormReadsLow(true)
	got := step(t, spec, 2, s)
	transform.SetNormReadsLow(old)
	sameGrads(t, "resnet18-64 bf16-mixed", got, base)
	count := func(o outcome) (mixedFwd, mixedBwd, casts int) {
		for _, n := range o.prog.Nodes {
			op := n.Op
			if f, ok := op.(*prim.Fused); ok {
				op = f.Producer // a batch norm with a fused epilogue
			}
			switch op := op.(type) {
			case *prim.BatchNormOp:
				if op.Mixed {
					mixedFwd++
				}
			case *prim.BatchNormBackward:
				if op.Mixed {
					mixedBwd++
				}
			case *prim.Cast:
				casts++
			}
		}
		return
	}
	f, b, casts := count(got)
	_, _, baseCasts := count(base)
	if f == 0 || b == 0 || casts >= baseCasts {
		t.Errorf("%d forward and %d backward batch norms read bfloat16; %d casts against %d", f, b, casts, baseCasts)
	}
	if got.plan.Activations > base.plan.Activations {
		t.Errorf("activations %d with batch norms reading bfloat16, %d without", got.plan.Activations, base.plan.Activations)
	}
	t.Logf("%d+%d mixed batch norms, casts %d -> %d, activations %d -> %d bytes", f, b, baseCasts, casts, base.plan.Activations, got.plan.Activations)
}

// Under bf16-mixed a bottleneck ResNet's convolutions (forward, input and
// weight gradient) read bfloat16 input and weight where the backend
// multiplies them natively: the input's bf16 copy saved for the backward,
// the weight cast rather than rounded, the gradient's and the saved
// input's bf16 values. Handed them with the native products off (the
// pointwise ones, or all), the kernels widen them: the float32
// convolution of the same values, the loss and every gradient bit for
// bit, and for the pointwise ones no more activations. Natively the
// products' summation order differs: they differ from the widened step by
// no more than the widened step differs from the float32 one, and plan no
// more activations. Without native bf16 products ("auto" on such a CPU)
// they keep float32 operands.
func TestPointwiseConvReadsLow(t *testing.T) {
	spec := zoo.Spec{Name: "bottleneck", Loss: zoo.CrossEntropyLoss,
		New: func(b nn.Builder) train.Model {
			return zoo.NewResNet(b, zoo.ResNetConfig{Block: zoo.Bottleneck, Layers: [4]int{1, 1, 1, 1}, NumClasses: 7})
		},
		Example: func(n int) (trace.Meta, trace.Meta) {
			return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 3, 32, 32}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}
		}}
	s := setup{precision: transform.BF16Mixed}
	run := func(pointwise string, native bool, with ...setup) outcome {
		defer transform.SetConvPointwiseLow(transform.SetConvPointwiseLow(pointwise))
		defer cpu.SetNativeBF16(cpu.SetNativeBF16(native))
		if len(with) > 0 {
			return step(t, spec, 2, with[0])
		}
		return step(t, spec, 2, s)
	}
	count := func(o outcome) map[string]int {
		low := map[string]int{}
		for _, n := range o.prog.Nodes {
			op := n.Op
			if f, ok := op.(*prim.Fused); ok {
				op = f.Producer // a convolution with a fused epilogue
			}
			switch op.(type) {
			case *prim.Conv2dOp, *prim.Conv2dBackwardInput, *prim.Conv2dBackwardWeight:
				if n.Inputs[0].DType() == tensor.BFloat16 && n.Inputs[1].DType() == tensor.BFloat16 {
					low[op.Name()]++
				}
			}
		}
		return low
	}
	base := run("off", false)
	if low := count(run("auto", false)); len(low) != 0 {
		t.Errorf("without native bf16 products, convolutions read bfloat16 operands: %v", low)
	}
	got := run("on", false)
	sameGrads(t, "bottleneck bf16-mixed, widened", got, base)
	low := count(got)
	// 4 blocks × 3 convolutions, 2 of them pointwise, and 1 downsample each.
	for _, name := range []string{"conv2d", "conv2d_backward_input", "conv2d_backward_weight"} {
		if low[name] < 8 {
			t.Errorf("%d %s nodes read bfloat16 input and weight, want the 8 pointwise ones at least (%v)", low[name], name, low)
		}
	}
	// The bf16 copies read earlier move the schedule a little (16 KiB
	// here); on ResNet-152 the step's training memory fell 40 MiB.
	if got.plan.Activations > base.plan.Activations+base.plan.Activations/100 {
		t.Errorf("activations %d with bf16 pointwise operands, %d without", got.plan.Activations, base.plan.Activations)
	}
	if !cpu.Caps().NativeBF16 {
		t.Logf("no native bf16 products on this CPU: the native comparison is not run")
		return
	}
	all := run("all", false)
	sameGrads(t, "bottleneck bf16-mixed, every convolution's operands bf16, widened", all, base)
	native := run("auto", true)
	auto := count(native)
	for name, n := range low {
		if auto[name] < n {
			t.Errorf("with native bf16 products, %v read bfloat16 operands, want at least the pointwise %v", auto, low)
		}
	}
	if native.plan.Activations > base.plan.Activations+base.plan.Activations/100 {
		t.Errorf("activations %d with native bf16 convolutions, %d without", native.plan.Activations, base.plan.Activations)
	}
	// The yardstick is bf16's own noise: the widened step against the
	// float32 one. (At batch 2 the last stage's batch norms see 2 values
	// a channel, so gradients far from the loss move a lot with any
	// rounding: tens of percent between bf16 and float32.)
	fp32 := run("off", false, setup{})
	if d, noise := math.Abs(native.loss-base.loss), math.Abs(base.loss-fp32.loss); d > 1.5*noise+1e-5*math.Abs(base.loss) {
		t.Errorf("native loss %v, widened %v, float32 %v", native.loss, base.loss, fp32.loss)
	}
	rel := func(a, b []float32) float64 {
		var num, den float64
		for i, v := range b {
			d := float64(a[i] - v)
			num += d * d
			den += float64(v) * float64(v)
		}
		return math.Sqrt(num / max(den, 1e-30))
	}
	worst, at := 0.0, ""
	for _, name := range base.names {
		d, noise := rel(native.grads[name], base.grads[name]), rel(base.grads[name], fp32.grads[name])
		if d > 1.5*noise+0.01 {
			t.Errorf("%s: native gradient off by %.3g relative (rms) from the widened one, which is %.3g from float32's", name, d, noise)
		}
		if d/max(noise, 1e-30) > worst {
			worst, at = d/max(noise, 1e-30), name
		}
	}
	t.Logf("native products: %v read bf16 operands; worst gradient %s, %.2g× bf16's own error; activations %d -> %d bytes", auto, at, worst, base.plan.Activations, native.plan.Activations)
	t.Logf("bf16 operands: %v; activations %d -> %d bytes", low, base.plan.Activations, got.plan.Activations)
}
