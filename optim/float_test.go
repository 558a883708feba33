package optim

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// fmaExact is a*b+c rounded once to float32, computed exactly with big.Float.
func fmaExact(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(2000).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

func TestFMA32(t *testing.T) {
	// 1+2^-11+2^-24 is halfway between two float32s; the tiny c decides the
	// rounding, which a plain float64 sum would lose (double rounding).
	a := float32(1 + 1.0/4096)
	cases := [][3]float32{
		{a, a, 0x1p-60}, {a, a, -0x1p-60}, {-a, a, 0x1p-60}, {-a, a, -0x1p-60},
		{3, 5, -15}, {0, 1, -0.0}, {1e30, 1e30, 1},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		f := func() float32 {
			return float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(60)-30)))
		}
		cases = append(cases, [3]float32{f(), f(), f()})
	}
	for _, c := range cases {
		got, want := fma32(c[0], c[1], c[2]), fmaExact(c[0], c[1], c[2])
		if math.Float32bits(got) != math.Float32bits(want) && !(math.IsInf(float64(want), 0) && got == want) {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", c[0], c[1], c[2], got, want)
		}
	}
	if fma32(a, a, 0x1p-60) == float32(float64(a)*float64(a)+0x1p-60) {
		t.Error("the double-rounding case does not exercise round-to-odd")
	}
	inf := float32(math.Inf(1))
	if g := fma32(inf, 1, 1); g != inf {
		t.Errorf("fma32(inf, 1, 1) = %v", g)
	}
	if g := fma32(float32(math.NaN()), 1, 1); g == g {
		t.Errorf("fma32(NaN, 1, 1) = %v", g)
	}
}

func TestPowInt(t *testing.T) {
	for _, b := range []float64{0.9, 0.999, 0.99, 0.5, 0.6, 1.5} {
		for _, n := range []int64{0, 1, 2, 3, 7, 100, 2904, 59425, 1 << 20} {
			x := new(big.Float).SetPrec(4000).SetFloat64(1)
			p := new(big.Float).SetPrec(4000).SetFloat64(b)
			for k := n; k > 0; k >>= 1 {
				if k&1 == 1 {
					x.Mul(x, p)
				}
				p.Mul(p, p)
			}
			want, _ := x.Float64()
			if got := powInt(b, n); got != want {
				t.Errorf("powInt(%v, %d) = %v, want %v", b, n, got, want)
			}
		}
	}
	if got := powInt(2, -2); got != 0.25 {
		t.Errorf("powInt(2, -2) = %v", got)
	}
}
