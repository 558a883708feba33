package cpu

import (
	"math"
	"testing"
)

// ulps is the distance between a and b in float32 units in the last place.
func ulps(a, b float32) float64 {
	ia, ib := int64(int32(math.Float32bits(a))), int64(int32(math.Float32bits(b)))
	if ia < 0 {
		ia = math.MinInt32 - ia
	}
	if ib < 0 {
		ib = math.MinInt32 - ib
	}
	return math.Abs(float64(ia - ib))
}

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := float32(-104); x < 89; x += 0.0007 {
		want := float32(math.Exp(float64(x)))
		got := expf(x)
		if want > 1e-37 {
			if u := ulps(got, want); u > worst {
				worst = u
				if u > 2 {
					t.Fatalf("expf(%v) = %v, want %v (%v ulp)", x, got, want, u)
				}
			}
		} else if math.Abs(float64(got-want)) > 1e-44 {
			t.Fatalf("expf(%v) = %v, want %v (subnormal range)", x, got, want)
		}
	}
	t.Logf("expf: worst %v ulp", worst)
	for _, tc := range []struct{ x, want float32 }{
		{0, 1}, {float32(math.Inf(1)), float32(math.Inf(1))}, {float32(math.Inf(-1)), 0}, {89, float32(math.Inf(1))}, {-200, 0},
	} {
		if got := expf(tc.x); got != tc.want {
			t.Errorf("expf(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if v := expf(float32(math.NaN())); v == v {
		t.Errorf("expf(NaN) = %v", v)
	}
}

func TestErff(t *testing.T) {
	worst := 0.0
	for x := float32(-6); x < 6; x += 0.0003 {
		d := math.Abs(float64(erff(x)) - math.Erf(float64(x)))
		worst = math.Max(worst, d)
	}
	if worst > 6e-7 {
		t.Errorf("erff: worst absolute error %v", worst)
	}
	if v := erff(float32(math.NaN())); v == v {
		t.Errorf("erff(NaN) = %v", v)
	}
	if erff(float32(math.Inf(1))) != 1 || erff(float32(math.Inf(-1))) != -1 {
		t.Errorf("erff(±Inf) = %v, %v", erff(float32(math.Inf(1))), erff(float32(math.Inf(-1))))
	}
}

func TestMasks(t *testing.T) {
	nan := float32(math.NaN())
	negNaN := math.Float32frombits(math.Float32bits(nan) | 1<<31)
	negZero := math.Float32frombits(1 << 31)
	inf := float32(math.Inf(1))
	for _, v := range []float32{1, -1, 0, negZero, nan, negNaN, inf, -inf, 1e-45, -1e-45, math.MaxFloat32} {
		want := uint32(0)
		if v > 0 {
			want = ^want
		}
		if got := posMask(v); got != want {
			t.Errorf("posMask(%v) = %#x, want %#x", v, got, want)
		}
		want = 0
		if v != v {
			want = ^want
		}
		if got := nanMask(v); got != want {
			t.Errorf("nanMask(%v) = %#x, want %#x", v, got, want)
		}
	}
	if selectF32(^uint32(0), 1, 2) != 1 || selectF32(0, 1, 2) != 2 {
		t.Error("selectF32")
	}
}

func TestMaxWindowF32(t *testing.T) {
	nan := float32(math.NaN())
	negZero := math.Float32frombits(1 << 31)
	vals := []float32{0, negZero, 1, -1, 2, nan, float32(math.Inf(1)), float32(math.Inf(-1)), 1, 0}
	x := make([]float32, 25)
	for trial := 0; trial < 20000; trial++ {
		s := uint32(trial*2654435761 + 12345)
		for i := range x {
			s = s*1664525 + 1013904223
			x[i] = vals[s>>28%uint32(len(vals))]
		}
		best, at := float32(math.Inf(-1)), 0
		for ih := 0; ih < 5; ih++ {
			for iw := 1; iw < 4; iw++ {
				if v := x[ih*5+iw]; v > best || v != v {
					best, at = v, ih*5+iw
				}
			}
		}
		if ih0 := 0; at == 0 {
			at = ih0*5 + 1
		}
		b, a := maxWindowF32(x, 5, 0, 5, 1, 1, 4, 1)
		if a != at || math.Float32bits(b) != math.Float32bits(best) && !(b != b && best != best) {
			t.Fatalf("window %v: got %v at %d, want %v at %d", x, b, a, best, at)
		}
	}
}
