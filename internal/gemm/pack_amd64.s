//go:build amd64 && !purego

#include "textflag.h"

// TRANSPOSE8 transposes the 8x8 floats in Y0..Y7 (row r in Yr) into
// Y8..Y15 (column c in Y(8+c)). Clobbers Y0..Y7.
#define TRANSPOSE8 \
	VUNPCKLPS Y1, Y0, Y8 \
	VUNPCKHPS Y1, Y0, Y9 \
	VUNPCKLPS Y3, Y2, Y10 \
	VUNPCKHPS Y3, Y2, Y11 \
	VUNPCKLPS Y5, Y4, Y12 \
	VUNPCKHPS Y5, Y4, Y13 \
	VUNPCKLPS Y7, Y6, Y14 \
	VUNPCKHPS Y7, Y6, Y15 \
	VSHUFPS $0x44, Y10, Y8, Y0 \
	VSHUFPS $0xEE, Y10, Y8, Y1 \
	VSHUFPS $0x44, Y11, Y9, Y2 \
	VSHUFPS $0xEE, Y11, Y9, Y3 \
	VSHUFPS $0x44, Y14, Y12, Y4 \
	VSHUFPS $0xEE, Y14, Y12, Y5 \
	VSHUFPS $0x44, Y15, Y13, Y6 \
	VSHUFPS $0xEE, Y15, Y13, Y7 \
	VPERM2F128 $0x20, Y4, Y0, Y8 \
	VPERM2F128 $0x20, Y5, Y1, Y9 \
	VPERM2F128 $0x20, Y6, Y2, Y10 \
	VPERM2F128 $0x20, Y7, Y3, Y11 \
	VPERM2F128 $0x31, Y4, Y0, Y12 \
	VPERM2F128 $0x31, Y5, Y1, Y13 \
	VPERM2F128 $0x31, Y6, Y2, Y14 \
	VPERM2F128 $0x31, Y7, Y3, Y15

// LOAD8 loads 8 floats from each of 8 rows: rows 0-3 at A, rows 4-7 at B,
// row stride R8, R9 = 3*R8.
#define LOAD8(A, B) \
	VMOVUPS (A), Y0 \
	VMOVUPS (A)(R8*1), Y1 \
	VMOVUPS (A)(R8*2), Y2 \
	VMOVUPS (A)(R9*1), Y3 \
	VMOVUPS (B), Y4 \
	VMOVUPS (B)(R8*1), Y5 \
	VMOVUPS (B)(R8*2), Y6 \
	VMOVUPS (B)(R9*1), Y7

// STORE8 stores column c (Y(8+c)) at OFF + c*64 bytes from DI.
#define STORE8(OFF) \
	VMOVUPS Y8, (OFF+0)(DI) \
	VMOVUPS Y9, (OFF+64)(DI) \
	VMOVUPS Y10, (OFF+128)(DI) \
	VMOVUPS Y11, (OFF+192)(DI) \
	VMOVUPS Y12, (OFF+256)(DI) \
	VMOVUPS Y13, (OFF+320)(DI) \
	VMOVUPS Y14, (OFF+384)(DI) \
	VMOVUPS Y15, (OFF+448)(DI)

// func packT16(src *float32, ld int, blocks int, dst *float32)
//
// For 16 rows of src (stride ld floats) and 8*blocks columns:
// dst[16*p + r] = src[r*ld + p].
TEXT ·packT16(SB), NOSPLIT, $0-32
	MOVQ src+0(FP), SI
	MOVQ ld+8(FP), R8
	MOVQ blocks+16(FP), CX
	MOVQ dst+24(FP), DI
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	LEAQ (SI)(R8*4), R11
	LEAQ (R11)(R8*4), R12
	LEAQ (R12)(R8*4), R13
	TESTQ CX, CX
	JZ done
loop:
	LOAD8(SI, R11)
	TRANSPOSE8
	STORE8(0)
	LOAD8(R12, R13)
	TRANSPOSE8
	STORE8(32)
	ADDQ $32, SI
	ADDQ $32, R11
	ADDQ $32, R12
	ADDQ $32, R13
	ADDQ $512, DI
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET
