//go:build ignore

// gen_amx writes amx_amd64.s, the AMX-BF16 micro-kernel amxKernel32x32: a
// 32×32 float32 tile of C as 2×2 tiles of 16×16 (tmm0-3), A as two tiles
// of 16 rows × 16 pairs of k (tmm4-5, rows of A row-major a stride apart),
// B as two tiles of 16 pairs × 16 columns (tmm6-7: the pair-major B panel
// of 32 columns the bf16 driver packs, 128 bytes a pair, the second tile
// 64 bytes in), TDPBF16PS on each of the four products, 16 pairs a step.
// A tail of fewer than 16 pairs comes from a scratch block the Go wrapper
// fills (zeros past the tail); the sums are stored to scratch by
// TILESTORED and from there to C by AVX-512 as the VDPBF16PS kernels do:
// c = alpha*sum rounded, then fma(beta, c, that) unless beta0.
//
// Go's assembler knows no AMX instruction, so the generator encodes them
// (Intel SDM, VEX.128 map 0F38, W0):
//
//	LDTILECFG m512             NP 49 /0          c4 e2 78 49 00       ldtilecfg [rax]
//	TILERELEASE                NP 49 C0          c4 e2 78 49 c0
//	TILEZERO tmm               F2 49 11:rrr:000  c4 e2 7b 49 c0       tilezero tmm0
//	TILELOADD tmm, sibmem      F2 4B /r          c4 a2 7b 4b 24 06    tileloadd tmm4,[rsi+r8*1]
//	TILESTORED sibmem, tmm     F3 4B /r          c4 a2 7a 4b 04 08    tilestored [rax+r9*1],tmm0
//	TDPBF16PS tmm1, tmm2, tmm3 F3 5C 11:rrr:bbb  c4 e2 4a 5c c4       tdpbf16ps tmm0,tmm4,tmm6
//
// (tmm1 in ModRM.reg, tmm2 in ModRM.rm, tmm3 in VEX.vvvv), and writes the
// bytes with each instruction's Intel-syntax form, as GNU objdump -M intel
// prints it, in a comment: TestAMXEncoding disassembles the bytes with
// objdump and compares.
//
//	go run gen_amx.go [-o file]
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// Registers by number.
const (
	rAX = 0
	rSI = 6
	rDI = 7
	r8  = 8
	r9  = 9
	r10 = 10
)

var regNames = map[int]string{rAX: "rax", rSI: "rsi", rDI: "rdi", r8: "r8", r9: "r9", r10: "r10"}

// vex3 is the three-byte VEX prefix for map 0F38, W0, L0: r, x, b the
// high bits of ModRM.reg, SIB.index and ModRM.rm/SIB.base, vvvv the
// register in VEX.vvvv (0 where unused: encoded 1111), pp 0 (NP), 2 (F3)
// or 3 (F2).
func vex3(r, x, b, vvvv, pp int) []byte {
	inv := func(v int) byte { return byte(^(v >> 3) & 1) }
	return []byte{0xc4, inv(r)<<7 | inv(x)<<6 | inv(b)<<5 | 0x02, byte(^vvvv&0xf)<<3 | byte(pp)}
}

// sibMem encodes ModRM (reg) and SIB for [base+index*1+disp]. base is not
// rbp/r13 and index not rsp (no special forms).
func sibMem(reg, base, index, disp int) []byte {
	var mod byte
	switch {
	case disp == 0:
	case disp >= -128 && disp <= 127:
		mod = 0x40
	default:
		mod = 0x80
	}
	out := []byte{mod | byte(reg&7)<<3 | 4, byte(index&7)<<3 | byte(base&7)}
	switch mod {
	case 0x40:
		out = append(out, byte(int8(disp)))
	case 0x80:
		out = append(out, byte(disp), byte(disp>>8), byte(disp>>16), byte(disp>>24))
	}
	return out
}

// sibText is [base+index*1+disp] as objdump -M intel prints it.
func sibText(base, index, disp int) string {
	s := fmt.Sprintf("[%s+%s*1", regNames[base], regNames[index])
	if disp != 0 {
		s += fmt.Sprintf("+0x%x", disp)
	}
	return s + "]"
}

func ldtilecfg(base int) ([]byte, string) {
	return append(vex3(0, 0, base, 0, 0), 0x49, byte(base&7)), fmt.Sprintf("ldtilecfg [%s]", regNames[base])
}

func tilerelease() ([]byte, string) {
	return append(vex3(0, 0, 0, 0, 0), 0x49, 0xc0), "tilerelease"
}

func tilezero(t int) ([]byte, string) {
	return append(vex3(0, 0, 0, 0, 3), 0x49, 0xc0|byte(t)<<3), fmt.Sprintf("tilezero tmm%d", t)
}

func tileloadd(t, base, index, disp int) ([]byte, string) {
	return append(append(vex3(t, index, base, 0, 3), 0x4b), sibMem(t, base, index, disp)...),
		fmt.Sprintf("tileloadd tmm%d,%s", t, sibText(base, index, disp))
}

