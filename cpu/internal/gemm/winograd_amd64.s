//go:build amd64 && !purego

#include "textflag.h"

// func winoBT6(n16 int, p *float32, rs, ps int)
// In place, for b < n16 and x < 16, rows r of 16 floats at
// p + b*ps + r*rs (elements): s_r -> Bᵀ s (F(4×4,3×3) input transform).
TEXT ·winoBT6(SB), NOSPLIT, $0-32
	MOVQ n16+0(FP), CX
	MOVQ p+8(FP), SI
	MOVQ rs+16(FP), R8
	MOVQ ps+24(FP), R10
	SHLQ $2, R8
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R11
	MOVL $0x40800000, AX // 4
	VMOVD AX, X12
	VBROADCASTSS X12, Y12
	MOVL $0xC0A00000, AX // -5
	VMOVD AX, X13
	VBROADCASTSS X13, Y13
	MOVL $0xC0800000, AX // -4
	VMOVD AX, X14
	VBROADCASTSS X14, Y14
	TESTQ CX, CX
	JLE   btdone

btloop:
	LEAQ (SI)(R11*1), DI // row 3
	MOVQ $2, DX
	MOVQ SI, BX

bthalf:
	VMOVUPS (BX), Y0
	VMOVUPS (BX)(R8*1), Y1
	VMOVUPS (BX)(R8*2), Y2
	VMOVUPS (DI), Y3
	VMOVUPS (DI)(R8*1), Y4
	VMOVUPS (DI)(R8*2), Y5

	// o0 = 4 s0 - 5 s2 + s4
	VMOVAPS     Y4, Y6
	VFMADD231PS Y12, Y0, Y6
	VFMADD231PS Y13, Y2, Y6

	// a = s4 - 4 s2, b = s3 - 4 s1; o1 = a + b, o2 = a - b
	VMOVAPS     Y4, Y7
	VFMADD231PS Y14, Y2, Y7
	VMOVAPS     Y3, Y8
	VFMADD231PS Y14, Y1, Y8
	VADDPS      Y8, Y7, Y9
	VSUBPS      Y8, Y7, Y10

	// c = s4 - s2, e = 2 (s3 - s1); o3 = c + e, o4 = c - e
	VSUBPS Y2, Y4, Y7
	VSUBPS Y1, Y3, Y8
	VADDPS Y8, Y8, Y8
	VADDPS Y8, Y7, Y11
	VSUBPS Y8, Y7, Y15

	// o5 = 4 s1 - 5 s3 + s5
	VFMADD231PS Y12, Y1, Y5
	VFMADD231PS Y13, Y3, Y5

	VMOVUPS Y6, (BX)
	VMOVUPS Y9, (BX)(R8*1)
	VMOVUPS Y10, (BX)(R8*2)
	VMOVUPS Y11, (DI)
	VMOVUPS Y15, (DI)(R8*1)
	VMOVUPS Y5, (DI)(R8*2)

	ADDQ $32, BX
	ADDQ $32, DI
	DECQ DX
	JNZ  bthalf

	ADDQ R10, SI
	DECQ CX
	JNZ  btloop

btdone:
	VZEROUPPER
	RET

// func winoAT6(n16 int, p *float32, rs, ps int)
// In place, rows r < 6 of 16 floats at p + b*ps + r*rs -> rows 0..3 of
// Aᵀ s (F(4×4,3×3) output transform).
TEXT ·winoAT6(SB), NOSPLIT, $0-32
	MOVQ n16+0(FP), CX
	MOVQ p+8(FP), SI
	MOVQ rs+16(FP), R8
	MOVQ ps+24(FP), R10
	SHLQ $2, R8
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R11
	MOVL $0x40000000, AX // 2
	VMOVD AX, X12
	VBROADCASTSS X12, Y12
	MOVL $0x40800000, AX // 4
	VMOVD AX, X13
	VBROADCASTSS X13, Y13
	MOVL $0x41000000, AX // 8
	VMOVD AX, X14
	VBROADCASTSS X14, Y14
	TESTQ CX, CX
	JLE   atdone

atloop:
	LEAQ (SI)(R11*1), DI
	MOVQ $2, DX
	MOVQ SI, BX

athalf:
	VMOVUPS (BX), Y0
	VMOVUPS (BX)(R8*1), Y1
	VMOVUPS (BX)(R8*2), Y2
	VMOVUPS (DI), Y3
	VMOVUPS (DI)(R8*1), Y4
	VMOVUPS (DI)(R8*2), Y5

	// a = s1 + s2, b = s1 - s2, c = s3 + s4, e = s3 - s4
	VADDPS Y2, Y1, Y6
	VSUBPS Y2, Y1, Y7
	VADDPS Y4, Y3, Y8
	VSUBPS Y4, Y3, Y9

	// o0 = s0 + a + c
	VADDPS Y6, Y0, Y10
	VADDPS Y8, Y10, Y10

	// o1 = b + 2 e
	VMOVAPS     Y7, Y11
	VFMADD231PS Y12, Y9, Y11

	// o2 = a + 4 c
	VFMADD231PS Y13, Y8, Y6

	// o3 = b + 8 e + s5
	VADDPS      Y5, Y7, Y7
	VFMADD231PS Y14, Y9, Y7

	VMOVUPS Y10, (BX)
	VMOVUPS Y11, (BX)(R8*1)
	VMOVUPS Y6, (BX)(R8*2)
	VMOVUPS Y7, (DI)

	ADDQ $32, BX
	ADDQ $32, DI
	DECQ DX
	JNZ  athalf

	ADDQ R10, SI
	DECQ CX
	JNZ  atloop

