// Package vec holds vectorized (AVX2+FMA assembly) loops over float32
// slices for the cpu backend's elementwise kernels. Each function processes
// the longest prefix of its slices that is a multiple of its vector width
// and returns that length; the caller finishes the rest (and everything,
// where the CPU or the build has no assembly: -tags purego, non-amd64) with
// its portable Go loop, which computes the same formulas.
package vec

import "math"

// Enabled reports whether the assembly loops run on this CPU.
func Enabled() bool { return enabled }

// GELU sets y[i] = x[i]*0.5*(1+erf(x[i]/√2)) for a prefix of x and returns
// its length. erf is Abramowitz and Stegun 7.1.26 with exp by Cephes'
// polynomial, as ATen's Vectorized<float> computes them.
func GELU(x, y []float32) int {
	n := len(x) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_ = y[n-1]
	m := 0
	if use512 {
		// 16 lanes at a time, a last 8 by the AVX2 loop (the same bits).
		if m = n &^ 15; m > 0 {
			gelu512(&x[0], &y[0], m)
		}
	}
	if m < n {
		geluAVX2(&x[m], &y[m], n-m)
	}
	return n
}

// BiasGELUBF16 is bf16-mixed gpt's c_fc epilogue in one pass over a
// prefix of c (a multiple of 8 long, returned; 0 without AVX-512): v =
// c+bias, h = v rounded to bfloat16, g = GELU(h) rounded to bfloat16,
// each step with the bits of the loops a fused program runs one after
// the other (an add, gemm.NarrowBF16, a widening, GELU, gemm.NarrowBF16).
func BiasGELUBF16(c, bias []float32, h, g []uint16) int {
	n := len(c) &^ 7
	if !use512 || n == 0 {
		return 0
	}
	_, _, _ = bias[n-1], h[n-1], g[n-1]
	biasGeluBF16x512(&c[0], &bias[0], &h[0], &g[0], n)
	return n
}

// BiasGELUBF16Enabled reports whether BiasGELUBF16 runs (AVX-512).
func BiasGELUBF16Enabled() bool { return use512 }

// GELUBackward sets y[i] = g[i]*(cdf(x[i]) + x[i]*pdf(x[i])), the gradient
// of GELU, for a prefix of x and returns its length.
func GELUBackward(g, x, y []float32) int {
	n := len(x) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_ = y[n-1]
	_ = g[n-1]
	m := 0
	if use512 {
		if m = n &^ 15; m > 0 {
			geluBackward512(&g[0], &x[0], &y[0], m)
		}
	}
	if m < n {
		geluBackwardAVX2(&g[m], &x[m], &y[m], n-m)
	}
	return n
}

// AdamConsts are the per-step scalars of an Adam update, already rounded to
// float32 as PyTorch rounds them.
type AdamConsts struct {
	B1, OmB1 float32 // beta1, 1-beta1
	B2, OmB2 float32 // beta2, 1-beta2
	BC2Sqrt  float32 // sqrt(1 - beta2**step)
	Eps      float32
	NegStep  float32 // -lr / (1 - beta1**step)
	Decay    float32 // AdamW's 1 - lr*weight_decay (1 for Adam)
}

// Adam applies PyTorch 1.13's single-tensor Adam update (no L2 weight
// decay, no AMSGrad, no maximize; AdamW's decoupled decay through Decay) to
// a prefix of the parameters v with gradients g, moments m and s, and
// returns its length:
//
//	v = v*Decay
//	m = fma(g, 1-beta1, m*beta1)
//	s = fma((1-beta2)*g, g, s*beta2)
//	v = v + (negStep*m) / (sqrt(s)/bc2sqrt + eps)
//
// with every operation rounded to float32 as in PyTorch (the fused
// multiply-adds are those of ATen's vectorized add with alpha and addcmul).
func Adam(v, g, m, s []float32, c *AdamConsts) int {
	n := len(v) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_, _, _ = g[n-1], m[n-1], s[n-1]
	adamAVX2(&v[0], &g[0], &m[0], &s[0], n, c)
	return n
}

