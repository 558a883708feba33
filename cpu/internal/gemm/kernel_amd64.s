// Hand-written (regular, fully unrolled) assembly; see kernel_amd64.go.
// AVX2+FMA single-precision GEMM micro-kernel, 6x16 register tile.

//go:build amd64 && !purego

#include "textflag.h"

// Registers: Y0..Y11 accumulators (row r in Y(2r), Y(2r+1)), Y12/Y13 the
// current row of b, Y14/Y15 broadcasts of a. SI walks a, DI walks b, DX is
// the tile of c, R8 its row stride in bytes.

// PREFETCH_C prefetches the 6 rows of the tile at DX (uses R10).
#define PREFETCH_C \
	MOVQ DX, R10 \
	PREFETCHT0 (R10) \
	PREFETCHT0 63(R10) \
	ADDQ R8, R10 \
	PREFETCHT0 (R10) \
	PREFETCHT0 63(R10) \
	ADDQ R8, R10 \
	PREFETCHT0 (R10) \
	PREFETCHT0 63(R10) \
	ADDQ R8, R10 \
	PREFETCHT0 (R10) \
	PREFETCHT0 63(R10) \
	ADDQ R8, R10 \
	PREFETCHT0 (R10) \
	PREFETCHT0 63(R10) \
	ADDQ R8, R10 \
	PREFETCHT0 (R10) \
	PREFETCHT0 63(R10)

// ZERO clears the accumulators.
#define ZERO \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11

// KSTEP4 runs 4 steps of k.
#define KSTEP4 \
	PREFETCHT0 384(SI) \
	VMOVUPS 0(DI), Y12 \
	VMOVUPS 32(DI), Y13 \
	VBROADCASTSS 0(SI), Y14 \
	VFMADD231PS Y12, Y14, Y0 \
	VFMADD231PS Y13, Y14, Y1 \
	VBROADCASTSS 4(SI), Y15 \
	VFMADD231PS Y12, Y15, Y2 \
	VFMADD231PS Y13, Y15, Y3 \
	VBROADCASTSS 8(SI), Y14 \
	VFMADD231PS Y12, Y14, Y4 \
	VFMADD231PS Y13, Y14, Y5 \
	VBROADCASTSS 12(SI), Y15 \
	VFMADD231PS Y12, Y15, Y6 \
	VFMADD231PS Y13, Y15, Y7 \
	VBROADCASTSS 16(SI), Y14 \
	VFMADD231PS Y12, Y14, Y8 \
	VFMADD231PS Y13, Y14, Y9 \
	VBROADCASTSS 20(SI), Y15 \
	VFMADD231PS Y12, Y15, Y10 \
	VFMADD231PS Y13, Y15, Y11 \
	VMOVUPS 64(DI), Y12 \
	VMOVUPS 96(DI), Y13 \
	VBROADCASTSS 24(SI), Y14 \
	VFMADD231PS Y12, Y14, Y0 \
	VFMADD231PS Y13, Y14, Y1 \
	VBROADCASTSS 28(SI), Y15 \
	VFMADD231PS Y12, Y15, Y2 \
	VFMADD231PS Y13, Y15, Y3 \
	VBROADCASTSS 32(SI), Y14 \
	VFMADD231PS Y12, Y14, Y4 \
	VFMADD231PS Y13, Y14, Y5 \
	VBROADCASTSS 36(SI), Y15 \
	VFMADD231PS Y12, Y15, Y6 \
	VFMADD231PS Y13, Y15, Y7 \
	VBROADCASTSS 40(SI), Y14 \
	VFMADD231PS Y12, Y14, Y8 \
	VFMADD231PS Y13, Y14, Y9 \
	VBROADCASTSS 44(SI), Y15 \
	VFMADD231PS Y12, Y15, Y10 \
	VFMADD231PS Y13, Y15, Y11 \
	VMOVUPS 128(DI), Y12 \
	VMOVUPS 160(DI), Y13 \
	VBROADCASTSS 48(SI), Y14 \
	VFMADD231PS Y12, Y14, Y0 \
	VFMADD231PS Y13, Y14, Y1 \
	VBROADCASTSS 52(SI), Y15 \
	VFMADD231PS Y12, Y15, Y2 \
	VFMADD231PS Y13, Y15, Y3 \
	VBROADCASTSS 56(SI), Y14 \
	VFMADD231PS Y12, Y14, Y4 \
	VFMADD231PS Y13, Y14, Y5 \
	VBROADCASTSS 60(SI), Y15 \
	VFMADD231PS Y12, Y15, Y6 \
	VFMADD231PS Y13, Y15, Y7 \
	VBROADCASTSS 64(SI), Y14 \
	VFMADD231PS Y12, Y14, Y8 \
	VFMADD231PS Y13, Y14, Y9 \
	VBROADCASTSS 68(SI), Y15 \
	VFMADD231PS Y12, Y15, Y10 \
	VFMADD231PS Y13, Y15, Y11 \
	VMOVUPS 192(DI), Y12 \
	VMOVUPS 224(DI), Y13 \
	VBROADCASTSS 72(SI), Y14 \
	VFMADD231PS Y12, Y14, Y0 \
	VFMADD231PS Y13, Y14, Y1 \
	VBROADCASTSS 76(SI), Y15 \
	VFMADD231PS Y12, Y15, Y2 \
	VFMADD231PS Y13, Y15, Y3 \
	VBROADCASTSS 80(SI), Y14 \
	VFMADD231PS Y12, Y14, Y4 \
	VFMADD231PS Y13, Y14, Y5 \
	VBROADCASTSS 84(SI), Y15 \
	VFMADD231PS Y12, Y15, Y6 \
	VFMADD231PS Y13, Y15, Y7 \
	VBROADCASTSS 88(SI), Y14 \
	VFMADD231PS Y12, Y14, Y8 \
	VFMADD231PS Y13, Y14, Y9 \
	VBROADCASTSS 92(SI), Y15 \
	VFMADD231PS Y12, Y15, Y10 \
	VFMADD231PS Y13, Y15, Y11 \
	ADDQ $96, SI \
	ADDQ $256, DI

