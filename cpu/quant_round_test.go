package cpu

import (
	"math"
	"testing"

	"github.com/headroom-ml/headroom/tensor"
)

// refRound is the rounding through the tensor package's conversions, which
// the kernels' inlined loops must match bit for bit.
func refRound(to tensor.DType, v float32) float32 {
	if to == tensor.BFloat16 {
		return tensor.BFloat16ToFloat32(tensor.Float32ToBFloat16(v))
	}
	return tensor.Float16ToFloat32(tensor.Float32ToFloat16(v))
}

// roundEdgeBits are float32 bit patterns at the edges of bf16 and f16
// rounding: signed zeros, subnormals, ties (even and odd kept bit), one
// ulp either side of a tie, the largest finite values (rounding up to
// infinity), infinities and NaNs (quiet, signalling, negative, payloads
// that truncation would turn into an infinity).
var roundEdgeBits = []uint32{
	0x00000000, 0x80000000, // ±0
	0x00000001, 0x80000001, 0x00007fff, 0x00008000, 0x00008001, 0x00018000, // subnormal ties
	0x007fffff, 0x807fffff, 0x00800000, // largest subnormal, smallest normal
	0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, // ties to even (down / up), ±1 ulp
	0xbf808000, 0xbf818000,
	0x3f800000, 0xbf800000, 0x3fffffff, 0x40490fdb, // 1, -1, just below 2, pi
	0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff, // largest finite: rounds to inf / tie / below
	0x7f800000, 0xff800000, // ±inf
	0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7f80ffff, 0x7fff0000, // NaNs
	0x477fe000, 0x477fefff, 0x477ff000, 0x38800000, 0x33800000, 0x33000000, 0x33000001, // f16: max, overflow tie, subnormal edges
}

func TestRoundIntoMatchesConversions(t *testing.T) {
	for _, to := range []tensor.DType{tensor.BFloat16, tensor.Float16} {
		src := make([]float32, len(roundEdgeBits))
		for i, b := range roundEdgeBits {
			src[i] = math.Float32frombits(b)
		}
		for _, add := range []bool{false, true} {
			dst := make([]float32, len(src))
			for i := range dst {
				dst[i] = 0.25 * float32(i)
			}
			want := make([]float32, len(src))
			for i, v := range src {
				want[i] = refRound(to, v)
				if add {
					want[i] = dst[i] + want[i]
				}
			}
			roundInto(to, dst, src, add)
			for i := range dst {
				if g, w := math.Float32bits(dst[i]), math.Float32bits(want[i]); g != w {
					t.Errorf("%v add=%v: round(%#08x) = %#08x, want %#08x", to, add, roundEdgeBits[i], g, w)
				}
			}
		}
	}
}

// TestRoundBF16AllBits compares the bf16 rounding (roundInto) with the
// conversions over float32 bit patterns a prime stride apart (every low
// 16-bit pattern, which decides the rounding, comes up across the range).
// A stride of 1 (all 2^32 patterns, minutes) passed when the loop was
// written.
func TestRoundBF16AllBits(t *testing.T) {
	step := uint64(251)
	if testing.Short() {
		step = 65521
	}
	const chunk = 1 << 16
	src, dst := make([]float32, 0, chunk), make([]float32, chunk)
	bad := 0
	flush := func() {
		d := dst[:len(src)]
		roundInto(tensor.BFloat16, d, src, false)
		for i, v := range src {
			if g, w := math.Float32bits(d[i]), math.Float32bits(refRound(tensor.BFloat16, v)); g != w {
				if bad++; bad <= 10 {
					t.Errorf("round(%#08x) = %#08x, want %#08x", math.Float32bits(v), g, w)
				}
			}
		}
		src = src[:0]
	}
	for b := uint64(0); b < 1<<32; b += step {
		src = append(src, math.Float32frombits(uint32(b)))
		if len(src) == chunk {
			flush()
		}
	}
	flush()
	if bad > 10 {
		t.Errorf("%d mismatches in all", bad)
	}
}

func BenchmarkRoundBF16(b *testing.B) {
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(i) * 1.001
	}
	y := make([]float32, len(x))
	b.Run("loop", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			roundInto(tensor.BFloat16, y, x, false)
		}
	})
	b.Run("tile", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			roundTile(tensor.BFloat16, y, x)
		}
	})
	b.Run("closure", func(b *testing.B) { // the rounding as it was: a closure per element
		round := roundClosure
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			for i := range x {
				y[i] = round(x[i])
			}
		}
	})
}

// roundClosure is called through a variable, as the kernels called the
// closure rounder returned (not inlined).
var roundClosure = func(v float32) float32 { return tensor.BFloat16ToFloat32(tensor.Float32ToBFloat16(v)) }

// roundTile (the Round kernel and fused instruction: vectorized narrowing
// and widening through a buffer) matches the conversions bit for bit, out
// of place and in place, over the edge patterns and a sweep longer than
// its buffer and not a multiple of the vector width.
func TestRoundTileMatchesConversions(t *testing.T) {
	var bits []uint32
	bits = append(bits, roundEdgeBits...)
	for b := uint64(0); b < 1<<32; b += 2654435 {
		bits = append(bits, uint32(b))
	}
	bits = append(bits, roundEdgeBits...)
	if len(bits)%16 == 0 || len(bits) < 1024 {
		t.Fatalf("sweep of %d elements does not exercise the tails", len(bits))
	}
	for _, to := range []tensor.DType{tensor.BFloat16, tensor.Float16} {
		src := make([]float32, len(bits))
		for i, b := range bits {
			src[i] = math.Float32frombits(b)
		}
		for _, inPlace := range []bool{false, true} {
			y := make([]float32, len(src))
			x := src
			if inPlace {
				copy(y, src)
				x = y
			}
			roundTile(to, y, x)
			for i, v := range src {
				if g, w := math.Float32bits(y[i]), math.Float32bits(refRound(to, v)); g != w {
					t.Fatalf("%v in place=%v: round(%#08x) = %#08x, want %#08x", to, inPlace, bits[i], g, w)
				}
			}
		}
	}
}