atdone:
	VZEROUPPER
	RET

DATA winoLane<>+0(SB)/4, $0
DATA winoLane<>+4(SB)/4, $1
DATA winoLane<>+8(SB)/4, $2
DATA winoLane<>+12(SB)/4, $3
DATA winoLane<>+16(SB)/4, $4
DATA winoLane<>+20(SB)/4, $5
DATA winoLane<>+24(SB)/4, $6
DATA winoLane<>+28(SB)/4, $7
GLOBL winoLane<>(SB), RODATA|NOPTR, $32

// Lanes of tiles 0..7 after the in-lane 4×4 transposes hold tiles
// 0 2 4 6 1 3 5 7: winoOrder puts them back in order, winoNext shifts by
// one tile (lane 7 is filled in after).
DATA winoOrder<>+0(SB)/4, $0
DATA winoOrder<>+4(SB)/4, $4
DATA winoOrder<>+8(SB)/4, $1
DATA winoOrder<>+12(SB)/4, $5
DATA winoOrder<>+16(SB)/4, $2
DATA winoOrder<>+20(SB)/4, $6
DATA winoOrder<>+24(SB)/4, $3
DATA winoOrder<>+28(SB)/4, $7
GLOBL winoOrder<>(SB), RODATA|NOPTR, $32

DATA winoNext<>+0(SB)/4, $4
DATA winoNext<>+4(SB)/4, $1
DATA winoNext<>+8(SB)/4, $5
DATA winoNext<>+12(SB)/4, $2
DATA winoNext<>+16(SB)/4, $6
DATA winoNext<>+20(SB)/4, $3
DATA winoNext<>+24(SB)/4, $7
DATA winoNext<>+28(SB)/4, $0
GLOBL winoNext<>(SB), RODATA|NOPTR, $32

// func winoGather(n int, row *float32, iw0, w int, dst *float32, rs int)
// For tiles i < n (n <= 8) and columns j < 6:
// dst[j*6*rs + i] = row[iw0 + 4i + j], zero where iw0+4i+j is outside
// [0, w). Only columns inside the row are read (masked loads).
TEXT ·winoGather(SB), NOSPLIT, $0-48
	MOVQ row+8(FP), SI
	MOVQ iw0+16(FP), AX
	LEAQ (SI)(AX*4), SI // column iw0 (may lie outside the row: masked)
	VMOVDQU winoLane<>(SB), Y15
	VMOVD   AX, X12
	VPBROADCASTD X12, Y12
	VPADDD  Y15, Y12, Y12 // columns of load 0
	MOVQ    w+24(FP), AX
	VMOVD   AX, X14
	VPBROADCASTD X14, Y14
	VPCMPEQD Y13, Y13, Y13 // -1
	MOVL    $8, AX
	VMOVD   AX, X10
	VPBROADCASTD X10, Y10

	// A0..A4: columns 0-7, 8-15, 16-23, 24-31, 32-39 of the run.
	VPCMPGTD Y13, Y12, Y11
	VPCMPGTD Y12, Y14, Y9
	VPAND    Y9, Y11, Y11
	VMASKMOVPS (SI), Y11, Y0
	VPADDD   Y10, Y12, Y12
	VPCMPGTD Y13, Y12, Y11
	VPCMPGTD Y12, Y14, Y9
	VPAND    Y9, Y11, Y11
	VMASKMOVPS 32(SI), Y11, Y1
	VPADDD   Y10, Y12, Y12
	VPCMPGTD Y13, Y12, Y11
	VPCMPGTD Y12, Y14, Y9
	VPAND    Y9, Y11, Y11
	VMASKMOVPS 64(SI), Y11, Y2
	VPADDD   Y10, Y12, Y12
	VPCMPGTD Y13, Y12, Y11
	VPCMPGTD Y12, Y14, Y9
	VPAND    Y9, Y11, Y11
	VMASKMOVPS 96(SI), Y11, Y3
	VPADDD   Y10, Y12, Y12
	VPCMPGTD Y13, Y12, Y11
	VPCMPGTD Y12, Y14, Y9
	VPAND    Y9, Y11, Y11
	VMASKMOVPS 128(SI), Y11, Y4

	// Store mask: lanes < n.
	MOVQ n+0(FP), AX
	VMOVD AX, X11
	VPBROADCASTD X11, Y11
	VPCMPGTD Y15, Y11, Y11

	// In-lane 4×4 transposes: J_c = column c of tiles 0 2 4 6 | 1 3 5 7.
	VUNPCKLPS Y1, Y0, Y5
	VUNPCKHPS Y1, Y0, Y6
	VUNPCKLPS Y3, Y2, Y7
	VUNPCKHPS Y3, Y2, Y8
	VSHUFPS   $0x44, Y7, Y5, Y0 // J0
	VSHUFPS   $0xEE, Y7, Y5, Y1 // J1
	VSHUFPS   $0x44, Y8, Y6, Y2 // J2
	VSHUFPS   $0xEE, Y8, Y6, Y3 // J3

	VMOVDQU winoOrder<>(SB), Y12
	VMOVDQU winoNext<>(SB), Y13
	VPERMPS Y0, Y13, Y5 // column 4 = column 0 of the next tile
	VPERMPS Y1, Y13, Y6 // column 5 = column 1 of the next tile
	VBROADCASTSS X4, Y7
	VBLENDPS $0x80, Y7, Y5, Y5
	VPSHUFD $0x55, Y4, Y7
	VPERMQ  $0x00, Y7, Y7
	VBLENDPS $0x80, Y7, Y6, Y6
	VPERMPS Y0, Y12, Y0
	VPERMPS Y1, Y12, Y1
	VPERMPS Y2, Y12, Y2
	VPERMPS Y3, Y12, Y3

	MOVQ dst+32(FP), DI
	MOVQ rs+40(FP), R9
	IMULQ $24, R9 // 6 rows, in bytes
	LEAQ (R9)(R9*2), BX
	ADDQ DI, BX
	CMPQ n+0(FP), $8
	JEQ  full
	VMASKMOVPS Y0, Y11, (DI)
	VMASKMOVPS Y1, Y11, (DI)(R9*1)
	VMASKMOVPS Y2, Y11, (DI)(R9*2)
	VMASKMOVPS Y3, Y11, (BX)
	VMASKMOVPS Y5, Y11, (BX)(R9*1)
	VMASKMOVPS Y6, Y11, (BX)(R9*2)
	VZEROUPPER
	RET

