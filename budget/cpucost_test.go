package budget_test

import (
	"context"
	"strings"
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
		if row != c.row || cm.FLOPS != c.flops || (cm.BF16FLOPS > cm.FLOPS) != c.halfFaster {
			t.Errorf("%s: row %q FLOPS %g bf16 %g; want row %q FLOPS %g, bf16 faster %v", c.name, row, cm.FLOPS, cm.BF16FLOPS, c.row, c.flops, c.halfFaster)
		}
		// Memory no slower than DefaultCost's where the row measured its
		// own (cpu.Throughput.MemoryRate).
		if cm.Bandwidth < budget.DefaultCost.Bandwidth {
			t.Errorf("%s: bandwidth %g below the default's", c.name, cm.Bandwidth)
		}
		if c.row == "avx2" && cm != budget.DefaultCost {
			t.Errorf("%s: %+v, want DefaultCost", c.name, cm)
		}
	}
}

// The planner picks the precision the CPU's table makes faster: fp32 where
// 16-bit products are not faster (autocast only adds casts where bf16 is
// emulated), bf16-mixed where they are; the plan says which it is.
func TestPrecisionFollowsCPUCost(t *testing.T) {
	spec, err := zoo.Lookup("mlp-1024") // matmuls: where 16-bit products pay
	if err != nil {
		t.Fatal(err)
	}
	p := budget.Problem{Build: testkit.Build(spec), Example: spec.Example, Batch: 128, Budget: 1 << 40, Precisions: mixed, Compress: keep,
		NewOptimizer: func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }}
	pick := func(c budget.CostModel) (transform.Precision, string) {
		p.Cost = c
		res, err := budget.Fit(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		res.Print(&b, p.Budget)
		return res.Best.Precision, b.String()
	}
	if got, _ := pick(budget.DefaultCost); got != transform.FP32 {
		t.Errorf("DefaultCost: %v, want fp32", got)
	}
	fast := budget.DefaultCost
	fast.BF16FLOPS = 4 * fast.FLOPS
	got, plan := pick(fast)
	if got != transform.BF16Mixed {
		t.Errorf("16-bit products 4 times faster: %v, want bf16-mixed", got)
	}
	// The plan says why a low precision is cheaper, not that it is emulated.
	if !strings.Contains(plan, "bf16 products native on this CPU") || strings.Contains(plan, "emulated") {
		t.Errorf("plan chosen for a native bf16 kernel reads:\n%s", plan)
	}
	// Forced to bf16-mixed where bf16 is emulated, it says so.
	p.Precisions = []transform.Precision{transform.BF16Mixed}
	if _, plan := pick(budget.DefaultCost); !strings.Contains(plan, "emulated on the cpu") {
		t.Errorf("plan in emulated bf16-mixed reads:\n%s", plan)
	}
}

// Which precision is cheaper follows the CPU, with its features injected:
// wherever bf16 is emulated (AVX2; AVX-512 with or without AVX512-BF16
// while no native kernel runs) every low precision is estimated slower
// than fp32 (the products run at the float32 rate and autocast adds
// conversions), so the planner keeps fp32. Where a native bf16 kernel
// runs, bf16 steps are estimated faster than emulated ones, and on the
// matmul model faster than fp32, so the planner chooses bf16-mixed there;
// fp16-mixed (no native fp16 kernel) is never faster than fp32. (On the
// ResNet bf16-mixed does not beat fp32 even then: autocast's casts of
// activations, and the float32 Winograd convolutions, outweigh twice the
// products per instruction.)
func TestPrecisionCostByCPU(t *testing.T) {
	avx2 := cpuid.Features{AVX2: true, FMA: true, F16C: true}
	skx := avx2
	skx.AVX512F, skx.AVX512BW, skx.AVX512VL = true, true, true
	cpl := skx
	cpl.AVX512BF16 = true
	all := []transform.Precision{transform.FP32, transform.BF16Mixed, transform.FP16Mixed, transform.BF16True}
	for _, m := range []struct {
		name          string
		batch         int
		nativeCheaper bool // bf16-mixed beats fp32 with a native bf16 kernel
	}{{"mlp-1024", 128, true}, {"resnet18-64", 8, false}} {
		spec, err := zoo.Lookup(m.name)
		if err != nil {
			t.Fatal(err)
		}
		p := budget.Problem{Build: testkit.Build(spec), Example: spec.Example, Batch: m.batch, Budget: 1 << 40, Compress: keep,
			NewOptimizer: func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }}
		var emulated map[transform.Precision]float64 // on the same CPU, AVX512-BF16 unused
		for _, c := range []struct {
			name   string
			f      cpuid.Features
			k      cpu.Capabilities
			native bool
		}{
			{"zen3", avx2, cpu.Capabilities{}, false},
			{"skylake-x", skx, cpu.Capabilities{AVX512: true}, false},
			{"cooper lake, bf16 emulated", cpl, cpu.Capabilities{AVX512: true}, false},
			{"cooper lake, native bf16 kernel", cpl, cpu.Capabilities{AVX512: true, NativeBF16: true}, true},
		} {
			p.Cost, _ = budget.CPUCost(c.f, c.k)
			step := map[transform.Precision]float64{}
			for _, prec := range all {
				p.Precisions = []transform.Precision{prec}
				res, err := budget.Fit(context.Background(), p)
				if err != nil {
					t.Fatal(err)
				}
				step[prec] = res.Best.Time
			}
			t.Logf("%s on %s: fp32 %.4g s, bf16-mixed %.4g, fp16-mixed %.4g, bf16-true %.4g", m.name, c.name,
				step[transform.FP32], step[transform.BF16Mixed], step[transform.FP16Mixed], step[transform.BF16True])
			fp32 := step[transform.FP32]
			for _, prec := range all[1:] {
				switch {
				case !c.native && step[prec] <= fp32:
					t.Errorf("%s on %s (bf16 emulated): %v estimated %.4g s, fp32 %.4g; want slower", m.name, c.name, prec, step[prec], fp32)
				case c.native && prec != transform.FP16Mixed && step[prec] >= emulated[prec]:
					t.Errorf("%s on %s: %v estimated %.4g s, emulated %.4g; want faster", m.name, c.name, prec, step[prec], emulated[prec])
				case c.native && prec == transform.FP16Mixed && step[prec] <= fp32:
					t.Errorf("%s on %s: fp16-mixed estimated %.4g s, fp32 %.4g; want slower (no native fp16)", m.name, c.name, step[prec], fp32)
				}
			}
			if c.native && (step[transform.BF16Mixed] < fp32) != m.nativeCheaper {
				t.Errorf("%s on %s: bf16-mixed %.4g s, fp32 %.4g; want bf16-mixed cheaper %v", m.name, c.name, step[transform.BF16Mixed], fp32, m.nativeCheaper)
			}
			emulated = step
			p.Precisions = []transform.Precision{transform.FP32, transform.BF16Mixed}
			res, err := budget.Fit(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if want := c.native && m.nativeCheaper; (res.Best.Precision == transform.BF16Mixed) != want {
				t.Errorf("%s on %s: chose %v; want bf16-mixed %v", m.name, c.name, res.Best.Precision, want)
			}
		}
	}
}
