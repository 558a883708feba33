//go:build amd64 && !purego

#include "textflag.h"

// Constants, one float32 (or int32) each; loaded with VBROADCASTSS.
DATA ·vconst+0(SB)/4, $0x3f800000 // 1
DATA ·vconst+4(SB)/4, $0x3f000000 // 0.5
DATA ·vconst+8(SB)/4, $0x3f3504f3 // 1/sqrt(2)
DATA ·vconst+12(SB)/4, $0x80000000 // sign bit
DATA ·vconst+16(SB)/4, $0x7fffffff // all but the sign bit
DATA ·vconst+20(SB)/4, $0x3ea7ba05 // erf: p = 0.3275911
DATA ·vconst+24(SB)/4, $0x3e827906 // erf: p1 = 0.254829592
DATA ·vconst+28(SB)/4, $0xbe91a98e // erf: p2 = -0.284496736
DATA ·vconst+32(SB)/4, $0x3fb5f0e3 // erf: p3 = 1.421413741
DATA ·vconst+36(SB)/4, $0xbfba00e3 // erf: p4 = -1.453152027
DATA ·vconst+40(SB)/4, $0x3f87dc22 // erf: p5 = 1.061405429
DATA ·vconst+44(SB)/4, $0xc2aeac4f // exp: lowest argument, -87.33654
DATA ·vconst+48(SB)/4, $0x42b0c0a5 // exp: highest argument, 88.37626 (so 2^n stays finite)
DATA ·vconst+52(SB)/4, $0x3fb8aa3b // exp: log2(e)
DATA ·vconst+56(SB)/4, $0x3f318000 // exp: ln2 high part, 0.693359375
DATA ·vconst+60(SB)/4, $0xb95e8083 // exp: ln2 low part, -2.12194440e-4
DATA ·vconst+64(SB)/4, $0x39506967 // exp: c0 = 1.9875691500e-4
DATA ·vconst+68(SB)/4, $0x3ab743ce // exp: c1 = 1.3981999507e-3
DATA ·vconst+72(SB)/4, $0x3c088908 // exp: c2 = 8.3334519073e-3
DATA ·vconst+76(SB)/4, $0x3d2aa9c1 // exp: c3 = 4.1665795894e-2
DATA ·vconst+80(SB)/4, $0x3e2aaaaa // exp: c4 = 1.6666665459e-1
DATA ·vconst+84(SB)/4, $0x3f000000 // exp: c5 = 5.0000001201e-1
DATA ·vconst+88(SB)/4, $0x0000007f // 127 (exponent bias)
DATA ·vconst+92(SB)/4, $0x3ecc422a // 1/sqrt(2*pi)
GLOBL ·vconst(SB), RODATA|NOPTR, $96

#define C(off) ·vconst+off(SB)

