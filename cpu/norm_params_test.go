package cpu

import (
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"math"
	"math/rand/v2"
	"testing"
)

// lnParamSums gives, bit for bit, each column's sums of gy*(x-mean)*rstd
// and of gy over the rows in order in float64, for any column range.
func TestLNParamSumsMatchRowOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sh := range [][2]int{{1, 1}, {5, 3}, {130, 9}, {300, 384}} {
		rows, cols := sh[0], sh[1]
		x, gy := make([]float32, rows*cols), make([]float32, rows*cols)
		mean, rstd := make([]float32, rows), make([]float32, rows)
		for i := range x {
			x[i], gy[i] = float32(rng.NormFloat64()*3), float32(rng.NormFloat64())
		}
		for r := range mean {
			mean[r], rstd[r] = float32(rng.NormFloat64()), float32(rng.Float64()+0.5)
		}
		for _, lo := range []int{0, 1, cols / 2} {
			w := cols - lo
			sw, sb := make([]float64, w), make([]float64, w)
			lnParamSums(sw, sb, x[lo:], gy[lo:], mean, rstd, cols, rows)
			for j := 0; j < w; j++ {
				var a, b float64
				for r := 0; r < rows; r++ {
					g := float64(gy[r*cols+lo+j])
					a += g * (float64(x[r*cols+lo+j]) - float64(mean[r])) * float64(rstd[r])
					b += g
				}
				if math.Float64bits(a) != math.Float64bits(sw[j]) || math.Float64bits(b) != math.Float64bits(sb[j]) {
					t.Fatalf("%dx%d from %d: column %d sums %g %g, want %g %g", rows, cols, lo, j, sw[j], sb[j], a, b)
				}
			}
		}
	}
}

// Layer norm's backward on a GPT block's activations ([2048, 384]).
func BenchmarkLayerNormBackward(b *testing.B) {
	const rows, cols = 2048, 384
	mk := func(s tensor.Shape) *tensor.Tensor {
		t := tensor.New(tensor.Float32, s)
		for i := range t.F32() {
			t.F32()[i] = float32(i%13) * 0.1
		}
		return t
	}
	sh := tensor.Shape{rows, cols}
	in := []*tensor.Tensor{mk(sh), mk(sh), mk(tensor.Shape{rows, 1}), mk(tensor.Shape{rows, 1}), mk(tensor.Shape{cols})}
	out := []*tensor.Tensor{mk(sh), mk(tensor.Shape{cols}), mk(tensor.Shape{cols})}
	n := &trace.Node{Op: &prim.LayerNormBackward{Dims: 1, HasWeight: true, HasBias: true}}
	pool := parallel.NewPool(1)
	defer pool.Close()
	ws := make([]byte, 16*cols)
	for b.Loop() {
		if err := runOn(pool, n, in, out, ws); err != nil {
			b.Fatal(err)
		}
	}
}
