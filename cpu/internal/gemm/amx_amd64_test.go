//go:build amd64 && !purego

package gemm

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// On a machine where the AMX kernel runs (CPUID, the OS's permission, the
// self-check), the assembly is bitwise its Go contract, kernel by kernel
// (steps, tails, strides, stores, special values) and through the driver
// on amxCases, 1 and 2 threads. The contract's model is the one the
// self-check found bitwise; where it found neither, this fails, saying
// how far the hardware is from the SDM's text. Elsewhere it skips with
// the reason.
func TestAMXAsm(t *testing.T) {
	kern := amxKernel()
	_, why := AMXStatus()
	if kern == nil {
		t.Skip("AMX kernel does not run here: " + why)
	}
	if !strings.Contains(why, "bitwise") || strings.Contains(why, "not bitwise") {
		t.Fatalf("the AMX kernel runs within tolerance but matches no model bitwise: %s", why)
	}
	ref := amxGoKernel(amxModelK)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kp := range []int{1, 15, 16, 17, 31, 32, 100, 256} {
		for _, beta0 := range []bool{true, false} {
			rs := kp + 5
			a := make([]uint32, 31*rs+kp)
			b := make([]uint32, 32*kp)
			for _, x := range [][]uint32{a, b} {
				for i := range x {
					x[i] = uint32(randBF16(rng, true)) | uint32(randBF16(rng, true))<<16
				}
			}
			const ldc = 37
			c := make([]float32, 31*ldc+32)
			for i := range c {
				c[i] = float32(rng.NormFloat64())
			}
			want := append([]float32(nil), c...)
			kern.strided(kp, a, rs, b, c, ldc, 0.75, -1.5, beta0)
			ref.strided(kp, a, rs, b, want, ldc, 0.75, -1.5, beta0)
			for i := range c {
				if !sameBits(c[i], want[i]) {
					t.Fatalf("kp=%d beta0=%v: element %d (row %d col %d) = %g (%#08x), want %g (%#08x)", kp, beta0, i, i/ldc, i%ldc, c[i], math.Float32bits(c[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
	for ci, tc := range amxCases {
		rng := rand.New(rand.NewPCG(uint64(ci), 22))
		mt := makeMats(tc, rng)
		a := randBF16s(rng, len(mt.a), ci%3 == 0)
		b := randBF16s(rng, len(mt.b), ci%3 == 0)
		c0 := to32(mt.c)
		for _, threads := range []int{1, 2} {
			run := func(k *bf16Kernel) []float32 {
				defer useBF16Kern(k)()
				c := append([]float32(nil), c0...)
				SgemmMixed(tc.transA, tc.transB, tc.m, tc.n, tc.k, float32(tc.alpha), BF16(a), mt.lda, BF16(b), mt.ldb, float32(tc.beta), c, mt.ldc, parallel.NewPool(threads))
				return c
			}
			got, want := run(kern), run(ref)
			for i := range want {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("t%d %v: element %d = %g (%#08x), want %g (%#08x)", threads, tc, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}
