//go:build ignore

// gen_bf16 writes bf16_amd64.s, the native bfloat16 micro-kernels: an
// mr×nr tile of float32 accumulators (one ZMM per row and 16 columns)
// updated by VDPBF16PS, each instruction multiplying 16 pairs of B values
// by one pair of A values broadcast from memory ({1to16}). The 24x16
// tile also comes in a form reading A as rows of pairs (rowStride dwords
// apart: a non-transposed A's rows copied, not gathered), and bf16Ilv24
// packs a transposed A's 24-row panels.
//
// Go's assembler does not know VDPBF16PS, so the generator encodes it
// (EVEX.512.F3.0F38.W0 52 /r, memory operand (SI) with a 32-bit
// broadcast) and writes the bytes, each instruction's AT&T form in a
// comment. The encoding was checked against GNU as 2.x (objdump -d):
//
//	vdpbf16ps (%rsi){1to16}, %zmm24, %zmm0       62 f2 3e 50 52 06
//	vdpbf16ps 4(%rsi){1to16}, %zmm24, %zmm1      62 f2 3e 50 52 4e 01
//	vdpbf16ps 92(%rsi){1to16}, %zmm24, %zmm23    62 e2 3e 50 52 7e 17
//	vdpbf16ps 380(%rsi){1to16}, %zmm28, %zmm23   62 e2 1e 50 52 7e 5f
//	vdpbf16ps 188(%rsi){1to16}, %zmm29, %zmm23   62 e2 16 50 52 7e 2f
//	vdpbf16ps 8(%rsi){1to16}, %zmm25, %zmm5      62 f2 36 50 52 6e 02
//	vdpbf16ps 1024(%rsi){1to16}, %zmm24, %zmm15  62 72 3e 50 52 be 00 04 00 00
//	vdpbf16ps -8(%rsi){1to16}, %zmm31, %zmm16    62 e2 06 50 52 46 fe
//
// and TestBF16Encoding checks the generated file against these bytes (and
// every instruction in it against GNU as where it is installed).
//
//	go run gen_bf16.go
package main

import (
	"fmt"
	"os"
	"strings"
)

// vdpbf16ps encodes vdpbf16ps disp(%rsi){1to16}, %zmm<src1>, %zmm<dst>.
func vdpbf16ps(disp, src1, dst int) []byte {
	inv := func(v, bit int) byte { return byte(^(v >> bit) & 1) }
	p0 := inv(dst, 3)<<7 | 1<<6 | 1<<5 | inv(dst, 4)<<4 | 0x2 // R X B R' 00 mm=0F38
	p1 := byte(^src1&0xf)<<3 | 1<<2 | 0x2                     // W=0 vvvv 1 pp=F3
	p2 := byte(0x40 | 0x10 | inv(src1, 4)<<3)                 // z=0 L'L=512 b=1 V' aaa=0
	out := []byte{0x62, p0, p1, p2, 0x52}
	reg := byte(dst&7) << 3
	switch {
	case disp == 0:
		out = append(out, reg|6)
	case disp%4 == 0 && disp/4 >= -128 && disp/4 <= 127:
		out = append(out, 0x40|reg|6, byte(int8(disp/4)))
	default:
		out = append(out, 0x80|reg|6, byte(disp), byte(disp>>8), byte(disp>>16), byte(disp>>24))
	}
	return out
}

// Registers by number (the low 3 bits go into ModRM/SIB, bit 3 into EVEX).
const (
	regAX  = 0
	regBX  = 3
	regSI  = 6
	regR8  = 8
	regR9  = 9
	regR10 = 10
	regR11 = 11
)

var regName = map[int]string{regAX: "rax", regBX: "rbx", regSI: "rsi", regR8: "r8", regR9: "r9", regR10: "r10", regR11: "r11"}