// ExpAffine sets y[i] = exp(x[i]*a + b) for a prefix of x and returns its
// length. The argument x*a+b is rounded to float32 (one fused multiply-add)
// and clamped to [-87.34, 88.38]: tiny results are about 1e-38 rather than
// 0, huge ones about 2.4e38 rather than +Inf. x and y may be the same
// slice.
func ExpAffine(x, y []float32, a, b float32) int {
	n := len(x) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_ = y[n-1]
	ab := [2]float32{a, b}
	expAffineAVX2(&x[0], &y[0], n, &ab)
	return n
}

// ReLU sets y = x where x > 0 or x is a NaN, else +0, for a prefix of x,
// and returns its length.
func ReLU(x, y []float32) int {
	n := len(x) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_ = y[n-1]
	reluAVX2(&x[0], &y[0], n)
	return n
}

// ReLUBackward sets y = g where s > 0 or s is a NaN, else +0 (PyTorch's
// threshold_backward on the output s), for a prefix and returns its length.
func ReLUBackward(g, s, y []float32) int {
	n := len(s) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_, _ = g[n-1], y[n-1]
	reluBackwardAVX2(&g[0], &s[0], &y[0], n)
	return n
}

// LeakyReLU sets y = x*k with k = 1 where x > 0, else c (for the input
// x), or the gradient y = g*k for the input x when g is not nil, for a
// prefix and returns its length.
func LeakyReLU(g, x, y []float32, c float32) int {
	n := len(x) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_ = y[n-1]
	var gp *float32
	if g != nil {
		_ = g[n-1]
		gp = &g[0]
	}
	leakyAVX2(gp, &x[0], &y[0], n, c)
	return n
}

// SumX returns the float64 sum of a prefix of x and its length.
func SumX(x []float32) (float64, int) {
	n := len(x) &^ 15
	if !enabled || n == 0 {
		return 0, 0
	}
	var out [2]float64
	sumsAVX2(nil, &x[0], n, 1, 0, 0, &out, 0)
	return out[0], n
}

// SumSqDev returns the float64 sum of (x-m)² over a prefix of x and its
// length.
func SumSqDev(x []float32, m float64) (float64, int) {
	n := len(x) &^ 15
	if !enabled || n == 0 {
		return 0, 0
	}
	var out [2]float64
	sumsAVX2(nil, &x[0], n, 1, 0, m, &out, 1)
	return out[0], n
}

// SumDot returns the float64 sums of g and of g*(x-m) over a prefix of
// length n (returned) of g and x.
func SumDot(g, x []float32, m float64) (sg, sd float64, n int) {
	n = len(g) &^ 15
	if !enabled || n == 0 {
		return 0, 0, 0
	}
	_ = x[n-1]
	var out [2]float64
	sumsAVX2(&g[0], &x[0], n, 1, 0, m, &out, 2)
	return out[0], out[1], n
}

// Affine sets y = x*a + b (one rounding per operation, no fused
// multiply-add) for a prefix and returns its length.
func Affine(x, y []float32, a, b float32) int {
	n := len(x) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_ = y[n-1]
	c := [4]float32{a, b}
	normAVX2(nil, &x[0], &y[0], n, 1, 0, &c, 0)
	return n
}

// LayerNormAffine sets y = (x*a + c)*w + b (one rounding per operation,
// no fused multiply-add), a layer norm's output row, for a prefix and
// returns its length.
func LayerNormAffine(x, w, b, y []float32, a, c float32) int {
	n := len(x) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_, _, _ = w[n-1], b[n-1], y[n-1]
	k := [2]float32{a, c}
	lnAffineAVX2(&x[0], &w[0], &b[0], &y[0], n, &k)
	return n
}

// NormGrad sets y = (g - gm - (x-m)*k) * s, the input gradient of a
// normalization, for a prefix and returns its length.
func NormGrad(g, x, y []float32, gm, m, k, s float32) int {
	n := len(x) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_, _ = g[n-1], y[n-1]
	c := [4]float32{gm, m, k, s}
	normAVX2(&g[0], &x[0], &y[0], n, 1, 0, &c, 1)
	return n
}

// planesLen checks that planes planes of n elements, stride elements
// apart, lie within a slice of length l.
func planesLen(l, n, stride, planes int) {
	if planes > 0 && n > 0 && (planes-1)*stride+n > l {
		panic("vec: planes past the end of a slice")
	}
}

