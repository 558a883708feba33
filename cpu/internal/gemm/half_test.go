package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/tensor"
)

// halfConvs lists the conversions to test for type t: portable Go (nil)
// and the assembly where this CPU has it.
func halfConvs(t Type) []*halfConv {
	cs := []*halfConv{nil}
	if hc := kernAVX2Half(t); hc != nil {
		cs = append(cs, hc)
	}
	return cs
}

func kernAVX2Half(t Type) *halfConv {
	for _, k := range kernels32() {
		if hc := k.half[t-1]; hc != nil {
			return hc
		}
	}
	return nil
}

// Every 16-bit pattern widens to tensor's exact conversion, bit for bit
// (NaN payloads included), on every path and at every tail length.
func TestWiden(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	for _, typ := range []Type{BFloat16, Float16} {
		want := func(h uint16) float32 {
			if typ == BFloat16 {
				return tensor.BFloat16ToFloat32(h)
			}
			return tensor.Float16ToFloat32(h)
		}
		for _, hc := range halfConvs(typ) {
			name := fmt.Sprintf("%v/asm=%v", typ, hc != nil)
			dst := make([]float32, len(src))
			widen(typ, hc, dst, src)
			for i, v := range dst {
				if math.Float32bits(v) != math.Float32bits(want(src[i])) {
					t.Fatalf("%s: %#04x -> %#08x, want %#08x", name, src[i], math.Float32bits(v), math.Float32bits(want(src[i])))
				}
			}
			// Short runs and odd offsets: the tails and the block loop.
			for n := range 40 {
				d := make([]float32, n+1)
				d[n] = 7
				widen(typ, hc, d[:n], src[1000+n:1000+2*n])
				for i := range n {
					if math.Float32bits(d[i]) != math.Float32bits(want(src[1000+n+i])) {
						t.Fatalf("%s n=%d: element %d wrong", name, n, i)
					}
				}
				if d[n] != 7 {
					t.Fatalf("%s n=%d: wrote past the end", name, n)
				}
			}
		}
	}
}

// halfMat is a random operand of type typ (float32 values that typ holds
// exactly, for a float32 operand) and its float32 image.
func halfMat(typ Type, n int, rng *rand.Rand) (Matrix, []float32) {
	f := make([]float32, n)
	u := make([]uint16, n)
	for i := range f {
		v := float32(rng.NormFloat64())
		switch r := rng.IntN(64); {
		case r == 0:
			v *= 1e-6 // float16 subnormals
		case r == 1:
			v = 0
		}
		switch typ {
		case BFloat16:
			u[i] = tensor.Float32ToBFloat16(v)
			f[i] = tensor.BFloat16ToFloat32(u[i])
		case Float16:
			u[i] = tensor.Float32ToFloat16(v)
			f[i] = tensor.Float16ToFloat32(u[i])
		default:
			f[i] = v
		}
	}
	if typ == Float32 {
		return F32(f), f
	}
	return Matrix{Type: typ, U16: u}, f
}

var typePairs = [][2]Type{
	{BFloat16, BFloat16}, {Float16, Float16}, {BFloat16, Float32}, {Float32, BFloat16},
	{Float16, Float32}, {Float32, Float16}, {BFloat16, Float16},
}

func bitsEqual(t *testing.T, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("element %d: got %v (%#08x), want %v (%#08x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// SgemmMixed is bitwise Sgemm on the operands converted first, for every
// kernel, thread count, type pair, shape, transpose, stride and scalar of
// the Sgemm table.
func TestSgemmMixed(t *testing.T) {
	defer useBF16Kern(nil)() // the widened path (TestSgemmBF16 the native one)
	for _, threads := range []int{1, 2} {
		old := parallel.SetThreads(threads)
		for _, kern := range kernels32() {
			withKernel(kern, func() {
				for ci, tc := range cases() {
					if testing.Short() && tc.m*tc.n*tc.k > 1e6 {
						continue
					}
					// Each case meets several type pairs across thread counts.
					tp := typePairs[(ci+3*threads)%len(typePairs)]
					t.Run(fmt.Sprintf("%s/t%d/%v/%v-%v", kern.name, threads, tc, tp[0], tp[1]), func(t *testing.T) {
						rng := rand.New(rand.NewPCG(uint64(ci), 11))
						mt := makeMats(tc, rng)
						a, af := halfMat(tp[0], len(mt.a), rng)
						b, bf := halfMat(tp[1], len(mt.b), rng)
						c0 := to32(mt.c)
						want := append([]float32(nil), c0...)
						Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), af, mt.lda, bf, mt.ldb, float32(tc.beta), want, mt.ldc)
						got := append([]float32(nil), c0...)
						SgemmMixed(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), a, mt.lda, b, mt.ldb, float32(tc.beta), got, mt.ldc)
						bitsEqual(t, got, want)
					})
				}
			})
		}
		parallel.SetThreads(old)
	}
}