func tilestored(base, index, disp, t int) ([]byte, string) {
	return append(append(vex3(t, index, base, 0, 2), 0x4b), sibMem(t, base, index, disp)...),
		fmt.Sprintf("tilestored %s,tmm%d", sibText(base, index, disp), t)
}

// tdpbf16ps is tmm<c> += tmm<a> · tmm<b>.
func tdpbf16ps(c, a, b int) ([]byte, string) {
	return append(vex3(0, 0, 0, b, 2), 0x5c, 0xc0|byte(c)<<3|byte(a)), fmt.Sprintf("tdpbf16ps tmm%d,tmm%d,tmm%d", c, a, b)
}

var out strings.Builder

func w(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }

// inst writes one encoded instruction as BYTE directives.
func inst(bs []byte, text string) {
	parts := make([]string, len(bs))
	for i, x := range bs {
		parts[i] = fmt.Sprintf("BYTE $0x%02x", x)
	}
	w("\t%s // %s", strings.Join(parts, "; "), text)
}

// step is one 16-pair step: A rows 0-15 at [SI+R8*1] and rows 16-31 at
// [R10+R8*1] (R8 the row stride in bytes), B at [DI+R9*1] (R9 = 128).
func step() {
	inst(tileloadd(4, rSI, r8, 0))
	inst(tileloadd(5, r10, r8, 0))
	inst(tileloadd(6, rDI, r9, 0))
	inst(tileloadd(7, rDI, r9, 64))
	inst(tdpbf16ps(0, 4, 6))
	inst(tdpbf16ps(1, 4, 7))
	inst(tdpbf16ps(2, 5, 6))
	inst(tdpbf16ps(3, 5, 7))
}

