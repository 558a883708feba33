package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// packStored is a PackFunc that reads a stored row-major op(B) (k×n, row
// stride ld), so SgemmFunc can be checked against Sgemm.
func packStored[T float](b []T, ld int, byRows bool) Packer[T] {
	return Packer[T]{ByRows: byRows, Pack: func(dst []T, p0, kc, j0, nc, r0, r1, jp0, jp1, nr int) {
		for jp := jp0; jp < jp1; jp++ {
			d := dst[jp*nr*kc : (jp+1)*nr*kc]
			for p := r0; p < r1; p++ {
				for l := 0; l < nr; l++ {
					j := jp*nr + l
					var v T
					if j < nc {
						v = b[(p0+p)*ld+j0+j]
					}
					d[p*nr+l] = v
				}
			}
		}
	}}
}

// SgemmFunc and DgemmFunc give exactly Sgemm's and Dgemm's results (the
// same kernel sums in the same order), for every kernel and thread count.
func TestGemmFunc(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	shapes := [][3]int{{1, 1, 1}, {7, 5, 3}, {33, 47, 29}, {150, 300, 260}, {64, 4100, 70}, {200, 17, 600}}
	for _, threads := range []int{1, 2, 3} {
		old := parallel.SetThreads(threads)
		for _, kern := range kernels32() {
			for _, s := range shapes {
				for _, transA := range []bool{false, true} {
					m, n, k := s[0], s[1], s[2]
					name := fmt.Sprintf("t%d/%s/%dx%dx%d/tA=%v", threads, kern.name, m, n, k, transA)
					a := make([]float32, m*k)
					b := make([]float32, k*n)
					for i := range a {
						a[i] = rng.Float32() - 0.5
					}
					for i := range b {
						b[i] = rng.Float32() - 0.5
					}
					lda := k
					if transA {
						lda = m
					}
					want := make([]float32, m*n)
					got := make([]float32, m*n)
					for i := range want {
						want[i] = rng.Float32()
						got[i] = want[i]
					}
					withKernel(kern, func() {
						Sgemm(transA, false, m, n, k, 1.5, a, lda, b, n, 0.5, want, n)
						SgemmFunc(transA, m, n, k, 1.5, a, lda, packStored(b, n, k%2 == 0), 0.5, got, n)
					})
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("%s: c[%d] = %v, Sgemm gives %v", name, i, got[i], want[i])
						}
					}
					a64, b64 := make([]float64, len(a)), make([]float64, len(b))
					for i, v := range a {
						a64[i] = float64(v)
					}
					for i, v := range b {
						b64[i] = float64(v)
					}
					w64, g64 := make([]float64, m*n), make([]float64, m*n)
					Dgemm(transA, false, m, n, k, 1, a64, lda, b64, n, 0, w64, n)
					DgemmFunc(transA, m, n, k, 1, a64, lda, packStored(b64, n, k%2 == 1), 0, g64, n)
					for i := range w64 {
						if g64[i] != w64[i] {
							t.Fatalf("%s: float64 c[%d] = %v, Dgemm gives %v", name, i, g64[i], w64[i])
						}
					}
				}
			}
		}
		parallel.SetThreads(old)
	}
	if NR[float32]() != sgemmKern.nr || NR[float64]() != kernGo64.nr {
		t.Errorf("NR = %d, %d", NR[float32](), NR[float64]())
	}
}
