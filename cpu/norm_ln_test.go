package cpu

import (
	"math"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
)

// The layer norm's input, weight and bias gradients are, bit for bit,
// the scalar loops' (rows' sums in float64 in two chains, the input
// gradient in float32, the weight and bias gradients each column's rows
// in order in float64), whatever of them runs vectorized, for widths with
// and without a vector tail and 1 to 3 threads.
func TestLayerNormBackwardMatchesScalar(t *testing.T) {
	for _, m := range []int{384, 13, 40} {
		ln, lc, rows := f32(6, 37, m), f32(m), f32(6, 37, 1)
		k := newKernelCase(t, &prim.LayerNormBackward{Dims: 1, HasWeight: true, HasBias: true}, ln, ln, rows, rows, lc)
		for i, v := range k.in[3].F32() {
			k.in[3].F32()[i] = 1 + v*v // rstd
		}
		gy, x, mean, rstd, w := k.in[0].F32(), k.in[1].F32(), k.in[2].F32(), k.in[3].F32(), k.in[4].F32()
		R := len(mean)
		gx := make([]float32, len(x))
		sw, sb := make([]float64, m), make([]float64, m)
		for r := range R {
			xs, gs := x[r*m:(r+1)*m], gy[r*m:(r+1)*m]
			mr, rs := float64(mean[r]), float64(rstd[r])
			var a, a1, d, d1 float64
			j := 0
			for ; j+1 < m; j += 2 {
				g0, g1 := float64(gs[j])*float64(w[j]), float64(gs[j+1])*float64(w[j+1])
				a += g0
				a1 += g1
				d += g0 * (float64(xs[j]) - mr)
				d1 += g1 * (float64(xs[j+1]) - mr)
			}
			for ; j < m; j++ {
				g := float64(gs[j]) * float64(w[j])
				a += g
				d += g * (float64(xs[j]) - mr)
			}
			a, d = a+a1, d+d1
			ca, cb := float32(a/float64(m)), float32(d*rs*rs/float64(m))
			for j, v := range xs {
				gx[r*m+j] = rstd[r] * (gs[j]*w[j] - ca - (v-mean[r])*cb)
				gd := float64(gs[j])
				sw[j] += gd * (float64(v) - mr) * rs
				sb[j] += gd
			}
		}
		for _, threads := range []int{1, 2, 3} {
			pool := parallel.NewPool(threads)
			err := runOn(pool, k.n, k.in, k.out, k.ws)
			pool.Close()
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range k.out[0].F32() {
				if math.Float32bits(v) != math.Float32bits(gx[i]) {
					t.Fatalf("width %d, %d threads: dx[%d] = %v, want %v", m, threads, i, v, gx[i])
				}
			}
			for j := range m {
				if gw, gb := k.out[1].F32()[j], k.out[2].F32()[j]; math.Float32bits(gw) != math.Float32bits(float32(sw[j])) || math.Float32bits(gb) != math.Float32bits(float32(sb[j])) {
					t.Fatalf("width %d, %d threads: dw, db[%d] = %v, %v, want %v, %v", m, threads, j, gw, gb, float32(sw[j]), float32(sb[j]))
				}
			}
		}
	}
}
