package transform_test

import (
	"testing"

	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/prim"
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
	} {
		if testing.Short() && c.model == "gpt-shakespeare-char" {
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
			mixed := 0
			for _, n := range got.prog.Nodes {
				if mm, ok := n.Op.(*prim.MatMul); ok && mm.Mixed {
					mixed++
				}
			}
			if mixed == 0 {
				t.Errorf("%s: no matmul reads 16-bit operands", what)
			}
			if got.plan.Activations > base.plan.Activations {
				t.Errorf("%s: activations %d with ReadLow, %d without", what, got.plan.Activations, base.plan.Activations)
			}
			t.Logf("%s: %d mixed matmuls, activations %d -> %d bytes", what, mixed, base.plan.Activations, got.plan.Activations)
		}
	}
}
