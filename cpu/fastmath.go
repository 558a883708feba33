package cpu

import (
	"math"

	"github.com/headroom-ml/headroom/cpu/internal/vec"
)

// Float32 transcendental functions for the hot elementwise kernels, written
// as PyTorch's vectorized CPU kernels compute them (ATen's Vectorized<float>
// with Sleef), so that float32 results agree with PyTorch's to about an ulp
// and cost a fraction of math's float64 functions. float64 kernels keep the
// math package.

// expf is e**x in float32 (Cephes' expf: range reduction by ln 2 and a
// degree-6 polynomial; within 2 ulp). It returns +Inf above 88.72, 0 below
// -103.97 and subnormals between, and propagates NaN.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	switch {
	case x != x:
		return x
	case x > 88.72283905206835:
		return float32(math.Inf(1))
	case x < -103.972076:
		return 0
	}
	// n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2].
	fn := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - fn*ln2hi - fn*ln2lo
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	y := p*r*r + r + 1
	n := int32(fn)
	if n > 127 {
		return y * math.Float32frombits(254<<23) * 2
	}
	if n < -126 {
		// Scale in two steps so that the result may be subnormal.
		return y * math.Float32frombits(uint32(n+126+127)<<23) * math.Float32frombits(1<<23)
	}
	return y * math.Float32frombits(uint32(n+127)<<23)
}

// erff is the error function in float32 as ATen's Vectorized<float>::erf
// computes it: Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7),
// evaluated in float32 (below 6e-7 in all).
func erff(x float32) float32 { return erfWithExp(x, expf(-x*x)) }

// erfWithExp is erff given e = exp(-x*x). It has no data-dependent
// branches (the sign is applied with bit operations), which matters more
// than its arithmetic: on random inputs a branch on the sign is
// mispredicted half the time.
func erfWithExp(x, e float32) float32 {
	const (
		p  = 0.3275911
		p1 = 0.254829592
		p2 = -0.284496736
		p3 = 1.421413741
		p4 = -1.453152027
		p5 = 1.061405429
	)
	bits := math.Float32bits(x)
	a := math.Float32frombits(bits &^ (1 << 31))
	t := 1 / (p*a + 1)
	r := (((p5*t+p4)*t+p3)*t+p2)*t + p1
	v := 1 - r*t*e
	return math.Float32frombits(math.Float32bits(v) ^ bits&(1<<31))
}

// posMask is all ones where v > 0 (not for NaN) and zero elsewhere,
// computed without branches.
func posMask(v float32) uint32 {
	b := int64(int32(math.Float32bits(v)))
	return uint32(^((b - 1) >> 63)) &^ nanMask(v)
}

// nanMask is all ones where v is a NaN and zero elsewhere.
func nanMask(v float32) uint32 {
	a := int64(math.Float32bits(v) & 0x7fffffff)
	return uint32((0x7f800000 - a) >> 63)
}

// selectF32 is a where mask is all ones, b where it is zero.
func selectF32(mask uint32, a, b float32) float32 {
	ab, bb := math.Float32bits(a), math.Float32bits(b)
	return math.Float32frombits(bb ^ (ab^bb)&mask)
}

// reluF32 is max(x, 0), NaN propagating; -0 becomes 0.
func reluF32(x, y []float32) {
	y = y[:len(x)]
	done := vec.ReLU(x, y)
	x, y = x[done:], y[done:]
	for i, v := range x {
		y[i] = max(v, 0)
	}
}

// reluBackwardF32 passes g where the output s is positive or NaN, as
// PyTorch's threshold_backward does.
func reluBackwardF32(g, s, y []float32) {
	g, y = g[:len(s)], y[:len(s)]
	done := vec.ReLUBackward(g, s, y)
	g, s, y = g[done:], s[done:], y[done:]
	for i, v := range s {
		m := posMask(v) | nanMask(v)
		y[i] = math.Float32frombits(math.Float32bits(g[i]) & m)
	}
}

// leakyReLUF32 is x where x > 0, else c*x.
func leakyReLUF32(x, y []float32, c float32) {
	y = y[:len(x)]
	done := vec.LeakyReLU(nil, x, y, c)
	x, y = x[done:], y[done:]
	for i, v := range x {
		y[i] = v * selectF32(posMask(v), 1, c)
	}
}

// leakyReLUBackwardF32 is g where the input s > 0, else c*g.
func leakyReLUBackwardF32(g, s, y []float32, c float32) {
	g, y = g[:len(s)], y[:len(s)]
	done := vec.LeakyReLU(g, s, y, c)
	g, s, y = g[done:], s[done:], y[done:]
	for i, v := range s {
		y[i] = g[i] * selectF32(posMask(v), 1, c)
	}
}

const (
	sqrtHalf32   = float32(0.70710678118654752440)
	invSqrt2Pi32 = float32(0.39894228040143267794) // 1/sqrt(2*pi)
)

// geluF32 is y = x*0.5*(1+erf(x/sqrt 2)) over float32s, as PyTorch's
// GeluKernel computes it.
func geluF32(x, y []float32) {
	y = y[:len(x)]
	done := vec.GELU(x, y)
	x, y = x[done:], y[done:]
	for i, v := range x {
		y[i] = v * 0.5 * (1 + erff(v*sqrtHalf32))
	}
}

// geluBackwardF32 is the gradient of geluF32: g*(cdf(x) + x*pdf(x)). One
// exponential serves both: exp(-x²/2) is the pdf's and, as exp(-(x/√2)²),
// erf's.
func geluBackwardF32(g, x, y []float32) {
	g, y = g[:len(x)], y[:len(x)]
	done := vec.GELUBackward(g, x, y)
	g, x, y = g[done:], x[done:], y[done:]
	for i, v := range x {
		h := v * sqrtHalf32
		e := expf(-h * h)
		cdf := 0.5 * (1 + erfWithExp(h, e))
		pdf := e * invSqrt2Pi32
		y[i] = g[i] * (cdf + v*pdf)
	}
}
