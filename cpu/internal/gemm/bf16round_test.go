package gemm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// roundSamples is every bfloat16 upper half with low halves at the
// rounding boundaries and a random one: NaNs, infinities, denormals.
func roundSamples() []float32 {
	rng := rand.New(rand.NewPCG(7, 8))
	var src []float32
	for hi := 0; hi < 1<<16; hi++ {
		for _, lo := range []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, rng.Uint32() & 0xffff} {
			src = append(src, math.Float32frombits(uint32(hi)<<16|lo))
		}
	}
	return src
}

// checkRound runs round on tails of the samples (every length the vector
// loops split differently) and wants Widen(NarrowBF16(x)) bit for bit,
// in place too, and nothing written past the end.
func checkRound(t *testing.T, name string, round func(dst, src []float32)) {
	t.Helper()
	src := roundSamples()
	for _, n := range []int{len(src), 0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100} {
		s := src[len(src)-n:]
		h := make([]uint16, n)
		NarrowBF16(h, s)
		want := make([]float32, n)
		Widen(BFloat16, want, h)
		dst := make([]float32, n+1)
		dst[n] = 42
		round(dst[:n], s)
		inPlace := append([]float32(nil), s...)
		round(inPlace, inPlace)
		for i := range s {
			if math.Float32bits(dst[i]) != math.Float32bits(want[i]) || math.Float32bits(inPlace[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s n=%d: %#08x -> %#08x (in place %#08x), want %#08x", name, n,
					math.Float32bits(s[i]), math.Float32bits(dst[i]), math.Float32bits(inPlace[i]), math.Float32bits(want[i]))
			}
		}
		if dst[n] != 42 {
			t.Fatalf("%s n=%d: wrote past the end", name, n)
		}
	}
}

func TestRoundBF16(t *testing.T) {
	for _, c := range []struct {
		name  string
		round func(dst, src []float32)
	}{
		{"RoundBF16", RoundBF16},
		{"go", roundBF16Go},
	} {
		checkRound(t, c.name, c.round)
	}
}

func BenchmarkRoundBF16(b *testing.B) {
	src := make([]float32, 2048) // an L1 tile, as fused programs round
	for i := range src {
		src[i] = float32(i) * 1.0001
	}
	dst := make([]float32, len(src))
	b.SetBytes(8 * 2048)
	b.Run("one-pass", func(b *testing.B) {
		for b.Loop() {
			RoundBF16(dst, src)
		}
	})
	b.Run("narrow-widen", func(b *testing.B) {
		h := make([]uint16, len(src))
		for b.Loop() {
			NarrowBF16(h, src)
			Widen(BFloat16, dst, h)
		}
	})
}