// EXP's last constants as whole vectors (expAffineAVX2's memory operands):
// c4, c5 and the exponent bias 127, eight times each.
DATA ·expv+0(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA ·expv+8(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA ·expv+16(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA ·expv+24(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA ·expv+32(SB)/8, $0x3f0000003f000000
DATA ·expv+40(SB)/8, $0x3f0000003f000000
DATA ·expv+48(SB)/8, $0x3f0000003f000000
DATA ·expv+56(SB)/8, $0x3f0000003f000000
DATA ·expv+64(SB)/8, $0x0000007f0000007f
DATA ·expv+72(SB)/8, $0x0000007f0000007f
DATA ·expv+80(SB)/8, $0x0000007f0000007f
DATA ·expv+88(SB)/8, $0x0000007f0000007f
GLOBL ·expv(SB), RODATA|NOPTR, $96

// EXP sets Y4 = exp(Y4) (argument clamped to [-87.34, 88.38]).
// Clobbers Y7, Y8, Y9.
#define EXP \
	VBROADCASTSS C(44), Y9 \
	VMAXPS Y9, Y4, Y4 \
	VBROADCASTSS C(48), Y9 \
	VMINPS Y9, Y4, Y4 \
	VBROADCASTSS C(52), Y9 \
	VMULPS Y9, Y4, Y7 \
	VROUNDPS $0, Y7, Y7 \
	VBROADCASTSS C(56), Y9 \
	VFNMADD231PS Y9, Y7, Y4 \
	VBROADCASTSS C(60), Y9 \
	VFNMADD231PS Y9, Y7, Y4 \
	VBROADCASTSS C(64), Y8 \
	VBROADCASTSS C(68), Y9 \
	VFMADD213PS Y9, Y4, Y8 \
	VBROADCASTSS C(72), Y9 \
	VFMADD213PS Y9, Y4, Y8 \
	VBROADCASTSS C(76), Y9 \
	VFMADD213PS Y9, Y4, Y8 \
	VBROADCASTSS C(80), Y9 \
	VFMADD213PS Y9, Y4, Y8 \
	VBROADCASTSS C(84), Y9 \
	VFMADD213PS Y9, Y4, Y8 \
	VMULPS Y4, Y4, Y9 \
	VFMADD213PS Y4, Y9, Y8 \
	VADDPS Y15, Y8, Y8 \
	VCVTPS2DQ Y7, Y7 \
	VPBROADCASTD C(88), Y9 \
	VPADDD Y9, Y7, Y7 \
	VPSLLD $23, Y7, Y7 \
	VMULPS Y7, Y8, Y4

// ERF computes, from x in Y0: Y6 = erf(x/sqrt2) and Y4 = exp(-x*x/2).
// Clobbers Y1, Y2, Y3, Y5, Y7, Y8, Y9.
#define ERF \
	VBROADCASTSS C(8), Y1 \
	VMULPS Y1, Y0, Y1 \
	VANDPS Y13, Y1, Y3 \
	VANDPS Y12, Y1, Y2 \
	VMULPS Y1, Y1, Y4 \
	VXORPS Y13, Y4, Y4 \
	EXP \
	VBROADCASTSS C(20), Y9 \
	VMOVAPS Y15, Y5 \
	VFMADD231PS Y9, Y2, Y5 \
	VDIVPS Y5, Y15, Y5 \
	VBROADCASTSS C(40), Y6 \
	VBROADCASTSS C(36), Y9 \
	VFMADD213PS Y9, Y5, Y6 \
	VBROADCASTSS C(32), Y9 \
	VFMADD213PS Y9, Y5, Y6 \
	VBROADCASTSS C(28), Y9 \
	VFMADD213PS Y9, Y5, Y6 \
	VBROADCASTSS C(24), Y9 \
	VFMADD213PS Y9, Y5, Y6 \
	VMULPS Y5, Y6, Y6 \
	VFNMADD213PS Y15, Y4, Y6 \
	VXORPS Y3, Y6, Y6

#define SETUP \
	VBROADCASTSS C(0), Y15 \
	VBROADCASTSS C(4), Y14 \
	VBROADCASTSS C(12), Y13 \
	VBROADCASTSS C(16), Y12

// func geluAVX2(x, y *float32, n int)
// y = x*0.5*(1+erf(x/sqrt2)), n a multiple of 8.
TEXT ·geluAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   gdone
	SETUP
gloop:
	VMOVUPS (SI), Y0
	ERF
	VADDPS Y15, Y6, Y6
	VMULPS Y14, Y0, Y7
	VMULPS Y7, Y6, Y6
	VMOVUPS Y6, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  gloop
gdone:
	VZEROUPPER
	RET

// func geluBackwardAVX2(dy, x, y *float32, n int)
// y = g*(0.5*(1+erf(x/sqrt2)) + x*exp(-x*x/2)/sqrt(2*pi)), n a multiple of 8.
TEXT ·geluBackwardAVX2(SB), NOSPLIT, $0-32
	MOVQ dy+0(FP), DX
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   bdone
	SETUP
bloop:
	VMOVUPS (SI), Y0
	ERF
	VADDPS Y15, Y6, Y6
	VMULPS Y14, Y6, Y6
	VBROADCASTSS C(92), Y9
	VMULPS Y9, Y4, Y4
	VFMADD231PS Y4, Y0, Y6
	VMULPS (DX), Y6, Y6
	VMOVUPS Y6, (DI)
	ADDQ $32, DX
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  bloop
bdone:
	VZEROUPPER
	RET

// func adamAVX2(v, grad, m, s *float32, n int, c *AdamConsts)
// n a multiple of 8; c holds B1, OmB1, B2, OmB2, BC2Sqrt, Eps, NegStep,
// Decay at byte offsets 0, 4, ..., 28.
TEXT ·adamAVX2(SB), NOSPLIT, $0-48
	MOVQ v+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ s+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), AX
	SHRQ $3, CX
	JZ   adone
	VBROADCASTSS 0(AX), Y8   // beta1
	VBROADCASTSS 4(AX), Y9   // 1-beta1
	VBROADCASTSS 8(AX), Y10  // beta2
	VBROADCASTSS 12(AX), Y11 // 1-beta2
	VBROADCASTSS 16(AX), Y12 // sqrt(bias correction 2)
	VBROADCASTSS 20(AX), Y13 // eps
	VBROADCASTSS 24(AX), Y14 // -step size
	VBROADCASTSS 28(AX), Y15 // decay
aloop:
	VMOVUPS (SI), Y0
	VMULPS (R8), Y8, Y1
	VFMADD231PS Y9, Y0, Y1
	VMOVUPS Y1, (R8)
	VMULPS (R9), Y10, Y2
	VMULPS Y11, Y0, Y3
	VFMADD231PS Y0, Y3, Y2
	VMOVUPS Y2, (R9)
	VSQRTPS Y2, Y4
	VDIVPS Y12, Y4, Y4
	VADDPS Y13, Y4, Y4
	VMULPS Y14, Y1, Y5
	VDIVPS Y4, Y5, Y5
	VMULPS (DI), Y15, Y6
	VADDPS Y5, Y6, Y6
	VMOVUPS Y6, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	DECQ CX
	JNZ  aloop
adone:
	VZEROUPPER
	RET

// func expAffineAVX2(x, y *float32, n int, ab *[2]float32)
// y = exp(x*a + b), n a multiple of 8. EXP's operations in its order,
// with its constants held in registers (Y0-Y3, Y5, Y6, Y12-Y14) or read
// as whole vectors (·expv), not broadcast again for every vector: a
// third of the instructions fewer (attention's softmax spends most of
// its time here).
TEXT ·expAffineAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ ab+24(FP), AX
	SHRQ $3, CX
	JZ   edone
	VBROADCASTSS C(0), Y15
	VBROADCASTSS 0(AX), Y10
	VBROADCASTSS 4(AX), Y11
	VBROADCASTSS C(44), Y0
	VBROADCASTSS C(48), Y1
	VBROADCASTSS C(52), Y2
	VBROADCASTSS C(56), Y3
	VBROADCASTSS C(60), Y5
	VBROADCASTSS C(64), Y6
	VBROADCASTSS C(68), Y12
	VBROADCASTSS C(72), Y13
	VBROADCASTSS C(76), Y14
eloop:
	VMOVUPS (SI), Y4
	VFMADD213PS Y11, Y10, Y4
	VMAXPS Y0, Y4, Y4
	VMINPS Y1, Y4, Y4
	VMULPS Y2, Y4, Y7
	VROUNDPS $0, Y7, Y7
	VFNMADD231PS Y3, Y7, Y4
	VFNMADD231PS Y5, Y7, Y4
	VMOVAPS Y6, Y8
	VFMADD213PS Y12, Y4, Y8
	VFMADD213PS Y13, Y4, Y8
	VFMADD213PS Y14, Y4, Y8
	VFMADD213PS ·expv+0(SB), Y4, Y8
	VFMADD213PS ·expv+32(SB), Y4, Y8
	VMULPS Y4, Y4, Y9
	VFMADD213PS Y4, Y9, Y8
	VADDPS Y15, Y8, Y8
	VCVTPS2DQ Y7, Y7
	VPADDD ·expv+64(SB), Y7, Y7
	VPSLLD $23, Y7, Y7
	VMULPS Y7, Y8, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  eloop
edone:
	VZEROUPPER
	RET

// func reluAVX2(x, y *float32, n int)
// y = x & (x > 0 | isnan(x)), n a multiple of 8.
TEXT ·reluAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   rdone
	VXORPS Y15, Y15, Y15
rloop:
	VMOVUPS (SI), Y0
	VCMPPS $0x1e, Y15, Y0, Y1 // x > 0, ordered
	VCMPPS $3, Y0, Y0, Y2     // unordered: NaN
	VORPS Y2, Y1, Y1
	VANDPS Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  rloop
rdone:
	VZEROUPPER
	RET

// func reluBackwardAVX2(dy, s, y *float32, n int)
// y = dy & (s > 0 | isnan(s)), n a multiple of 8.
TEXT ·reluBackwardAVX2(SB), NOSPLIT, $0-32
	MOVQ dy+0(FP), DX
	MOVQ s+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   rbdone
	VXORPS Y15, Y15, Y15
rbloop:
	VMOVUPS (SI), Y0
	VCMPPS $0x1e, Y15, Y0, Y1
	VCMPPS $3, Y0, Y0, Y2
	VORPS Y2, Y1, Y1
	VANDPS (DX), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, DX
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  rbloop
rbdone:
	VZEROUPPER
	RET

// func leakyAVX2(dy, x, y *float32, n int, c float32)
// k = x > 0 (ordered) ? 1 : c; y = x*k, or dy*k when dy is not nil.
TEXT ·leakyAVX2(SB), NOSPLIT, $0-36
	MOVQ dy+0(FP), DX
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	VBROADCASTSS c+32(FP), Y14
	VBROADCASTSS C(0), Y13
	VXORPS Y15, Y15, Y15
	SHRQ $3, CX
	JZ   ldone
	TESTQ DX, DX
	JZ   lfwd
lbwd:
	VMOVUPS (SI), Y0
	VCMPPS $0x1e, Y15, Y0, Y1
	VBLENDVPS Y1, Y13, Y14, Y2 // mask ? 1 : c
	VMULPS (DX), Y2, Y2
	VMOVUPS Y2, (DI)
	ADDQ $32, DX
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  lbwd
	JMP  ldone
lfwd:
	VMOVUPS (SI), Y0
	VCMPPS $0x1e, Y15, Y0, Y1
	VBLENDVPS Y1, Y13, Y14, Y2
	VMULPS Y0, Y2, Y2
	VMOVUPS Y2, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  lfwd
ldone:
	VZEROUPPER
	RET

// SUMS_REDUCE adds sumsAVX2's accumulators Y0-Y3 and Y4-Y7 into the
// two float64s at DI.
#define SUMS_REDUCE \
	VADDPD Y1, Y0, Y0; \
	VADDPD Y3, Y2, Y2; \
	VADDPD Y2, Y0, Y0; \
	VADDPD Y5, Y4, Y4; \
	VADDPD Y7, Y6, Y6; \
	VADDPD Y6, Y4, Y4; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPD X1, X0, X0; \
	VHADDPD X0, X0, X0; \
	VMOVSD X0, 0(DI); \
	VEXTRACTF128 $1, Y4, X5; \
	VADDPD X5, X4, X4; \
	VHADDPD X4, X4, X4; \
	VMOVSD X4, 8(DI)

// func sumsAVX2(dy, x *float32, n, planes, stride int, m float64, out *[2]float64, mode int)
// Float64 sums over n (a multiple of 16) elements of each of planes planes
// stride elements apart, four lanes per accumulator, reduced once at the
// end: mode 0 Σx; mode 1 Σ(x-m)²; mode 2 Σdy and Σdy*(x-m).
TEXT ·sumsAVX2(SB), NOSPLIT, $0-64
	MOVQ dy+0(FP), DX
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), BX
	MOVQ planes+24(FP), R8
	MOVQ stride+32(FP), R9
	VBROADCASTSD m+40(FP), Y15
	MOVQ out+48(FP), DI
	MOVQ mode+56(FP), AX
	SHLQ $2, R9
	SHRQ $4, BX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7
	TESTQ BX, BX
	JZ    sreduce
	TESTQ R8, R8
	JZ    sreduce
splane:
	MOVQ SI, R10
	MOVQ DX, R11
	MOVQ BX, CX
	CMPQ AX, $1
	JEQ  smode1
	CMPQ AX, $2
	JEQ  smode2
smode0:
	VCVTPS2PD 0(R10), Y8
	VCVTPS2PD 16(R10), Y9
	VCVTPS2PD 32(R10), Y10
	VCVTPS2PD 48(R10), Y11
	VADDPD Y8, Y0, Y0
	VADDPD Y9, Y1, Y1
	VADDPD Y10, Y2, Y2
	VADDPD Y11, Y3, Y3
	ADDQ $64, R10
	DECQ CX
	JNZ  smode0
	JMP  snext
smode1:
	VCVTPS2PD 0(R10), Y8
	VCVTPS2PD 16(R10), Y9
	VCVTPS2PD 32(R10), Y10
	VCVTPS2PD 48(R10), Y11
	VSUBPD Y15, Y8, Y8
	VSUBPD Y15, Y9, Y9
	VSUBPD Y15, Y10, Y10
	VSUBPD Y15, Y11, Y11
	VFMADD231PD Y8, Y8, Y0
	VFMADD231PD Y9, Y9, Y1
	VFMADD231PD Y10, Y10, Y2
	VFMADD231PD Y11, Y11, Y3
	ADDQ $64, R10
	DECQ CX
	JNZ  smode1
	JMP  snext
smode2:
	VCVTPS2PD 0(R11), Y8
	VCVTPS2PD 16(R11), Y9
	VCVTPS2PD 32(R11), Y10
	VCVTPS2PD 48(R11), Y11
	VADDPD Y8, Y0, Y0
	VADDPD Y9, Y1, Y1
	VADDPD Y10, Y2, Y2
	VADDPD Y11, Y3, Y3
	VCVTPS2PD 0(R10), Y12
	VSUBPD Y15, Y12, Y12
	VFMADD231PD Y12, Y8, Y4
	VCVTPS2PD 16(R10), Y12
	VSUBPD Y15, Y12, Y12
	VFMADD231PD Y12, Y9, Y5
	VCVTPS2PD 32(R10), Y12
	VSUBPD Y15, Y12, Y12
	VFMADD231PD Y12, Y10, Y6
	VCVTPS2PD 48(R10), Y12
	VSUBPD Y15, Y12, Y12
	VFMADD231PD Y12, Y11, Y7
	ADDQ $64, R11
	ADDQ $64, R10
	DECQ CX
	JNZ  smode2
snext:
	ADDQ R9, SI
	ADDQ R9, DX
	DECQ R8
	JNZ  splane
sreduce:
	SUMS_REDUCE
	VZEROUPPER
	RET

// func normAVX2(dy, x, y *float32, n, planes, stride int, c *[4]float32, mode int)
// Over n (a multiple of 8) elements of each of planes planes stride
// elements apart: mode 0: y = x*c0 + c1; mode 1: y = (dy - c0 - (x-c1)*c2)
// * c3; mode 2: y = x * (dy - c0) * c1. Separate multiplies and adds, as
// the scalar code rounds.
TEXT ·normAVX2(SB), NOSPLIT, $0-64
	MOVQ dy+0(FP), DX
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), R12
	MOVQ planes+32(FP), R8
	MOVQ stride+40(FP), R9
	MOVQ c+48(FP), AX
	MOVQ mode+56(FP), BX
	VBROADCASTSS 0(AX), Y12
	VBROADCASTSS 4(AX), Y13
	VBROADCASTSS 8(AX), Y14
	VBROADCASTSS 12(AX), Y15
	SHLQ $2, R9
	SHRQ $3, R12
	JZ   ndone
	TESTQ R8, R8
	JZ   ndone
nplane:
	MOVQ DX, R10
	MOVQ SI, R11
	MOVQ DI, R13
	MOVQ R12, CX
	CMPQ BX, $2
	JEQ  nmsub
	TESTQ BX, BX
	JNZ  ngrad
naff:
	VMULPS (R11), Y12, Y0
	VADDPS Y13, Y0, Y0
	VMOVUPS Y0, (R13)
	ADDQ $32, R11
	ADDQ $32, R13
	DECQ CX
	JNZ  naff
	JMP  nnext
ngrad:
	VMOVUPS (R11), Y0
	VSUBPS Y13, Y0, Y0
	VMULPS Y14, Y0, Y0
	VMOVUPS (R10), Y1
	VSUBPS Y12, Y1, Y1
	VSUBPS Y0, Y1, Y1
	VMULPS Y15, Y1, Y1
	VMOVUPS Y1, (R13)
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R13
	DECQ CX
	JNZ  ngrad
	JMP  nnext
nmsub:
	VMOVUPS (R10), Y0
	VSUBPS Y12, Y0, Y0
	VMULPS (R11), Y0, Y0
	VMULPS Y13, Y0, Y0
	VMOVUPS Y0, (R13)
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R13
	DECQ CX
	JNZ  nmsub
nnext:
	ADDQ R9, DX
	ADDQ R9, SI
	ADDQ R9, DI
	DECQ R8
	JNZ  nplane
ndone:
	VZEROUPPER
	RET

// func sumsBF16AVX2(dy *float32, x *uint16, n, planes, stride int, m float64, out *[2]float64, mode int)
// sumsAVX2 with x in bfloat16 (widened exactly as loaded): mode 0 Σx and
// Σx*(x-m); mode 1 Σdy and Σdy*(x-m), dy float32. n a multiple of 16;
// stride in elements of either.
TEXT ·sumsBF16AVX2(SB), NOSPLIT, $0-64
	MOVQ dy+0(FP), DX
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), BX
	MOVQ planes+24(FP), R8
	MOVQ stride+32(FP), R9
	VBROADCASTSD m+40(FP), Y15
	MOVQ out+48(FP), DI
	MOVQ mode+56(FP), AX
	MOVQ R9, R12
	SHLQ $2, R9  // dy's stride in bytes
	SHLQ $1, R12 // x's
	SHRQ $4, BX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7
	TESTQ BX, BX
	JZ    bsreduce
	TESTQ R8, R8
	JZ    bsreduce
