package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// MulPacked against a B that PackB packed gives SgemmMixed's C (alpha 1,
// beta 0 or 1) bit for bit, on each native kernel: row blocks of a taller
// B (k0 > 0, an odd k inside B whose next row must not count), A in place
// and packed (odd lda, odd k, transposed), edge tiles in both directions,
// several K blocks, and special values (zeros of both signs, infinities,
// NaNs, denormals).
func TestMulPacked(t *testing.T) {
	ks := bf16Kernels()
	if len(ks) == 0 {
		t.Skip("no native bf16 kernel")
	}
	for _, kern := range ks {
		for _, s := range []struct {
			m, n, k, k0, bk int
			tA, tB          bool
			lda             int // 0: packed rows
		}{
			{48, 48, 64, 0, 64, false, true, 0},      // scores: q K^T
			{48, 64, 96, 0, 256, false, false, 0},    // P V, causal block
			{48, 64, 95, 0, 256, false, false, 0},    // odd k inside B
			{48, 64, 95, 0, 256, false, false, 97},   // odd k, odd lda
			{96, 64, 48, 48, 256, true, false, 0},    // dk += dS^T q
			{96, 40, 47, 48, 95, true, false, 0},     // odd rows at B's end
			{16, 40, 40, 0, 40, false, true, 41},     // edge rows, odd lda
			{30, 50, 1100, 2, 1200, false, false, 0}, // several K blocks
			{30, 50, 1101, 0, 1200, true, true, 0},   // odd last K block
			{1, 1, 1, 0, 3, false, false, 0},
		} {
			for _, set := range []bool{true, false} {
				for _, special := range []bool{false, true} {
					name := fmt.Sprintf("%s/%+v/set=%v/special=%v", kern.name, s, set, special)
					rng := rand.New(rand.NewPCG(uint64(s.m), uint64(s.k)))
					lda := s.lda
					if lda == 0 {
						lda = s.k
						if s.tA {
							lda = s.m
						}
					}
					ar, ac := s.m, s.k
					if s.tA {
						ar, ac = s.k, s.m
					}
					a := randBF16s(rng, (ar-1)*lda+ac, special)
					ldb := s.n
					if s.tB {
						ldb = s.bk
					}
					b := randBF16s(rng, s.bk*s.n, special)
					c0 := make([]float32, s.m*s.n)
					for i := range c0 {
						c0[i] = float32(rng.NormFloat64())
					}
					beta := float32(1)
					if set {
						beta = 0
						for i := range c0 {
							c0[i] = float32(math.NaN()) // must not be read
						}
					}
					// B's rows [k0, k0+k) where they lie.
					boff := s.k0 * ldb
					if s.tB {
						boff = s.k0
					}
					was := bf16Kern
					bf16Kern = kern
					want := append([]float32(nil), c0...)
					SgemmMixed(s.tA, s.tB, s.m, s.n, s.k, 1, BF16(a), lda, BF16(b[boff:]), ldb, beta, want, s.n)
					bf16Kern = was
					tile := BF16Tile{kern}
					bp := make([]uint32, tile.PackedBLen(s.n, s.bk))
					tile.PackB(bp, s.tB, s.n, s.bk, b, ldb)
					got := append([]float32(nil), c0...)
					tile.MulPacked(s.tA, s.m, s.n, s.k, a, lda, bp, s.bk, s.k0, got, s.n, set)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s: C[%d] = %g (%#x), SgemmMixed %g (%#x)", name, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
				}
			}
		}
	}
}
