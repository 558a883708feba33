package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/tensor"
)

// NarrowBF16 is tensor.Float32ToBFloat16 bit for bit: every upper half
// with low halves at the rounding boundaries and random ones, at every
// tail length.
func TestNarrowBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var src []float32
	for hi := 0; hi < 1<<16; hi++ {
		for _, lo := range []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, rng.Uint32() & 0xffff} {
			src = append(src, math.Float32frombits(uint32(hi)<<16|lo))
		}
	}
	for _, n := range []int{len(src), 0, 1, 15, 16, 17, 33, 100} {
		s := src[len(src)-n:]
		dst := make([]uint16, n+1)
		dst[n] = 0xbeef
		NarrowBF16(dst[:n], s)
		for i, v := range s {
			if want := tensor.Float32ToBFloat16(v); dst[i] != want {
				t.Fatalf("n=%d: %#08x -> %#04x, want %#04x", n, math.Float32bits(v), dst[i], want)
			}
		}
		if dst[n] != 0xbeef {
			t.Fatalf("n=%d: wrote past the end", n)
		}
	}
}

func BenchmarkNarrowBF16(b *testing.B) {
	src := make([]float32, 1<<20)
	dst := make([]uint16, len(src))
	for b.Loop() {
		NarrowBF16(dst, src)
	}
	b.SetBytes(6 << 20)
}