bsplane:
	MOVQ SI, R10
	MOVQ DX, R11
	MOVQ BX, CX
	TESTQ AX, AX
	JNZ  bsmode1
bsmode0:
	VPMOVZXWD 0(R10), X8
	VPSLLD $16, X8, X8
	VCVTPS2PD X8, Y8
	VADDPD Y8, Y0, Y0
	VSUBPD Y15, Y8, Y12
	VFMADD231PD Y12, Y8, Y4
	VPMOVZXWD 8(R10), X8
	VPSLLD $16, X8, X8
	VCVTPS2PD X8, Y8
	VADDPD Y8, Y1, Y1
	VSUBPD Y15, Y8, Y12
	VFMADD231PD Y12, Y8, Y5
	VPMOVZXWD 16(R10), X8
	VPSLLD $16, X8, X8
	VCVTPS2PD X8, Y8
	VADDPD Y8, Y2, Y2
	VSUBPD Y15, Y8, Y12
	VFMADD231PD Y12, Y8, Y6
	VPMOVZXWD 24(R10), X8
	VPSLLD $16, X8, X8
	VCVTPS2PD X8, Y8
	VADDPD Y8, Y3, Y3
	VSUBPD Y15, Y8, Y12
	VFMADD231PD Y12, Y8, Y7
	ADDQ $32, R10
	DECQ CX
	JNZ  bsmode0
	JMP  bsnext
