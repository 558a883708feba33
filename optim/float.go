package optim

import (
	"math"
	"strconv"
	"strings"
)

// fma32 is a*b+c rounded once to float32, as the fused multiply-add that
// PyTorch's AVX2 CPU kernels use for add(x, y, alpha=a) and friends.
//
// a*b is exact in float64, so only the sum s rounds there. Rounding s to
// nearest and then to float32 could round twice the wrong way (when s lands
// on a float32 tie the exact sum was not on); rounding s to odd instead
// makes the final rounding exact. The body is kept within the inlining
// budget: this is the inner loop of every update.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	// TwoSum: e is the exact rounding error of s. It is NaN, and fails
	// both comparisons below, only for infinite inputs; it cannot be
	// infinite, since a product of float32s cannot overflow float64.
	t := s - p
	e := (p - (s - t)) + (float64(c) - t)
	u := math.Float64bits(s)
	if e > 0 || e < 0 {
		// Inexact: truncate toward zero, which is one ulp down in
		// magnitude when e points toward zero (their signs differ), and
		// set the last bit. That is rounding to odd.
		u = (u - (math.Float64bits(e)^u)>>63) | 1
	}
	return float32(math.Float64frombits(u))
}

// powInt is b**n correctly rounded (barring exact ties), computed in
// double-double by repeated squaring. PyTorch computes Adam's bias
// corrections as beta**step in Python floats; math.Pow is off by an ulp in
// about half of such cases, glibc's pow (Python's) in a few near-ties only.
func powInt(b float64, n int64) float64 {
	if n < 0 {
		return 1 / powInt(b, -n)
	}
	rh, rl := 1.0, 0.0
	xh, xl := b, 0.0
	for n > 0 {
		if n&1 == 1 {
			rh, rl = ddMul(rh, rl, xh, xl)
		}
		xh, xl = ddMul(xh, xl, xh, xl)
		n >>= 1
	}
	return rh + rl
}

func ddMul(ah, al, bh, bl float64) (float64, float64) {
	p := ah * bh
	if math.IsInf(p, 0) {
		return p, 0 // the error terms would be NaN
	}
	e := math.FMA(ah, bh, -p) + (ah*bl + al*bh)
	s := p + e
	return s, e - (s - p)
}

// pyFloat formats f as Python's repr does, so that error messages quote
// values exactly as PyTorch's do ("-1.0", "1e-05", "nan").
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