// vdpbf16psMem encodes vdpbf16ps disp(%base,%index,scale){1to16},
// %zmm<src1>, %zmm<dst> (index < 0: none). base is AX, BX or SI (no SIB
// or displacement special cases), index R8..R11.
func vdpbf16psMem(disp, base, index, scale, src1, dst int) []byte {
	inv := func(v, bit int) byte { return byte(^(v >> bit) & 1) }
	x := byte(1)
	if index >= 0 {
		x = inv(index, 3)
	}
	p0 := inv(dst, 3)<<7 | x<<6 | inv(base, 3)<<5 | inv(dst, 4)<<4 | 0x2
	p1 := byte(^src1&0xf)<<3 | 1<<2 | 0x2
	p2 := byte(0x40 | 0x10 | inv(src1, 4)<<3)
	out := []byte{0x62, p0, p1, p2, 0x52}
	reg := byte(dst&7) << 3
	rm := byte(base & 7)
	if index >= 0 {
		rm = 4
	}
	var mod byte
	switch {
	case disp == 0:
	case disp%4 == 0 && disp/4 >= -128 && disp/4 <= 127:
		mod = 0x40
	default:
		mod = 0x80
	}
	out = append(out, mod|reg|rm)
	if index >= 0 {
		ss := map[int]byte{1: 0, 2: 1, 4: 2, 8: 3}[scale]
		out = append(out, ss<<6|byte(index&7)<<3|byte(base&7))
	}
	switch mod {
	case 0x40:
		out = append(out, byte(int8(disp/4)))
	case 0x80:
		out = append(out, byte(disp), byte(disp>>8), byte(disp>>16), byte(disp>>24))
	}
	return out
}

// vdpbf16psReg encodes vdpbf16ps %zmm<src2>, %zmm<src1>, %zmm<dst>.
func vdpbf16psReg(src2, src1, dst int) []byte {
	inv := func(v, bit int) byte { return byte(^(v >> bit) & 1) }
	p0 := inv(dst, 3)<<7 | inv(src2, 4)<<6 | inv(src2, 3)<<5 | inv(dst, 4)<<4 | 0x2 // R X B R' 00 mm=0F38
	p1 := byte(^src1&0xf)<<3 | 1<<2 | 0x2                                           // W=0 vvvv 1 pp=F3
	p2 := byte(0x40 | inv(src1, 4)<<3)                                              // z=0 L'L=512 b=0 V' aaa=0
	return []byte{0x62, p0, p1, p2, 0x52, 0xc0 | byte(dst&7)<<3 | byte(src2&7)}
}

type tile struct {
	mr, nz int  // rows, ZMM registers (16 columns each) per row
	rows   bool // A as rows of pairs rowStride dwords apart (else pair-major)
	// strided: A as rows of pairs a stride apart that the caller passes
	// (A read where it lies, unpacked); nz 1 only, mr 24, or 8 and 16 for
	// the edge tiles of products with 2^j rows (2048 = 85*24 + 8).
	strided bool
}

// stridedRow is where the strided kernel finds row r (< 24) of A: a base
// register (SI for rows 0-8, BX for 9-17, AX for 18-23, each 9 rows
// further) and an index register times a scale (index -1: none), with R8
// = S (the stride in bytes), R9 = 3S, R10 = 5S and R11 = 7S.
func stridedRow(r int) (base, index, scale int) {
	base = []int{regSI, regBX, regAX}[r/9]
	switch r % 9 {
	case 0:
		return base, -1, 0
	case 1:
		return base, regR8, 1
	case 2:
		return base, regR8, 2
	case 3:
		return base, regR9, 1
	case 4:
		return base, regR8, 4
	case 5:
		return base, regR10, 1
	case 6:
		return base, regR9, 2
	case 7:
		return base, regR11, 1
	default:
		return base, regR8, 8
	}
}

// goMem is base+disp(+index*scale) in Go assembler syntax.
func goMem(disp, base, index, scale int) string {
	names := map[int]string{regAX: "AX", regBX: "BX", regSI: "SI", regR8: "R8", regR9: "R9", regR10: "R10", regR11: "R11"}
	if index < 0 {
		return fmt.Sprintf("%d(%s)", disp, names[base])
	}
	return fmt.Sprintf("%d(%s)(%s*%d)", disp, names[base], names[index], scale)
}