bsmode1:
	VCVTPS2PD 0(R11), Y8
	VADDPD Y8, Y0, Y0
	VPMOVZXWD 0(R10), X12
	VPSLLD $16, X12, X12
	VCVTPS2PD X12, Y12
	VSUBPD Y15, Y12, Y12
	VFMADD231PD Y12, Y8, Y4
	VCVTPS2PD 16(R11), Y8
	VADDPD Y8, Y1, Y1
	VPMOVZXWD 8(R10), X12
	VPSLLD $16, X12, X12
	VCVTPS2PD X12, Y12
	VSUBPD Y15, Y12, Y12
	VFMADD231PD Y12, Y8, Y5
	VCVTPS2PD 32(R11), Y8
	VADDPD Y8, Y2, Y2
	VPMOVZXWD 16(R10), X12
	VPSLLD $16, X12, X12
	VCVTPS2PD X12, Y12
	VSUBPD Y15, Y12, Y12
	VFMADD231PD Y12, Y8, Y6
	VCVTPS2PD 48(R11), Y8
	VADDPD Y8, Y3, Y3
	VPMOVZXWD 24(R10), X12
	VPSLLD $16, X12, X12
	VCVTPS2PD X12, Y12
	VSUBPD Y15, Y12, Y12
	VFMADD231PD Y12, Y8, Y7
	ADDQ $32, R10
	ADDQ $64, R11
	DECQ CX
	JNZ  bsmode1
