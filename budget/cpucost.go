package budget

import (
	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/internal/cpuid"
)

// CPUThroughput is one row of the per-CPU throughput table: the rates of
// headroom's cpu kernels on CPUs with some vector extensions, relative to
// DefaultCost's machine (2 cores, AVX2+FMA).
type CPUThroughput struct {
	Name string
	// Match reports whether a CPU with features f has this row's kernels.
	Match func(f cpuid.Features, k cpu.Capabilities) bool
	// FLOPS scales DefaultCost.FLOPS for float32 arithmetic; Half scales
	// it for ops on 16-bit operands (CostModel.HalfFLOPS).
	FLOPS, Half float64
}

// CPUThroughputs is the table, most capable row first; the first row that
// matches is the CPU's.
//
// Float32: the AVX-512 kernels (24x16 sgemm tile, ZMM convolution tiles)
// ran the issue-17 workloads about 1.7 times as fast per core as the AVX2
// kernels; sgemm 1024³ reached 193 GFLOP/s on 2 Xeon cores against about
// 110 on 2 Zen 3 cores.
//
// 16-bit operands: headroom's products widen bf16 and fp16 to float32
// while packing and run the float32 micro-kernel, so on every CPU they are
// no faster than float32 (Half 1: autocast only adds its casts, and the
// planner prefers fp32 whenever it fits). A CPU row gets Half above FLOPS
// only once a native 16-bit kernel runs there (cpu.Capabilities.NativeBF16,
// AVX512-BF16's VDPBF16PS: twice the float32 products per instruction).
var CPUThroughputs = []CPUThroughput{
	{Name: "avx512-bf16 (native bf16 kernel)", FLOPS: 1.7, Half: 3.4,
		Match: func(f cpuid.Features, k cpu.Capabilities) bool { return f.AVX512BF16 && k.NativeBF16 }},
	{Name: "avx512", FLOPS: 1.7, Half: 1.7,
		Match: func(f cpuid.Features, k cpu.Capabilities) bool { return f.AVX512F && k.AVX512 }},
	{Name: "avx2", FLOPS: 1, Half: 1,
		Match: func(f cpuid.Features, k cpu.Capabilities) bool { return f.AVX2 && f.FMA }},
	// Portable Go kernels: scalar, about a tenth of the AVX2 rate.
	{Name: "portable", FLOPS: 0.1, Half: 0.1,
		Match: func(cpuid.Features, cpu.Capabilities) bool { return true }},
}

// CPUCost is the cost model of headroom's cpu kernels on a CPU with
// features f running kernels k: DefaultCost with the compute rates of the
// first matching row of CPUThroughputs. On an AVX2 machine it is
// DefaultCost.
func CPUCost(f cpuid.Features, k cpu.Capabilities) (CostModel, string) {
	for _, row := range CPUThroughputs {
		if !row.Match(f, k) {
			continue
		}
		c := DefaultCost
		c.FLOPS = DefaultCost.FLOPS * row.FLOPS
		if row.Half != row.FLOPS {
			c.HalfFLOPS = DefaultCost.FLOPS * row.Half
		}
		return c, row.Name
	}
	return DefaultCost, ""
}

// HostCost is CPUCost of this machine: the default cost model of the
// planner.
func HostCost() CostModel {
	c, _ := CPUCost(cpuid.X86, cpu.Caps())
	return c
}
