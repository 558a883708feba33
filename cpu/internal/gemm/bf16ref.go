package gemm

import (
	"math"
	"math/big"
)

// The portable reference of VDPBF16PS's arithmetic, as measured on this
// project's AVX512_BF16 machine (AMD Zen 4) and as Intel's SDM describes
// it: per dword lane, acc += a_hi*b_hi, then acc += a_lo*b_lo (the odd k
// of the pair first); each product is exact (a bf16 product has at most
// 16 significant bits) and each addition rounds once to float32, nearest
// even; bf16 inputs that are denormal count as zero (DAZ), and a sum whose
// magnitude after rounding (to 24 bits, exponent unbounded) is below
// 2^-126 becomes a zero of its sign (FTZ). MXCSR plays no part.
// TestBF16DotPairCases pins each of these rules with a case that the
// alternatives (even first, one rounding per pair, denormal inputs or
// products kept, tininess before rounding) would get wrong.

// bf16In is a bf16 as VDPBF16PS reads it: denormals are zeros of their sign.
func bf16In(h uint16) float64 {
	if h&0x7f80 == 0 {
		return math.Copysign(0, float64(int16(h)))
	}
	return float64(math.Float32frombits(uint32(h) << 16))
}

// bf16Add is acc + p, p a product of two bf16 values (exact in float64),
// rounded once to float32 and flushed to zero when tiny after rounding.
// The float64 sum is exact or, when not, so far from a float32 rounding
// boundary that rounding it again gives the correctly rounded sum: p has
// at most 16 significant bits and acc 24.
func bf16Add(acc float32, p float64) float32 {
	s := float64(acc) + p
	if a := math.Abs(s); a != 0 && a < 0x1p-100 {
		// Round to 24 bits as if the exponent were unbounded: scaled up,
		// the value is a normal float32.
		r := float32(s * 0x1p64)
		if math.Abs(float64(r)) < 0x1p-62 {
			return float32(math.Copysign(0, s))
		}
		return r * 0x1p-64
	}
	return float32(s)
}

// bf16DotPair is one VDPBF16PS lane: acc plus both products of the pairs
// a and b (bf16 of even k low, odd k high).
func bf16DotPair(acc float32, a, b uint32) float32 {
	acc = bf16Add(acc, bf16In(uint16(a>>16))*bf16In(uint16(b>>16)))
	return bf16Add(acc, bf16In(uint16(a))*bf16In(uint16(b)))
}

// fma32 is beta*c + t rounded once to float32 (VFMADD231PS).
func fma32(beta, c, t float32) float32 {
	for _, v := range []float32{beta, c, t} {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return float32(float64(beta)*float64(c) + float64(t))
		}
	}
	x := new(big.Float).SetPrec(1000).SetFloat64(float64(beta))
	x.Mul(x, new(big.Float).SetFloat64(float64(c)))
	x.Add(x, new(big.Float).SetFloat64(float64(t)))
	f, _ := x.Float32()
	if f == 0 {
		// big.Float has no signed zero of its own for exact cancellation:
		// IEEE gives +0 there, and the sign of equal-signed zeros.
		if float64(beta)*float64(c) == 0 && t == 0 {
			return float32(float64(beta)*float64(c) + float64(t))
		}
	}
	return f
}

// bf16Store is the kernels' store of a sum.
func bf16Store(alpha, beta, sum, c float32, beta0 bool) float32 {
	t := alpha * sum
	if beta0 {
		return t
	}
	return fma32(beta, c, t)
}

// RefDotBF16 is one element of SgemmMixed's native bf16 product, by the
// reference arithmetic: a and b are the k values of row i of op(A) and
// column j of op(B), c the element's value before (read unless beta is
// 0); k is cut into blocks of bf16Block(k) values, each summed pair by
// pair from +0 and stored as c = alpha*sum + beta*c (beta 1 after the
// first block). For tests of code built on the native driver (the
// convolutions), whose arithmetic this derives independently of the
// assembly.
func RefDotBF16(a, b []uint16, alpha, beta, c float32) float32 {
	return refDotBlocks(a, b, alpha, beta, c, func(ap, bp []uint32) float32 {
		var acc float32
		for i := range ap {
			acc = bf16DotPair(acc, ap[i], bp[i])
		}
		return acc
	})
}

// refDotBlocks is the native driver's K blocking around a block's sum:
// k cut into blocks of bf16Block(k) values, each block's values packed
// as pairs (zero past k) and summed by sum from +0, then stored as
// c = alpha*sum + beta*c (beta 1 after the first block). The references
// of each native kernel differ only in sum.
func refDotBlocks(a, b []uint16, alpha, beta, c float32, sum func(ap, bp []uint32) float32) float32 {
	k := len(a)
	at := func(s []uint16, p int) uint32 {
		if p >= k {
			return 0
		}
		return uint32(s[p])
	}
	kc := bf16Block(k)
	var ap, bp []uint32
	for pc := 0; pc < k; pc += kc {
		ap, bp = ap[:0], bp[:0]
		for p := pc; p < min(k, pc+kc); p += 2 {
			ap = append(ap, at(a, p)|at(a, p+1)<<16)
			bp = append(bp, at(b, p)|at(b, p+1)<<16)
		}
		betaCur := beta
		if pc > 0 {
			betaCur = 1
		}
		c = bf16Store(alpha, betaCur, sum(ap, bp), c, betaCur == 0)
	}
	return c
}