bsnext:
	ADDQ R12, SI
	ADDQ R9, DX
	DECQ R8
	JNZ  bsplane
bsreduce:
	SUMS_REDUCE
	VZEROUPPER
	RET

// func normBF16AVX2(dy *float32, x *uint16, y *float32, n, planes, stride int, c *[4]float32, mode int)
// normAVX2's modes 0 and 1 with x in bfloat16 (widened exactly as
// loaded); n a multiple of 8; stride in elements.
TEXT ·normBF16AVX2(SB), NOSPLIT, $0-64
	MOVQ dy+0(FP), DX
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), R12
	MOVQ planes+32(FP), R8
	MOVQ stride+40(FP), R9
	MOVQ c+48(FP), AX
	MOVQ mode+56(FP), BX
	VBROADCASTSS 0(AX), Y12
	VBROADCASTSS 4(AX), Y13
	VBROADCASTSS 8(AX), Y14
	VBROADCASTSS 12(AX), Y15
	MOVQ R9, AX
	SHLQ $2, R9 // float32 strides in bytes
	SHLQ $1, AX // x's
	SHRQ $3, R12
	JZ   bndone
	TESTQ R8, R8
	JZ   bndone
bnplane:
	MOVQ DX, R10
	MOVQ SI, R11
	MOVQ DI, R13
	MOVQ R12, CX
	TESTQ BX, BX
	JNZ  bngrad
