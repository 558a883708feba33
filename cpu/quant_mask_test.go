package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/tensor"
)

// maskSpecials are the values whose sign test is easy to get wrong by
// their bits: both zeros and NaNs, subnormals, infinities, the largest
// finite values.
var maskSpecials = []float64{math.NaN(), -math.NaN(), math.Copysign(0, -1), 0, 1e-45, -1e-45, 5e-324, -5e-324,
	math.Inf(1), math.Inf(-1), 3e38, -3e38, math.MaxFloat64, -math.MaxFloat64, 1, -1}

// The branch-free mask kernels give what the element-by-element tests
// give: bit i is x[i] > 0 (or NaN unless strict), for float32 and float64,
// over lengths that end inside a byte and span several parallel ranges;
// the backward passes keep gy bit for bit where the bit is set and give
// +0 (ReLU) or gy·slope (LeakyReLU) elsewhere.
func TestMaskKernelsMatchElementwise(t *testing.T) {
	pool := parallel.NewPool(2)
	defer pool.Close()
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 7, 8, 13, 64, dropGrain*8*2 + 5} {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = r.NormFloat64()
			if i < len(maskSpecials) && n > len(maskSpecials) {
				xs[i] = maskSpecials[i]
			}
		}
		x32 := make([]float32, n)
		for i, v := range xs {
			x32[i] = float32(v)
		}
		for _, strict := range []bool{false, true} {
			for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
				in := tensor.FromFloat64(tensor.Shape{n}, xs)
				if dt == tensor.Float32 {
					in = tensor.FromFloat32(tensor.Shape{n}, x32)
				}
				out := tensor.New(tensor.Uint8, tensor.Shape{(n + 7) / 8})
				var err error
				if dt == tensor.Float32 {
					err = packMaskKernel[float32](pool, strict, []*tensor.Tensor{in}, []*tensor.Tensor{out})
				} else {
					err = packMaskKernel[float64](pool, strict, []*tensor.Tensor{in}, []*tensor.Tensor{out})
				}
				if err != nil {
					t.Fatal(err)
				}
				for i := range n {
					v := xs[i]
					if dt == tensor.Float32 {
						v = float64(x32[i])
					}
					want := v > 0 || !strict && v != v
					if got := out.Data[i/8]>>(i%8)&1 == 1; got != want {
						t.Fatalf("n %d, strict %v, %v: element %d (%v) has bit %v, want %v", n, strict, dt, i, v, got, want)
					}
				}
				if dt != tensor.Float32 {
					continue
				}
				gy := make([]float32, n)
				for i := range gy {
					gy[i] = float32(r.NormFloat64())
				}
				copy(gy, []float32{float32(math.NaN()), float32(math.Inf(-1)), 1e-45, float32(math.Copysign(0, -1))})
				gx := make([]float32, n)
				maskBackwardF32(gx, gy, out.Data, 0, false)
				const slope = 0.2
				lx := make([]float32, n)
				maskBackwardF32(lx, gy, out.Data, slope, true)
				for i := range n {
					set := out.Data[i/8]>>(i%8)&1 == 1
					want, lwant := float32(0), gy[i]*float32(slope)
					if set {
						want, lwant = gy[i], gy[i]*1
					}
					if math.Float32bits(gx[i]) != math.Float32bits(want) || math.Float32bits(lx[i]) != math.Float32bits(lwant) {
						t.Fatalf("n %d: element %d: relu %v, leaky %v; want %v, %v", n, i, gx[i], lx[i], want, lwant)
					}
				}
			}
		}
	}
}

func BenchmarkPackMask(b *testing.B) {
	pool := parallel.NewPool(1)
	defer pool.Close()
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 1<<21)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	in := tensor.FromFloat32(tensor.Shape{len(x)}, x)
	out := tensor.New(tensor.Uint8, tensor.Shape{len(x) / 8})
	gx := make([]float32, len(x))
	b.Run("pack", func(b *testing.B) {
		for range b.N {
			packMaskKernel[float32](pool, false, []*tensor.Tensor{in}, []*tensor.Tensor{out})
		}
	})
	b.Run("relu_backward", func(b *testing.B) {
		for range b.N {
			maskBackwardF32(gx, x, out.Data, 0, false)
		}
	})
	b.Run("leaky_backward", func(b *testing.B) {
		for range b.N {
			maskBackwardF32(gx, x, out.Data, 0.2, true)
		}
	})
}
