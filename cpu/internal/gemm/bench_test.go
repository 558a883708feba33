package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// Shapes as m×n×k: a square reference and training-shaped products (an MLP
// layer on a batch of 128 MNIST images, an im2col convolution, a layer of
// the gpt workload: 8 sequences of 256 tokens, 384 wide).
var benchShapes = []struct {
	name    string
	m, n, k int
	tA, tB  bool
}{
	{"1024x1024x1024", 1024, 1024, 1024, false, false},
	{"128x1024x784", 128, 1024, 784, false, false},
	{"128x784x1024_tB", 128, 784, 1024, false, true}, // backward dX = dY·Wᵀ
	{"784x1024x128_tA", 784, 1024, 128, true, false}, // backward dW = Xᵀ·dY
	{"8192x64x576", 8192, 64, 576, false, false},
	{"2048x1152x384_tB", 2048, 1152, 384, false, true}, // gpt's qkv projection
	{"1152x384x2048_tA", 1152, 384, 2048, true, false}, // its weight gradient
	{"256x256x256", 256, 256, 256, false, false},
	{"64x64x64", 64, 64, 64, false, false},
}

func BenchmarkSgemm(b *testing.B) {
	for _, threads := range []int{1, 2} {
		for _, kern := range kernels32() {
			for _, s := range benchShapes {
				b.Run(fmt.Sprintf("%s/t%d/%s", kern.name, threads, s.name), func(b *testing.B) {
					old := parallel.SetThreads(threads)
					defer parallel.SetThreads(old)
					withKernel(kern, func() { benchSgemm(b, s.m, s.n, s.k, s.tA, s.tB) })
				})
			}
		}
	}
}

func benchSgemm(b *testing.B, m, n, k int, tA, tB bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := make([]float32, m*k)
	bb := make([]float32, k*n)
	c := make([]float32, m*n)
	for i := range a {
		a[i] = rng.Float32()
	}
	for i := range bb {
		bb[i] = rng.Float32()
	}
	lda, ldb := k, n
	if tA {
		lda = m
	}
	if tB {
		ldb = k
	}
	for b.Loop() {
		Sgemm(tA, tB, m, n, k, 1, a, lda, bb, ldb, 0, c, n)
	}
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
}

func BenchmarkDgemm(b *testing.B) {
	for _, sz := range []int{64, 256} {
		b.Run(fmt.Sprint(sz), func(b *testing.B) {
			n := sz
			a := make([]float64, n*n)
			c := make([]float64, n*n)
			for b.Loop() {
				Dgemm(false, false, n, n, n, 1, a, n, a, n, 0, c, n)
			}
			b.ReportMetric(2*float64(n*n*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
	}
}