// SumDotPlanes is SumDot over the same prefix (n, returned: size rounded
// down to 16) of each of planes planes of size elements, stride elements
// apart in g and x, summed together: one call, and one reduction of the
// accumulators, for a batch norm channel's planes (4×4 and 8×8 planes
// paid for a call and a reduction every 16 or 64 elements).
func SumDotPlanes(g, x []float32, size, stride, planes int, m float64) (sg, sd float64, n int) {
	n = size &^ 15
	if !enabled || n == 0 || planes <= 0 {
		return 0, 0, 0
	}
	planesLen(len(g), n, stride, planes)
	planesLen(len(x), n, stride, planes)
	var out [2]float64
	sumsAVX2(&g[0], &x[0], n, planes, stride, m, &out, 2)
	return out[0], out[1], n
}

// AffinePlanes is Affine over the same prefix (returned: size rounded
// down to 8) of each of planes planes stride elements apart in x and y.
func AffinePlanes(x, y []float32, size, stride, planes int, a, b float32) int {
	n := size &^ 7
	if !enabled || n == 0 || planes <= 0 {
		return 0
	}
	planesLen(len(x), n, stride, planes)
	planesLen(len(y), n, stride, planes)
	c := [4]float32{a, b}
	normAVX2(nil, &x[0], &y[0], n, planes, stride, &c, 0)
	return n
}

// NormGradPlanes is NormGrad over the same prefix (returned: size rounded
// down to 8) of each of planes planes stride elements apart in g, x and y.
func NormGradPlanes(g, x, y []float32, size, stride, planes int, gm, m, k, s float32) int {
	n := size &^ 7
	if !enabled || n == 0 || planes <= 0 {
		return 0
	}
	planesLen(len(g), n, stride, planes)
	planesLen(len(x), n, stride, planes)
	planesLen(len(y), n, stride, planes)
	c := [4]float32{gm, m, k, s}
	normAVX2(&g[0], &x[0], &y[0], n, planes, stride, &c, 1)
	return n
}

// SumDotPlanesBF16 is SumDotPlanes with x in bfloat16 (its values
// widened exactly), and g = x where g is nil.
func SumDotPlanesBF16(g []float32, x []uint16, size, stride, planes int, m float64) (sg, sd float64, n int) {
	n = size &^ 15
	if !enabled || n == 0 || planes <= 0 {
		return 0, 0, 0
	}
	planesLen(len(x), n, stride, planes)
	var out [2]float64
	if g == nil {
		sumsBF16AVX2(nil, &x[0], n, planes, stride, m, &out, 0)
	} else {
		planesLen(len(g), n, stride, planes)
		sumsBF16AVX2(&g[0], &x[0], n, planes, stride, m, &out, 1)
	}
	return out[0], out[1], n
}

// AffinePlanesBF16 is AffinePlanes with x in bfloat16.
func AffinePlanesBF16(x []uint16, y []float32, size, stride, planes int, a, b float32) int {
	n := size &^ 7
	if !enabled || n == 0 || planes <= 0 {
		return 0
	}
	planesLen(len(x), n, stride, planes)
	planesLen(len(y), n, stride, planes)
	c := [4]float32{a, b}
	normBF16AVX2(nil, &x[0], &y[0], n, planes, stride, &c, 0)
	return n
}

// NormGradPlanesBF16 is NormGradPlanes with x in bfloat16.
func NormGradPlanesBF16(g []float32, x []uint16, y []float32, size, stride, planes int, gm, m, k, s float32) int {
	n := size &^ 7
	if !enabled || n == 0 || planes <= 0 {
		return 0
	}
	planesLen(len(g), n, stride, planes)
	planesLen(len(x), n, stride, planes)
	planesLen(len(y), n, stride, planes)
	c := [4]float32{gm, m, k, s}
	normBF16AVX2(&g[0], &x[0], &y[0], n, planes, stride, &c, 1)
	return n
}

// LayerNormGrad sets y = (g*w - gm - (x-m)*k) * s (one rounding per
// operation), a layer norm's input gradient, for a prefix and returns its
// length.
func LayerNormGrad(g, w, x, y []float32, gm, m, k, s float32) int {
	n := len(x) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_, _, _ = g[n-1], w[n-1], y[n-1]
	c := [4]float32{gm, m, k, s}
	lnGradAVX2(&g[0], &w[0], &x[0], &y[0], n, &c)
	return n
}

