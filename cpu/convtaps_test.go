package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
)

// The tap-pair convolution (forward and input gradient) agrees with the
// convolution's definition summed in float64, and its results do not
// depend on the thread count (on every geometry, whether convTapsPlan
// would choose it or not).
func TestConvTaps(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		n, c, h, w, k, kh, kw, s, ph, pw, d int
	}{
		{32, 40, 2, 2, 30, 3, 3, 1, 1, 1, 1}, // resnet18's last stage, smaller
		{17, 33, 4, 4, 25, 3, 3, 2, 1, 1, 1}, // stride 2, images not a panel multiple
		{5, 7, 4, 4, 9, 3, 3, 1, 1, 1, 1},    // few images
		{16, 8, 3, 5, 6, 3, 2, 1, 1, 0, 2},   // dilation, rectangular kernel
		{20, 12, 1, 1, 10, 3, 3, 1, 1, 1, 1}, // one position: the centre tap only
		{16, 5, 3, 3, 4, 5, 5, 1, 2, 2, 1},   // 5x5 on 3x3
		{18, 26, 2, 3, 50, 3, 3, 2, 1, 1, 1}, // strided, rows of 2 and 1
		{16, 4, 6, 2, 3, 3, 3, 1, 1, 1, 1},   // 6x2
	} {
		name := fmt.Sprintf("%+v", tc)
		opts := op.ConvOpts{Stride: [2]int{tc.s, tc.s}, Padding: [2]int{tc.ph, tc.pw}, Dilation: [2]int{tc.d, tc.d}}
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.w}, tensor.Shape{tc.k, tc.c, tc.kh, tc.kw}, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ct := newConvTaps(g)
		rnd := func(n int) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			return v
		}
		P, T := g.OH*g.OW, g.KH*g.KW
		x, w, bias, gy := rnd(g.N*g.C*g.H*g.W), rnd(g.K*g.C*T), rnd(g.K), rnd(g.N*g.K*P)
		// The definition in float64.
		wantY, wantX := make([]float64, len(gy)), make([]float64, len(x))
		for img := 0; img < g.N; img++ {
			for k := 0; k < g.K; k++ {
				for o := 0; o < P; o++ {
					oh, ow := o/g.OW, o%g.OW
					y := float64(bias[k])
					for c := 0; c < g.C; c++ {
						for kh := 0; kh < g.KH; kh++ {
							for kw := 0; kw < g.KW; kw++ {
								ih, iw := oh*g.SH-g.PH+kh*g.DH, ow*g.SW-g.PW+kw*g.DW
								if ih < 0 || ih >= g.H || iw < 0 || iw >= g.W {
									continue
								}
								xi := ((img*g.C+c)*g.H+ih)*g.W + iw
								wi := ((k*g.C+c)*g.KH+kh)*g.KW + kw
								e := float64(gy[(img*g.K+k)*P+o])
								y += float64(w[wi]) * float64(x[xi])
								wantX[xi] += float64(w[wi]) * e
							}
						}
					}
					wantY[(img*g.K+k)*P+o] = y
				}
			}
		}
		var ref [2][]float32
		for _, threads := range []int{1, 2, 3} {
			pool := parallel.NewPool(threads)
			gotY, gotX := make([]float32, len(gy)), make([]float32, len(x))
			ct.forward(pool, x, w, bias, gotY, make([]float32, ct.bScratch(false)))
			ct.inputGrad(pool, gy, w, gotX, make([]float32, ct.bScratch(true)))
			for i, c := range []struct {
				what  string
				got   []float32
				want  []float64
				inner int
			}{{"forward", gotY, wantY, g.C * T}, {"input gradient", gotX, wantX, g.K * T}} {
				for j := range c.want {
					// float32 rounding of a sum of inner products of unit normals.
					if d := math.Abs(float64(c.got[j]) - c.want[j]); d > 1e-6*float64(c.inner)+1e-5*math.Abs(c.want[j]) {
						t.Fatalf("%s %s (%d threads): element %d: got %v, want %v", name, c.what, threads, j, c.got[j], c.want[j])
					}
				}
				if ref[i] == nil {
					ref[i] = c.got
				} else {
					for j := range c.got {
						if math.Float32bits(c.got[j]) != math.Float32bits(ref[i][j]) {
							t.Fatalf("%s %s: element %d differs with %d threads: %v, not %v", name, c.what, j, threads, c.got[j], ref[i][j])
						}
					}
				}
			}
			pool.Close()
		}
	}
}
