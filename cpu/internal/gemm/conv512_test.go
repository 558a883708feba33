//go:build amd64 && !purego

package gemm

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// convSetsForTest are the direct-convolution kernel sets this CPU runs,
// narrowed by HEADROOM_GEMM_TEST_KERNELS as kernels32 is (for Bochs).
func convSetsForTest() []convKernels {
	ks := convKernelSets()
	if only := os.Getenv("HEADROOM_GEMM_TEST_KERNELS"); only != "" {
		ks = slices.DeleteFunc(ks, func(k convKernels) bool { return !slices.Contains(strings.Split(only, ","), k.name) })
	}
	return ks
}

// The convolution kernel sets agree: the 6x16 tiles bit for bit (the same
// FMA chains in the same order), the weight-gradient kernels (4 and 8
// output channels) to rounding;
// and each is checked against a float64 reference, so that a machine with
// one set (or Bochs with HEADROOM_GEMM_TEST_KERNELS=avx512) tests it alone.
func TestConvKernelSetsAgree(t *testing.T) {
	sets := convSetsForTest()
	if len(sets) == 0 {
		t.Skip("no direct-convolution kernels on this CPU")
	}
	t.Logf("kernel sets: %d, chosen: %s", len(sets), convKernelName)
	r := rand.New(rand.NewPCG(11, 12))
	for _, k := range []int{1, 3, 4, 5, 8, 31, 288} {
		a := make([]float32, 6*k)
		b := make([]float32, 3000)
		offs := make([]int32, k)
		for i := range a {
			a[i] = r.Float32() - 0.5
		}
		for i := range b {
			b[i] = r.Float32() - 0.5
		}
		for i := range offs {
			offs[i] = int32(r.IntN(2900))
		}
		const ldc = 21
		c0 := make([]float32, 5*ldc+16+3)
		for i := range c0 {
			c0[i] = r.Float32()
		}
		var first []float32
		for _, s := range sets {
			c := slices.Clone(c0)
			s.tile(k, &a[0], &b[1], &offs[0], &c[2], ldc)
			for i := 0; i < 6; i++ {
				for j := 0; j < 16; j++ {
					want := float64(c0[2+i*ldc+j])
					for p := 0; p < k; p++ {
						want += float64(a[6*p+i]) * float64(b[1+int(offs[p])+j])
					}
					if got := c[2+i*ldc+j]; math.Abs(float64(got)-want) > 1e-4 {
						t.Fatalf("%s k=%d: c[%d][%d] = %v, want %v", s.name, k, i, j, got, want)
					}
				}
			}
			// Nothing outside the tile is touched.
			for i := range c {
				if row, col := (i-2)/ldc, (i-2)%ldc; (i < 2 || row >= 6 || col >= 16) && c[i] != c0[i] {
					t.Fatalf("%s k=%d: wrote c[%d] outside the tile", s.name, k, i)
				}
			}
			if first == nil {
				first = c
			} else if i := firstDiff(first, c); i >= 0 {
				t.Fatalf("k=%d: %s and %s differ at %d: %v vs %v", k, sets[0].name, s.name, i, first[i], c[i])
			}
		}
	}
	for _, g := range [][4]int{{8, 1, 1, 10}, {16, 2, 1, 18}, {24, 3, 2, 30}, {40, 5, 1, 43}, {64, 4, 3, 70}} {
		ow, oh, dw, wp := g[0], g[1], g[2], g[3]
		ldk := oh*ow + 5
		gy := make([]float32, 8*ldk+3)
		// x ends exactly where the kernel's last read does (the masked
		// loads of a row's last 8 positions must not read the lanes past
		// it).
		x := make([]float32, (oh-1)*wp+ow+2*dw+1)
		for i := range gy {
			gy[i] = r.Float32() - 0.5
		}
		for i := range x {
			x[i] = r.Float32() - 0.5
		}
		want := make([]float64, 24)
		for kk := 0; kk < 8; kk++ {
			for tap := 0; tap < 3; tap++ {
				for o := 0; o < oh; o++ {
					for j := 0; j < ow; j++ {
						want[3*kk+tap] += float64(gy[1+kk*ldk+o*ow+j]) * float64(x[1+o*wp+j+tap*dw])
					}
				}
			}
		}
		for _, s := range sets {
			out := make([]float32, 12)
			for i := range out {
				out[i] = float32(i)
			}
			s.wgrad(&gy[1], ldk, &x[1], dw, wp, ow, oh, &out[0])
			for i := range out {
				if d := math.Abs(float64(out[i]) - (want[i] + float64(i))); d > 1e-4*math.Sqrt(float64(ow*oh)) {
					t.Fatalf("%s %v: out[%d] = %v, want %v", s.name, g, i, out[i], want[i]+float64(i))
				}
			}
			if s.wgrad8 == nil {
				continue
			}
			// The 8-channel kernel: the 4-channel one's sums and the next
			// four's, added to out.
			out8 := make([]float32, 24+1)
			for i := range out8 {
				out8[i] = float32(i)
			}
			s.wgrad8(&gy[1], ldk, &x[1], dw, wp, ow, oh, &out8[0])
			for i := range 24 {
				if d := math.Abs(float64(out8[i]) - (want[i] + float64(i))); d > 1e-4*math.Sqrt(float64(ow*oh)) {
					t.Fatalf("%s %v: 8x3 out[%d] = %v, want %v", s.name, g, i, out8[i], want[i]+float64(i))
				}
			}
			if out8[24] != 24 {
				t.Fatalf("%s %v: 8x3 wrote past its 24 sums", s.name, g)
			}
		}
	}
}

func firstDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// The kernels chosen follow the sgemm kernel's instruction set.
func TestConvKernelChosen(t *testing.T) {
	sets := convKernelSets()
	if len(sets) == 0 {
		t.Skip("no direct-convolution kernels on this CPU")
	}
	if !strings.HasPrefix(convKernelName, sgemmKern.name) && sgemmKern.name != "go" {
		t.Errorf("convolution kernels %q, sgemm kernel %q", convKernelName, sgemmKern.name)
	}
}
