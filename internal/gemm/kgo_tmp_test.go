package gemm

import "testing"

func BenchmarkGoKernel(b *testing.B) {
	k := 256
	a := make([]float32, 4*k)
	bb := make([]float32, 4*k)
	c := make([]float32, 16)
	for b.Loop() {
		kernelGo4x4(k, a, bb, c, 4, 1, 0, true)
	}
	b.ReportMetric(2*16*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
}
