//go:build amd64 && !purego

package gemm

import "testing"

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
