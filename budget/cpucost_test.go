package budget_test

import (
	"context"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/internal/cpuid"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// The per-CPU throughput table: an AVX2 machine is DefaultCost itself (so
// no plan changes there); AVX-512 kernels are faster in float32; 16-bit
// operands are cheaper than float32 only where a native bf16 kernel runs,
// which AVX512-BF16 alone does not make so.
func TestCPUCost(t *testing.T) {
	avx2 := cpuid.Features{AVX2: true, FMA: true, F16C: true}
	skx := avx2
	skx.AVX512F, skx.AVX512BW, skx.AVX512VL = true, true, true
	cpl := skx
	cpl.AVX512BF16 = true
	for _, c := range []struct {
		name       string
		f          cpuid.Features
		k          cpu.Capabilities
		row        string
		halfFaster bool
		flops      float64
	}{
		{"zen3", avx2, cpu.Capabilities{}, "avx2", false, budget.DefaultCost.FLOPS},
		{"skylake-x", skx, cpu.Capabilities{AVX512: true}, "avx512", false, 1.7 * budget.DefaultCost.FLOPS},
		{"avx512 forced off (HEADROOM_SGEMM_KERNEL=avx2)", skx, cpu.Capabilities{}, "avx2", false, budget.DefaultCost.FLOPS},
		{"cooper lake, bf16 widened", cpl, cpu.Capabilities{AVX512: true}, "avx512", false, 1.7 * budget.DefaultCost.FLOPS},
		{"cooper lake, native bf16 kernel", cpl, cpu.Capabilities{AVX512: true, NativeBF16: true}, "avx512-bf16 (native bf16 kernel)", true, 1.7 * budget.DefaultCost.FLOPS},
		{"no vector extensions", cpuid.Features{}, cpu.Capabilities{}, "portable", false, 0.1 * budget.DefaultCost.FLOPS},
	} {
		cm, row := budget.CPUCost(c.f, c.k)
		if row != c.row || cm.FLOPS != c.flops || (cm.HalfFLOPS > cm.FLOPS) != c.halfFaster {
			t.Errorf("%s: row %q FLOPS %g half %g; want row %q FLOPS %g, half faster %v", c.name, row, cm.FLOPS, cm.HalfFLOPS, c.row, c.flops, c.halfFaster)
		}
		if c.row == "avx2" && cm != budget.DefaultCost {
			t.Errorf("%s: %+v, want DefaultCost", c.name, cm)
		}
	}
}

// The planner picks the precision the CPU's table makes faster: fp32 where
// 16-bit products are not faster (every CPU today: autocast only adds
// casts), bf16-mixed where they are.
func TestPrecisionFollowsCPUCost(t *testing.T) {
	spec, err := zoo.Lookup("mlp-1024") // matmuls: where 16-bit products pay
	if err != nil {
		t.Fatal(err)
	}
	p := budget.Problem{Build: testkit.Build(spec), Example: spec.Example, Batch: 128, Budget: 1 << 40, Precisions: mixed, Compress: keep,
		NewOptimizer: func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }}
	pick := func(c budget.CostModel) transform.Precision {
		p.Cost = c
		res, err := budget.Fit(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		return res.Best.Precision
	}
	if got := pick(budget.DefaultCost); got != transform.FP32 {
		t.Errorf("DefaultCost: %v, want fp32", got)
	}
	fast := budget.DefaultCost
	fast.HalfFLOPS = 4 * fast.FLOPS
	if got := pick(fast); got != transform.BF16Mixed {
		t.Errorf("16-bit products 4 times faster: %v, want bf16-mixed", got)
	}
}
