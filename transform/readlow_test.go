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
