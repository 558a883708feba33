//go:build amd64 && !purego

package gemm

// narrowBF16x16 is in bf16cvt_amd64.s: dst[i] = Float32ToBFloat16(src[i])
// for i < 16*blocks.
//
//go:noescape
func narrowBF16x16(src *float32, blocks int, dst *uint16)

// narrowAsm is narrowBF16x16 where the CPU runs it (AVX-512F), else nil.
var narrowAsm = func() func(src *float32, blocks int, dst *uint16) {
	if hasAVX512() {
		return narrowBF16x16
	}
	return nil
}()