// Every type pair on a few shapes whose edges cover partial panels on both
// kernels, with NaN and Inf in the operands.
func TestSgemmMixedPairs(t *testing.T) {
	defer useBF16Kern(nil)()
	shapes := [][3]int{{1, 1, 1}, {6, 16, 8}, {7, 17, 9}, {13, 35, 67}, {150, 40, 300}}
	for _, kern := range kernels32() {
		withKernel(kern, func() {
			for _, tp := range typePairs {
				for _, s := range shapes {
					for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
						m, n, k := s[0], s[1], s[2]
						rng := rand.New(rand.NewPCG(uint64(m*n*k), 5))
						a, af := halfMat(tp[0], m*k, rng)
						b, bf := halfMat(tp[1], k*n, rng)
						if m*k > 10 {
							af[3], af[m*k-2] = float32(math.Inf(1)), float32(math.NaN())
							a = reencode(a, af)
						}
						lda, ldb := k, n
						if tr[0] {
							lda = m
						}
						if tr[1] {
							ldb = k
						}
						want := make([]float32, m*n)
						Sgemm(tr[0], tr[1], m, n, k, 1, af, lda, bf, ldb, 0, want, n)
						got := make([]float32, m*n)
						SgemmMixed(tr[0], tr[1], m, n, k, 1, a, lda, b, ldb, 0, got, n)
						t.Run(fmt.Sprintf("%s/%v-%v/%dx%dx%d/%v", kern.name, tp[0], tp[1], m, n, k, tr), func(t *testing.T) { bitsEqual(t, got, want) })
					}
				}
			}
		})
	}
}

// reencode stores the float32 values f in a's type (they must be exact).
func reencode(a Matrix, f []float32) Matrix {
	switch a.Type {
	case BFloat16:
		for i, v := range f {
			a.U16[i] = tensor.Float32ToBFloat16(v)
		}
	case Float16:
		for i, v := range f {
			a.U16[i] = tensor.Float32ToFloat16(v)
		}
	}
	return a
}

// SgemmFuncMixed is bitwise SgemmFunc on A converted first.
func TestSgemmFuncMixed(t *testing.T) {
	shapes := [][3]int{{1, 1, 1}, {7, 5, 3}, {33, 47, 29}, {150, 300, 260}}
	for _, threads := range []int{1, 2} {
		old := parallel.SetThreads(threads)
		for _, kern := range kernels32() {
			withKernel(kern, func() {
				for _, typ := range []Type{BFloat16, Float16} {
					for _, s := range shapes {
						for _, transA := range []bool{false, true} {
							m, n, k := s[0], s[1], s[2]
							rng := rand.New(rand.NewPCG(uint64(m+n+k), 3))
							a, af := halfMat(typ, m*k, rng)
							_, bf := halfMat(Float32, k*n, rng)
							lda := k
							if transA {
								lda = m
							}
							for _, byRows := range []bool{false, true} {
								want := make([]float32, m*n)
								SgemmFunc(transA, m, n, k, 1, af, lda, packStored(bf, n, byRows), 0, want, n)
								got := make([]float32, m*n)
								SgemmFuncMixed(transA, m, n, k, 1, a, lda, packStored(bf, n, byRows), 0, got, n)
								t.Run(fmt.Sprintf("t%d/%s/%v/%dx%dx%d/tA=%v/rows=%v", threads, kern.name, typ, m, n, k, transA, byRows), func(t *testing.T) { bitsEqual(t, got, want) })
							}
						}
					}
				}
			})
		}
		parallel.SetThreads(old)
	}
}

func TestSgemmMixedPanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	u := make([]uint16, 4)
	mustPanic("short a", func() { SgemmMixed(false, false, 2, 2, 2, 1, BF16(u[:3]), 2, BF16(u), 2, 0, make([]float32, 4), 2) })
	mustPanic("short b", func() { SgemmMixed(false, false, 2, 2, 2, 1, BF16(u), 2, F16(u[:3]), 2, 0, make([]float32, 4), 2) })
	mustPanic("bad type", func() { SgemmMixed(false, false, 2, 2, 2, 1, Matrix{Type: 9}, 2, BF16(u), 2, 0, make([]float32, 4), 2) })
	// alpha = 0: A and B are not read.
	c := []float32{1, 2, 3, 4}
	SgemmMixed(false, false, 2, 2, 2, 0, BF16(nil), 2, BF16(nil), 2, 2, c, 2)
	if c[3] != 8 {
		t.Fatalf("alpha=0: %v", c)
	}
}

