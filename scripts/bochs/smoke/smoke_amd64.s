//go:build bochs && amd64

#include "textflag.h"

// func cpuidRaw(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuidRaw(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbvRaw() (eax, edx uint32)
TEXT ·xgetbvRaw(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// func fmaZ(a, b *[16]float32, s *float32, out, masked *[16]float32, mask uint16)
TEXT ·fmaZ(SB), NOSPLIT, $0-42
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), BX
	MOVQ s+16(FP), CX
	MOVQ out+24(FP), DX
	MOVQ masked+32(FP), DI
	MOVWLZX mask+40(FP), SI
	VMOVUPS (AX), Z16
	VMOVUPS (BX), Z17
	VADDPS Z16, Z17, Z24              // Z24 = a + b
	VFMADD231PS.BCST (CX), Z16, Z24   // Z24 += a * {s x16}
	VMOVUPS Z24, (DX)
	KMOVW SI, K1
	VMOVUPS Z24, K1, (DI)             // store only lanes whose mask bit is set
	VZEROUPPER
	RET

// func addVLBW(x, y, outY *[8]float32, mask uint8, p, q, outB *[64]byte)
TEXT ·addVLBW(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), AX
	MOVQ y+8(FP), BX
	MOVQ outY+16(FP), DX
	MOVBLZX mask+24(FP), SI
	VMOVUPS (AX), Y20
	VMOVUPS (BX), Y21
	KMOVW SI, K2
	VADDPS.Z Y20, Y21, K2, Y22        // zero the lanes whose mask bit is clear
	VMOVUPS Y22, (DX)
	MOVQ p+32(FP), AX
	MOVQ q+40(FP), BX
	MOVQ outB+48(FP), DX
	VMOVDQU8 (AX), Z25
	VMOVDQU8 (BX), Z26
	VPADDB Z25, Z26, Z27
	VMOVDQU8 Z27, (DX)
	VZEROUPPER
	RET
