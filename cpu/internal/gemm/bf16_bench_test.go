package gemm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// The bf16 peak: VDPBF16PS on registers only (16 independent chains),
// 64 flops each; cpu-GFLOP/s by the process's CPU time, which a loaded
// machine disturbs less than wall time. The kernels and products below
// report against it.
func BenchmarkBF16Peak(b *testing.B) {
	if !hasAVX512BF16() {
		b.Skip("no AVX512_BF16")
	}
	const iters = 1 << 16
	c0 := processCPU()
	for b.Loop() {
		bf16PeakLoop(iters)
	}
	flop := float64(iters*bf16PeakChains*64) * float64(b.N)
	b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if d := processCPU() - c0; d > 0 {
		b.ReportMetric(flop/d.Seconds()/1e9, "cpu-GFLOP/s")
	}
}

// The micro-kernels alone, operands in L1/L2 (kp pairs = 2*kp values of k).
func BenchmarkBF16Kernel(b *testing.B) {
	for _, kern := range bf16Kernels() {
		b.Run(kern.name, func(b *testing.B) {
			const kp = 256
			a := make([]uint32, kern.mr*kp)
			bb := make([]uint32, kern.nr*kp)
			for i := range a {
				a[i] = 0x3f803f80
			}
			for i := range bb {
				bb[i] = 0x3f803f80
			}
			c := make([]float32, kern.mr*kern.nr)
			c0 := processCPU()
			for b.Loop() {
				kern.fn(kp, a, bb, c, kern.nr, 1, 0, true)
			}
			flop := float64(4*kp*kern.mr*kern.nr) * float64(b.N)
			b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			if d := processCPU() - c0; d > 0 {
				b.ReportMetric(flop/d.Seconds()/1e9, "cpu-GFLOP/s")
			}
		})
	}
}

// bf16Shape is a product's shape for the benchmarks.
type bf16Shape struct {
	name    string
	m, n, k int
	tA, tB  bool
}

// operands are the shape's random bf16 A and B (seeded alike for every
// path), their float32 widenings, a C, and A's and B's row strides.
func (s bf16Shape) operands() (a16, b16 []uint16, a32, b32, c []float32, lda, ldb int) {
	rng := rand.New(rand.NewPCG(1, 2))
	a16 = randBF16s(rng, s.m*s.k, false)
	b16 = randBF16s(rng, s.k*s.n, false)
	a32, b32 = make([]float32, len(a16)), make([]float32, len(b16))
	Widen(BFloat16, a32, a16)
	Widen(BFloat16, b32, b16)
	c = make([]float32, s.m*s.n)
	lda, ldb = s.k, s.n
	if s.tA {
		lda = s.m
	}
	if s.tB {
		ldb = s.k
	}
	return
}

var bf16BenchShapes = []bf16Shape{
	{"1024x1024x1024", 1024, 1024, 1024, false, false},
	{"2048x1536x384", 2048, 1536, 384, false, false},
	{"2048x384x1536", 2048, 384, 1536, false, false},
	{"2048x384x1536_tB", 2048, 384, 1536, false, true},
	{"384x1536x2048_tA", 384, 1536, 2048, true, false},
}

