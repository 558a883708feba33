//go:build amd64 && !purego

package gemm

import (
	"math"
	"testing"
)

// Both assembly widths, whichever RoundBF16 picked here.
func TestRoundBF16Asm(t *testing.T) {
	for _, c := range []struct {
		name  string
		ok    bool
		fn    func(src *float32, blocks int, dst *float32)
		lanes int
	}{
		{"avx512", hasAVX512(), roundBF16x16, 16},
		{"avx2", hasAVX2FMA(), roundBF16x8, 8},
	} {
		if !c.ok {
			t.Logf("%s: not on this CPU", c.name)
			continue
		}
		checkRound(t, c.name, func(dst, src []float32) {
			if b := len(src) / c.lanes; b > 0 {
				c.fn(&src[0], b, &dst[0])
				src, dst = src[b*c.lanes:], dst[b*c.lanes:]
			}
			roundBF16Go(dst, src)
		})
	}
}

// Both assembly widths of NarrowBF16 against tensor.Float32ToBFloat16 (by
// way of the Go loop, which TestNarrowBF16 checks), every tail length.
func TestNarrowBF16Asm(t *testing.T) {
	src := roundSamples()
	for _, c := range []struct {
		name  string
		ok    bool
		fn    func(src *float32, blocks int, dst *uint16)
		lanes int
	}{
		{"avx512", hasAVX512(), narrowBF16x16, 16},
		{"avx2", hasAVX2FMA(), narrowBF16x8, 8},
	} {
		if !c.ok {
			t.Logf("%s: not on this CPU", c.name)
			continue
		}
		for _, n := range []int{len(src), 0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100} {
			s := src[len(src)-n:]
			got := make([]uint16, n+1)
			got[n] = 0xbeef
			b := n / c.lanes
			if b > 0 {
				c.fn(&s[0], b, &got[0])
			}
			narrowGo(got[b*c.lanes:n], s[b*c.lanes:])
			want := make([]uint16, n)
			narrowGo(want, s)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s n=%d: %#08x -> %#04x, want %#04x", c.name, n, math.Float32bits(s[i]), got[i], want[i])
				}
			}
			if got[n] != 0xbeef {
				t.Fatalf("%s n=%d: wrote past the end", c.name, n)
			}
		}
	}
}

// narrowGo is NarrowBF16's scalar loop.
func narrowGo(dst []uint16, src []float32) {
	for i, v := range src {
		b := math.Float32bits(v)
		if b&0x7fffffff > 0x7f800000 {
			dst[i] = 0x7fc0
			continue
		}
		dst[i] = uint16((b + 0x7fff + (b>>16)&1) >> 16)
	}
}