// LayerNormRowSums continues a layer norm backward's row sums over a
// prefix of g, w and x and returns its length: with G =
// float64(g[j])*float64(w[j]), s[0] and s[1] add G over the even and odd
// j, s[2] and s[3] add G*(float64(x[j])-m), in order of j, each operation
// rounded: the scalar loop's four chains, bit for bit.
func LayerNormRowSums(g, w, x []float32, m float64, s *[4]float64) int {
	n := len(x) &^ 3
	if !enabled || n == 0 {
		return 0
	}
	_, _ = g[n-1], w[n-1]
	lnRowSumsAVX2(&g[0], &w[0], &x[0], n, m, s)
	return n
}

// ScoreGrad sets y = p * (g - d) * s (one rounding per operation), an
// attention score gradient from its probability p and dP g, for a prefix
// and returns its length (y may be g).
func ScoreGrad(p, g, y []float32, d, s float32) int {
	n := len(p) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_, _ = g[n-1], y[n-1]
	c := [4]float32{d, s}
	normAVX2(&g[0], &p[0], &y[0], n, 1, 0, &c, 2)
	return n
}

// Add sets y = a + b for a prefix and returns its length (y may be a or b).
func Add(a, b, y []float32) int {
	n := len(a) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_, _ = b[n-1], y[n-1]
	addAVX2(&a[0], &b[0], &y[0], n)
	return n
}

// PackMask sets bit k of mask[b] where x[8b+k] > 0, or is a NaN unless
// strict (ReLU's saved mask; LeakyReLU's is strict), for a prefix of x (a
// multiple of 8) and returns its length.
func PackMask(x []float32, mask []byte, strict bool) int {
	n := min(len(x), 8*len(mask)) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	packMaskAVX2(&x[0], &mask[0], n, strict)
	return n
}

// MaskBackward sets y[i] = gy[i] where bit i of mask is set, else +0
// (ReLU's backward from its mask), or with leaky y[i] = gy[i]*1 where it
// is set, else gy[i]*c, for a prefix of gy (a multiple of 8) and returns
// its length.
func MaskBackward(gy, y []float32, mask []byte, c float32, leaky bool) int {
	n := min(len(gy), 8*len(mask)) &^ 7
	if !enabled || n == 0 {
		return 0
	}
	_ = y[n-1]
	maskBackwardAVX2(&gy[0], &y[0], &mask[0], n, c, leaky)
	return n
}

// MaxPool3s2 is max pooling 3×3 at stride 2, padding 1, of outputs
// [ow0, ow0+8n) of output row oh of a plane x (row length w): windows
// inside the plane only (oh ≥ 1, ow0 ≥ 1, rows 2oh-1..2oh+1 and columns
// up to 2(ow0+8n)-1 in the plane). Each window is scanned as PyTorch's
// loop does (rows, then columns; a value replaces the best only if
// greater, so the first maximum wins and -0 and +0 are equal), 8 windows
// at a time; y and idx get each maximum and its index in the plane. It
// reports false, with y and idx unspecified, if a value read was a NaN
// (the loop's result then depends on where it is), or without AVX2.
func MaxPool3s2(x []float32, w, oh, ow0, n int, y []float32, idx []int64) bool {
	if n <= 0 {
		return enabled
	}
	ih := 2*oh - 1
	if !enabled || (ih+3)*w > math.MaxInt32 {
		return false // no AVX2, or indices past the kernel's int32 lanes
	}
	last := (ih+2)*w + 2*(ow0+8*n) - 1 // the last value read
	if oh < 1 || ow0 < 1 || 2*(ow0+8*n)-1 >= w || last >= len(x) || len(y) < 8*n || len(idx) < 8*n {
		panic("vec: MaxPool3s2 window outside the plane")
	}
	c := 2*ow0 - 2
	ib := [3]int32{int32(ih*w + c + 2), int32((ih+1)*w + c + 2), int32((ih+2)*w + c + 2)}
	return !maxPool3s2AVX2(&x[ih*w+c], &x[(ih+1)*w+c], &x[(ih+2)*w+c], n, &y[0], &idx[0], &ib)
}
