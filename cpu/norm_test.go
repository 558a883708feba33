package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Batch norm's one-pass statistics (Σx and Σx² in float64) give the saved
// mean and inverse standard deviation of a float64 two-pass reference to
// within float32 rounding, also where the mean is large against the
// spread (the cancellation in Σx² - m·Σx) or the channel is constant.
func TestBatchNormStatsOnePass(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mean, std  float64
		n, c, h, w int
	}{
		{"unit", 0, 1, 4, 3, 5, 7},
		{"offset", 300, 0.5, 8, 4, 8, 8},
		{"narrow", -2, 1e-3, 2, 5, 16, 16},
		{"constant", 7, 0, 3, 2, 4, 4},
		{"short planes", 1, 2, 5, 6, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 6))
			x := tensor.New(tensor.Float32, tensor.Shape{tc.n, tc.c, tc.h, tc.w})
			for i := range x.F32() {
				x.F32()[i] = float32(tc.mean + tc.std*r.NormFloat64())
			}
			k := newKernelCase(t, &prim.BatchNormOp{Training: true, Eps: 1e-5}, trace.Meta{DType: tensor.Float32, Shape: x.Shape})
			k.in[0] = x
			k.run(t)
			S := tc.h * tc.w
			for c := 0; c < tc.c; c++ {
				var s float64
				for i := 0; i < tc.n; i++ {
					for _, v := range x.F32()[(i*tc.c+c)*S:][:S] {
						s += float64(v)
					}
				}
				m := s / float64(tc.n*S)
				var q float64
				for i := 0; i < tc.n; i++ {
					for _, v := range x.F32()[(i*tc.c+c)*S:][:S] {
						q += (float64(v) - m) * (float64(v) - m)
					}
				}
				inv := 1 / math.Sqrt(q/float64(tc.n*S)+1e-5)
				gotM, gotInv := float64(k.out[1].F32()[c]), float64(k.out[2].F32()[c])
				if math.Abs(gotM-m) > 2e-7*math.Abs(m)+1e-12 || math.Abs(gotInv-inv) > 2e-7*inv {
					t.Errorf("channel %d: mean %v invstd %v, want %v %v", c, gotM, gotInv, m, inv)
				}
			}
		})
	}
}
