package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// kernels32 lists every float32 micro-kernel usable on this machine, so the
// tests exercise the assembly ones and the portable one alike.
// HEADROOM_GEMM_TEST_KERNELS (a comma-separated list of names) narrows it,
// for slow runs such as scripts/bochs (the AVX-512 kernel under emulation).
func kernels32() []*kernel[float32] {
	ks := append([]*kernel[float32]{kernGo32}, asmKernelsForTest()...)
	if only := os.Getenv("HEADROOM_GEMM_TEST_KERNELS"); only != "" {
		ks = slices.DeleteFunc(ks, func(k *kernel[float32]) bool {
			return !slices.Contains(strings.Split(only, ","), k.name)
		})
	}
	return ks
}

func withKernel(k *kernel[float32], f func()) {
	old := sgemmKern
	sgemmKern = k
	defer func() { sgemmKern = old }()
	f()
}

type gemmCase struct {
	m, n, k          int
	transA, transB   bool
	padA, padB, padC int // extra stride beyond the row length
	alpha, beta      float64
}

func (c gemmCase) String() string {
	return fmt.Sprintf("%dx%dx%d_tA=%v_tB=%v_pad=%d,%d,%d_a=%g_b=%g", c.m, c.n, c.k, c.transA, c.transB, c.padA, c.padB, c.padC, c.alpha, c.beta)
}

func cases() []gemmCase {
	shapes := [][3]int{
		{1, 1, 1}, {1, 1, 7}, {2, 3, 4}, {5, 7, 3}, {6, 16, 1}, {6, 16, 9}, {7, 17, 5},
		{12, 32, 64}, {13, 33, 65}, {1, 100, 50}, {100, 1, 50}, {31, 29, 257},
		{145, 20, 300}, {64, 64, 64}, {150, 4100, 3}, {200, 130, 520}, {3, 300, 40},
		{1023, 1025, 17}, {24, 16, 7}, {48, 48, 6}, {49, 31, 11},
	}
	var cs []gemmCase
	for i, s := range shapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				c := gemmCase{m: s[0], n: s[1], k: s[2], transA: ta, transB: tb, alpha: 1, beta: 0}
				// Vary strides and scalars across the table.
				switch (i + b2i(ta) + 2*b2i(tb)) % 4 {
				case 1:
					c.padA, c.padB, c.padC = 3, 1, 5
					c.alpha, c.beta = 0.5, 1
				case 2:
					c.alpha, c.beta = -1.25, 0.75
					c.padC = 1
				case 3:
					c.padA, c.padB = 17, 2
					c.alpha, c.beta = 2, -1
				}
				cs = append(cs, c)
			}
		}
	}
	return cs
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

type mats struct {
	a, b, c       []float64
	lda, ldb, ldc int
	arows, brows  int
}

func makeMats(tc gemmCase, rng *rand.Rand) mats {
	ar, acols := tc.m, tc.k
	if tc.transA {
		ar, acols = tc.k, tc.m
	}
	br, bcols := tc.k, tc.n
	if tc.transB {
		br, bcols = tc.n, tc.k
	}
	mt := mats{lda: acols + tc.padA, ldb: bcols + tc.padB, ldc: tc.n + tc.padC, arows: ar, brows: br}
	fill := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = rng.Float64()*2 - 1
		}
		return x
	}
	mt.a = fill(ar * mt.lda)
	mt.b = fill(br * mt.ldb)
	mt.c = fill(tc.m * mt.ldc)
	return mt
}

// reference returns alpha*op(A)*op(B)+beta*C (C's padding unchanged) and a
// per-element error scale: |alpha|*sum|a||b| + |beta*c|.
func reference(tc gemmCase, mt mats) (ref, scale []float64) {
	ref = append([]float64(nil), mt.c...)
	scale = make([]float64, len(ref))
	for i := 0; i < tc.m; i++ {
		for j := 0; j < tc.n; j++ {
			var s, sa float64
			for p := 0; p < tc.k; p++ {
				var av, bv float64
				if tc.transA {
					av = mt.a[p*mt.lda+i]
				} else {
					av = mt.a[i*mt.lda+p]
				}
				if tc.transB {
					bv = mt.b[j*mt.ldb+p]
				} else {
					bv = mt.b[p*mt.ldb+j]
				}
				s += av * bv
				sa += math.Abs(av * bv)
			}
			idx := i*mt.ldc + j
			cv := mt.c[idx]
			if tc.beta == 0 {
				ref[idx] = tc.alpha * s
				scale[idx] = math.Abs(tc.alpha) * sa
			} else {
				ref[idx] = tc.alpha*s + tc.beta*cv
				scale[idx] = math.Abs(tc.alpha)*sa + math.Abs(tc.beta*cv)
			}
		}
	}
	return ref, scale
}

func to32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