full: // masked stores are slow on some CPUs (microcoded on AMD's)
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, (DI)(R9*1)
	VMOVUPS Y2, (DI)(R9*2)
	VMOVUPS Y3, (BX)
	VMOVUPS Y5, (BX)(R9*1)
	VMOVUPS Y6, (BX)(R9*2)
	VZEROUPPER
	RET

DATA winoSpread<>+0(SB)/4, $0
DATA winoSpread<>+4(SB)/4, $2
DATA winoSpread<>+8(SB)/4, $4
DATA winoSpread<>+12(SB)/4, $6
DATA winoSpread<>+16(SB)/4, $1
DATA winoSpread<>+20(SB)/4, $3
DATA winoSpread<>+24(SB)/4, $5
DATA winoSpread<>+28(SB)/4, $7
GLOBL winoSpread<>(SB), RODATA|NOPTR, $32

// func winoScatter(n int, m *float32, rs int, b float32, y *float32, ldy, rows, cols int)
// For output rows i < rows (<= 4), tiles t < n (<= 8) and columns j < 4
// with 4t+j < cols: y[i*ldy + 4t + j] = m[(6j+i)*rs + t] + b.
TEXT ·winoScatter(SB), NOSPLIT, $0-64
	MOVQ m+8(FP), SI
	MOVQ rs+16(FP), R8
	LEAQ (R8*4), R11 // one row of m, in bytes
	IMULQ $24, R8    // 6 rows of m, in bytes
	VBROADCASTSS b+24(FP), Y15
	MOVQ y+32(FP), DI
	MOVQ ldy+40(FP), R9
	SHLQ $2, R9
	MOVQ rows+48(FP), CX
	VMOVDQU winoSpread<>(SB), Y14

	// Valid columns: min(4n, cols); full stores when 32.
	MOVQ n+0(FP), AX
	SHLQ $2, AX
	MOVQ cols+56(FP), DX
	CMPQ DX, AX
	CMOVQGT AX, DX
	VMOVDQU winoLane<>(SB), Y13
	VMOVD   DX, X12
	VPBROADCASTD X12, Y12
	VPCMPGTD Y13, Y12, Y8 // mask of columns 0-7
	MOVL    $8, AX
	VMOVD   AX, X11
	VPBROADCASTD X11, Y11
	VPADDD  Y11, Y13, Y13
	VPCMPGTD Y13, Y12, Y9 // 8-15
	VPADDD  Y11, Y13, Y13
	VPCMPGTD Y13, Y12, Y10 // 16-23
	VPADDD  Y11, Y13, Y13
	VPCMPGTD Y13, Y12, Y11 // 24-31

	LEAQ (R8)(R8*2), R10
	TESTQ CX, CX
	JLE  scdone