// KSTEP1 runs 1 step of k.
#define KSTEP1 \
	VMOVUPS 0(DI), Y12 \
	VMOVUPS 32(DI), Y13 \
	VBROADCASTSS 0(SI), Y14 \
	VFMADD231PS Y12, Y14, Y0 \
	VFMADD231PS Y13, Y14, Y1 \
	VBROADCASTSS 4(SI), Y15 \
	VFMADD231PS Y12, Y15, Y2 \
	VFMADD231PS Y13, Y15, Y3 \
	VBROADCASTSS 8(SI), Y14 \
	VFMADD231PS Y12, Y14, Y4 \
	VFMADD231PS Y13, Y14, Y5 \
	VBROADCASTSS 12(SI), Y15 \
	VFMADD231PS Y12, Y15, Y6 \
	VFMADD231PS Y13, Y15, Y7 \
	VBROADCASTSS 16(SI), Y14 \
	VFMADD231PS Y12, Y14, Y8 \
	VFMADD231PS Y13, Y14, Y9 \
	VBROADCASTSS 20(SI), Y15 \
	VFMADD231PS Y12, Y15, Y10 \
	VFMADD231PS Y13, Y15, Y11 \
	ADDQ $24, SI \
	ADDQ $64, DI

// STORE_BETA stores alpha*acc + beta*c (Y14 alpha, Y15 beta) to the tile
// at DX (uses R10).
#define STORE_BETA \
	MOVQ DX, R10 \
	VMULPS Y14, Y0, Y0 \
	VMULPS Y14, Y1, Y1 \
	VFMADD231PS (R10), Y15, Y0 \
	VFMADD231PS 32(R10), Y15, Y1 \
	VMOVUPS Y0, (R10) \
	VMOVUPS Y1, 32(R10) \
	ADDQ R8, R10 \
	VMULPS Y14, Y2, Y2 \
	VMULPS Y14, Y3, Y3 \
	VFMADD231PS (R10), Y15, Y2 \
	VFMADD231PS 32(R10), Y15, Y3 \
	VMOVUPS Y2, (R10) \
	VMOVUPS Y3, 32(R10) \
	ADDQ R8, R10 \
	VMULPS Y14, Y4, Y4 \
	VMULPS Y14, Y5, Y5 \
	VFMADD231PS (R10), Y15, Y4 \
	VFMADD231PS 32(R10), Y15, Y5 \
	VMOVUPS Y4, (R10) \
	VMOVUPS Y5, 32(R10) \
	ADDQ R8, R10 \
	VMULPS Y14, Y6, Y6 \
	VMULPS Y14, Y7, Y7 \
	VFMADD231PS (R10), Y15, Y6 \
	VFMADD231PS 32(R10), Y15, Y7 \
	VMOVUPS Y6, (R10) \
	VMOVUPS Y7, 32(R10) \
	ADDQ R8, R10 \
	VMULPS Y14, Y8, Y8 \
	VMULPS Y14, Y9, Y9 \
	VFMADD231PS (R10), Y15, Y8 \
	VFMADD231PS 32(R10), Y15, Y9 \
	VMOVUPS Y8, (R10) \
	VMOVUPS Y9, 32(R10) \
	ADDQ R8, R10 \
	VMULPS Y14, Y10, Y10 \
	VMULPS Y14, Y11, Y11 \
	VFMADD231PS (R10), Y15, Y10 \
	VFMADD231PS 32(R10), Y15, Y11 \
	VMOVUPS Y10, (R10) \
	VMOVUPS Y11, 32(R10)