func checkClose(t *testing.T, got func(int) float64, ref, scale []float64, eps float64, k int) {
	t.Helper()
	bad := 0
	for i := range ref {
		tol := eps*float64(k+4)*scale[i] + 1e-300
		if d := math.Abs(got(i) - ref[i]); !(d <= tol) {
			if bad < 5 {
				t.Errorf("element %d: got %g, want %g (diff %g, tol %g)", i, got(i), ref[i], d, tol)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d bad elements", bad)
	}
}

func runSgemm(tc gemmCase, mt mats) []float32 {
	a, b, c := to32(mt.a), to32(mt.b), to32(mt.c)
	Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), a, mt.lda, b, mt.ldb, float32(tc.beta), c, mt.ldc)
	return c
}

func round32(mt mats) mats {
	r := func(x []float64) []float64 {
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = float64(float32(v))
		}
		return y
	}
	mt.a, mt.b, mt.c = r(mt.a), r(mt.b), r(mt.c)
	return mt
}

type refData struct {
	mt         mats
	ref, scale []float64
}

// refs32 caches inputs and reference results per case across kernels and
// thread counts.
var refs32 = map[gemmCase]*refData{}

func TestSgemm(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		old := parallel.SetThreads(threads)
		for _, kern := range kernels32() {
			withKernel(kern, func() {
				for _, tc := range cases() {
					if testing.Short() && tc.m*tc.n*tc.k > 1e6 {
						continue
					}
					t.Run(fmt.Sprintf("%s/t%d/%v", kern.name, threads, tc), func(t *testing.T) {
						rd := refs32[tc]
						if rd == nil {
							rng := rand.New(rand.NewPCG(uint64(tc.m*1000003+tc.n*101+tc.k), 7))
							rd = &refData{mt: round32(makeMats(tc, rng))}
							rd.ref, rd.scale = reference(tc, rd.mt)
							refs32[tc] = rd
						}
						got := runSgemm(tc, rd.mt)
						checkClose(t, func(i int) float64 { return float64(got[i]) }, rd.ref, rd.scale, 1.2e-7, tc.k)
					})
				}
			})
		}
		parallel.SetThreads(old)
	}
}

func TestDgemm(t *testing.T) {
	for _, threads := range []int{1, 2} {
		old := parallel.SetThreads(threads)
		for _, tc := range cases() {
			if testing.Short() && tc.m*tc.n*tc.k > 1e6 {
				continue
			}
			t.Run(fmt.Sprintf("t%d/%v", threads, tc), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(tc.m*1000003+tc.n*101+tc.k), 9))
				mt := makeMats(tc, rng)
				ref, scale := reference(tc, mt)
				c := append([]float64(nil), mt.c...)
				Dgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, mt.a, mt.lda, mt.b, mt.ldb, tc.beta, c, mt.ldc)
				checkClose(t, func(i int) float64 { return c[i] }, ref, scale, 2.3e-16, tc.k)
			})
		}
		parallel.SetThreads(old)
	}
}

// TestSpecialScalars covers beta=0 with NaN in C, alpha=0, k=0 and NaN/Inf in
// A or B when alpha=0 (A and B must then not be read).
func TestSpecialScalars(t *testing.T) {
	nan := float32(math.NaN())
	for _, kern := range kernels32() {
		withKernel(kern, func() {
			for _, sz := range [][3]int{{1, 1, 1}, {7, 19, 5}, {64, 64, 64}, {300, 200, 100}} {
				m, n, k := sz[0], sz[1], sz[2]
				name := fmt.Sprintf("%s/%dx%dx%d", kern.name, m, n, k)
				a := make([]float32, m*k)
				b := make([]float32, k*n)
				for i := range a {
					a[i] = 1
				}
				for i := range b {
					b[i] = 2
				}
				c := make([]float32, m*n)

				// beta = 0 ignores NaN in C.
				for i := range c {
					c[i] = nan
				}
				Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
				for i, v := range c {
					if v != float32(2*k) {
						t.Fatalf("%s beta=0: c[%d]=%v want %v", name, i, v, 2*k)
					}
				}

				// alpha = 0: C = beta*C, A and B not read (NaN there is harmless).
				an := make([]float32, m*k)
				for i := range an {
					an[i] = nan
				}
				Sgemm(false, false, m, n, k, 0, an, k, b, n, 0.5, c, n)
				for i, v := range c {
					if v != float32(k) {
						t.Fatalf("%s alpha=0: c[%d]=%v want %v", name, i, v, k)
					}
				}
				// alpha = 0, beta = 0: C = 0 even if C holds NaN.
				for i := range c {
					c[i] = nan
				}
				Sgemm(false, false, m, n, k, 0, an, k, b, n, 0, c, n)
				for i, v := range c {
					if v != 0 {
						t.Fatalf("%s alpha=0 beta=0: c[%d]=%v", name, i, v)
					}
				}
				// k = 0: C = beta*C; A and B may be empty.
				for i := range c {
					c[i] = 3
				}
				Sgemm(false, false, m, n, 0, 1, nil, 1, nil, n, 2, c, n)
				for i, v := range c {
					if v != 6 {
						t.Fatalf("%s k=0: c[%d]=%v", name, i, v)
					}
				}
				// beta = 1 accumulates.
				Sgemm(false, false, m, n, k, 1, a, k, b, n, 1, c, n)
				for i, v := range c {
					if v != float32(6+2*k) {
						t.Fatalf("%s beta=1: c[%d]=%v want %v", name, i, v, 6+2*k)
					}
				}
			}
		})
	}
	// Dgemm: beta=0 ignores NaN.
	c := []float64{math.NaN(), math.Inf(1)}
	Dgemm(false, false, 1, 2, 1, 1, []float64{3}, 1, []float64{1, 2}, 2, 0, c, 2)
	if c[0] != 3 || c[1] != 6 {
		t.Fatalf("Dgemm beta=0: %v", c)
	}
}