bnaff:
	VPMOVZXWD (R11), Y0
	VPSLLD $16, Y0, Y0
	VMULPS Y0, Y12, Y0
	VADDPS Y13, Y0, Y0
	VMOVUPS Y0, (R13)
	ADDQ $16, R11
	ADDQ $32, R13
	DECQ CX
	JNZ  bnaff
	JMP  bnnext
bngrad:
	VPMOVZXWD (R11), Y0
	VPSLLD $16, Y0, Y0
	VSUBPS Y13, Y0, Y0
	VMULPS Y14, Y0, Y0
	VMOVUPS (R10), Y1
	VSUBPS Y12, Y1, Y1
	VSUBPS Y0, Y1, Y1
	VMULPS Y15, Y1, Y1
	VMOVUPS Y1, (R13)
	ADDQ $32, R10
	ADDQ $16, R11
	ADDQ $32, R13
	DECQ CX
	JNZ  bngrad
bnnext:
	ADDQ R9, DX
	ADDQ AX, SI
	ADDQ R9, DI
	DECQ R8
	JNZ  bnplane
bndone:
	VZEROUPPER
	RET

// func lnAffineAVX2(x, w, b, y *float32, n int, c *[2]float32)
// y = (x*c[0] + c[1])*w + b, each operation rounded, n a multiple of 8.
TEXT ·lnAffineAVX2(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DX
	MOVQ b+16(FP), BX
	MOVQ y+24(FP), DI
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), AX
	VBROADCASTSS 0(AX), Y12
	VBROADCASTSS 4(AX), Y13
	SHRQ $3, CX
	JZ   lndone