// STORE_BETA0 stores alpha*acc to the tile at DX (c not read).
#define STORE_BETA0 \
	MOVQ DX, R10 \
	VMULPS Y14, Y0, Y0 \
	VMULPS Y14, Y1, Y1 \
	VMOVUPS Y0, (R10) \
	VMOVUPS Y1, 32(R10) \
	ADDQ R8, R10 \
	VMULPS Y14, Y2, Y2 \
	VMULPS Y14, Y3, Y3 \
	VMOVUPS Y2, (R10) \
	VMOVUPS Y3, 32(R10) \
	ADDQ R8, R10 \
	VMULPS Y14, Y4, Y4 \
	VMULPS Y14, Y5, Y5 \
	VMOVUPS Y4, (R10) \
	VMOVUPS Y5, 32(R10) \
	ADDQ R8, R10 \
	VMULPS Y14, Y6, Y6 \
	VMULPS Y14, Y7, Y7 \
	VMOVUPS Y6, (R10) \
	VMOVUPS Y7, 32(R10) \
	ADDQ R8, R10 \
	VMULPS Y14, Y8, Y8 \
	VMULPS Y14, Y9, Y9 \
	VMOVUPS Y8, (R10) \
	VMOVUPS Y9, 32(R10) \
	ADDQ R8, R10 \
	VMULPS Y14, Y10, Y10 \
	VMULPS Y14, Y11, Y11 \
	VMOVUPS Y10, (R10) \
	VMOVUPS Y11, 32(R10)

// func sgemmKernel6x16(k int, a, b, c *float32, ldc int, alpha, beta float32, beta0 int)
//
// a: packed 6-row panel, 6 values per step of k; b: packed 16-column panel,
// 16 values per step of k. For each of the 6x16 elements of the tile at c
// (row stride ldc elements): c = alpha*sum + beta*c, or c = alpha*sum when
// beta0 != 0 (c is then not read, so NaNs in it do not propagate).
TEXT ·sgemmKernel6x16(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	PREFETCH_C
	ZERO
	MOVQ CX, R9
	SHRQ $2, R9
	JZ tail
loop4:
	KSTEP4
	DECQ R9
	JNZ loop4
tail:
	ANDQ $3, CX
	JZ store
loop1:
	KSTEP1
	DECQ CX
	JNZ loop1
store:
	VBROADCASTSS alpha+40(FP), Y14
	VBROADCASTSS beta+44(FP), Y15
	MOVQ beta0+48(FP), AX
	TESTQ AX, AX
	JNZ store0
	STORE_BETA
	VZEROUPPER
	RET
store0:
	STORE_BETA0
	VZEROUPPER
	RET

// func sgemmKernel6x16Tiles(k int, a, b, c *float32, ldc int, alpha, beta float32, beta0 int, tiles int, bnext *float32)
//
// sgemmKernel6x16 for tiles tiles, one above the other: tile t multiplies
// the 6-row panel at a + 6*k*t by the same panel of b into the tile at
// c + 6*ldc*t. One call per column of tiles saves a call, its argument
// copies and its checks per tile; the arithmetic is sgemmKernel6x16's.
//
// bnext, if not nil, is the B panel (k steps, 64 bytes each) the next call
// will read: the last 4 tiles prefetch it, a line every 4 steps of k, so
// that the next column's first tile finds it in L1 rather than waiting on
// L2/L3 (PREFETCHT1/T2 fill L1 too on Zen 3, so the prefetch comes late,
// when the current panel has few tiles left to serve).
TEXT ·sgemmKernel6x16Tiles(SB), NOSPLIT, $0-72
	MOVQ a+8(FP), SI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	MOVQ bnext+64(FP), R13
	MOVQ tiles+56(FP), R11
	TESTQ R11, R11
	JLE done
tile:
	// SI already points at this tile's panel of a (panels are contiguous).
	MOVQ k+0(FP), CX
	MOVQ b+16(FP), DI
	PREFETCH_C
	ZERO
	MOVQ CX, R9
	SHRQ $2, R9
	JZ tail
	TESTQ R13, R13
	JZ loop4
	CMPQ R11, $4
	JGT loop4
loop4pf:
	PREFETCHT0 (R13)
	ADDQ $64, R13
	KSTEP4
	DECQ R9
	JNZ loop4pf
	JMP tail
loop4:
	KSTEP4
	DECQ R9
	JNZ loop4
tail:
	ANDQ $3, CX
	JZ store
loop1:
	KSTEP1
	DECQ CX
	JNZ loop1
store:
	// Y14/Y15 were the broadcasts of a in the loop: load alpha and beta again.
	VBROADCASTSS alpha+40(FP), Y14
	VBROADCASTSS beta+44(FP), Y15
	MOVQ beta0+48(FP), AX
	TESTQ AX, AX
	JNZ store0
	STORE_BETA
	JMP next
store0:
	STORE_BETA0
next:
	LEAQ (R8)(R8*2), R10
	LEAQ (DX)(R10*2), DX
	DECQ R11
	JNZ tile
done:
	VZEROUPPER
	RET
