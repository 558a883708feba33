package transform_test

import (
	"testing"

	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/transform"
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
