package cpu

import (
	"time"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/cpu/internal/vec"
	"github.com/headroom-ml/headroom/internal/env"
	"github.com/headroom-ml/headroom/internal/parallel"
)

// The kernels below are the cpu backend's own (cpu/internal/gemm and
// cpu/internal/vec); these entry points are the few that code outside the
// backend needs: the optimizer's vectorized update, the benchmarks' bare
// matrix product, and the kernel choice reported beside measurements.

// AdamConsts are the per-step scalars of an Adam update, already rounded to
// float32 as PyTorch rounds them.
type AdamConsts = vec.AdamConsts

// Adam applies the vectorized Adam (or AdamW, through c.Decay) update to a
// prefix of v with gradients g and moments m and s, and returns the
// prefix's length; the caller updates the rest element by element. See
// cpu/internal/vec's Adam for the exact rounding.
func Adam(v, g, m, s []float32, c *AdamConsts) int { return vec.Adam(v, g, m, s, c) }

// Sgemm computes c = alpha*op(a)*op(b) + beta*c with the backend's float32
// kernel (row-major, BLAS argument order).
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, pool ...*parallel.Pool) {
	blas.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool...)
}

// GEMMKernel names the sgemm kernel chosen on this CPU ("avx512", "avx2",
// "go").
func GEMMKernel() string { return blas.Kernel() }

// KernelSummary describes every kernel family chosen on this CPU, one
// line, for bench and report headers.
func KernelSummary() string {
	wino := "Winograd F(4x4,3x3) for large 3x3 stride-1 float32 convolutions and their gradients"
	if winogradOff {
		wino = "Winograd off (" + env.Winograd + "=0)"
	}
	return blas.KernelSummary() + ", " + wino
}

// Capabilities are the kernel families chosen on this CPU, for cost models.
type Capabilities = blas.Capabilities

// Caps reports the kernel families chosen on this CPU.
func Caps() Capabilities { return blas.Caps() }

// SetNativeBF16 turns the native bf16 matrix-multiply kernel on (where the
// CPU has AVX512-BF16) or off (bf16 operands widened to float32, the
// float32 product's arithmetic) and reports whether it was on: for tests
// and comparisons, as HEADROOM_BF16_NATIVE=0 does for a process. Not safe
// while a step runs.
func SetNativeBF16(on bool) (was bool) { return blas.SetNativeBF16(on) }

// Peak is a measured arithmetic peak.
type Peak = blas.Peak

// FMAPeak measures the machine's peak float32 FMA rate with threads
// threads for about d.
func FMAPeak(threads int, d time.Duration) Peak { return blas.FMAPeak(threads, d) }
