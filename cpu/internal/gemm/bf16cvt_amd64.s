//go:build amd64 && !purego

#include "textflag.h"

// BF16RND16_CONSTS sets the AVX-512 rounding's shared constants: Z16 = 1,
// Z17 = 0x7fff, Z18 = 0x7fffffff, Z19 = 0x7f800000 (NaN threshold), in
// every lane (narrowBF16x16, roundBF16x16; each sets its own NaN in Z20).
#define BF16RND16_CONSTS \
	MOVL $1, AX \
	VPBROADCASTD AX, Z16 \
	MOVL $0x7fff, AX \
	VPBROADCASTD AX, Z17 \
	MOVL $0x7fffffff, AX \
	VPBROADCASTD AX, Z18 \
	MOVL $0x7f800000, AX \
	VPBROADCASTD AX, Z19

// func narrowBF16x16(src *float32, blocks int, dst *uint16)
//
// Rounds 16*blocks float32 values to bfloat16 as tensor.Float32ToBFloat16
// does, in integer arithmetic (so denormals round like any value, unlike
// VCVTNEPS2BF16, which flushes them): bits + 0x7fff + (bit 16 of bits),
// the upper half kept, and NaNs become the canonical 0x7fc0. AVX-512F.
TEXT ·narrowBF16x16(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVQ dst+16(FP), DI
	TESTQ CX, CX
	JZ done
	BF16RND16_CONSTS
	MOVL $0x7fc0, AX
	VPBROADCASTD AX, Z20
loop:
	VMOVDQU32 (SI), Z0
	VPSRLD $16, Z0, Z1
	VPANDD Z16, Z1, Z1
	VPADDD Z17, Z1, Z1
	VPADDD Z0, Z1, Z1
	VPSRLD $16, Z1, Z1
	// NaN: |bits| > 0x7f800000 (signed compare of non-negative values).
	VPANDD Z18, Z0, Z2
	VPCMPGTD Z19, Z2, K1
	VMOVDQA32 Z20, K1, Z1
	VPMOVDW Z1, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET

// func ilvBF16x16(lo, hi *uint16, blocks int, dst *uint32, stride int)
//
// Interleaves two rows of bf16 into pairs, 16 at a time: for block b and
// l < 16, dst[b*stride+l] = lo[16b+l] | hi[16b+l]<<16. AVX-512F.
TEXT ·ilvBF16x16(SB), NOSPLIT, $0-40
	MOVQ lo+0(FP), SI
	MOVQ hi+8(FP), BX
	MOVQ blocks+16(FP), CX
	MOVQ dst+24(FP), DI
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	TESTQ CX, CX
	JZ ilvdone
ilvloop:
	VPMOVZXWD (SI), Z0
	VPMOVZXWD (BX), Z1
	VPSLLD $16, Z1, Z1
	VPORD Z1, Z0, Z0
	VMOVDQU32 Z0, (DI)
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ R8, DI
	DECQ CX
	JNZ ilvloop
ilvdone:
	VZEROUPPER
	RET

// func gatherPairs(src *uint16, offs *int32, kp int, dst *uint32, w int)
//
// Packs w (16 or 24) lanes of pairs whose k runs along memory: for q < kp
// and r < w, dst[q*w+r] = the dword at byte offset offs[r] + 4q from src
// (the pair of k = 2q, 2q+1 of lane r). One VPGATHERDD per 16 lanes.
// AVX-512F.
TEXT ·gatherPairs(SB), NOSPLIT, $0-40
	MOVQ src+0(FP), SI
	MOVQ offs+8(FP), AX
	MOVQ kp+16(FP), CX
	MOVQ dst+24(FP), DI
	MOVQ w+32(FP), R8
	VMOVDQU32 (AX), Z16
	VMOVDQU32 64(AX), Y17
	MOVL $0xff, R9
	TESTQ CX, CX
	JZ gdone
	CMPQ R8, $24
	JEQ g24
g16:
	KXNORW K1, K1, K1
	VPGATHERDD (SI)(Z16*1), K1, Z0
	VMOVDQU32 Z0, (DI)
	ADDQ $4, SI
	ADDQ $64, DI
	DECQ CX
	JNZ g16
	JMP gdone
g24:
	KXNORW K1, K1, K1
	KMOVW R9, K2
	VPGATHERDD (SI)(Z16*1), K1, Z0
	VPGATHERDD (SI)(Y17*1), K2, Y1
	VMOVDQU32 Z0, (DI)
	VMOVDQU32 Y1, 64(DI)
	ADDQ $4, SI
	ADDQ $96, DI
	DECQ CX
	JNZ g24
gdone:
	VZEROUPPER
	RET

// func roundBF16x16(src *float32, blocks int, dst *float32)
//
// narrowBF16x16's rounding, kept float32: bits + 0x7fff + (bit 16 of
// bits) with the low half cleared, NaNs the canonical 0x7fc00000 (what
// widening narrowBF16x16's 0x7fc0 gives). AVX-512F.
TEXT ·roundBF16x16(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVQ dst+16(FP), DI
	TESTQ CX, CX
	JZ rdone
	BF16RND16_CONSTS
	MOVL $0x7fc00000, AX
	VPBROADCASTD AX, Z20
	MOVL $0xffff0000, AX
	VPBROADCASTD AX, Z21
rloop:
	VMOVDQU32 (SI), Z0
	VPSRLD $16, Z0, Z1
	VPANDD Z16, Z1, Z1
	VPADDD Z17, Z1, Z1
	VPADDD Z0, Z1, Z1
	VPANDD Z21, Z1, Z1
	VPANDD Z18, Z0, Z2
	VPCMPGTD Z19, Z2, K1
	VMOVDQA32 Z20, K1, Z1
	VMOVDQU32 Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ rloop
rdone:
	VZEROUPPER
	RET

// BF16RND8_CONSTS sets the AVX2 rounding's constants: Y8 = 1, Y9 =
// 0x7fff, Y10 = 0x7fffffff, Y11 = 0x7f800000 (NaN threshold), Y12 =
// 0x7fc00000 (canonical NaN), in every lane (roundBF16x8, narrowBF16x8).
#define BF16RND8_CONSTS \
	MOVL $1, AX \
	MOVQ AX, X8 \
	VPBROADCASTD X8, Y8 \
	MOVL $0x7fff, AX \
	MOVQ AX, X9 \
	VPBROADCASTD X9, Y9 \
	MOVL $0x7fffffff, AX \
	MOVQ AX, X10 \
	VPBROADCASTD X10, Y10 \
	MOVL $0x7f800000, AX \
	MOVQ AX, X11 \
	VPBROADCASTD X11, Y11 \
	MOVL $0x7fc00000, AX \
	MOVQ AX, X12 \
	VPBROADCASTD X12, Y12

// func roundBF16x8(src *float32, blocks int, dst *float32)
//
// roundBF16x16 on 8 lanes. AVX2.
TEXT ·roundBF16x8(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVQ dst+16(FP), DI
	TESTQ CX, CX
	JZ r8done
	BF16RND8_CONSTS
	MOVL $0xffff0000, AX
	MOVQ AX, X13
	VPBROADCASTD X13, Y13
r8loop:
	VMOVDQU (SI), Y0
	VPSRLD $16, Y0, Y1
	VPAND Y8, Y1, Y1
	VPADDD Y9, Y1, Y1
	VPADDD Y0, Y1, Y1
	VPAND Y13, Y1, Y1
	VPAND Y10, Y0, Y2
	VPCMPGTD Y11, Y2, Y2
	VPBLENDVB Y2, Y12, Y1, Y1
	VMOVDQU Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ r8loop
r8done:
	VZEROUPPER
	RET

// func narrowBF16x8(src *float32, blocks int, dst *uint16)
//
// narrowBF16x16 on 8 lanes: roundBF16x8's rounding, the upper halves
// packed to words (VPACKUSDW of the two 128-bit halves; every value fits
// in 16 bits after the shift, so nothing saturates). AVX2.
TEXT ·narrowBF16x8(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVQ dst+16(FP), DI
	TESTQ CX, CX
	JZ n8done
	BF16RND8_CONSTS
n8loop:
	VMOVDQU (SI), Y0
	VPSRLD $16, Y0, Y1
	VPAND Y8, Y1, Y1
	VPADDD Y9, Y1, Y1
	VPADDD Y0, Y1, Y1
	VPAND Y10, Y0, Y2
	VPCMPGTD Y11, Y2, Y2
	VPBLENDVB Y2, Y12, Y1, Y1
	VPSRLD $16, Y1, Y1
	VEXTRACTI128 $1, Y1, X2
	VPACKUSDW X2, X1, X3
	VMOVDQU X3, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	DECQ CX
	JNZ n8loop
n8done:
	VZEROUPPER
	RET