scrow:
	VADDPS (SI), Y15, Y0
	VADDPS (SI)(R8*1), Y15, Y1
	VADDPS (SI)(R8*2), Y15, Y2
	VADDPS (SI)(R10*1), Y15, Y3
	VPERMPS Y0, Y14, Y0
	VPERMPS Y1, Y14, Y1
	VPERMPS Y2, Y14, Y2
	VPERMPS Y3, Y14, Y3
	VUNPCKLPS Y1, Y0, Y4
	VUNPCKHPS Y1, Y0, Y5
	VUNPCKLPS Y3, Y2, Y6
	VUNPCKHPS Y3, Y2, Y7
	VSHUFPS   $0x44, Y6, Y4, Y0 // tiles 0 | 1
	VSHUFPS   $0xEE, Y6, Y4, Y1 // 2 | 3
	VSHUFPS   $0x44, Y7, Y5, Y2 // 4 | 5
	VSHUFPS   $0xEE, Y7, Y5, Y3 // 6 | 7
	CMPQ DX, $32
	JLT  scmask
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	JMP  scnext

scmask:
	VMASKMOVPS Y0, Y8, (DI)
	VMASKMOVPS Y1, Y9, 32(DI)
	VMASKMOVPS Y2, Y10, 64(DI)
	VMASKMOVPS Y3, Y11, 96(DI)

scnext:
	ADDQ R11, SI // next output row: next point row of m (6j+i)
	ADDQ R9, DI
	DECQ CX
	JNZ  scrow

scdone:
	VZEROUPPER
	RET

// func winoG6(n16 int, p *float32, rs, ps int)
// In place, rows g_0..g_2 of 16 floats at p + b*ps + r*rs -> rows 0..5 of
// G g (F(4×4,3×3) weight transform).
TEXT ·winoG6(SB), NOSPLIT, $0-32
	MOVQ n16+0(FP), CX
	MOVQ p+8(FP), SI
	MOVQ rs+16(FP), R8
	MOVQ ps+24(FP), R10
	SHLQ $2, R8
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R11
	MOVL $0x3E800000, AX // 1/4
	VMOVD AX, X10
	VBROADCASTSS X10, Y10
	MOVL $0xBE2AAAAB, AX // -1/6
	VMOVD AX, X11
	VBROADCASTSS X11, Y11
	MOVL $0x3D2AAAAB, AX // 1/24
	VMOVD AX, X12
	VBROADCASTSS X12, Y12
	MOVL $0x3E2AAAAB, AX // 1/6
	VMOVD AX, X13
	VBROADCASTSS X13, Y13
	MOVL $0x3DAAAAAB, AX // 1/12
	VMOVD AX, X14
	VBROADCASTSS X14, Y14
	TESTQ CX, CX
	JLE   gdone

gloop:
	LEAQ (SI)(R11*1), DI
	MOVQ $2, DX
	MOVQ SI, BX

ghalf:
	VMOVUPS (BX), Y0
	VMOVUPS (BX)(R8*1), Y1
	VMOVUPS (BX)(R8*2), Y2

	VMULPS Y10, Y0, Y3 // g0/4
	VADDPS Y2, Y0, Y4  // s = g0 + g2
	VADDPS Y1, Y4, Y5
	VMULPS Y11, Y5, Y5 // -(s + g1)/6
	VSUBPS Y1, Y4, Y6
	VMULPS Y11, Y6, Y6 // -(s - g1)/6
	VMULPS Y13, Y2, Y7
	VFMADD231PS Y12, Y0, Y7 // p = g0/24 + g2/6
	VMULPS Y14, Y1, Y8      // q = g1/12
	VADDPS Y8, Y7, Y9       // p + q
	VSUBPS Y8, Y7, Y7       // p - q

	VMOVUPS Y3, (BX)
	VMOVUPS Y5, (BX)(R8*1)
	VMOVUPS Y6, (BX)(R8*2)
	VMOVUPS Y9, (DI)
	VMOVUPS Y7, (DI)(R8*1)
	VMOVUPS Y2, (DI)(R8*2)

	ADDQ $32, BX
	ADDQ $32, DI
	DECQ DX
	JNZ  ghalf

	ADDQ R10, SI
	DECQ CX
	JNZ  gloop

gdone:
	VZEROUPPER
	RET

#define WGATH(dst, mask, reg) \
	VPCMPGTD Y14, Y15, mask \
	VXORPS   reg, reg, reg \
	VGATHERDPS mask, (AX)(Y15*4), reg \
	VMOVUPS  reg, dst \
	ADDQ     R11, AX

