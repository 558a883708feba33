package gemm

import (
	"math/rand/v2"
	"testing"
)

func TestConvTile(t *testing.T) {
	if !ConvTileOK() {
		t.Skip("no direct-convolution kernel on this CPU or build")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range []int{1, 2, 3, 17, 256} {
		a := make([]float32, 6*k)
		b := make([]float32, 4000)
		offs := make([]int32, k)
		for i := range a {
			a[i] = r.Float32() - 0.5
		}
		for i := range b {
			b[i] = r.Float32() - 0.5
		}
		maxOff := 0
		for i := range offs {
			offs[i] = int32(r.IntN(3900))
			maxOff = max(maxOff, int(offs[i]))
		}
		ldc := 37
		c := make([]float32, 300)
		want := make([]float32, 300)
		for i := range c {
			c[i] = r.Float32()
			want[i] = c[i]
		}
		coff := 5
		for i := 0; i < 6; i++ {
			for j := 0; j < 16; j++ {
				var s float64
				for p := 0; p < k; p++ {
					s += float64(a[6*p+i]) * float64(b[3+int(offs[p])+j])
				}
				want[coff+i*ldc+j] += float32(s)
			}
		}
		c4 := append([]float32(nil), c...)
		ConvTile(k, a, b, 3, offs, maxOff, c, coff, ldc)
		for i := range c {
			if d := c[i] - want[i]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("k=%d: c[%d] = %v, want %v", k, i, c[i], want[i])
			}
		}
		// The 4-row kernel on the first 4 rows of a (repacked).
		a4 := make([]float32, 4*k)
		for p := 0; p < k; p++ {
			copy(a4[4*p:4*p+4], a[6*p:6*p+4])
		}
		ConvTile4(k, a4, b, 3, offs, maxOff, c4, coff, ldc)
		for i := range c4 {
			row := (i - coff) / ldc
			if i >= coff && row >= 4 && row < 6 && (i-coff)%ldc < 16 {
				continue // rows the 4-row kernel does not touch
			}
			if d := c4[i] - want[i]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("k=%d: 4 rows: c[%d] = %v, want %v", k, i, c4[i], want[i])
			}
		}
	}
}

func TestConvWgrad(t *testing.T) {
	if !ConvWgradOK() {
		t.Skip("no direct-convolution kernel on this CPU or build")
	}
	r := rand.New(rand.NewPCG(7, 6))
	for _, s := range [][4]int{{8, 1, 1, 10}, {16, 3, 2, 20}, {32, 5, 1, 40}} {
		ow, oh, dw, wp := s[0], s[1], s[2], s[3]
		ldk := oh*ow + 7
		gy := make([]float32, 4*ldk+5)
		x := make([]float32, oh*wp+2*dw+ow+3)
		for i := range gy {
			gy[i] = r.Float32() - 0.5
		}
		for i := range x {
			x[i] = r.Float32() - 0.5
		}
		out := make([]float32, 12)
		want := make([]float64, 12)
		for i := range out {
			out[i] = float32(i)
			want[i] = float64(i)
		}
		for k := 0; k < 4; k++ {
			for t2 := 0; t2 < 3; t2++ {
				for o := 0; o < oh; o++ {
					for j := 0; j < ow; j++ {
						want[3*k+t2] += float64(gy[2+k*ldk+o*ow+j]) * float64(x[1+o*wp+j+t2*dw])
					}
				}
			}
		}
		ConvWgrad(gy, 2, ldk, x, 1, dw, wp, ow, oh, out)
		for i := range out {
			if d := float64(out[i]) - want[i]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("%v: out[%d] = %v, want %v", s, i, out[i], want[i])
			}
		}
	}
}

// BenchmarkMicroKernels runs the micro-kernels on operands in L1 (one
// thread): their peak, against which whole products are measured.
func BenchmarkMicroKernels(b *testing.B) {
	if !ConvTileOK() {
		b.Skip("no assembly kernels")
	}
	const k = 256
	a := make([]float32, 6*k)
	bb := make([]float32, 16*k)
	offs := make([]int32, k)
	for i := range offs {
		offs[i] = int32((i * 37) % (16*k - 16))
	}
	c := make([]float32, 6*64)
	report := func(b *testing.B, rows int) {
		b.ReportMetric(float64(b.N)*k*float64(rows)*16*2/b.Elapsed().Seconds()/1e9, "GFLOPS")
	}
	b.Run("sgemm6x16", func(b *testing.B) {
		for range b.N {
			sgemmKern.fn(k, a, bb, c, 64, 1, 1, false)
		}
		report(b, 6)
	})
	b.Run("conv6x16", func(b *testing.B) {
		for range b.N {
			ConvTile(k, a, bb, 0, offs, 16*k-16, c, 0, 64)
		}
		report(b, 6)
	})
	b.Run("conv4x16", func(b *testing.B) {
		for range b.N {
			ConvTile4(k, a, bb, 0, offs, 16*k-16, c, 0, 64)
		}
		report(b, 4)
	})
}
