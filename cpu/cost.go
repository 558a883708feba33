package cpu

import (
	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/cpuid"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// What the cpu backend tells the planner's cost model (budget.CostModel)
// about its kernels: the arithmetic of the algorithms it picks where they
// are not the op's declared one, and the rates of its kernel families on a
// CPU, float32 and 16-bit. The facts stay here, next to the kernels that
// decide them; the planner asks (backend.Coster, ThroughputOf).

// Flops is the arithmetic of the cpu kernel of op o on inputs in producing
// out where it is not the op's declaration (backend.Coster): float32 3×3
// convolutions, their input gradients and weight gradients that run as
// Winograd F(4×4, 3×3), decided by the predicates the kernels and their
// workspaces use (winogradFor, winogradInputGrad, winogradWgrad). The
// other paths (direct, im2col and sgemm, col2im) do the declared
// arithmetic.
func (*cpuBackend) Flops(o trace.Op, in, out []trace.Meta) (float64, bool) {
	return kernelFlops(o, in, out)
}

func kernelFlops(o trace.Op, in, out []trace.Meta) (float64, bool) {
	switch o.(type) {
	case *prim.Conv2dOp, *prim.Conv2dBackwardInput, *prim.Conv2dBackwardWeight:
	default:
		return 0, false
	}
	// The kernels take Winograd in their float32 instance only (Floats
	// dispatches on the output's type).
	if len(in) < 2 || len(out) == 0 || out[0].DType != tensor.Float32 {
		return 0, false
	}
	g, err := convOpGeom(o, in[0].Shape, in[1].Shape)
	if err != nil {
		return 0, false
	}
	switch o.(type) {
	case *prim.Conv2dOp:
		if w, ok := winogradFor(g); ok {
			return w.flops(), true
		}
	case *prim.Conv2dBackwardInput:
		if w, ok := winogradInputGrad(g); ok {
			return w.flops(), true
		}
	case *prim.Conv2dBackwardWeight:
		if w, ok := winogradWgrad(g); ok {
			return w.flops(), true
		}
	}
	return 0, false
}

// NativeLow reports whether the kernel for op o on bfloat16 operands runs
// natively in bf16 (backend.LowCoster): products and attention do where
// the CPU has the native kernel (the planner asks only then); a
// convolution where it is pointwise (convPwBF16: all three natively) or
// where convBF16PathOf takes a native path (convbf16_col.go: by default
// the strided and 7x7 ones, and those float32 Winograd does not beat).
// The others widen their operands (or read them in place) and run the
// float32 kernels, at the float32 rate.
func (*cpuBackend) NativeLow(o trace.Op, in, out []trace.Meta) bool {
	if f, ok := o.(*prim.Fused); ok && f.Producer != nil && f.NProd <= len(in) {
		o, in = f.Producer, in[:f.NProd]
	}
	switch o.(type) {
	case *prim.Conv2dOp, *prim.Conv2dBackwardInput, *prim.Conv2dBackwardWeight:
		if len(in) < 2 {
			return false
		}
		g, err := convOpGeom(o, in[0].Shape, in[1].Shape)
		return err == nil && (convPwBF16(o, g) || convBF16Native(o, g))
	}
	return true
}

// RunsLow is NativeLow where the CPU's native bf16 kernel is on
// (backend.LowRunner).
func (b *cpuBackend) RunsLow(o trace.Op, in, out []trace.Meta) bool {
	return blas.Caps().NativeBF16 && b.NativeLow(o, in, out)
}

// convNativeCheaper reports whether the native bf16 kernel of conv op o
// (the declared arithmetic) is expected to be faster for geometry g than
// the float32 Winograd kernel on the operands' widened values (bf16
// values are exact in float32, and Winograd's float32 sums keep
// autocast's semantics as they keep fp32's), by the ratio of the rates of
// the native kernel (convNativeRates). By geometry and the machine alone,
// whatever kernels a test turns on, so that a workspace sized for one
// choice is never run with the other. On rrdbnet's layers with VDPBF16PS
// Winograd wins (weight gradient, CPU time a call, one thread: 64→32 on
// 4×32×32 0.93 ms against 1.04 native, 192→64 4.1 against 5.4), as the
// rates say, and on ResNet-18's stride-1 3x3 layers from 16x16 to 4x4
// (TestConvColPerfReport); Winograd does 3.5-4 times fewer flops there.
func convNativeCheaper(o trace.Op, g prim.ConvGeom) bool {
	return convNativeCheaperAt(o, g, convNativeRates())
}

// convNativeRates is the rates of the native convolution kernels: the
// VDPBF16PS row, on every CPU (they run on blas.BF16Tile, which is
// VDPBF16PS also where the AMX kernel runs the matrix products).
func convNativeRates() Throughput {
	f := cpuid.Features{AVX512F: true, AVX512BW: true, AVX512VL: true, AVX512BF16: true}
	return ThroughputOf(f, Capabilities{AVX512: true, NativeBF16: true})
}

// convNativeCheaperAt is convNativeCheaper on the native kernel's rates r.
func convNativeCheaperAt(o trace.Op, g prim.ConvGeom, r Throughput) bool {
	var wino float64
	switch o.(type) {
	case *prim.Conv2dOp:
		w, ok := winogradFor(g)
		if !ok {
			return true
		}
		wino = w.flops()
	case *prim.Conv2dBackwardInput:
		w, ok := winogradInputGrad(g)
		if !ok {
			return true
		}
		wino = w.flops()
	case *prim.Conv2dBackwardWeight:
		w, ok := winogradWgrad(g)
		if !ok {
			return true
		}
		wino = w.flops()
	default:
		return true
	}
	direct := 2 * float64(g.N) * float64(g.K*g.OH*g.OW) * float64(g.C/max(1, g.Groups)*g.KH*g.KW)
	return direct/r.ConvBF16() < wino/r.FLOPS
}

// Throughput is the speed of the cpu kernels on some CPU, relative to the
// AVX2 kernels on 2 Zen 3 cores (the machine of budget.DefaultCost).
type Throughput struct {
	Name  string
	FLOPS float64 // float32 arithmetic
	// BF16 is the rate of the products on bfloat16 operands (bf16-true,
	// and the matmuls, convolutions and attention autocast runs in bf16).
	BF16 float64
	// Conv is the rate of the native bf16 convolution kernels where it
	// was measured apart from the products' (0: BF16; see ConvBF16).
	Conv float64
	// Memory is the rate of the memory-bound kernels relative to
	// budget.DefaultCost's Bandwidth where it was measured (0: 1; see
	// MemoryRate).
	Memory float64
}

// throughputs is the table, most capable row first; the first row that
// matches a CPU is its row.
//
// Float32: the AVX-512 kernels (then a 24x16 sgemm tile, now 6x64; ZMM
// convolution tiles) ran the issue-17 workloads about 1.7 times as fast
// per core as the AVX2 kernels; sgemm 1024³ reached 193 GFLOP/s on 2 Xeon
// cores against about 110 on 2 Zen 3 cores. Zen 4 splits each 512-bit FMA
// in two, so its AVX-512 and AVX2 peaks are equal (about 115 GFLOP/s a
// core) and the row overstates its float32 rate by about 1.5 — for every
// float32 choice alike, so rankings on one machine stand; what the ratio
// BF16/FLOPS says (native bf16 against float32) was measured on Zen 4.
//
// bfloat16 operands: where no native kernel runs, the products widen bf16
// (and fp16) to float32 while packing and run the float32 micro-kernel,
// so they are no faster than float32 (BF16 = FLOPS): the precision only
// adds autocast's casts and roundings, which the cost model charges as
// format conversions at the emulation's element-by-element rate. On a CPU
// with AVX512-BF16 the native kernel (Capabilities.NativeBF16: VDPBF16PS,
// twice the float32 products per instruction) runs matmuls whose operands
// are both bf16: measured on 2 Zen 4 cores (CPU time, interleaved runs),
// 1.5-2.0 times the float32 sgemm rate on 1024³ and GPT-shaped products
// (about 1.9 on one thread, 1.7 on two), hence BF16 = 1.75 × FLOPS; bf16
// conversions then run vectorized, at memory speed, and the cost model
// charges them by the roofline.
var throughputs = []struct {
	Throughput
	match func(f cpuid.Features, k Capabilities) bool
}{
	// AMX-BF16 (Capabilities.AMX: the TDPBF16PS kernel runs): float32 as
	// the AVX-512 row; bf16 products 5 times that. Intel's peaks are 1024
	// bf16 flops a cycle a core for AMX against 64 float32 for AVX-512
	// FMAs (16 times); a real GEMM waits on tile loads and stores (large
	// oneDNN GEMMs reach well under half the AMX peak), and this one adds
	// Go packing, a transposed A's repack, and tails and stores through
	// scratch, none of which the peak counts: 5 times keeps a margin of
	// 3 below the peak ratio. Not measured: this project has not run on an
	// AMX machine (the PyTorch/oneDNN rrdbnet step in bf16
	// autocast took 0.53 of its fp32 time there, every op included).
	{Throughput{Name: "amx-bf16 (AMX tile kernel)", FLOPS: 1.7, BF16: 8.5, Memory: 4},
		func(f cpuid.Features, k Capabilities) bool { return f.AMXBF16 && k.AMX }},
	{Throughput{Name: "avx512-bf16 (native bf16 kernel)", FLOPS: 1.7, BF16: 3.0, Conv: 1.35 * 1.7, Memory: 4},
		func(f cpuid.Features, k Capabilities) bool { return f.AVX512BF16 && k.NativeBF16 }},
	{Throughput{Name: "avx512", FLOPS: 1.7, BF16: 1.7},
		func(f cpuid.Features, k Capabilities) bool { return f.AVX512F && k.AVX512 }},
	{Throughput{Name: "avx2", FLOPS: 1, BF16: 1},
		func(f cpuid.Features, k Capabilities) bool { return f.AVX2 && f.FMA }},
	// Portable Go kernels: scalar, about a tenth of the AVX2 rate.
	{Throughput{Name: "portable", FLOPS: 0.1, BF16: 0.1},
		func(cpuid.Features, Capabilities) bool { return true }},
}

// MemoryRate is the rate of the memory-bound kernels (elementwise ops,
// casts and roundings, copies, concatenations, slices, sums) on t's CPUs
// relative to budget.DefaultCost's Bandwidth (8 GB/s): t.Memory where it
// was measured, else 1.
//
// avx512-bf16, on 2 Zen 4 cores: the nodes budget.CostModel charges by
// their bytes (its roofline's memory side: concatenations, slices,
// splits, elementwise ops and their gradients, sums) in the op profiles
// of rrdbnet's steps at batches 2 and 4 (`headroom bench --threads 2
// --model rrdbnet --batch 2 --op-profile`, fp32 and bf16-mixed, 3
// interleaved runs each, medians, 2026-12-03) moved their declared bytes
// at 42–44 GB/s in fp32 and 33–36 in bf16-mixed, whose bf16 casts and
// roundings ran at 32–34 GB/s, and gpt's (batches 4 and 8) at 28–35:
// about 32 GB/s, 4 times the default, whose 8 GB/s had made them 3–5
// times their measured time and overvalued the bytes bf16 saves. (gpt's
// layer norms, sums and cross entropy ran at 7–10 GB/s: they compute
// more than their bytes say, which a roofline of bytes alone misses.)
// The workloads' tensors are mostly in cache, not in DRAM. The amx-bf16
// row takes the same rate, not measured (no AMX machine here): its CPUs
// have AVX-512 cores with caches at least as fast.
func (t Throughput) MemoryRate() float64 {
	if t.Memory > 0 {
		return t.Memory
	}
	return 1
}

// ConvBF16 is the rate of t's native bf16 convolution kernels
// (cpu/convbf16.go: the weight gradient tiled straight from the padded
// image, the only one on by default) relative to the AVX2 float32
// kernels: t.Conv where it was measured, else the products' BF16.
//
// avx512-bf16, on 2 Zen 4 cores: rrdbnet's weight gradients of 64 and
// 160 channels into 32 at batch 2 (BenchmarkConvBF16's
// bwd_weight_f32gy, ȳ float32 as autocast's step has it, 2 threads, CPU
// time, 5 interleaved runs, 2026-12-03) took 0.71 and 0.82 of the
// float32 kernel's time on the same values (1.45 and 1.5 times its rate
// on one thread), against 1/1.76 for the matrix products: the
// convolution's tiles are fewer and its B operand gathered from the
// image, so it is 1.35 × FLOPS, not BF16.
func (t Throughput) ConvBF16() float64 {
	if t.Conv > 0 {
		return t.Conv
	}
	return t.BF16
}

// ThroughputOf is the speed of the cpu kernels on a CPU with features f
// running kernel families k (Caps on this machine; tests inject others).
func ThroughputOf(f cpuid.Features, k Capabilities) Throughput {
	for _, row := range throughputs {
		if row.match(f, k) {
			return row.Throughput
		}
	}
	return throughputs[len(throughputs)-1].Throughput
}

// HostThroughput is ThroughputOf this machine and the kernels chosen on it.
func HostThroughput() Throughput { return ThroughputOf(cpuid.X86, Caps()) }
