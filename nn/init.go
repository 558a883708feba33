package nn

import (
	"math"
	"math/rand"

	"github.com/headroom-ml/headroom/tensor"
)

// Uniform fills with U(-bound, bound).
func Uniform(bound float64) func(*rand.Rand, *tensor.Tensor) {
	return func(r *rand.Rand, t *tensor.Tensor) {
		for i := range t.F32() {
			t.F32()[i] = float32((2*r.Float64() - 1) * bound)
		}
	}
}

// Normal fills with N(mean, std²).
func Normal(mean, std float64) func(*rand.Rand, *tensor.Tensor) {
	return func(r *rand.Rand, t *tensor.Tensor) {
		for i := range t.F32() {
			t.F32()[i] = float32(mean + std*r.NormFloat64())
		}
	}
}

// Constant fills with v (any dtype).
func Constant(v float64) func(*rand.Rand, *tensor.Tensor) {
	return func(_ *rand.Rand, t *tensor.Tensor) {
		n := t.Shape.NumElements()
		c := make([]float64, n)
		for i := range c {
			c[i] = v
		}
		copy(t.Data, tensor.FromFloat64(t.Shape, c).Convert(t.DType).Data)
	}
}

// KaimingUniformDefault is PyTorch's default weight init for Linear and
// Conv2d: kaiming_uniform_(a=sqrt(5)), which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
func KaimingUniformDefault(fanIn int) func(*rand.Rand, *tensor.Tensor) {
	gain := math.Sqrt(2.0 / (1 + 5.0))
	return Uniform(gain * math.Sqrt(3.0/float64(fanIn)))
}

// BiasDefault is PyTorch's default bias init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
func BiasDefault(fanIn int) func(*rand.Rand, *tensor.Tensor) {
	if fanIn <= 0 {
		return Constant(0)
	}
	return Uniform(1 / math.Sqrt(float64(fanIn)))
}
