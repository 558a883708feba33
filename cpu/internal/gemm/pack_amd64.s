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

// The 16-bit forms below widen as they load: bfloat16 is the upper half of
// a float32 (zero-extend, shift left 16), float16 goes through F16C's
// VCVTPH2PS; both are exact.

// LOAD8_BF16 is LOAD8 from rows of 8 bfloat16 values (R8 the row stride in
// bytes).
#define LOAD8_BF16(A, B) \
	VPMOVZXWD (A), Y0 \
	VPMOVZXWD (A)(R8*1), Y1 \
	VPMOVZXWD (A)(R8*2), Y2 \
	VPMOVZXWD (A)(R9*1), Y3 \
	VPMOVZXWD (B), Y4 \
	VPMOVZXWD (B)(R8*1), Y5 \
	VPMOVZXWD (B)(R8*2), Y6 \
	VPMOVZXWD (B)(R9*1), Y7 \
	VPSLLD $16, Y0, Y0 \
	VPSLLD $16, Y1, Y1 \
	VPSLLD $16, Y2, Y2 \
	VPSLLD $16, Y3, Y3 \
	VPSLLD $16, Y4, Y4 \
	VPSLLD $16, Y5, Y5 \
	VPSLLD $16, Y6, Y6 \
	VPSLLD $16, Y7, Y7

// LOAD8_F16 is LOAD8 from rows of 8 float16 values.
#define LOAD8_F16(A, B) \
	VCVTPH2PS (A), Y0 \
	VCVTPH2PS (A)(R8*1), Y1 \
	VCVTPH2PS (A)(R8*2), Y2 \
	VCVTPH2PS (A)(R9*1), Y3 \
	VCVTPH2PS (B), Y4 \
	VCVTPH2PS (B)(R8*1), Y5 \
	VCVTPH2PS (B)(R8*2), Y6 \
	VCVTPH2PS (B)(R9*1), Y7

// PACKT16_SETUP loads packT16's arguments for 16-bit rows.
#define PACKT16_SETUP \
	MOVQ src+0(FP), SI \
	MOVQ ld+8(FP), R8 \
	MOVQ blocks+16(FP), CX \
	MOVQ dst+24(FP), DI \
	SHLQ $1, R8 \
	LEAQ (R8)(R8*2), R9 \
	LEAQ (SI)(R8*4), R11 \
	LEAQ (R11)(R8*4), R12 \
	LEAQ (R12)(R8*4), R13

// func packT16BF16(src *uint16, ld int, blocks int, dst *float32)
//
// packT16 from bfloat16: dst[16*p + r] = float32(src[r*ld + p]).
TEXT ·packT16BF16(SB), NOSPLIT, $0-32
	PACKT16_SETUP
	TESTQ CX, CX
	JZ done
loop:
	LOAD8_BF16(SI, R11)
	TRANSPOSE8
	STORE8(0)
	LOAD8_BF16(R12, R13)
	TRANSPOSE8
	STORE8(32)
	ADDQ $16, SI
	ADDQ $16, R11
	ADDQ $16, R12
	ADDQ $16, R13
	ADDQ $512, DI
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET

// func packT16F16(src *uint16, ld int, blocks int, dst *float32)
//
// packT16 from float16 (needs F16C).
TEXT ·packT16F16(SB), NOSPLIT, $0-32
	PACKT16_SETUP
	TESTQ CX, CX
	JZ done
loop:
	LOAD8_F16(SI, R11)
	TRANSPOSE8
	STORE8(0)
	LOAD8_F16(R12, R13)
	TRANSPOSE8
	STORE8(32)
	ADDQ $16, SI
	ADDQ $16, R11
	ADDQ $16, R12
	ADDQ $16, R13
	ADDQ $512, DI
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET

// func widenBF16x16(src *uint16, blocks int, dst *float32, stride int)
//
// dst[b*stride + l] = float32(src[16*b + l]) for b < blocks, l < 16.
TEXT ·widenBF16x16(SB), NOSPLIT, $0-32
	MOVQ src+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ stride+24(FP), R8
	SHLQ $2, R8
	TESTQ CX, CX
	JZ done
loop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD $16, Y0, Y0
	VPSLLD $16, Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $32, SI
	ADDQ R8, DI
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET

// func widenF16x16(src *uint16, blocks int, dst *float32, stride int)
//
// widenBF16x16 from float16 (needs F16C).
TEXT ·widenF16x16(SB), NOSPLIT, $0-32
	MOVQ src+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ stride+24(FP), R8
	SHLQ $2, R8
	TESTQ CX, CX
	JZ done
loop:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $32, SI
	ADDQ R8, DI
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET

// func packA6(src *float32, ld int, blocks int, dst *float32)
//
// Interleaves 6 rows of src (stride ld floats), 8*blocks columns of them:
// dst[6*p + r] = src[r*ld + p]. Each group of 6 is stored as 8 floats, the
// last 2 overwritten by the next group, so it writes dst[6*8*blocks] and
// dst[6*8*blocks+1] too (the caller leaves at least one group after).
TEXT ·packA6(SB), NOSPLIT, $0-32
	MOVQ src+0(FP), SI
	MOVQ ld+8(FP), R8
	MOVQ blocks+16(FP), CX
	MOVQ dst+24(FP), DI
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	LEAQ (SI)(R8*4), R11
	ADDQ R8, R11
	TESTQ CX, CX
	JZ done
loop:
	PREFETCHT0 256(SI)
	PREFETCHT0 256(SI)(R8*1)
	PREFETCHT0 256(SI)(R8*2)
	PREFETCHT0 256(SI)(R9*1)
	PREFETCHT0 256(SI)(R8*4)
	PREFETCHT0 256(R11)
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R8*1), Y1
	VMOVUPS (SI)(R8*2), Y2
	VMOVUPS (SI)(R9*1), Y3
	VMOVUPS (SI)(R8*4), Y4
	VMOVUPS (R11), Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TRANSPOSE8
	VMOVUPS Y8, 0(DI)
	VMOVUPS Y9, 24(DI)
	VMOVUPS Y10, 48(DI)
	VMOVUPS Y11, 72(DI)
	VMOVUPS Y12, 96(DI)
	VMOVUPS Y13, 120(DI)
	VMOVUPS Y14, 144(DI)
	VMOVUPS Y15, 168(DI)
	ADDQ $32, SI
	ADDQ $32, R11
	ADDQ $192, DI
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET

// func packAT6(src *float32, lda, kc, panels int, dst *float32)
//
// AVX-512F packing of a transposed A into 6-row panels (packATRows for
// mr = 6, full panels only): for p < kc and ip < panels,
// dst[ip*6*kc + 6*p + r] = src[p*lda + 6*ip + r], r < 6. It reads each row
// of the stored A (lda floats apart) along its length and writes two rows'
// groups (12 floats) of a panel with one masked store; masked lanes are
// neither read nor written, so nothing outside the panels is touched.
TEXT ·packAT6(SB), NOSPLIT, $0-40
	MOVQ src+0(FP), SI
	MOVQ lda+8(FP), R8
	MOVQ kc+16(FP), BX
	MOVQ panels+24(FP), R10
	MOVQ dst+32(FP), DI
	SHLQ $2, R8
	LEAQ (BX)(BX*2), R9
	SHLQ $3, R9 // panel stride in bytes: 6*kc*4
	MOVQ $0x3f, AX
	KMOVW AX, K1 // lanes 0-5: row p
	MOVQ $0xfc0, AX
	KMOVW AX, K2 // lanes 6-11: row p+1
	MOVQ $0xfff, AX
	KMOVW AX, K3
	TESTQ R10, R10
	JLE done
pairs:
	CMPQ BX, $2
	JLT single
	MOVQ SI, R11
	MOVQ DI, R12
	MOVQ R10, CX
pairloop:
	VMOVUPS.Z (R11), K1, Z0
	VMOVUPS -24(R11)(R8*1), K2, Z0
	VMOVUPS Z0, K3, (R12)
	ADDQ $24, R11
	ADDQ R9, R12
	DECQ CX
	JNZ pairloop
	LEAQ (SI)(R8*2), SI
	ADDQ $48, DI
	SUBQ $2, BX
	JMP pairs
single:
	TESTQ BX, BX
	JZ done
	MOVQ R10, CX
singleloop:
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS Z0, K1, (DI)
	ADDQ $24, SI
	ADDQ R9, DI
	DECQ CX
	JNZ singleloop
done:
	VZEROUPPER
	RET
