//go:build amd64 && !purego

package gemm

// narrowBF16x16 is in bf16cvt_amd64.s: dst[i] = Float32ToBFloat16(src[i])
// for i < 16*blocks.
//
//go:noescape
func narrowBF16x16(src *float32, blocks int, dst *uint16)

// narrowBF16x8 is narrowBF16x16 on 8 lanes (AVX2): bf16-mixed's casts
// on CPUs without AVX-512 ran the scalar loop.
//
//go:noescape
func narrowBF16x8(src *float32, blocks int, dst *uint16)

// narrowAsm narrows narrowLanes values per block where the CPU runs it,
// else nil.
var narrowAsm, narrowLanes = func() (func(src *float32, blocks int, dst *uint16), int) {
	switch {
	case hasAVX512():
		return narrowBF16x16, 16
	case hasAVX2FMA():
		return narrowBF16x8, 8
	}
	return nil, 1
}()

// roundBF16x16 and roundBF16x8 are in bf16cvt_amd64.s: dst[i] = src[i]
// rounded to bfloat16 precision (RoundBF16) for i < 16*blocks (AVX-512F)
// or 8*blocks (AVX2).
//
//go:noescape
func roundBF16x16(src *float32, blocks int, dst *float32)

//go:noescape
func roundBF16x8(src *float32, blocks int, dst *float32)

// roundAsm rounds roundLanes values per block where the CPU runs it, else
// nil.
var roundAsm, roundLanes = func() (func(src *float32, blocks int, dst *float32), int) {
	switch {
	case hasAVX512():
		return roundBF16x16, 16
	case hasAVX2FMA():
		return roundBF16x8, 8
	}
	return nil, 1
}()

// ilvBF16x16 is in bf16cvt_amd64.s: for block b < blocks and l < 16,
// dst[b*stride+l] = lo[16b+l] | hi[16b+l]<<16.
//
//go:noescape
func ilvBF16x16(lo, hi *uint16, blocks int, dst *uint32, stride int)

// ilvAsm is ilvBF16x16 where the CPU runs it, else nil.
var ilvAsm = func() func(lo, hi *uint16, blocks int, dst *uint32, stride int) {
	if hasAVX512() {
		return ilvBF16x16
	}
	return nil
}()

// gatherPairs is in bf16cvt_amd64.s: for q < kp and r < w (16 or 24),
// dst[q*w+r] = the dword at byte offset offs[r]+4q from src. offs has 24
// entries (the last 8 unused when w is 16).
//
//go:noescape
func gatherPairs(src *uint16, offs *int32, kp int, dst *uint32, w int)

// gatherAsm is gatherPairs where the CPU runs it, else nil.
var gatherAsm = func() func(src *uint16, offs *int32, kp int, dst *uint32, w int) {
	if hasAVX512() {
		return gatherPairs
	}
	return nil
}()
