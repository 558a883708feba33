//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 forms of geluAVX2 and geluBackwardAVX2: the same operations in
// the same order on 16 lanes, so the results are bitwise those of the
// AVX2 loops. ZMM's 32 registers hold every constant (the AVX2 loops
// broadcast most of them again for every vector), and VPANDD/VPXORD stand
// for VANDPS/VXORPS (those need AVX512DQ; the bits are the same).

#define C(off) ·vconst+off(SB)

#define SETUP512 \
	VBROADCASTSS C(0), Z31 \
	VBROADCASTSS C(4), Z30 \
	VPBROADCASTD C(12), Z29 \
	VPBROADCASTD C(16), Z28 \
	VBROADCASTSS C(8), Z27 \
	VBROADCASTSS C(20), Z26 \
	VBROADCASTSS C(24), Z25 \
	VBROADCASTSS C(28), Z24 \
	VBROADCASTSS C(32), Z23 \
	VBROADCASTSS C(36), Z22 \
	VBROADCASTSS C(40), Z21 \
	VBROADCASTSS C(44), Z20 \
	VBROADCASTSS C(48), Z19 \
	VBROADCASTSS C(52), Z18 \
	VBROADCASTSS C(56), Z17 \
	VBROADCASTSS C(60), Z16 \
	VBROADCASTSS C(64), Z15 \
	VBROADCASTSS C(68), Z14 \
	VBROADCASTSS C(72), Z13 \
	VBROADCASTSS C(76), Z12 \
	VBROADCASTSS C(80), Z11 \
	VBROADCASTSS C(84), Z10 \
	VPBROADCASTD C(88), Z9 \
	VBROADCASTSS C(92), Z8

// ERF512 is ERF (vec_amd64.s) on Z0: Z6 = erf(x/sqrt2), Z4 =
// exp(-x*x/2). Clobbers Z1, Z2, Z3, Z5, Z7.
#define ERF512 \
	VMULPS Z27, Z0, Z1 \
	VPANDD Z29, Z1, Z3 \
	VPANDD Z28, Z1, Z2 \
	VMULPS Z1, Z1, Z4 \
	VPXORD Z29, Z4, Z4 \
	VMAXPS Z20, Z4, Z4 \
	VMINPS Z19, Z4, Z4 \
	VMULPS Z18, Z4, Z7 \
	VRNDSCALEPS $0, Z7, Z7 \
	VFNMADD231PS Z17, Z7, Z4 \
	VFNMADD231PS Z16, Z7, Z4 \
	VMOVAPS Z15, Z5 \
	VFMADD213PS Z14, Z4, Z5 \
	VFMADD213PS Z13, Z4, Z5 \
	VFMADD213PS Z12, Z4, Z5 \
	VFMADD213PS Z11, Z4, Z5 \
	VFMADD213PS Z10, Z4, Z5 \
	VMULPS Z4, Z4, Z6 \
	VFMADD213PS Z4, Z6, Z5 \
	VADDPS Z31, Z5, Z5 \
	VCVTPS2DQ Z7, Z7 \
	VPADDD Z9, Z7, Z7 \
	VPSLLD $23, Z7, Z7 \
	VMULPS Z7, Z5, Z4 \
	VMOVAPS Z31, Z5 \
	VFMADD231PS Z26, Z2, Z5 \
	VDIVPS Z5, Z31, Z5 \
	VMOVAPS Z21, Z6 \
	VFMADD213PS Z22, Z5, Z6 \
	VFMADD213PS Z23, Z5, Z6 \
	VFMADD213PS Z24, Z5, Z6 \
	VFMADD213PS Z25, Z5, Z6 \
	VMULPS Z5, Z6, Z6 \
	VFNMADD213PS Z31, Z4, Z6 \
	VPXORD Z3, Z6, Z6

// func gelu512(x, y *float32, n int)
// y = x*0.5*(1+erf(x/sqrt2)), n a multiple of 16.
TEXT ·gelu512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   gdone
	SETUP512