lnloop:
	VMULPS (SI), Y12, Y0
	VADDPS Y13, Y0, Y0
	VMULPS (DX), Y0, Y0
	VADDPS (BX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	ADDQ $32, DI
	DECQ CX
	JNZ  lnloop
lndone:
	VZEROUPPER
	RET

// func lnGradAVX2(gy, w, x, y *float32, n int, c *[4]float32)
// y = (g*w - c[0] - (x-c[1])*c[2]) * c[3], each operation rounded, n a
// multiple of 8.
TEXT ·lnGradAVX2(SB), NOSPLIT, $0-48
	MOVQ gy+0(FP), DX
	MOVQ w+8(FP), BX
	MOVQ x+16(FP), SI
	MOVQ y+24(FP), DI
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), AX
	VBROADCASTSS 0(AX), Y12
	VBROADCASTSS 4(AX), Y13
	VBROADCASTSS 8(AX), Y14
	VBROADCASTSS 12(AX), Y15
	SHRQ $3, CX
	JZ   lgdone
lgloop:
	VMOVUPS (SI), Y0
	VSUBPS Y13, Y0, Y0
	VMULPS Y14, Y0, Y0
	VMOVUPS (DX), Y1
	VMULPS (BX), Y1, Y1
	VSUBPS Y12, Y1, Y1
	VSUBPS Y0, Y1, Y1
	VMULPS Y15, Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, DX
	ADDQ $32, BX
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  lgloop
lgdone:
	VZEROUPPER
	RET

