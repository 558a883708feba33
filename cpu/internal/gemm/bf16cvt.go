package gemm

import "math"

// NarrowBF16 rounds float32 values to bfloat16: dst[i] = the bfloat16
// nearest src[i] (ties to even) for i < len(src), denormals kept, NaNs the
// canonical 0x7fc0, bitwise tensor.Float32ToBFloat16. It is vectorized
// where the CPU allows (AVX-512).
func NarrowBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	if blocks := len(src) / 16; narrowAsm != nil && blocks > 0 {
		narrowAsm(&src[0], blocks, &dst[0])
		src, dst = src[16*blocks:], dst[16*blocks:]
	}
	for i, v := range src {
		b := math.Float32bits(v)
		if b&0x7fffffff > 0x7f800000 {
			dst[i] = 0x7fc0
			continue
		}
		dst[i] = uint16((b + 0x7fff + (b>>16)&1) >> 16)
	}
}