const unroll = 4

// rowStride is bf16RowStride: the dwords between rows of a row-major A
// panel (256 pairs, the deepest K block, and a cache line more so that the
// rows fall into different L1 sets).
const rowStride = 272

func main() {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("// Code generated by gen_bf16.go; DO NOT EDIT.")
	w("")
	w("//go:build amd64 && !purego")
	w("")
	w("#include \"textflag.h\"")
	for _, t := range []tile{{24, 1, false, false}, {12, 2, false, false}, {24, 1, true, false}, {24, 1, false, true}, {8, 1, false, true}, {16, 1, false, true}} {
		kernel(w, t)
	}
	ilv24(w)
	ilv24N(w)
	tr16(w)
	peak(w)
	if err := os.WriteFile("bf16_amd64.s", []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func kernel(w func(string, ...any), t tile) {
	mr, nz := t.mr, t.nz
	nr := 16 * nz
	name := fmt.Sprintf("bf16Kernel%dx%d", mr, nr)
	// aDisp is the byte offset of A's row r in unrolled pair s, aStep the
	// bytes from one pair to the next.
	aDisp := func(s, r int) int { return 4 * (mr*s + r) }
	aStep := 4 * mr
	if t.rows {
		name += "R"
		aDisp = func(s, r int) int { return 4 * (rowStride*r + s) }
		aStep = 4
	}
	if t.strided {
		name += "S"
		aStep = 4
	}
	// aOperand is A's row r in unrolled pair s as the instruction's
	// memory operand: its encoding and its AT&T form.
	aOperand := func(s, r, src, dst int) ([]byte, string) {
		if !t.strided {
			disp := aDisp(s, r)
			return vdpbf16ps(disp, src, dst), fmt.Sprintf("%d(%%rsi)", disp)
		}
		base, index, scale := stridedRow(r)
		at := fmt.Sprintf("%d(%%%s)", 4*s, regName[base])
		if index >= 0 {
			at = fmt.Sprintf("%d(%%%s,%%%s,%d)", 4*s, regName[base], regName[index], scale)
		}
		return vdpbf16psMem(4*s, base, index, scale, src, dst), at
	}
	sig, frame := "", 56
	if t.strided {
		sig, frame = ", rs int", 64
	}
	acc := func(r, z int) int { return r*nz + z }
	// B registers: pair s of the unrolled loop uses bReg(s, z), two sets
	// alternating so that the next loads need not wait.
	bReg := func(s, z int) int { return 24 + 4*(s%2) + z }
	w("")
	w("// func %s(kp int, a, b *uint32, c *float32, ldc int, alpha, beta float32, beta0 int%s)", name, sig)
	w("//")
	w("// c = alpha*(A·B) + beta*c, or alpha*(A·B) when beta0 != 0, for the")
	w("// %dx%d tile at c (row stride ldc floats). A and B hold kp pairs of k:", mr, nr)
	if t.rows {
		w("// a holds row i's pairs at a[%d*i+p] (bf16 A[i][2p] low, A[i][2p+1] high),", rowStride)
	} else if t.strided {
		w("// a holds row i's pairs at a[rs*i+p] (bf16 A[i][2p] low, A[i][2p+1] high),")
	} else {
		w("// a has %d dwords per pair (row i: bf16 A[i][2p] low, A[i][2p+1] high),", mr)
	}
	w("// b %d (column j: B[2p][j] low, B[2p+1][j] high). Sums start at +0 and", nr)
	w("// take one VDPBF16PS per pair, in order of p.")
	w("//")
	w("// Registers: Z0..Z%d accumulators (row r, columns 16z.. in Z%d*r+z),", mr*nz-1, nz)
	w("// Z24..Z%d and Z28..Z%d the B pairs (alternating), Z26/Z27 alpha and beta.", 24+nz-1, 28+nz-1)
	if t.strided {
		w("// Rows of A: SI, BX and AX point at rows 0, 9 and 18, the others")
		w("// reached through R8 = S (rs in bytes), R9 = 3S, R10 = 5S, R11 = 7S.")
	}
	w("TEXT ·%s(SB), NOSPLIT, $0-%d", name, frame)
	w("\tMOVQ kp+0(FP), CX")
	w("\tMOVQ a+8(FP), SI")
	w("\tMOVQ b+16(FP), DI")
	w("\tMOVQ c+24(FP), DX")
	w("\tMOVQ ldc+32(FP), R8")
	w("\tSHLQ $2, R8")
	w("\tMOVQ DX, R10")
	for r := 0; r < mr; r++ {
		w("\tPREFETCHT0 (R10)")
		if nz > 1 {
			w("\tPREFETCHT0 64(R10)")
		}
		if r < mr-1 {
			w("\tADDQ R8, R10")
		}
	}
	for r := 0; r < mr*nz; r++ {
		w("\tVPXORD Z%d, Z%d, Z%d", r, r, r)
	}
	if t.strided {
		w("\tMOVQ rs+56(FP), R8")
		w("\tSHLQ $2, R8")
		w("\tLEAQ (R8)(R8*2), R9")
		w("\tLEAQ (R8)(R8*4), R10")
		w("\tLEAQ (R9)(R8*4), R11")
		w("\tLEAQ (SI)(R8*8), BX")
		w("\tADDQ R8, BX")
		w("\tLEAQ (BX)(R8*8), AX")
		w("\tADDQ R8, AX")
	}
	step := func(s int) {
		for z := 0; z < nz; z++ {
			w("\tVMOVUPS %d(DI), Z%d", 64*(nz*s+z), bReg(s, z))
		}
		for r := 0; r < mr; r++ {
			for z := 0; z < nz; z++ {
				src, dst := bReg(s, z), acc(r, z)
				enc, at := aOperand(s, r, src, dst)
				var bs []string
				for _, x := range enc {
					bs = append(bs, fmt.Sprintf("BYTE $0x%02x", x))
				}
				w("\t%s // vdpbf16ps %s{1to16}, %%zmm%d, %%zmm%d", strings.Join(bs, "; "), at, src, dst)
			}
		}
	}
	// The unrolled loop's count (R9 is an index register of the strided form).
	cnt := "R9"
	if t.strided {
		cnt = "R12"
	}
	advanceA := func(bytes int) {
		w("\tADDQ $%d, SI", bytes)
		if t.strided {
			w("\tADDQ $%d, BX", bytes)
			w("\tADDQ $%d, AX", bytes)
		}
	}
	w("\tMOVQ CX, %s", cnt)
	w("\tSHRQ $2, %s", cnt)
	w("\tJZ tail")
	w("loop4:")
	// Ahead by 4 unrolled steps of A and 8 of B. (Rows of A, 16 bytes of
	// each an iteration: each row's line 8 iterations ahead.)
	for off := 0; off < 4*mr*unroll && !t.rows && !t.strided; off += 64 {
		w("\tPREFETCHT0 %d(SI)", 4*mr*unroll+off)
	}
	for r := 0; r < mr && t.rows; r++ {
		w("\tPREFETCHT0 %d(SI)", 4*rowStride*r+128)
	}
	for r := 0; r < mr && t.strided; r++ {
		base, index, scale := stridedRow(r)
		w("\tPREFETCHT0 %s", goMem(128, base, index, scale))
	}
	for off := 0; off < 64*nz*unroll; off += 64 {
		w("\tPREFETCHT0 %d(DI)", 2*64*nz*unroll+off)
	}
	for s := 0; s < unroll; s++ {
		step(s)
	}
	advanceA(aStep * unroll)
	w("\tADDQ $%d, DI", 64*nz*unroll)
	w("\tDECQ %s", cnt)
	w("\tJNZ loop4")
	w("tail:")
	w("\tANDQ $3, CX")
	w("\tJZ store")
	w("loop1:")
	step(0)
	advanceA(aStep)
	w("\tADDQ $%d, DI", 64*nz)
	w("\tDECQ CX")
	w("\tJNZ loop1")
	w("store:")
	if t.strided {
		w("\tMOVQ ldc+32(FP), R8")
		w("\tSHLQ $2, R8")
	}
	w("\tVBROADCASTSS alpha+40(FP), Z26")
	w("\tVBROADCASTSS beta+44(FP), Z27")
	w("\tMOVQ beta0+48(FP), AX")
	w("\tTESTQ AX, AX")
	w("\tJNZ store0")
	// c = alpha*sum + beta*c: the product rounded, then one FMA, as in
	// the float32 kernels.
	for r := 0; r < mr; r++ {
		for z := 0; z < nz; z++ {
			w("\tVMULPS Z26, Z%d, Z%d", acc(r, z), acc(r, z))
			w("\tVFMADD231PS %d(DX), Z27, Z%d", 64*z, acc(r, z))
			w("\tVMOVUPS Z%d, %d(DX)", acc(r, z), 64*z)
		}
		if r < mr-1 {
			w("\tADDQ R8, DX")
		}
	}
	w("\tVZEROUPPER")
	w("\tRET")
	w("store0:")
	for r := 0; r < mr; r++ {
		for z := 0; z < nz; z++ {
			w("\tVMULPS Z26, Z%d, Z%d", acc(r, z), acc(r, z))
			w("\tVMOVUPS Z%d, %d(DX)", acc(r, z), 64*z)
		}
		if r < mr-1 {
			w("\tADDQ R8, DX")
		}
	}
	w("\tVZEROUPPER")
	w("\tRET")
}

// ilv24 writes bf16Ilv24, the packing of a transposed A into 24-row
// pair-major panels (the kernels' a) two rows of k at a time.
func ilv24(w func(string, ...any)) {
	w("")
	w("// func bf16Ilv24(src *uint16, ld, kp int, dst *uint32)")
	w("//")
	w("// For q < kp and l < 24: dst[24q+l] = src[2q*ld+l] | src[(2q+1)*ld+l]<<16.")
	w("// AVX-512F.")
	w("TEXT ·bf16Ilv24(SB), NOSPLIT, $0-32")
	w("\tMOVQ src+0(FP), SI")
	w("\tMOVQ ld+8(FP), R8")
	w("\tMOVQ kp+16(FP), CX")
	w("\tMOVQ dst+24(FP), DI")
	w("\tSHLQ $1, R8")
	w("\tLEAQ (SI)(R8*1), R9")
	w("\tSHLQ $1, R8")
	w("\tTESTQ CX, CX")
	w("\tJZ ilvdone")
	w("ilvloop:")
	w("\tVPMOVZXWD (SI), Z0")
	w("\tVPMOVZXWD 32(SI), Y1")
	w("\tVPMOVZXWD (R9), Z2")
	w("\tVPMOVZXWD 32(R9), Y3")
	w("\tVPSLLD $16, Z2, Z2")
	w("\tVPSLLD $16, Y3, Y3")
	w("\tVPORD Z2, Z0, Z0")
	w("\tVPOR Y3, Y1, Y1")
	w("\tVMOVDQU32 Z0, (DI)")
	w("\tVMOVDQU Y1, 64(DI)")
	w("\tADDQ R8, SI")
	w("\tADDQ R8, R9")
	w("\tADDQ $96, DI")
	w("\tDECQ CX")
	w("\tJNZ ilvloop")
	w("ilvdone:")
	w("\tVZEROUPPER")
	w("\tRET")
}

// ilv24N writes bf16Ilv24N, bf16Ilv24 for a block of tiles side by side,
// a pair of rows of k read once for all of them: a transposed A's rows
// read along memory (by tiles, each row's 48 bytes of a tile came from
// lines the row's other tiles also read, its rows a multiple of 1 KiB
// apart falling into few L1 sets).
func ilv24N(w func(string, ...any)) {
	w("")
	w("// func bf16Ilv24N(src *uint16, ld, kp int, dst *uint32, tiles, tstride int)")
	w("//")
	w("// For t < tiles, q < kp and l < 24: dst[t*tstride+24q+l] =")
	w("// src[2q*ld+24t+l] | src[(2q+1)*ld+24t+l]<<16. AVX-512F.")
	w("TEXT ·bf16Ilv24N(SB), NOSPLIT, $0-48")
	w("\tMOVQ src+0(FP), SI")
	w("\tMOVQ ld+8(FP), R8")
	w("\tMOVQ kp+16(FP), CX")
	w("\tMOVQ dst+24(FP), DI")
	w("\tMOVQ tiles+32(FP), R10")
	w("\tMOVQ tstride+40(FP), R11")
	w("\tSHLQ $2, R11")
	w("\tSHLQ $1, R8")
	w("\tLEAQ (SI)(R8*1), R9")
	w("\tSHLQ $1, R8")
	w("\tTESTQ CX, CX")
	w("\tJZ ilvndone")
	w("\tTESTQ R10, R10")
	w("\tJZ ilvndone")
	w("ilvnq:")
	w("\tMOVQ SI, AX")
	w("\tMOVQ R9, BX")
	w("\tMOVQ DI, DX")
	w("\tMOVQ R10, R12")
	w("ilvnt:")
	w("\tVPMOVZXWD (AX), Z0")
	w("\tVPMOVZXWD 32(AX), Y1")
	w("\tVPMOVZXWD (BX), Z2")
	w("\tVPMOVZXWD 32(BX), Y3")
	w("\tVPSLLD $16, Z2, Z2")
	w("\tVPSLLD $16, Y3, Y3")
	w("\tVPORD Z2, Z0, Z0")
	w("\tVPOR Y3, Y1, Y1")
	w("\tVMOVDQU32 Z0, (DX)")
	w("\tVMOVDQU Y1, 64(DX)")
	w("\tADDQ $48, AX")
	w("\tADDQ $48, BX")
	w("\tADDQ R11, DX")
	w("\tDECQ R12")
	w("\tJNZ ilvnt")
	w("\tADDQ R8, SI")
	w("\tADDQ R8, R9")
	w("\tADDQ $96, DI")
	w("\tDECQ CX")
	w("\tJNZ ilvnq")
	w("ilvndone:")
	w("\tVZEROUPPER")
	w("\tRET")
}

// tr16 writes bf16Tr16, the packing of a transposed B's 16-column panels
// (the kernels' b): 16×16 dword transposes in registers, in place of one
// gather per pair.
func tr16(w func(string, ...any)) {
	w("")
	w("// func bf16Tr16(src *uint16, ld, blocks int, dst *uint32)")
	w("//")
	w("// For q < 16*blocks and r < 16: dst[16q+r] = the dword (pair) q of row r,")
	w("// rows ld values apart: src[r*ld+2q] | src[r*ld+2q+1]<<16. AVX-512F.")
	w("TEXT ·bf16Tr16(SB), NOSPLIT, $0-32")
	w("\tMOVQ src+0(FP), SI")
	w("\tMOVQ ld+8(FP), R8")
	w("\tMOVQ blocks+16(FP), CX")
	w("\tMOVQ dst+24(FP), DI")
	w("\tSHLQ $1, R8")
	w("\tTESTQ CX, CX")
	w("\tJZ trdone")
	w("trloop:")
	w("\tMOVQ SI, AX")
	for r := 0; r < 16; r++ {
		w("\tVMOVDQU32 (AX), Z%d", r)
		if r < 15 {
			w("\tADDQ R8, AX")
		}
	}
	// Dwords within 128-bit lanes, then quadwords, then lanes twice.
	for i := 0; i < 8; i++ {
		w("\tVPUNPCKLDQ Z%d, Z%d, Z%d", 2*i+1, 2*i, 16+2*i)
		w("\tVPUNPCKHDQ Z%d, Z%d, Z%d", 2*i+1, 2*i, 16+2*i+1)
	}
	for i := 0; i < 4; i++ {
		t := 16 + 4*i
		w("\tVPUNPCKLQDQ Z%d, Z%d, Z%d", t+2, t, 4*i)
		w("\tVPUNPCKHQDQ Z%d, Z%d, Z%d", t+2, t, 4*i+1)
		w("\tVPUNPCKLQDQ Z%d, Z%d, Z%d", t+3, t+1, 4*i+2)
		w("\tVPUNPCKHQDQ Z%d, Z%d, Z%d", t+3, t+1, 4*i+3)
	}
	// u[4i+j] lane L: column 4L+j of rows 4i..4i+3.
	for j := 0; j < 4; j++ {
		x := 16 + 4*j
		w("\tVSHUFI32X4 $0x88, Z%d, Z%d, Z%d", 4+j, j, x)
		w("\tVSHUFI32X4 $0xdd, Z%d, Z%d, Z%d", 4+j, j, x+1)
		w("\tVSHUFI32X4 $0x88, Z%d, Z%d, Z%d", 12+j, 8+j, x+2)
		w("\tVSHUFI32X4 $0xdd, Z%d, Z%d, Z%d", 12+j, 8+j, x+3)
	}
	for j := 0; j < 4; j++ {
		x := 16 + 4*j
		w("\tVSHUFI32X4 $0x88, Z%d, Z%d, Z%d", x+2, x, j)
		w("\tVSHUFI32X4 $0xdd, Z%d, Z%d, Z%d", x+2, x, 8+j)
		w("\tVSHUFI32X4 $0x88, Z%d, Z%d, Z%d", x+3, x+1, 4+j)
		w("\tVSHUFI32X4 $0xdd, Z%d, Z%d, Z%d", x+3, x+1, 12+j)
	}
	for c := 0; c < 16; c++ {
		w("\tVMOVDQU32 Z%d, %d(DI)", c, 64*c)
	}
	w("\tADDQ $64, SI")
	w("\tADDQ $1024, DI")
	w("\tDECQ CX")
	w("\tJNZ trloop")
	w("trdone:")
	w("\tVZEROUPPER")
	w("\tRET")
}

// peakChains is the independent accumulators of bf16PeakLoop: more than
// VDPBF16PS's latency times its throughput on the CPUs measured (Zen 4:
// 6 cycles, one ZMM a cycle).
const peakChains = 16

// peak writes bf16PeakLoop, VDPBF16PS on registers only: the rate no bf16
// product can pass, which the benchmarks report the kernels against.
func peak(w func(string, ...any)) {
	w("")
	w("// func bf16PeakLoop(n int)")
	w("//")
	w("// n iterations of %d independent VDPBF16PS on registers (%d flops each:", peakChains, 64)
	w("// 16 lanes, 2 products and 2 additions a lane). AVX512_BF16.")
	w("TEXT ·bf16PeakLoop(SB), NOSPLIT, $0-8")
	w("\tMOVQ n+0(FP), CX")
	for r := 0; r < peakChains; r++ {
		w("\tVPXORD Z%d, Z%d, Z%d", r, r, r)
	}
	w("\tVPXORD Z30, Z30, Z30")
	w("\tVPXORD Z31, Z31, Z31")
	w("\tTESTQ CX, CX")
	w("\tJLE peakdone")
	w("peakloop:")
	for r := 0; r < peakChains; r++ {
		var bs []string
		for _, x := range vdpbf16psReg(31, 30, r) {
			bs = append(bs, fmt.Sprintf("BYTE $0x%02x", x))
		}
		w("\t%s // vdpbf16ps %%zmm31, %%zmm30, %%zmm%d", strings.Join(bs, "; "), r)
	}
	w("\tDECQ CX")
	w("\tJNZ peakloop")
	w("peakdone:")
	w("\tVZEROUPPER")
	w("\tRET")
}
