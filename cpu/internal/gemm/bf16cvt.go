package gemm

import "math"

// NarrowBF16 rounds float32 values to bfloat16: dst[i] = the bfloat16
// nearest src[i] (ties to even) for i < len(src), denormals kept, NaNs the
// canonical 0x7fc0, bitwise tensor.Float32ToBFloat16. It is vectorized
// where the CPU allows (AVX-512, AVX2).
func NarrowBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	if blocks := len(src) / narrowLanes; narrowAsm != nil && blocks > 0 {
		narrowAsm(&src[0], blocks, &dst[0])
		src, dst = src[narrowLanes*blocks:], dst[narrowLanes*blocks:]
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

// RoundBF16 rounds float32 values to bfloat16 precision and keeps them
// float32: dst[i] = Widen(NarrowBF16(src[i])) bit for bit, in one pass
// (no 16-bit buffer between). dst may be src. It is what a fused
// program's rounding to bfloat16 runs on every tile, so it is vectorized
// (AVX-512 and AVX2).
func RoundBF16(dst, src []float32) {
	dst = dst[:len(src)]
	if roundAsm != nil && len(src) >= roundLanes {
		blocks := len(src) / roundLanes
		roundAsm(&src[0], blocks, &dst[0])
		src, dst = src[roundLanes*blocks:], dst[roundLanes*blocks:]
	}
	roundBF16Go(dst, src)
}

func roundBF16Go(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		b := math.Float32bits(v)
		if b&0x7fffffff > 0x7f800000 {
			dst[i] = math.Float32frombits(0x7fc00000)
			continue
		}
		dst[i] = math.Float32frombits((b + 0x7fff + (b>>16)&1) &^ 0xffff)
	}
}