// func lnRowSumsAVX2(gy, w, x *float32, n int, m float64, out *[4]float64)
// With G = float64(g)*float64(w) (exact): out[0], out[1] += G over the
// even and odd indices, out[2], out[3] += G*(float64(x)-m) likewise, in
// index order, each operation rounded; n a multiple of 4. The two lanes
// of an XMM register are the scalar loop's two chains, each element added
// in the scalar order: four products are made at once, then added half
// by half.
TEXT ·lnRowSumsAVX2(SB), NOSPLIT, $0-48
	MOVQ gy+0(FP), DX
	MOVQ w+8(FP), BX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	VBROADCASTSD m+32(FP), Y15
	MOVQ out+40(FP), DI
	VMOVUPD 0(DI), X8
	VMOVUPD 16(DI), X9
	SHRQ $2, CX
	JZ   lrdone
lrloop:
	VCVTPS2PD (DX), Y0
	VCVTPS2PD (BX), Y1
	VMULPD Y1, Y0, Y0
	VCVTPS2PD (SI), Y2
	VSUBPD Y15, Y2, Y2
	VMULPD Y2, Y0, Y2
	VADDPD X0, X8, X8
	VEXTRACTF128 $1, Y0, X3
	VADDPD X3, X8, X8
	VADDPD X2, X9, X9
	VEXTRACTF128 $1, Y2, X4
	VADDPD X4, X9, X9
	ADDQ $16, DX
	ADDQ $16, BX
	ADDQ $16, SI
	DECQ CX
	JNZ  lrloop
lrdone:
	VMOVUPD X8, 0(DI)
	VMOVUPD X9, 16(DI)
	VZEROUPPER
	RET

// func addAVX2(a, b, y *float32, n int)
// y = a + b, n a multiple of 8.
TEXT ·addAVX2(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DX
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   adddone
addloop:
	VMOVUPS (SI), Y0
	VADDPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  addloop
adddone:
	VZEROUPPER
	RET