// BenchmarkSgemmBF16 compares SgemmMixed on bfloat16 (or float16) operands
// with converting them to float32 (Widen, into buffers allocated once) and
// calling Sgemm.
//
//	go test -run '^$' -bench SgemmBF16 ./cpu/internal/gemm
func BenchmarkSgemmBF16(b *testing.B) {
	for _, typ := range []Type{BFloat16, Float16} {
		for _, threads := range []int{1, 2} {
			for _, s := range benchShapes {
				m, n, k := s.m, s.n, s.k
				rng := rand.New(rand.NewPCG(1, 2))
				a, _ := halfMat(typ, m*k, rng)
				bb, _ := halfMat(typ, k*n, rng)
				c := make([]float32, m*n)
				lda, ldb := k, n
				if s.tA {
					lda = m
				}
				if s.tB {
					ldb = k
				}
				flops := 2 * float64(m) * float64(n) * float64(k)
				b.Run(fmt.Sprintf("%v/t%d/%s/mixed", typ, threads, s.name), func(b *testing.B) {
					defer parallel.SetThreads(parallel.SetThreads(threads))
					for b.Loop() {
						SgemmMixed(s.tA, s.tB, m, n, k, 1, a, lda, bb, ldb, 0, c, n)
					}
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
				})
				b.Run(fmt.Sprintf("%v/t%d/%s/convert", typ, threads, s.name), func(b *testing.B) {
					defer parallel.SetThreads(parallel.SetThreads(threads))
					af, bf := make([]float32, m*k), make([]float32, k*n)
					for b.Loop() {
						Widen(typ, af, a.U16)
						Widen(typ, bf, bb.U16)
						Sgemm(s.tA, s.tB, m, n, k, 1, af, lda, bf, ldb, 0, c, n)
					}
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
				})
			}
		}
	}
}

// TestHalfPerfReport times SgemmMixed against Widen-then-Sgemm on the
// benchmark shapes, alternating the two (A B A B ...) so that a noisy
// machine's drift hits both alike; it prints the medians and the median of
// the per-pair ratios. It runs only when HEADROOM_GEMM_PERF is set (the
// number of pairs), with HEADROOM_GEMM_PERF_THREADS threads (default 1).
//
//	HEADROOM_GEMM_PERF=31 go test -run HalfPerfReport -v ./cpu/internal/gemm
func TestHalfPerfReport(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("HEADROOM_GEMM_PERF"))
	if reps <= 0 {
		t.Skip("set HEADROOM_GEMM_PERF=<pairs> to measure")
	}
	threads := 1
	if s := os.Getenv("HEADROOM_GEMM_PERF_THREADS"); s != "" {
		threads, _ = strconv.Atoi(s)
	}
	defer parallel.SetThreads(parallel.SetThreads(threads))
	for _, typ := range []Type{BFloat16, Float16} {
		for _, s := range benchShapes {
			m, n, k := s.m, s.n, s.k
			rng := rand.New(rand.NewPCG(1, 2))
			a, _ := halfMat(typ, m*k, rng)
			b, _ := halfMat(typ, k*n, rng)
			af, bf, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
			lda, ldb := k, n
			if s.tA {
				lda = m
			}
			if s.tB {
				ldb = k
			}
			inner := max(1, int(1e8/(2*float64(m)*float64(n)*float64(k))))
			timeIt := func(f func()) float64 {
				t0 := time.Now()
				for range inner {
					f()
				}
				return time.Since(t0).Seconds() / float64(inner)
			}
			mixed := func() { SgemmMixed(s.tA, s.tB, m, n, k, 1, a, lda, b, ldb, 0, c, n) }
			convert := func() {
				Widen(typ, af, a.U16)
				Widen(typ, bf, b.U16)
				Sgemm(s.tA, s.tB, m, n, k, 1, af, lda, bf, ldb, 0, c, n)
			}
			mixed()
			convert()
			tm, tc, ratio := make([]float64, reps), make([]float64, reps), make([]float64, reps)
			for r := range reps {
				tm[r], tc[r] = timeIt(mixed), timeIt(convert)
				ratio[r] = tc[r] / tm[r]
			}
			slices.Sort(tm)
			slices.Sort(tc)
			slices.Sort(ratio)
			fmt.Printf("%-8v %-18s threads=%d  mixed %8.3f ms  convert+Sgemm %8.3f ms  speedup (median of pairs) %.2fx [p25 %.2f, p75 %.2f]\n",
				typ, s.name, threads, tm[reps/2]*1e3, tc[reps/2]*1e3, ratio[reps/2], ratio[reps/4], ratio[3*reps/4])
		}
	}
}