func main() {
	o := flag.String("o", "amx_amd64.s", "output file")
	flag.Parse()
	w("// Code generated by gen_amx.go; DO NOT EDIT.")
	w("")
	w("//go:build amd64 && !purego")
	w("")
	w("#include \"textflag.h\"")
	w("")
	w("// func amxKernel32x32(cfg *byte, steps int, a *uint32, rs int, b *uint32, tail *uint32, sums *float32, c *float32, ldc int, alpha, beta float32, beta0 int)")
	w("//")
	w("// c = alpha*(A·B) + beta*c, or alpha*(A·B) when beta0 != 0, for the")
	w("// 32x32 tile at c (row stride ldc floats). Tiles configured by the 64")
	w("// bytes at cfg (all eight 16 rows × 64 bytes). steps 16-pair steps read")
	w("// A row-major at a, rows rs bytes apart, and B pair-major at b (32")
	w("// dwords a pair); then, where tail is not nil, one more step reads A at")
	w("// tail (rows 64 bytes apart) and B at tail+2048. sums receives the")
	w("// 32x32 float32 sums (row stride 128 bytes) on their way to c.")
	w("//")
	w("// Tile state lives only within a call: configured at entry, released")
	w("// before return, so that nothing depends on which thread the goroutine")
	w("// runs on between calls. Go does not preempt inside an assembly")
	w("// function (a preemption signal finds no safe point and returns), and")
	w("// Linux saves and restores the tile registers across signal handlers")
	w("// once the process has the XTILEDATA permission (cpuid.RequestAMX).")
	w("TEXT ·amxKernel32x32(SB), NOSPLIT, $0-88")
	w("\tMOVQ cfg+0(FP), AX")
	inst(ldtilecfg(rAX))
	for t := 0; t < 4; t++ {
		inst(tilezero(t))
	}
	w("\tMOVQ steps+8(FP), CX")
	w("\tMOVQ a+16(FP), SI")
	w("\tMOVQ rs+24(FP), R8")
	w("\tMOVQ R8, R10")
	w("\tSHLQ $4, R10")
	w("\tADDQ SI, R10")
	w("\tMOVQ b+32(FP), DI")
	w("\tMOVQ $128, R9")
	w("\tTESTQ CX, CX")
	w("\tJZ tail")
	w("")
	w("loop:")
	step()
	w("\tADDQ $64, SI")
	w("\tADDQ $64, R10")
	w("\tADDQ $2048, DI")
	w("\tDECQ CX")
	w("\tJNZ loop")
	w("")
	w("tail:")
	w("\tMOVQ tail+40(FP), SI")
	w("\tTESTQ SI, SI")
	w("\tJZ store")
	w("\tMOVQ $64, R8")
	w("\tLEAQ 1024(SI), R10")
	w("\tLEAQ 2048(SI), DI")
	step()
	w("")
	w("store:")
	w("\tMOVQ sums+48(FP), AX")
	inst(tilestored(rAX, r9, 0, 0))
	inst(tilestored(rAX, r9, 64, 1))
	inst(tilestored(rAX, r9, 2048, 2))
	inst(tilestored(rAX, r9, 2112, 3))
	inst(tilerelease())
	w("\tVBROADCASTSS alpha+72(FP), Z30")
	w("\tVBROADCASTSS beta+76(FP), Z31")
	w("\tMOVQ c+56(FP), DX")
	w("\tMOVQ ldc+64(FP), BX")
	w("\tSHLQ $2, BX")
	w("\tMOVQ beta0+80(FP), R11")
	w("\tMOVQ $32, CX")
	w("")
	w("row:")
	w("\tVMULPS (AX), Z30, Z0")
	w("\tVMULPS 64(AX), Z30, Z1")
	w("\tTESTQ R11, R11")
	w("\tJNZ put")
	w("\tVFMADD231PS (DX), Z31, Z0")
	w("\tVFMADD231PS 64(DX), Z31, Z1")
	w("")
	w("put:")
	w("\tVMOVUPS Z0, (DX)")
	w("\tVMOVUPS Z1, 64(DX)")
	w("\tADDQ $128, AX")
	w("\tADDQ BX, DX")
	w("\tDECQ CX")
	w("\tJNZ row")
	w("\tVZEROUPPER")
	w("\tRET")
	packTr()
	if err := os.WriteFile(*o, []byte(out.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// packTr writes amxPackTr, the transposed A's packing into rows for the
// kernel (AVX-512F): per block of 16 rows of op(A) and 16 pairs of k, 16
// pairs of A's rows (k) read along memory and widened, lo | hi<<16, into
// Z0-Z15 (register q: pair q of the 16 rows), then the 16×16 dwords
// transposed (unpack dwords, unpack qwords, two rounds of 128-bit lane
// shuffles; Z16-Z31 in between) and stored as 64 bytes of 16 rows.
func packTr() {
	w("")
	w("// func amxPackTr(src *uint16, ld, qblocks, iblocks int, dst *uint32, ds int)")
	w("//")
	w("// For ib < iblocks, qb < qblocks, i < 16 and q < 16:")
	w("// dst[(16ib+i)*ds+16qb+q] = src[(32qb+2q)*ld+16ib+i] | src[(32qb+2q+1)*ld+16ib+i]<<16.")
	w("TEXT ·amxPackTr(SB), NOSPLIT, $0-48")
	w("\tMOVQ src+0(FP), SI")
	w("\tMOVQ ld+8(FP), DX")
	w("\tSHLQ $1, DX")
	w("\tMOVQ qblocks+16(FP), R9")
	w("\tMOVQ iblocks+24(FP), R10")
	w("\tMOVQ dst+32(FP), DI")
	w("\tMOVQ ds+40(FP), R11")
	w("\tSHLQ $2, R11")
	w("\tMOVQ R11, R13")
	w("\tSHLQ $4, R13")
	w("")
	w("trRows:")
	w("\tMOVQ SI, AX")
	w("\tMOVQ DI, BX")
	w("\tMOVQ R9, CX")
	w("")
	w("trPairs:")
	w("\tMOVQ AX, R8")
	for q := 0; q < 16; q++ {
		w("\tVPMOVZXWD (R8), Z%d", q)
		w("\tVPMOVZXWD (R8)(DX*1), Z16")
		w("\tVPSLLD $16, Z16, Z16")
		w("\tVPORD Z16, Z%d, Z%d", q, q)
		w("\tLEAQ (R8)(DX*2), R8")
	}
	// Intel order in the comments' terms: op dst, a, b; Go's is b, a, dst.
	op3 := func(op string, dst, a, b int) { w("\t%s Z%d, Z%d, Z%d", op, b, a, dst) }
	shuf := func(imm string, dst, a, b int) { w("\tVSHUFI32X4 $%s, Z%d, Z%d, Z%d", imm, b, a, dst) }
	T := func(i int) int { return 16 + i }
	for j := 0; j < 8; j++ {
		op3("VPUNPCKLDQ", T(2*j), 2*j, 2*j+1)
		op3("VPUNPCKHDQ", T(2*j+1), 2*j, 2*j+1)
	}
	for j := 0; j < 4; j++ {
		op3("VPUNPCKLQDQ", 4*j, T(4*j), T(4*j+2))
		op3("VPUNPCKHQDQ", 4*j+1, T(4*j), T(4*j+2))
		op3("VPUNPCKLQDQ", 4*j+2, T(4*j+1), T(4*j+3))
		op3("VPUNPCKHQDQ", 4*j+3, T(4*j+1), T(4*j+3))
	}
	for h := 0; h < 2; h++ {
		for j := 0; j < 4; j++ {
			shuf("0x88", T(8*h+j), 8*h+j, 8*h+j+4)
			shuf("0xdd", T(8*h+j+4), 8*h+j, 8*h+j+4)
		}
	}
	for j := 0; j < 8; j++ {
		shuf("0x88", j, T(j), T(j+8))
		shuf("0xdd", j+8, T(j), T(j+8))
	}
	w("\tMOVQ BX, R12")
	for i := 0; i < 16; i++ {
		w("\tVMOVDQU32 Z%d, (R12)", i)
		if i < 15 {
			w("\tADDQ R11, R12")
		}
	}
	w("\tADDQ $64, BX")
	w("\tMOVQ R8, AX")
	w("\tDECQ CX")
	w("\tJNZ trPairs")
	w("\tADDQ $32, SI")
	w("\tADDQ R13, DI")
	w("\tDECQ R10")
	w("\tJNZ trRows")
	w("\tVZEROUPPER")
	w("\tRET")
}
