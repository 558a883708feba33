package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ColAdd and NormCols are, bit for bit, the scalar loops they replace,
// over many rows (the sums carried from row to row), every prefix length
// and values of widely different magnitudes.
func TestColsMatchScalar(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(5, 6))
	val := func() float32 { return float32(r.NormFloat64() * math.Exp(r.NormFloat64()*6)) }
	for _, n := range []int{0, 1, 3, 4, 7, 8, 9, 16, 33, 384, 1539} {
		const rows = 40
		acc, want := make([]float64, n), make([]float64, n)
		sw, sb, wsw, wsb := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		for range rows {
			g, x := make([]float32, n), make([]float32, n)
			for j := range g {
				g[j], x[j] = val(), val()
			}
			m, rs := r.NormFloat64(), math.Exp(r.NormFloat64())
			done := ColAdd(acc, x)
			if done != n&^7 {
				t.Fatalf("n=%d: ColAdd did %d", n, done)
			}
			for j := done; j < n; j++ {
				acc[j] += float64(x[j])
			}
			done = NormCols(sw, sb, g, x, m, rs)
			if done != n&^3 {
				t.Fatalf("n=%d: NormCols did %d", n, done)
			}
			for j := done; j < n; j++ {
				gd := float64(g[j])
				sw[j] += gd * (float64(x[j]) - m) * rs
				sb[j] += gd
			}
			for j := range n {
				want[j] += float64(x[j])
				gd := float64(g[j])
				wsw[j] += gd * (float64(x[j]) - m) * rs
				wsb[j] += gd
			}
		}
		for j := range n {
			if math.Float64bits(acc[j]) != math.Float64bits(want[j]) {
				t.Fatalf("n=%d: ColAdd column %d = %v, want %v", n, j, acc[j], want[j])
			}
			if math.Float64bits(sw[j]) != math.Float64bits(wsw[j]) || math.Float64bits(sb[j]) != math.Float64bits(wsb[j]) {
				t.Fatalf("n=%d: NormCols column %d = %v, %v, want %v, %v", n, j, sw[j], sb[j], wsw[j], wsb[j])
			}
		}
	}
}

// Max is the largest element of its prefix, NaNs skipped, for every
// length, with the maximum at every position.
func TestMax(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(7, 8))
	nan := float32(math.NaN())
	for n := 0; n < 70; n++ {
		for hi := range max(1, n) {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64())
				if r.IntN(5) == 0 {
					x[i] = nan
				}
			}
			if hi < n {
				x[hi] = 100
			}
			got, done := Max(x)
			if done != n {
				t.Fatalf("n=%d: did %d", n, done)
			}
			want := float32(math.Inf(-1))
			for _, v := range x[:done] {
				if v > want {
					want = v
				}
			}
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("n=%d, max at %d: %v, want %v", n, hi, got, want)
			}
		}
	}
}

// ColAddRows is, bit for bit, the rows added one by one in order, for
// widths on both sides of its 16-column strips and row strides wider
// than the width.
func TestColAddRowsMatchesScalar(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(7, 8))
	val := func() float32 { return float32(r.NormFloat64() * math.Exp(r.NormFloat64()*6)) }
	for _, n := range []int{0, 8, 15, 16, 17, 48, 384, 1539} {
		for _, pad := range []int{0, 5} {
			for _, rows := range []int{0, 1, 3, 8} {
				ld := n + pad
				x := make([]float32, max(0, (rows-1)*ld+n))
				for i := range x {
					x[i] = val()
				}
				acc, want := make([]float64, n), make([]float64, n)
				for j := range acc {
					acc[j] = r.NormFloat64()
					want[j] = acc[j]
				}
				done := ColAddRows(acc, x, ld, rows)
				if rows > 0 && done != n&^15 {
					t.Fatalf("n=%d rows=%d: ColAddRows did %d", n, rows, done)
				}
				for j := range done {
					for i := range rows {
						want[j] += float64(x[i*ld+j])
					}
				}
				for j := range done {
					if math.Float64bits(acc[j]) != math.Float64bits(want[j]) {
						t.Fatalf("n=%d ld=%d rows=%d: column %d = %v, want %v", n, ld, rows, j, acc[j], want[j])
					}
				}
			}
		}
	}
}
