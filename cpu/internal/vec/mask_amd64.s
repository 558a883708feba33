//go:build amd64 && !purego

#include "textflag.h"

// Bit k of a byte, as eight int32 lanes: a mask byte broadcast to every
// lane, ANDed with these and compared with them, sets the lanes whose bit
// is set.
DATA ·maskBits+0(SB)/4, $1
DATA ·maskBits+4(SB)/4, $2
DATA ·maskBits+8(SB)/4, $4
DATA ·maskBits+12(SB)/4, $8
DATA ·maskBits+16(SB)/4, $16
DATA ·maskBits+20(SB)/4, $32
DATA ·maskBits+24(SB)/4, $64
DATA ·maskBits+28(SB)/4, $128
GLOBL ·maskBits(SB), RODATA|NOPTR, $32

// func packMaskAVX2(x *float32, mask *byte, n int, strict bool)
// Bit k of mask[b] = x[8b+k] > 0 (ordered), or NaN unless strict; n a
// multiple of 8.
TEXT ·packMaskAVX2(SB), NOSPLIT, $0-25
	MOVQ x+0(FP), SI
	MOVQ mask+8(FP), DI
	MOVQ n+16(FP), CX
	MOVBLZX strict+24(FP), DX
	SHRQ $3, CX
	JZ   pmdone
	VXORPS Y15, Y15, Y15
	TESTQ DX, DX
	JNZ  pmstrict
pmloop:
	VMOVUPS (SI), Y0
	VCMPPS $0x1e, Y15, Y0, Y1 // x > 0, ordered
	VCMPPS $3, Y0, Y0, Y2     // unordered: NaN
	VORPS Y2, Y1, Y1
	VMOVMSKPS Y1, AX
	MOVB AX, (DI)
	ADDQ $32, SI
	INCQ DI
	DECQ CX
	JNZ  pmloop
	JMP  pmdone
pmstrict:
	VMOVUPS (SI), Y0
	VCMPPS $0x1e, Y15, Y0, Y1
	VMOVMSKPS Y1, AX
	MOVB AX, (DI)
	ADDQ $32, SI
	INCQ DI
	DECQ CX
	JNZ  pmstrict
pmdone:
	VZEROUPPER
	RET

// func maskBackwardAVX2(gy, y *float32, mask *byte, n int, c float32, leaky bool)
// y[i] = gy[i] where bit i of mask is set, else +0; with leaky,
// y[i] = gy[i]*1 where it is set, else gy[i]*c. n a multiple of 8.
TEXT ·maskBackwardAVX2(SB), NOSPLIT, $0-37
	MOVQ gy+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ mask+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS c+32(FP), Y13
	MOVBLZX leaky+36(FP), BX
	SHRQ $3, CX
	JZ   mbdone
	VMOVDQU ·maskBits(SB), Y14
	MOVL $0x3f800000, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12 // 1
	TESTQ BX, BX
	JNZ  mbleaky
mbloop:
	MOVBLZX (DX), AX
	VMOVD AX, X0
	VPBROADCASTD X0, Y0
	VPAND Y14, Y0, Y0
	VPCMPEQD Y14, Y0, Y0 // lanes whose bit is set
	VANDPS (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	INCQ DX
	DECQ CX
	JNZ  mbloop
	JMP  mbdone
mbleaky:
	MOVBLZX (DX), AX
	VMOVD AX, X0
	VPBROADCASTD X0, Y0
	VPAND Y14, Y0, Y0
	VPCMPEQD Y14, Y0, Y0
	VBLENDVPS Y0, Y12, Y13, Y1 // set: 1, else c
	VMULPS (SI), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	INCQ DX
	DECQ CX
	JNZ  mbleaky
mbdone:
	VZEROUPPER
	RET
