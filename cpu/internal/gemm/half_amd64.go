//go:build amd64 && !purego

package gemm

import "github.com/headroom-ml/headroom/internal/cpuid"

// The 16-bit packing routines in pack_amd64.s; see halfConv.

//go:noescape
func packT16BF16(src *uint16, ld, blocks int, dst *float32)

//go:noescape
func packT16F16(src *uint16, ld, blocks int, dst *float32)

//go:noescape
func widenBF16x16(src *uint16, blocks int, dst *float32, stride int)

//go:noescape
func widenF16x16(src *uint16, blocks int, dst *float32, stride int)

func init() {
	// The routines use AVX2 (VPMOVZXWD on YMM), which the 6x16 kernel
	// needs anyway, and AVX-512 CPUs all have.
	if !hasAVX2FMA() {
		return
	}
	// Both assembly kernels take 16-wide B panels.
	for _, k := range []*kernel[float32]{kernAVX2, kernAVX512} {
		k.half[BFloat16-1] = &halfConv{rows16: widenBF16x16, packT16: packT16BF16}
		if cpuid.X86.F16C {
			k.half[Float16-1] = &halfConv{rows16: widenF16x16, packT16: packT16F16}
		}
	}
}
