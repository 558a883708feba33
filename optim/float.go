package optim

import (
	"math"
	"strconv"
	"strings"
)

// fma32 is a*b+c rounded once to float32, as the fused multiply-add that
// PyTorch's AVX2 CPU kernels use for add(x, y, alpha=a) and friends.
//
// a*b is exact in float64, so only the sum rounds there; rounding it to odd
// (rather than to nearest) before the final rounding to float32 makes the
// double rounding harmless, so the result equals a true fmaf.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	// TwoSum: e is the exact rounding error of s.
	bv := s - p
	e := (p - (s - bv)) + (float64(c) - bv)
	// A NaN or infinite e means infinite inputs; leave s alone then.
	if e != 0 && !math.IsNaN(e) && !math.IsInf(e, 0) {
		if u := math.Float64bits(s); u&1 == 0 {
			// s is even and inexact: move to the odd neighbour on the side
			// of the exact value, which is round-to-odd.
			if (e > 0) == (s > 0) {
				u++
			} else {
				u--
			}
			s = math.Float64frombits(u)
		}
	}
	return float32(s)
}

// powInt is b**n correctly rounded (barring exact ties), computed in
// double-double by repeated squaring. PyTorch computes Adam's bias
// corrections as beta**step in Python floats; math.Pow is off by an ulp in
// about half of such cases, glibc's pow (Python's) in a few near-ties only.
func powInt(b float64, n int64) float64 {
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