gloop:
	VMOVUPS (SI), Z0
	ERF512
	VADDPS Z31, Z6, Z6
	VMULPS Z30, Z0, Z7
	VMULPS Z7, Z6, Z6
	VMOVUPS Z6, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  gloop
gdone:
	VZEROUPPER
	RET

// func geluBackward512(dy, x, y *float32, n int)
// y = g*(0.5*(1+erf(x/sqrt2)) + x*exp(-x*x/2)/sqrt(2*pi)), n a multiple of 16.
TEXT ·geluBackward512(SB), NOSPLIT, $0-32
	MOVQ dy+0(FP), DX
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	SHRQ $4, CX
	JZ   bdone
	SETUP512
bloop:
	VMOVUPS (SI), Z0
	ERF512
	VADDPS Z31, Z6, Z6
	VMULPS Z30, Z6, Z6
	VMULPS Z8, Z4, Z4
	VFMADD231PS Z4, Z0, Z6
	VMULPS (DX), Z6, Z6
	VMOVUPS Z6, (DI)
	ADDQ $64, DX
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  bloop
bdone:
	VZEROUPPER
	RET

// The canonical bfloat16 NaN, as gemm.NarrowBF16 writes it.
DATA ·bfnan+0(SB)/4, $0x00007fc0
GLOBL ·bfnan(SB), RODATA|NOPTR, $4

// NARROW sets Z1's lanes to bfloat16 bits of Z's float32 lanes as
// gemm.NarrowBF16 rounds them: bits + 0x7fff + bit 16 of bits, the upper
// half kept; NaNs the canonical 0x7fc0. Z8 holds 0x7fff. Clobbers K1.
#define NARROW(Z) \
	VPSLLD $15, Z, Z1 \
	VPSRLD $31, Z1, Z1 \
	VPADDD Z8, Z1, Z1 \
	VPADDD Z, Z1, Z1 \
	VPSRLD $16, Z1, Z1 \
	VCMPPS $3, Z, Z, K1 \
	VPBROADCASTD ·bfnan(SB), K1, Z1

// BLOCK runs the kernel on the lanes of K2: c+bias rounded to bf16 into
// (DI), its gelu rounded to bf16 into (DX).
#define BLOCK \
	VMOVUPS.Z (SI), K2, Z0 \
	VMOVUPS.Z (BX), K2, Z1 \
	VADDPS Z1, Z0, Z0 \
	NARROW(Z0) \
	VPMOVDW Z1, K2, (DI) \
	VPSLLD $16, Z1, Z0 \
	ERF512 \
	VADDPS Z31, Z6, Z6 \
	VMULPS Z30, Z0, Z7 \
	VMULPS Z7, Z6, Z6 \
	NARROW(Z6) \
	VPMOVDW Z1, K2, (DX)

// func biasGeluBF16x512(c, bias *float32, h, gl *uint16, n int)
// For n (a multiple of 8) elements: v = c+bias; h = bf16(v); g =
// bf16(gelu(float32(h))), each step as the program's instructions compute
// it (binaryRun's add, NarrowBF16, Widen, geluAVX2's operations, which
// ERF512 repeats): bf16-mixed gpt's c_fc epilogue in one pass.
TEXT ·biasGeluBF16x512(SB), NOSPLIT, $0-40
	MOVQ c+0(FP), SI
	MOVQ bias+8(FP), BX
	MOVQ h+16(FP), DI
	MOVQ gl+24(FP), DX
	MOVQ n+32(FP), CX
	SETUP512
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z8
	KXNORW K2, K2, K2
	SHRQ $3, CX
bgloop:
	CMPQ CX, $2
	JLT  bgtail
	BLOCK
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $32, DI
	ADDQ $32, DX
	SUBQ $2, CX
	JMP  bgloop
bgtail:
	TESTQ CX, CX
	JZ   bgdone
	MOVL $0xff, AX
	KMOVW AX, K2
	BLOCK
bgdone:
	VZEROUPPER
	RET