// func winoWGather(n8 int, wt *float32, idx *int32, dst *float32, rs int, flip int)
// For blocks b < n8 and lanes l < 8, with x = idx[8b+l] and e = 3kh+kw < 9:
// dst[(6kw+kh)*rs + 8b + l] = wt[x + e] (flip: wt[x + 8 - e]), or zero
// where x < 0 (nothing is read for those lanes).
TEXT ·winoWGather(SB), NOSPLIT, $0-48
	MOVQ n8+0(FP), CX
	MOVQ wt+8(FP), SI
	MOVQ idx+16(FP), DX
	MOVQ dst+24(FP), DI
	MOVQ rs+32(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R12
	SHLQ $1, R12 // 6 rows, in bytes
	MOVQ $4, R11
	MOVQ flip+40(FP), AX
	TESTQ AX, AX
	JZ   wgfwd
	ADDQ $32, SI
	MOVQ $-4, R11

wgfwd:
	VPCMPEQD Y14, Y14, Y14 // -1
	TESTQ CX, CX
	JLE  wgdone

wgloop:
	VMOVDQU (DX), Y15
	MOVQ    SI, AX
	MOVQ    DI, BX
	WGATH((BX), Y9, Y0)
	WGATH((BX)(R12*1), Y10, Y1)
	WGATH((BX)(R12*2), Y11, Y2)
	ADDQ R8, BX
	WGATH((BX), Y12, Y3)
	WGATH((BX)(R12*1), Y9, Y4)
	WGATH((BX)(R12*2), Y10, Y5)
	ADDQ R8, BX
	WGATH((BX), Y11, Y6)
	WGATH((BX)(R12*1), Y12, Y7)
	WGATH((BX)(R12*2), Y9, Y8)
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  wgloop

wgdone:
	VZEROUPPER
	RET

// func winoGT6(n16 int, p *float32, rs, ps int)
// In place, rows s_0..s_5 of 16 floats at p + b*ps + r*rs -> rows 0..2 of
// Gᵀ s (the F(4×4,3×3) weight gradient's output transform).
TEXT ·winoGT6(SB), NOSPLIT, $0-32
	MOVQ n16+0(FP), CX
	MOVQ p+8(FP), SI
	MOVQ rs+16(FP), R8
	MOVQ ps+24(FP), R10
	SHLQ $2, R8
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R11
	MOVL $0x3E800000, AX // 1/4
	VMOVD AX, X10
	VBROADCASTSS X10, Y10
	MOVL $0x3E2AAAAB, AX // 1/6
	VMOVD AX, X11
	VBROADCASTSS X11, Y11
	MOVL $0x3D2AAAAB, AX // 1/24
	VMOVD AX, X12
	VBROADCASTSS X12, Y12
	MOVL $0x3DAAAAAB, AX // 1/12
	VMOVD AX, X13
	VBROADCASTSS X13, Y13
	TESTQ CX, CX
	JLE   gtdone

gtloop:
	LEAQ (SI)(R11*1), DI
	MOVQ $2, DX
	MOVQ SI, BX

gthalf:
	VMOVUPS (BX), Y0
	VMOVUPS (BX)(R8*1), Y1
	VMOVUPS (BX)(R8*2), Y2
	VMOVUPS (DI), Y3
	VMOVUPS (DI)(R8*1), Y4
	VMOVUPS (DI)(R8*2), Y5

	VADDPS Y2, Y1, Y6 // s1 + s2
	VSUBPS Y1, Y2, Y7 // s2 - s1
	VADDPS Y4, Y3, Y8 // s3 + s4
	VSUBPS Y4, Y3, Y9 // s3 - s4

	VMULPS Y10, Y0, Y0       // s0/4
	VFNMADD231PS Y11, Y6, Y0 // - (s1+s2)/6
	VFMADD231PS Y12, Y8, Y0  // + (s3+s4)/24
	VMULPS Y11, Y7, Y7       // (s2-s1)/6
	VFMADD231PS Y13, Y9, Y7  // + (s3-s4)/12
	VSUBPS Y6, Y8, Y8
	VFMADD231PS Y11, Y8, Y5 // s5 + (s3+s4-s1-s2)/6

	VMOVUPS Y0, (BX)
	VMOVUPS Y7, (BX)(R8*1)
	VMOVUPS Y5, (BX)(R8*2)

	ADDQ $32, BX
	ADDQ $32, DI
	DECQ DX
	JNZ  gthalf

	ADDQ R10, SI
	DECQ CX
	JNZ  gtloop

gtdone:
	VZEROUPPER
	RET

// func winoA6(n16 int, p *float32, rs, ps int)
// In place, rows s_0..s_3 of 16 floats at p + b*ps + r*rs -> rows 0..5 of
// A s (the output gradient's transform of the Winograd weight gradient).
// The sums are the portable transformGrad's: a = s0 + s2, b = s1 + s3,
// c = s0 + 4 s2, e = 2 s1 + 8 s3 (the products by powers of two exact, so
// the fused forms round as the separate ones).
TEXT ·winoA6(SB), NOSPLIT, $0-32
	MOVQ n16+0(FP), CX
	MOVQ p+8(FP), SI
	MOVQ rs+16(FP), R8
	MOVQ ps+24(FP), R10
	SHLQ $2, R8
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R11
	MOVL $0x40800000, AX // 4
	VMOVD AX, X12
	VBROADCASTSS X12, Y12
	MOVL $0x41000000, AX // 8
	VMOVD AX, X13
	VBROADCASTSS X13, Y13
	TESTQ CX, CX
	JLE   adone

aloop:
	LEAQ (SI)(R11*1), DI // row 3
	MOVQ $2, DX
	MOVQ SI, BX

ahalf:
	VMOVUPS (BX), Y0
	VMOVUPS (BX)(R8*1), Y1
	VMOVUPS (BX)(R8*2), Y2
	VMOVUPS (DI), Y3

	VADDPS Y2, Y0, Y4 // a = s0 + s2
	VADDPS Y3, Y1, Y5 // b = s1 + s3
	VADDPS Y5, Y4, Y6 // o1 = a + b
	VSUBPS Y5, Y4, Y7 // o2 = a - b
	VMOVAPS     Y0, Y8
	VFMADD231PS Y12, Y2, Y8 // c = s0 + 4 s2
	VADDPS      Y1, Y1, Y9
	VFMADD231PS Y13, Y3, Y9 // e = 2 s1 + 8 s3
	VADDPS Y9, Y8, Y10      // o3 = c + e
	VSUBPS Y9, Y8, Y11      // o4 = c - e

	VMOVUPS Y6, (BX)(R8*1)
	VMOVUPS Y7, (BX)(R8*2)
	VMOVUPS Y10, (DI)
	VMOVUPS Y11, (DI)(R8*1)
	VMOVUPS Y3, (DI)(R8*2)

	ADDQ $32, BX
	ADDQ $32, DI
	DECQ DX
	JNZ  ahalf

	ADDQ R10, SI
	DECQ CX
	JNZ  aloop

adone:
	VZEROUPPER
	RET

// Lanes 0..15, and the indices of VPERMT2PS deinterleaving columns 4i+j
// (i < 8) of two registers (columns 0..31): table j at winoDeint<>+64j.
DATA winoLane16<>+0(SB)/4, $0
DATA winoLane16<>+4(SB)/4, $1
DATA winoLane16<>+8(SB)/4, $2
DATA winoLane16<>+12(SB)/4, $3
DATA winoLane16<>+16(SB)/4, $4
DATA winoLane16<>+20(SB)/4, $5
DATA winoLane16<>+24(SB)/4, $6
DATA winoLane16<>+28(SB)/4, $7
DATA winoLane16<>+32(SB)/4, $8
DATA winoLane16<>+36(SB)/4, $9
DATA winoLane16<>+40(SB)/4, $10
DATA winoLane16<>+44(SB)/4, $11
DATA winoLane16<>+48(SB)/4, $12
DATA winoLane16<>+52(SB)/4, $13
DATA winoLane16<>+56(SB)/4, $14
DATA winoLane16<>+60(SB)/4, $15
GLOBL winoLane16<>(SB), RODATA|NOPTR, $64

DATA winoDeint<>+0(SB)/4, $0
DATA winoDeint<>+4(SB)/4, $4
DATA winoDeint<>+8(SB)/4, $8
DATA winoDeint<>+12(SB)/4, $12
DATA winoDeint<>+16(SB)/4, $16
DATA winoDeint<>+20(SB)/4, $20
DATA winoDeint<>+24(SB)/4, $24
DATA winoDeint<>+28(SB)/4, $28
DATA winoDeint<>+32(SB)/4, $0
DATA winoDeint<>+36(SB)/4, $0
DATA winoDeint<>+40(SB)/4, $0
DATA winoDeint<>+44(SB)/4, $0
DATA winoDeint<>+48(SB)/4, $0
DATA winoDeint<>+52(SB)/4, $0
DATA winoDeint<>+56(SB)/4, $0
DATA winoDeint<>+60(SB)/4, $0
DATA winoDeint<>+64(SB)/4, $1
DATA winoDeint<>+68(SB)/4, $5
DATA winoDeint<>+72(SB)/4, $9
DATA winoDeint<>+76(SB)/4, $13
DATA winoDeint<>+80(SB)/4, $17
DATA winoDeint<>+84(SB)/4, $21
DATA winoDeint<>+88(SB)/4, $25
DATA winoDeint<>+92(SB)/4, $29
DATA winoDeint<>+96(SB)/4, $0
DATA winoDeint<>+100(SB)/4, $0
DATA winoDeint<>+104(SB)/4, $0
DATA winoDeint<>+108(SB)/4, $0
DATA winoDeint<>+112(SB)/4, $0
DATA winoDeint<>+116(SB)/4, $0
DATA winoDeint<>+120(SB)/4, $0
DATA winoDeint<>+124(SB)/4, $0
DATA winoDeint<>+128(SB)/4, $2
DATA winoDeint<>+132(SB)/4, $6
DATA winoDeint<>+136(SB)/4, $10
DATA winoDeint<>+140(SB)/4, $14
DATA winoDeint<>+144(SB)/4, $18
DATA winoDeint<>+148(SB)/4, $22
DATA winoDeint<>+152(SB)/4, $26
DATA winoDeint<>+156(SB)/4, $30
DATA winoDeint<>+160(SB)/4, $0
DATA winoDeint<>+164(SB)/4, $0
DATA winoDeint<>+168(SB)/4, $0
DATA winoDeint<>+172(SB)/4, $0
DATA winoDeint<>+176(SB)/4, $0
DATA winoDeint<>+180(SB)/4, $0
DATA winoDeint<>+184(SB)/4, $0
DATA winoDeint<>+188(SB)/4, $0
DATA winoDeint<>+192(SB)/4, $3
DATA winoDeint<>+196(SB)/4, $7
DATA winoDeint<>+200(SB)/4, $11
DATA winoDeint<>+204(SB)/4, $15
DATA winoDeint<>+208(SB)/4, $19
DATA winoDeint<>+212(SB)/4, $23
DATA winoDeint<>+216(SB)/4, $27
DATA winoDeint<>+220(SB)/4, $31
DATA winoDeint<>+224(SB)/4, $0
DATA winoDeint<>+228(SB)/4, $0
DATA winoDeint<>+232(SB)/4, $0
DATA winoDeint<>+236(SB)/4, $0
DATA winoDeint<>+240(SB)/4, $0
DATA winoDeint<>+244(SB)/4, $0
DATA winoDeint<>+248(SB)/4, $0
DATA winoDeint<>+252(SB)/4, $0
GLOBL winoDeint<>(SB), RODATA|NOPTR, $256

// Six rows (column j of the patches) from Z8 at BX, BX+R12, ...: lanes < n.
#define STORE6(reg) \
	VMOVUPS reg, K5, (BX) \
	ADDQ    R12, BX

// func winoGatherRows512(n int, plane *float32, ih0, h, w, iw0 int, dst *float32, rs, nrows int)
// AVX-512F. For rows r < nrows of the patches of n <= 8 consecutive tiles
// (4 columns apart) of an h×w plane, i < n, j < 6: dst[(6j+r)*rs + i] =
// plane[(ih0+r)*w + iw0 + 4i + j], zero outside the plane (nothing outside
// it is read: masked loads).
TEXT ·winoGatherRows512(SB), NOSPLIT, $0-72
	MOVQ n+0(FP), CX
	MOVQ plane+8(FP), SI
	MOVQ ih0+16(FP), AX
	MOVQ h+24(FP), R8
	MOVQ w+32(FP), R9
	MOVQ iw0+40(FP), R10
	MOVQ dst+48(FP), DI
	MOVQ rs+56(FP), R11
	MOVQ nrows+64(FP), R14
	SHLQ $2, R11
	LEAQ (R11)(R11*2), R12
	SHLQ $1, R12 // 6 rows, in bytes

	// Column masks of the four loads (columns 0-15, 16-31, 4-19, 20-35
	// of the run): iw0 + c < w, unsigned (negative columns fail too).
	VMOVDQU32    winoLane16<>(SB), Z15
	VPBROADCASTD R10, Z14
	VPADDD       Z15, Z14, Z13
	VPBROADCASTD R9, Z12
	VPCMPUD      $1, Z12, Z13, K1
	MOVL         $16, DX
	VPBROADCASTD DX, Z11
	VPADDD       Z11, Z13, Z10
	VPCMPUD      $1, Z12, Z10, K2
	MOVL         $4, DX
	VPBROADCASTD DX, Z11
	VPADDD       Z11, Z13, Z10
	VPCMPUD      $1, Z12, Z10, K3
	MOVL         $20, DX
	VPBROADCASTD DX, Z11
	VPADDD       Z11, Z13, Z10
	VPCMPUD      $1, Z12, Z10, K4
	// Store mask: lanes < n.
	VPBROADCASTD CX, Z11
	VPCMPUD      $1, Z11, Z15, K5

	VMOVUPS winoDeint<>+0(SB), Z4
	VMOVUPS winoDeint<>+64(SB), Z5
	VMOVUPS winoDeint<>+128(SB), Z6
	VMOVUPS winoDeint<>+192(SB), Z7
	SHLQ    $2, R9 // row stride, bytes
	LEAQ    (SI)(R10*4), SI // column iw0 of row 0

	TESTQ R14, R14
	JLE   grdone

grloop:
	MOVQ DI, BX
	CMPQ AX, R8
	JAE  grzero // ih0+r outside [0, h)

	MOVQ  AX, R13
	IMULQ R9, R13
	ADDQ  SI, R13
	VMOVUPS.Z (R13), K1, Z0
	VMOVUPS.Z 64(R13), K2, Z1
	VMOVUPS.Z 16(R13), K3, Z2
	VMOVUPS.Z 80(R13), K4, Z3

	VMOVAPS   Z0, Z8
	VPERMT2PS Z1, Z4, Z8 // column 4i
	STORE6(Z8)
	VMOVAPS   Z0, Z8
	VPERMT2PS Z1, Z5, Z8 // 4i+1
	STORE6(Z8)
	VMOVAPS   Z0, Z8
	VPERMT2PS Z1, Z6, Z8 // 4i+2
	STORE6(Z8)
	VPERMT2PS Z1, Z7, Z0 // 4i+3
	STORE6(Z0)
	VMOVAPS   Z2, Z8
	VPERMT2PS Z3, Z4, Z8 // 4i+4
	STORE6(Z8)
	VPERMT2PS Z3, Z5, Z2 // 4i+5
	STORE6(Z2)
	JMP grnext

grzero:
	VPXORD Z8, Z8, Z8
	STORE6(Z8)
	STORE6(Z8)
	STORE6(Z8)
	STORE6(Z8)
	STORE6(Z8)
	STORE6(Z8)

grnext:
	INCQ AX
	ADDQ R11, DI
	DECQ R14
	JNZ  grloop

grdone:
	VZEROUPPER
	RET

// func winoGatherRowsBF16512(n int, plane *uint16, ih0, h, w, iw0 int, dst *float32, rs, nrows int)
// AVX-512F and BW. winoGatherRows512 on a bfloat16 plane, each value
// widened exactly to float32 (shifted into the high half): the same
// masks and permutations after 16-bit masked loads.
TEXT ·winoGatherRowsBF16512(SB), NOSPLIT, $0-72
	MOVQ n+0(FP), CX
	MOVQ plane+8(FP), SI
	MOVQ ih0+16(FP), AX
	MOVQ h+24(FP), R8
	MOVQ w+32(FP), R9
	MOVQ iw0+40(FP), R10
	MOVQ dst+48(FP), DI
	MOVQ rs+56(FP), R11
	MOVQ nrows+64(FP), R14
	SHLQ $2, R11
	LEAQ (R11)(R11*2), R12
	SHLQ $1, R12 // 6 rows, in bytes

	// Column masks of the four loads (columns 0-15, 16-31, 4-19, 20-35
	// of the run): iw0 + c < w, unsigned (negative columns fail too).
	VMOVDQU32    winoLane16<>(SB), Z15
	VPBROADCASTD R10, Z14
	VPADDD       Z15, Z14, Z13
	VPBROADCASTD R9, Z12
	VPCMPUD      $1, Z12, Z13, K1
	MOVL         $16, DX
	VPBROADCASTD DX, Z11
	VPADDD       Z11, Z13, Z10
	VPCMPUD      $1, Z12, Z10, K2
	MOVL         $4, DX
	VPBROADCASTD DX, Z11
	VPADDD       Z11, Z13, Z10
	VPCMPUD      $1, Z12, Z10, K3
	MOVL         $20, DX
	VPBROADCASTD DX, Z11
	VPADDD       Z11, Z13, Z10
	VPCMPUD      $1, Z12, Z10, K4
	// Store mask: lanes < n.
	VPBROADCASTD CX, Z11
	VPCMPUD      $1, Z11, Z15, K5

	VMOVUPS winoDeint<>+0(SB), Z4
	VMOVUPS winoDeint<>+64(SB), Z5
	VMOVUPS winoDeint<>+128(SB), Z6
	VMOVUPS winoDeint<>+192(SB), Z7
	SHLQ    $1, R9 // row stride, bytes
	LEAQ    (SI)(R10*2), SI // column iw0 of row 0

	TESTQ R14, R14
	JLE   gbdone

gbloop:
	MOVQ DI, BX
	CMPQ AX, R8
	JAE  gbzero // ih0+r outside [0, h)

	MOVQ  AX, R13
	IMULQ R9, R13
	ADDQ  SI, R13
	VMOVDQU16.Z (R13), K1, Y0
	VMOVDQU16.Z 32(R13), K2, Y1
	VMOVDQU16.Z 8(R13), K3, Y2
	VMOVDQU16.Z 40(R13), K4, Y3
	VPMOVZXWD   Y0, Z0
	VPMOVZXWD   Y1, Z1
	VPMOVZXWD   Y2, Z2
	VPMOVZXWD   Y3, Z3
	VPSLLD      $16, Z0, Z0
	VPSLLD      $16, Z1, Z1
	VPSLLD      $16, Z2, Z2
	VPSLLD      $16, Z3, Z3

	VMOVAPS   Z0, Z8
	VPERMT2PS Z1, Z4, Z8 // column 4i
	STORE6(Z8)
	VMOVAPS   Z0, Z8
	VPERMT2PS Z1, Z5, Z8 // 4i+1
	STORE6(Z8)
	VMOVAPS   Z0, Z8
	VPERMT2PS Z1, Z6, Z8 // 4i+2
	STORE6(Z8)
	VPERMT2PS Z1, Z7, Z0 // 4i+3
	STORE6(Z0)
	VMOVAPS   Z2, Z8
	VPERMT2PS Z3, Z4, Z8 // 4i+4
	STORE6(Z8)
	VPERMT2PS Z3, Z5, Z2 // 4i+5
	STORE6(Z2)
	JMP gbnext

gbzero:
	VPXORD Z8, Z8, Z8
	STORE6(Z8)
	STORE6(Z8)
	STORE6(Z8)
	STORE6(Z8)
	STORE6(Z8)
	STORE6(Z8)

gbnext:
	INCQ AX
	ADDQ R11, DI
	DECQ R14
	JNZ  gbloop

gbdone:
	VZEROUPPER
	RET