// TestConcurrent runs Sgemm from several goroutines at once (only one of
// them gets the worker pool; the others run serially) and checks each
// against a lone run.
func TestConcurrent(t *testing.T) {
	defer parallel.SetThreads(parallel.SetThreads(2))
	const g = 4
	m, n, k := 97, 131, 300
	rng := rand.New(rand.NewPCG(3, 4))
	var as, bs, want [g][]float32
	for i := range g {
		as[i] = make([]float32, m*k)
		bs[i] = make([]float32, k*n)
		for j := range as[i] {
			as[i][j] = rng.Float32()
		}
		for j := range bs[i] {
			bs[i][j] = rng.Float32()
		}
		want[i] = make([]float32, m*n)
		Sgemm(false, true, m, n, k, 1, as[i], k, bs[i], k, 0, want[i], n)
	}
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				c := make([]float32, m*n)
				Sgemm(false, true, m, n, k, 1, as[i], k, bs[i], k, 0, c, n)
				for j := range c {
					if c[j] != want[i][j] {
						t.Errorf("goroutine %d: c[%d]=%v want %v", i, j, c[j], want[i][j])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestEmptyAndPanics(t *testing.T) {
	Sgemm(false, false, 0, 5, 3, 1, nil, 3, make([]float32, 15), 5, 0, nil, 5)
	Sgemm(false, false, 5, 0, 3, 1, make([]float32, 15), 3, nil, 1, 0, nil, 1)
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	mustPanic("short c", func() {
		Sgemm(false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2)
	})
	mustPanic("short a", func() {
		Sgemm(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
	})
	mustPanic("bad lda", func() {
		Sgemm(false, false, 2, 2, 2, 1, make([]float32, 4), 1, make([]float32, 4), 2, 0, make([]float32, 4), 2)
	})
	mustPanic("negative", func() {
		Sgemm(false, false, -1, 2, 2, 1, nil, 2, nil, 2, 0, nil, 2)
	})
}

func TestKernelSelected(t *testing.T) {
	t.Logf("sgemm kernel: %s, threads: %d", Kernel(), Threads())
	if os.Getenv(kernelEnv) != "" {
		t.Logf("%s=%s", kernelEnv, os.Getenv(kernelEnv))
		return
	}
	want := "go"
	if ks := asmKernelsForTest(); len(ks) > 0 {
		want = ks[0].name
	}
	if Kernel() != want {
		t.Fatalf("kernel %q, want %q (the best this CPU runs)", Kernel(), want)
	}
}

// The assembly kernels sum every element in the same order with the same
// roundings, so they agree bit for bit (and results do not depend on which
// machine ran them).
func TestAsmKernelsAgree(t *testing.T) {
	ks := asmKernelsForTest()
	if len(ks) < 2 {
		t.Logf("only %d assembly kernel(s) on this CPU; nothing to compare", len(ks))
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range cases() {
		mt := makeMats(tc, rng)
		var first []float32
		for i, k := range ks {
			var got []float32
			withKernel(k, func() { got = runSgemm(tc, mt) })
			if i == 0 {
				first = got
				continue
			}
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(first[j]) {
					t.Fatalf("%v: %s and %s differ at %d: %g vs %g", tc, ks[0].name, k.name, j, first[j], got[j])
				}
			}
		}
	}
}

// TestNoAllocs: a product allocates nothing once the pools are warm, on
// one thread and on a pool's threads, in both ways the threads split it
// (rows of C sharing a packed B; column slices). A training step makes
// tens of thousands of products; a few closures each were most of a
// step's Go garbage (rrdbnet bf16-mixed: 15 of 19 MB).
func TestNoAllocs(t *testing.T) {
	if raceOn {
		t.Skip("under -race sync.Pool drops pooled values on purpose")
	}
	pool, one := parallel.NewPool(2), parallel.NewPool(1)
	defer pool.Close()
	defer one.Close()
	for _, tc := range []struct {
		name    string
		m, n, k int
		pool    *parallel.Pool
	}{
		{"one thread", 256, 256, 256, one},
		{"shared B", 256, 256, 256, pool},
		{"column slices", 64, 1024, 64, pool},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, n, k := tc.m, tc.n, tc.k
			a := make([]float32, m*k)
			b := make([]float32, k*n)
			c := make([]float32, m*n)
			Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n, tc.pool) // warm the pools
			allocs := testing.AllocsPerRun(20, func() {
				Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n, tc.pool)
			})
			// Below one: a collection may empty a sync.Pool now and then.
			if allocs >= 1 {
				t.Fatalf("%v allocations per call", allocs)
			}
		})
	}
}
