//go:build amd64 && !purego

#include "textflag.h"

// Column sums in float64, a row at a time: each lane is one column's
// running sum, so every column's rows are added in order, as the scalar
// loops add them. The sums are the first operand of each addition (as in
// the scalar acc += v), and no multiply-add is fused.

// func colAddAVX2(acc *float64, x *float32, n int)
// acc[j] += float64(x[j]) for j < n, n a multiple of 8.
TEXT ·colAddAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   cadone
caloop:
	VCVTPS2PD 0(SI), Y0
	VCVTPS2PD 16(SI), Y1
	VMOVUPD   0(DI), Y2
	VMOVUPD   32(DI), Y3
	VADDPD    Y0, Y2, Y2
	VADDPD    Y1, Y3, Y3
	VMOVUPD   Y2, 0(DI)
	VMOVUPD   Y3, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       caloop
cadone:
	VZEROUPPER
	RET

// func normColsAVX2(sw, sb *float64, dy, x *float32, n int, c *[2]float64)
// For j < n (a multiple of 4): sw[j] += (float64(dy[j])*(float64(x[j])-c[0]))*c[1];
// sb[j] += float64(dy[j]).
TEXT ·normColsAVX2(SB), NOSPLIT, $0-48
	MOVQ sw+0(FP), DI
	MOVQ sb+8(FP), R8
	MOVQ dy+16(FP), DX
	MOVQ x+24(FP), SI
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), AX
	VBROADCASTSD 0(AX), Y14
	VBROADCASTSD 8(AX), Y15
	SHRQ $2, CX
	JZ   ncdone
ncloop:
	VCVTPS2PD 0(DX), Y0
	VCVTPS2PD 0(SI), Y1
	VSUBPD    Y14, Y1, Y1
	VMULPD    Y1, Y0, Y1
	VMULPD    Y15, Y1, Y1
	VMOVUPD   0(DI), Y2
	VADDPD    Y1, Y2, Y2
	VMOVUPD   Y2, 0(DI)
	VMOVUPD   0(R8), Y3
	VADDPD    Y0, Y3, Y3
	VMOVUPD   Y3, 0(R8)
	ADDQ      $16, DX
	ADDQ      $16, SI
	ADDQ      $32, DI
	ADDQ      $32, R8
	DECQ      CX
	JNZ       ncloop
ncdone:
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int, out *[8]float32)
// out[l] = the largest of x[8i+l] for 8i+l < n (a multiple of 8), NaNs
// skipped, from out[l] on entry: each lane is the scalar loop's
// "if v > m { m = v }" (VMAXPS returns its second source unless the first
// is greater).
TEXT ·maxAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ out+16(FP), DI
	VMOVUPS 0(DI), Y0
	VMOVUPS Y0, Y1
	SHRQ $3, CX
	JZ   mxdone
	TESTQ $1, CX
	JZ   mxpairs
	VMOVUPS 0(SI), Y2
	VMAXPS  Y0, Y2, Y0
	ADDQ    $32, SI
	DECQ    CX
	JZ      mxdone
mxpairs:
	SHRQ $1, CX
mxloop:
	VMOVUPS 0(SI), Y2
	VMOVUPS 32(SI), Y3
	VMAXPS  Y0, Y2, Y0
	VMAXPS  Y1, Y3, Y1
	ADDQ    $64, SI
	DECQ    CX
	JNZ     mxloop
mxdone:
	VMAXPS  Y0, Y1, Y0
	VMOVUPS Y0, 0(DI)
	VZEROUPPER
	RET

// func colAddRowsAVX2(acc *float64, x *float32, ld, rows, n int)
// For j < n (a multiple of 16) and each row r < rows in order:
// acc[j] += float64(x[r*ld+j]). Sixteen columns' sums stay in registers
// while the rows run down them (acc is read and written once a call, not
// once a row).
TEXT ·colAddRowsAVX2(SB), NOSPLIT, $0-40
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8
	MOVQ rows+24(FP), R9
	MOVQ n+32(FP), CX
	TESTQ R9, R9
	JZ   crdone
	SHRQ $4, CX
	JZ   crdone
crchunk:
	VMOVUPD 0(DI), Y0
	VMOVUPD 32(DI), Y1
	VMOVUPD 64(DI), Y2
	VMOVUPD 96(DI), Y3
	MOVQ SI, AX
	MOVQ R9, DX
crrow:
	PREFETCHT0 512(AX)
	VCVTPS2PD 0(AX), Y4
	VCVTPS2PD 16(AX), Y5
	VCVTPS2PD 32(AX), Y6
	VCVTPS2PD 48(AX), Y7
	VADDPD    Y4, Y0, Y0
	VADDPD    Y5, Y1, Y1
	VADDPD    Y6, Y2, Y2
	VADDPD    Y7, Y3, Y3
	ADDQ      R8, AX
	DECQ      DX
	JNZ       crrow
	VMOVUPD Y0, 0(DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	ADDQ    $64, SI
	ADDQ    $128, DI
	DECQ    CX
	JNZ     crchunk
crdone:
	VZEROUPPER
	RET

// func normColsRowsAVX2(sw, sb *float64, dy, x *float32, ld, rows, n int, mr *float64)
// For j < n (a multiple of 8) and each row r < rows in order, with
// m = mr[2r] and rs = mr[2r+1]: sw[j] += (float64(dy[r*ld+j])*(float64(x[r*ld+j])-m))*rs;
// sb[j] += float64(dy[r*ld+j]). Eight columns' sums stay in registers
// down the rows.
TEXT ·normColsRowsAVX2(SB), NOSPLIT, $0-64
	MOVQ sw+0(FP), DI
	MOVQ sb+8(FP), R8
	MOVQ dy+16(FP), DX
	MOVQ x+24(FP), SI
	MOVQ ld+32(FP), R10
	SHLQ $2, R10
	MOVQ rows+40(FP), R9
	MOVQ n+48(FP), CX
	MOVQ mr+56(FP), R11
	TESTQ R9, R9
	JZ   nrdone
	SHRQ $3, CX
	JZ   nrdone
nrchunk:
	VMOVUPD 0(DI), Y0
	VMOVUPD 32(DI), Y1
	VMOVUPD 0(R8), Y2
	VMOVUPD 32(R8), Y3
	MOVQ DX, AX
	MOVQ SI, BX
	MOVQ R11, R12
	MOVQ R9, R13
nrrow:
	VBROADCASTSD 0(R12), Y14
	VBROADCASTSD 8(R12), Y15
	VCVTPS2PD 0(AX), Y4
	VCVTPS2PD 16(AX), Y5
	VCVTPS2PD 0(BX), Y6
	VCVTPS2PD 16(BX), Y7
	VSUBPD    Y14, Y6, Y6
	VSUBPD    Y14, Y7, Y7
	VMULPD    Y6, Y4, Y6
	VMULPD    Y7, Y5, Y7
	VMULPD    Y15, Y6, Y6
	VMULPD    Y15, Y7, Y7
	VADDPD    Y6, Y0, Y0
	VADDPD    Y7, Y1, Y1
	VADDPD    Y4, Y2, Y2
	VADDPD    Y5, Y3, Y3
	ADDQ      R10, AX
	ADDQ      R10, BX
	ADDQ      $16, R12
	DECQ      R13
	JNZ       nrrow
	VMOVUPD Y0, 0(DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 0(R8)
	VMOVUPD Y3, 32(R8)
	ADDQ    $32, DX
	ADDQ    $32, SI
	ADDQ    $64, DI
	ADDQ    $64, R8
	DECQ    CX
	JNZ     nrchunk
nrdone:
	VZEROUPPER
	RET
