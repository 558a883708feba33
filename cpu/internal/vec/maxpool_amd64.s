//go:build amd64 && !purego

#include "textflag.h"

// Lane offsets of eight outputs' columns at stride 2: 0, 2, ..., 14.
DATA maxpoolLanes<>+0(SB)/4, $0
DATA maxpoolLanes<>+4(SB)/4, $2
DATA maxpoolLanes<>+8(SB)/4, $4
DATA maxpoolLanes<>+12(SB)/4, $6
DATA maxpoolLanes<>+16(SB)/4, $8
DATA maxpoolLanes<>+20(SB)/4, $10
DATA maxpoolLanes<>+24(SB)/4, $12
DATA maxpoolLanes<>+28(SB)/4, $14
GLOBL maxpoolLanes<>(SB), RODATA|NOPTR, $32

// MAXPOOL_ROW loads the three window columns of 8 outputs from input row
// pointer p (column 2*ow0-2) into Y4 (x[2ow-1]), Y5 (x[2ow]) and Y6
// (x[2ow+1]), or-ing unordered lanes into Y14, and their plane indices,
// from ib (that of x[2*ow0]), into Y8, Y7 and Y9.
#define MAXPOOL_ROW(p, ib) \
	VMOVUPS 0(p), Y0; \
	VMOVUPS 32(p), Y1; \
	VMOVUPS 8(p), Y2; \
	VMOVUPS 40(p), Y3; \
	VSHUFPS $0xDD, Y1, Y0, Y4; \
	VPERMPD $0xD8, Y4, Y4; \
	VSHUFPS $0x88, Y3, Y2, Y5; \
	VPERMPD $0xD8, Y5, Y5; \
	VSHUFPS $0xDD, Y3, Y2, Y6; \
	VPERMPD $0xD8, Y6, Y6; \
	VCMPPS $3, Y4, Y4, Y10; \
	VORPS Y10, Y14, Y14; \
	VCMPPS $3, Y5, Y5, Y10; \
	VORPS Y10, Y14, Y14; \
	VCMPPS $3, Y6, Y6, Y10; \
	VORPS Y10, Y14, Y14; \
	VMOVD ib, X7; \
	VPBROADCASTD X7, Y7; \
	VPADDD Y15, Y7, Y7; \
	VPADDD Y11, Y7, Y8; \
	VPSUBD Y11, Y7, Y9

// MAXPOOL_TAKE replaces the best (Y13, its index Y12) by v (index iv) in
// the lanes where v is greater (ordered: -0 and +0 equal, NaN never).
#define MAXPOOL_TAKE(v, iv) \
	VCMPPS $0x1E, Y13, v, Y10; \
	VBLENDVPS Y10, v, Y13, Y13; \
	VBLENDVPS Y10, iv, Y12, Y12

// func maxPool3s2AVX2(r0, r1, r2 *float32, n int, y *float32, idx *int64, ib *[3]int32) (nan bool)
// Max pooling 3x3 at stride 2 of n groups of 8 outputs of one output row:
// rk points at column 2*ow0-2 of the window's input row k, ib[k] is the
// plane index of column 2*ow0 of that row. Each window is scanned as
// PyTorch's loop does (rows, then columns; a later value replaces the best
// only if greater: the first maximum, -0 and +0 equal); y and idx get the
// maximum and its plane index. nan reports a NaN among the values read
// (the results are then not the loop's: the caller rescans).
TEXT ·maxPool3s2AVX2(SB), NOSPLIT, $0-57
	MOVQ r0+0(FP), SI
	MOVQ r1+8(FP), DI
	MOVQ r2+16(FP), R11
	MOVQ n+24(FP), CX
	MOVQ y+32(FP), DX
	MOVQ idx+40(FP), BX
	MOVQ ib+48(FP), AX
	MOVL 0(AX), R8
	MOVL 4(AX), R9
	MOVL 8(AX), R10
	VMOVDQU maxpoolLanes<>(SB), Y15
	VPXOR Y14, Y14, Y14
	VPCMPEQD Y11, Y11, Y11 // all ones: -1 in each int32 lane
	TESTQ CX, CX
	JZ   mpdone
mploop:
	MAXPOOL_ROW(SI, R8)
	VMOVAPS Y4, Y13
	VMOVDQA Y8, Y12
	MAXPOOL_TAKE(Y5, Y7)
	MAXPOOL_TAKE(Y6, Y9)
	MAXPOOL_ROW(DI, R9)
	MAXPOOL_TAKE(Y4, Y8)
	MAXPOOL_TAKE(Y5, Y7)
	MAXPOOL_TAKE(Y6, Y9)
	MAXPOOL_ROW(R11, R10)
	MAXPOOL_TAKE(Y4, Y8)
	MAXPOOL_TAKE(Y5, Y7)
	MAXPOOL_TAKE(Y6, Y9)
	VMOVUPS Y13, (DX)
	VPMOVSXDQ X12, Y0
	VMOVDQU Y0, (BX)
	VEXTRACTI128 $1, Y12, X1
	VPMOVSXDQ X1, Y1
	VMOVDQU Y1, 32(BX)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, R11
	ADDL $16, R8
	ADDL $16, R9
	ADDL $16, R10
	ADDQ $32, DX
	ADDQ $64, BX
	DECQ CX
	JNZ  mploop
mpdone:
	VMOVMSKPS Y14, AX
	TESTL AX, AX
	SETNE nan+56(FP)
	VZEROUPPER
	RET
