package budget

import (
	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/internal/cpuid"
)

// CPUCost is the cost model of headroom's cpu kernels on a CPU with
// features f running kernel families k: DefaultCost with the compute
// rates the cpu backend gives for them (cpu.ThroughputOf: float32 by
// vector width; bf16 products at the float32 rate and conversions at the
// emulation's rate wherever bf16 is emulated, both faster only where a
// native bf16 kernel runs, native convolutions at their own measured
// rate; the memory bandwidth where the row's was measured,
// cpu.Throughput.MemoryRate), and the name of the row. On an AVX2
// machine it is DefaultCost.
func CPUCost(f cpuid.Features, k cpu.Capabilities) (CostModel, string) {
	r := cpu.ThroughputOf(f, k)
	c := DefaultCost
	c.FLOPS = DefaultCost.FLOPS * r.FLOPS
	c.Bandwidth = DefaultCost.Bandwidth * r.MemoryRate()
	if r.BF16 != r.FLOPS {
		c.BF16FLOPS = DefaultCost.FLOPS * r.BF16
		if v := r.ConvBF16(); v != r.BF16 {
			c.BF16ConvFLOPS = DefaultCost.FLOPS * v
		}
	}
	return c, r.Name
}

// HostCost is CPUCost of this machine: the default cost model of the
// planner.
func HostCost() CostModel {
	c, _ := CPUCost(cpuid.X86, cpu.Caps())
	return c
}