// bf16 products natively (each kernel), widened to float32, and Sgemm on
// float32 operands, on 1 and 2 threads.
func BenchmarkGemmBF16(b *testing.B) {
	type path struct {
		name string
		kern *bf16Kernel // nil: widened
		f32  bool
	}
	var paths []path
	for _, k := range bf16Kernels() {
		paths = append(paths, path{name: "native " + k.name, kern: k})
	}
	paths = append(paths, path{name: "widened"}, path{name: "float32", f32: true})
	for _, s := range bf16BenchShapes {
		for _, threads := range []int{1, 2} {
			for _, p := range paths {
				b.Run(fmt.Sprintf("%s/t%d/%s", s.name, threads, p.name), func(b *testing.B) {
					a16, b16, a32, b32, c, lda, ldb := s.operands()
					pool := parallel.NewPool(threads)
					defer pool.Close()
					defer useBF16Kern(p.kern)()
					for b.Loop() {
						if p.f32 {
							Sgemm(s.tA, s.tB, s.m, s.n, s.k, 1, a32, lda, b32, ldb, 0, c, s.n, pool)
						} else {
							SgemmMixed(s.tA, s.tB, s.m, s.n, s.k, 1, BF16(a16), lda, BF16(b16), ldb, 0, c, s.n, pool)
						}
					}
					b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// TestBF16PerfReport times bf16 products natively (each kernel), widened,
// and float32 Sgemm on the same values, interleaved (one run of each path
// in turn, reps times) so that a noisy machine's load falls on all alike;
// medians by wall time and by the process's CPU time. It runs only when
// HEADROOM_GEMM_PERF is set (to the number of rounds);
// HEADROOM_GEMM_PERF_THREADS sets the threads (default 1).
//
//	HEADROOM_GEMM_PERF=15 go test -run BF16PerfReport -v ./cpu/internal/gemm
func TestBF16PerfReport(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("HEADROOM_GEMM_PERF"))
	if reps <= 0 {
		t.Skip("set HEADROOM_GEMM_PERF=<runs> to measure")
	}
	threads := 1
	if s := os.Getenv("HEADROOM_GEMM_PERF_THREADS"); s != "" {
		threads, _ = strconv.Atoi(s)
	}
	pool := parallel.NewPool(threads)
	defer pool.Close()
	for _, s := range bf16BenchShapes {
		a16, b16, a32, b32, c, lda, ldb := s.operands()
		type path struct {
			name string
			run  func()
		}
		mixed := func(k *bf16Kernel) func() {
			return func() {
				defer useBF16Kern(k)()
				SgemmMixed(s.tA, s.tB, s.m, s.n, s.k, 1, BF16(a16), lda, BF16(b16), ldb, 0, c, s.n, pool)
			}
		}
		var paths []path
		for _, k := range bf16Kernels() {
			paths = append(paths, path{"native " + k.name, mixed(k)})
		}
		paths = append(paths, path{"widened", mixed(nil)},
			path{"float32", func() { Sgemm(s.tA, s.tB, s.m, s.n, s.k, 1, a32, lda, b32, ldb, 0, c, s.n, pool) }})
		flop := 2 * float64(s.m) * float64(s.n) * float64(s.k)
		inner := max(1, int(1e9/flop))
		wall := make([][]float64, len(paths))
		cpu := make([][]float64, len(paths))
		for r := -1; r < reps; r++ {
			for pi, p := range paths {
				t0, c0 := time.Now(), processCPU()
				for range inner {
					p.run()
				}
				if r < 0 {
					continue // warm-up
				}
				wall[pi] = append(wall[pi], flop*float64(inner)/time.Since(t0).Seconds()/1e9)
				if d := processCPU() - c0; d > 0 {
					cpu[pi] = append(cpu[pi], flop*float64(inner)*float64(threads)/d.Seconds()/1e9)
				}
			}
		}
		med := func(x []float64) float64 {
			if len(x) == 0 {
				return 0
			}
			slices.Sort(x)
			return x[len(x)/2]
		}
		for pi, p := range paths {
			fmt.Printf("%-18s t%d %-26s wall median %6.1f (p25 %6.1f p75 %6.1f)  CPU-time x threads median %6.1f GFLOP/s\n",
				s.name, threads, p.name, med(wall[pi]), wall[pi][len(wall[pi])/4], wall[pi][3*len(wall[pi])/4], med(cpu[pi]))
		}
	}
}

// Packing a 144x512 block of A (rows 1024 apart) and a 512x1024 block of B.
func BenchmarkBF16Pack(b *testing.B) {
	src := make([]uint16, 1024*1024)
	dst := make([]uint32, 512*1024)
	for _, ld := range []int{1024, 1536} {
		for _, gather := range []bool{false, true} {
			b.Run(fmt.Sprintf("A/ld=%d/gather=%v", ld, gather), func(b *testing.B) {
				if gather && gatherAsm == nil {
					b.Skip("no gather")
				}
				old := gatherAsm
				if !gather {
					gatherAsm = nil
				}
				defer func() { gatherAsm = old }()
				src := make([]uint16, 144*ld)
				for b.Loop() {
					for i0 := 0; i0 < 144; i0 += 24 {
						packPairsAdj(dst[i0*256:], 24, src, i0*ld, ld, 24, 512)
					}
				}
				b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/(144*512), "ns/elem")
			})
		}
	}
	b.Run("B", func(b *testing.B) {
		for b.Loop() {
			packPanelsIlv(dst, 16, 16*256, 256, src, 0, 1024, 1024, 512, 0, 64)
		}
		b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/(1024*512), "ns/elem")
	})
}

// gpt's (nanoGPT 6x384, 2048 rows) products on the native kernel, as
// its graph has them: forward X·Wᵀ (tB, W stored out×in), input gradients
// dY·W and weight gradients dYᵀ·X (tA, k = 2048). The cpu-GFLOP/s metric divides by the process's CPU time (all
// threads), which a loaded machine disturbs less than wall time.
func BenchmarkBF16GPT(b *testing.B) {
	shapes := []bf16Shape{
		{"qkv", 2048, 1152, 384, false, true},
		{"proj", 2048, 384, 384, false, true},
		{"fc", 2048, 1536, 384, false, true},
		{"fc2", 2048, 384, 1536, false, true},
		{"head", 2048, 256, 384, false, true},
		{"qkv_dX", 2048, 384, 1152, false, false},
		{"fc_dX", 2048, 384, 1536, false, false},
		{"fc2_dX", 2048, 1536, 384, false, false},
		{"qkv_dW", 1152, 384, 2048, true, false},
		{"fc_dW", 1536, 384, 2048, true, false},
		{"fc2_dW", 384, 1536, 2048, true, false},
		{"attn_qk", 128, 256, 64, false, true},
		{"attn_pv", 128, 64, 256, false, false},
	}
	if bf16Kern == nil {
		b.Skip("no native bf16 kernel")
	}
	// The kernel as it is, without its strided-A form (A's rows copied),
	// and without its row-major-A form either (A packed pair-major), run
	// in turn.
	forms := []*bf16Kernel{bf16Kern}
	if bf16Kern.strided != nil {
		rows := *bf16Kern
		rows.strided = nil
		forms = append(forms, &rows)
	}
	if bf16Kern.rows != nil {
		packed := *bf16Kern
		packed.rows, packed.strided = nil, nil
		forms = append(forms, &packed)
	}
	for _, s := range shapes {
		for _, threads := range []int{1, 2} {
			for _, kern := range forms {
				b.Run(fmt.Sprintf("%s/t%d/rows=%v/strided=%v", s.name, threads, kern.rows != nil, kern.strided != nil), func(b *testing.B) {
					a16, b16, _, _, c, lda, ldb := s.operands()
					pool := parallel.NewPool(threads)
					defer pool.Close()
					defer useBF16Kern(kern)()
					c0 := processCPU()
					for b.Loop() {
						SgemmMixed(s.tA, s.tB, s.m, s.n, s.k, 1, BF16(a16), lda, BF16(b16), ldb, 0, c, s.n, pool)
					}
					flop := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
					b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					if d := processCPU() - c0; d > 0 {
						b.ReportMetric(flop*float64(threads)/d.Seconds()/1e9, "cpu-GFLOP/s")
					}
				})
			}
		}
	}
}

// The macro-kernel alone (bf16Macro: every tile of a 144-row M block by
// 24 B panels of 16 columns, gpt's n = 384) on panels packed once, A packed
// pair-major or strided in place (rows 3072 bytes apart, gpt's k = 1536),
// kp pairs deep: the kernel's rate with A in L2 and B in L1/L2, against
// which a whole product's shows what packing, edges and waits cost.
func BenchmarkBF16Macro(b *testing.B) {
	kern := bf16Kern
	if kern == nil || kern.strided == nil {
		b.Skip("no native bf16 kernel with a strided form")
	}
	const mc, n, nr = 144, 384, 16
	for _, kp := range []int{192, 256} {
		for _, strided := range []bool{false, true} {
			b.Run(fmt.Sprintf("kp=%d/strided=%v", kp, strided), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				pair := func() uint32 { return uint32(randBF16(rng, false)) | uint32(randBF16(rng, false))<<16 }
				bps := nr*kp + bf16PanelPad
				bp := make([]uint32, bps*n/nr)
				for i := range bp {
					bp[i] = pair()
				}
				fn, astride := kern.fn, kp
				if strided {
					rs := 768
					astride = rs
					fn = func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
						kern.strided(kp, a, rs, b, c, ldc, alpha, beta, beta0)
					}
				}
				ap := make([]uint32, mc*astride)
				for i := range ap {
					ap[i] = pair()
				}
				c := make([]float32, mc*n)
				c0 := processCPU()
				for b.Loop() {
					bf16Macro(fn, kern.mr, nr, astride, mc, n, kp, ap, bp, bps, 0, n/nr, 1, 1, c, 0, n, nil, bf16Edge{})
				}
				flop := float64(4*kp*mc*n) * float64(b.N)
				if d := processCPU() - c0; d > 0 {
					b.ReportMetric(flop/d.Seconds()/1e9, "cpu-GFLOP/s")
				}
			})
		}
	}
}
