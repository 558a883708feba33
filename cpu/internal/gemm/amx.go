package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"sync"
)

// AMX-BF16 (TDPBF16PS) products: the arithmetic, its portable model and
// the Go form of the AMX micro-kernel's contract, on every machine.
//
// The AMX kernel (amx_amd64.s, gen_amx.go) computes a 32×32 tile of C
// from A row-major (row i's pairs of k a stride apart) and the pair-major
// B panel of 32 columns the driver packs, 16 pairs of k per TDPBF16PS. A
// K block's kp pairs go in steps of 16 from the block's start; a last
// step of fewer pairs is padded with zero pairs (A and B both zero, so
// that no garbage can make 0·Inf = NaN). Each element of C thus sees, per
// K block: a sum from +0 (TILEZERO), one TDPBF16PS per step of 16 pairs,
// the store as the VDPBF16PS kernels' (c = alpha*sum rounded, then
// fma(beta, c, that)). The steps depend on the K block only, not on the
// tile, split or thread count: results are bitwise the same for any of
// those, as with VDPBF16PS (whose arithmetic differs: a per-pair running
// sum).
//
// TDPBF16PS, as the Intel SDM's pseudocode writes it: for each element,
// two float32 temporaries from 0, one for the even and one for the odd
// bf16 of the pairs, each accumulating its products over the
// instruction's 16 pairs in order by fused multiply-adds; then the two
// temporaries are added and the result added to the element. Every
// addition rounds to nearest even, bf16 inputs that are denormal count as
// zero, results that are denormal become zero; MXCSR plays no part. The
// padding's zero pairs add +0 to each temporary: a temporary that was -0
// becomes +0 (the only effect of the padding, and one that changes the
// result only where the whole sum is zero). The older Intrinsics Guide
// text instead adds each pair's even then odd product to the element
// directly (amxPairs): the self-check on an AMX machine reports which of
// the two the hardware matched.

// amxStep is the pairs of k one TDPBF16PS takes (a 64-byte tile row).
const amxStep = 16

// amxModel is an arithmetic for TDPBF16PS.
type amxModel int

const (
	amxLanes amxModel = iota // the SDM: even and odd temporaries, then their sum
	amxPairs                 // the Intrinsics Guide: even, odd product onto the element
)

func (m amxModel) String() string {
	if m == amxPairs {
		return "the Intrinsics Guide's per-pair sum"
	}
	return "the SDM's per-lane temporaries"
}

// amxStepDot is one element of one TDPBF16PS: acc plus the products of
// the pairs a[q] and b[q] (bf16 of even k low), zero pairs past their
// length up to amxStep.
func amxStepDot(model amxModel, acc float32, a, b []uint32) float32 {
	pair := func(s []uint32, q int) uint32 {
		if q < len(s) {
			return s[q]
		}
		return 0
	}
	if model == amxPairs {
		for q := range amxStep {
			av, bv := pair(a, q), pair(b, q)
			acc = bf16Add(acc, bf16In(uint16(av))*bf16In(uint16(bv)))
			acc = bf16Add(acc, bf16In(uint16(av>>16))*bf16In(uint16(bv>>16)))
		}
		return acc
	}
	var even, odd float32
	for q := range amxStep {
		av, bv := pair(a, q), pair(b, q)
		even = bf16Add(even, bf16In(uint16(av))*bf16In(uint16(bv)))
		odd = bf16Add(odd, bf16In(uint16(av>>16))*bf16In(uint16(bv>>16)))
	}
	// float32 + float32 rounded from float64: correctly rounded (53 >=
	// 2*24+2, so the double rounding is innocuous), and bf16Add flushes.
	return bf16Add(acc, float64(bf16Add(even, float64(odd))))
}

// RefDotAMX is one element of the AMX kernel's product, by the reference
// arithmetic (the SDM's): a and b are the k values of row i of op(A) and
// column j of op(B), c the element before (read unless beta is 0); k is
// cut into the driver's blocks of bf16Block(k) values, each summed from +0
// in steps of 16 pairs (the last padded with zero pairs) and stored as
// c = alpha*sum + beta*c (beta 1 after the first block). Independent of
// the tiling: for tests of the driver and of code built on it.
func RefDotAMX(a, b []uint16, alpha, beta, c float32) float32 {
	return refDotAMX(amxLanes, a, b, alpha, beta, c)
}

func refDotAMX(model amxModel, a, b []uint16, alpha, beta, c float32) float32 {
	return refDotBlocks(a, b, alpha, beta, c, func(ap, bp []uint32) float32 {
		var acc float32
		for p := 0; p < len(ap); p += amxStep {
			acc = amxStepDot(model, acc, ap[p:min(len(ap), p+amxStep)], bp[p:min(len(bp), p+amxStep)])
		}
		return acc
	})
}

// amxMR and amxNR are the AMX kernel's tile: 2×2 tiles of 16×16 float32.
const amxMR, amxNR = 32, 32

// amxTileGo is the AMX kernel's contract in Go, by model: the 32×32 tile
// at c from A rows rs dwords apart (kp pairs each) and the pair-major B
// panel of 32 columns, in steps of 16 pairs from the first, the last
// padded with zero pairs, stored as bf16Store does.
func amxTileGo(model amxModel, kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
	_ = a[(amxMR-1)*rs+kp-1]
	_ = b[amxNR*kp-1]
	_ = c[(amxMR-1)*ldc+amxNR-1]
	var ap, bp [amxStep]uint32
	for i := range amxMR {
		for j := range amxNR {
			var acc float32
			for q0 := 0; q0 < kp; q0 += amxStep {
				n := min(amxStep, kp-q0)
				for q := range n {
					ap[q] = a[i*rs+q0+q]
					bp[q] = b[(q0+q)*amxNR+j]
				}
				acc = amxStepDot(model, acc, ap[:n], bp[:n])
			}
			c[i*ldc+j] = bf16Store(alpha, beta, acc, c[i*ldc+j], beta0)
		}
	}
}

// amxKernelOf is the bf16Kernel of an AMX-contract strided kernel s: its
// row-major forms s itself, its pair-major form (fn: the convolutions'
// and MulPacked's panels) s on the panel transposed into rows first, and
// rowsTrans, so that the driver packs a transposed A into rows too.
func amxKernelOf(name string, s bf16StridedFn) *bf16Kernel {
	return &bf16Kernel{
		name: name, mr: amxMR, nr: amxNR, amx: true, rowsTrans: true,
		strided: s,
		rows: func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
			s(kp, a, bf16RowStride, b, c, ldc, alpha, beta, beta0)
		},
		fn: func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
			buf := getU32(&amxRowBufs, amxMR*kp)
			defer amxRowBufs.Put(buf)
			r := *buf
			_ = a[amxMR*kp-1]
			for q := range kp {
				for i, v := range a[q*amxMR : q*amxMR+amxMR] {
					r[i*kp+q] = v
				}
			}
			s(kp, r, kp, b, c, ldc, alpha, beta, beta0)
		},
	}
}

// amxRowBufs hold the rows of pair-major A panels transposed for the AMX
// kernel.
var amxRowBufs sync.Pool

// amxGoKernel is the AMX contract in Go as a bf16Kernel (model lanes):
// the driver's integration of the AMX kernel (K blocks and their tails,
// edge tiles, strides, transposes, threads, alpha and beta) tested on
// every machine.
func amxGoKernel(model amxModel) *bf16Kernel {
	return amxKernelOf(fmt.Sprintf("amx-go %dx%d", amxMR, amxNR), func(kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
		amxTileGo(model, kp, a, rs, b, c, ldc, alpha, beta, beta0)
	})
}

// packRowsTr is packRows for a transposed A (value p of row i at
// src[off+p*ld+i]): row i < lines of the panel (bf16RowStride dwords
// apart) holds the pairs of values [0, kcur), zero past kcur; rows from
// lines on zeros. Whole blocks of 16 rows and 16 pairs by amxPackTrAsm
// where the CPU has it; the rest a pair of A's rows (two values of k) at
// a time, read along memory (read down its columns, each value on
// another line of A, it ran at 8 ns a value on Zen 4).
func packRowsTr(dst []uint32, src []uint16, off, ld, lines, rows, kcur int) {
	kp := ceilDiv(kcur, 2)
	_ = dst[(rows-1)*bf16RowStride+kp-1]
	i0, q0 := 0, 0 // rows [0, i0) have pairs [0, q0) packed
	if ib, qb := lines/16, kcur/32; amxPackTrAsm != nil && ib > 0 && qb > 0 {
		_ = src[off+(32*qb-1)*ld+16*ib-1]
		amxPackTrAsm(&src[off], ld, qb, ib, &dst[0], bf16RowStride)
		i0, q0 = 16*ib, 16*qb
	}
	for q := range kp {
		from := 0
		if q < q0 {
			from = i0
		}
		if from == lines {
			continue
		}
		lo := src[off+2*q*ld+from : off+2*q*ld+lines]
		d := dst[from*bf16RowStride+q:]
		if 2*q+1 < kcur {
			hi := src[off+(2*q+1)*ld+from : off+(2*q+1)*ld+lines]
			for i, v := range lo {
				d[i*bf16RowStride] = uint32(v) | uint32(hi[i])<<16
			}
		} else {
			for i, v := range lo {
				d[i*bf16RowStride] = uint32(v)
			}
		}
	}
	for i := lines; i < rows; i++ {
		clear(dst[i*bf16RowStride : i*bf16RowStride+kp])
	}
}

// amxPackTrAsm, where the CPU has it (amx_amd64.go), is packRowsTr's
// whole blocks: for ib < iblocks, qb < qblocks, i < 16 and q < 16,
// dst[(16ib+i)*ds+16qb+q] = src[(32qb+2q)*ld+16ib+i] |
// src[(32qb+2q+1)*ld+16ib+i]<<16.
var amxPackTrAsm func(src *uint16, ld, qblocks, iblocks int, dst *uint32, ds int)

// The AMX kernel's state, decided once (amxProbe: CPUID, the OS's
// permission, a self-check) the first time the bf16 kernels are listed.
// On a CPU without AMX this is a CPUID look-up; on one with it, an
// arch_prctl and a self-check of four tiles (milliseconds).
var (
	amxOnce   sync.Once
	amxK      *bf16Kernel
	amxModelK amxModel // the model the kernel matched (amxLanes if none bitwise)
	amxWhy    string
)

// amxKernel is the AMX kernel if it runs on this machine, else nil.
func amxKernel() *bf16Kernel {
	amxOnce.Do(func() { amxK, amxModelK, amxWhy = amxProbe() })
	return amxK
}

// AMXStatus reports whether the AMX-BF16 kernel runs on this machine and
// why (or why not): for reports.
func AMXStatus() (on bool, reason string) {
	k := amxKernel()
	return k != nil, amxWhy
}

// amxSelfCheck runs kernel s on a few tiles (a whole step, a tail alone,
// steps and a tail, beta 0 and not) and compares with the models: it
// reports the model s matched bitwise, or else how far from the lanes
// model it was, relative to the bound of float32 summation in any order
// (|alpha| Σ|a b| + |beta c|). Beyond 2^-12 of that bound, or a NaN
// where the model has none, it fails: a wrong encoding, tile shape or
// stride makes errors of order 1.
func amxSelfCheck(s bf16StridedFn) (amxModel, string, bool) {
	rng := rand.New(rand.NewPCG(17, 2))
	bitwise := map[amxModel]bool{amxLanes: true, amxPairs: true}
	worst := 0.0
	for ci, kp := range []int{16, 5, 37, 144} {
		rs := kp + 3
		a := make([]uint32, (amxMR-1)*rs+kp)
		b := make([]uint32, amxNR*kp)
		for _, x := range [][]uint32{a, b} {
			for i := range x {
				lo := math.Float32bits(float32(rng.NormFloat64())) >> 16
				hi := math.Float32bits(float32(rng.NormFloat64())) >> 16
				x[i] = lo | hi<<16
			}
		}
		const ldc = 35
		c0 := make([]float32, (amxMR-1)*ldc+amxNR)
		for i := range c0 {
			c0[i] = float32(rng.NormFloat64())
		}
		alpha, beta, beta0 := float32(0.75), float32(-1.5), ci%2 == 0
		got := append([]float32(nil), c0...)
		s(kp, a, rs, b, got, ldc, alpha, beta, beta0)
		for _, model := range []amxModel{amxLanes, amxPairs} {
			want := append([]float32(nil), c0...)
			amxTileGo(model, kp, a, rs, b, want, ldc, alpha, beta, beta0)
			for i := range amxMR {
				for j := range amxNR {
					o := i*ldc + j
					if !sameFloat(got[o], want[o]) {
						bitwise[model] = false
					}
					if model != amxLanes {
						continue
					}
					if math.IsNaN(float64(got[o])) || math.IsInf(float64(got[o]), 0) {
						return 0, fmt.Sprintf("kp %d: element (%d, %d) = %g, want %g", kp, i, j, got[o], want[o]), false
					}
					bound := 0.0
					for q := range kp {
						av, bv := a[i*rs+q], b[q*amxNR+j]
						bound += math.Abs(bf16In(uint16(av))*bf16In(uint16(bv))) + math.Abs(bf16In(uint16(av>>16))*bf16In(uint16(bv>>16)))
					}
					bound = math.Abs(float64(alpha))*bound + 0x1p-100
					if !beta0 {
						bound += math.Abs(float64(beta) * float64(c0[o]))
					}
					if e := math.Abs(float64(got[o])-float64(want[o])) / bound; e > worst {
						worst = e
					}
				}
			}
		}
	}
	for _, model := range []amxModel{amxLanes, amxPairs} {
		if bitwise[model] {
			return model, "bitwise " + model.String(), true
		}
	}
	report := fmt.Sprintf("not bitwise either model; worst error %.3g of the summation bound", worst)
	return amxLanes, report, worst <= 0x1p-12
}

// sameFloat is bitwise equality, any NaN equal to any NaN.
func sameFloat(x, y float32) bool {
	if math.IsNaN(float64(x)) {
		return math.IsNaN(float64(y))
	}
	return math.Float32bits(x) == math.Float32bits(y)
}

// amxCfg is the tile configuration LDTILECFG loads: palette 1, tiles 0-7
// each 16 rows of 64 bytes (C: 16×16 float32; A: 16 rows × 16 pairs; B:
// 16 pairs × 16 columns).
var amxCfg = func() (cfg [64]byte) {
	cfg[0] = 1
	for t := range 8 {
		cfg[16+2*t] = 64 // colsb, little endian
		cfg[48+t] = 16   // rows
	}
	return cfg
}()

// amxScratch is the kernel's scratch: the tail step's A (32 rows of 16
// pairs) and, right after it (2048 bytes in, as the kernel expects), B (16
// pairs of 32 columns), both zero past the tail; and the sums.
type amxScratch struct {
	a    [amxMR * amxStep]uint32
	b    [amxStep * amxNR]uint32
	sums [amxMR * amxNR]float32
}

var amxScratches sync.Pool

// amxAsmFn is amxKernel32x32's signature (amx_amd64.go).
type amxAsmFn func(cfg *byte, steps int, a *uint32, rs int, b *uint32, tail *uint32, sums *float32, c *float32, ldc int, alpha, beta float32, beta0 int)

// amxRun is the AMX contract (amxTileGo) on f, the assembly kernel or a
// test's emulation of it: A rows rs dwords apart, after checking the
// bounds f reads; the tail step's pairs copied into zeroed scratch.
func amxRun(f amxAsmFn, kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
	steps := kp / amxStep
	if steps > 0 {
		_ = a[(amxMR-1)*rs+steps*amxStep-1]
	}
	_ = b[amxNR*kp-1]
	_ = c[(amxMR-1)*ldc+amxNR-1]
	s, _ := amxScratches.Get().(*amxScratch)
	if s == nil {
		s = new(amxScratch)
	}
	defer amxScratches.Put(s)
	var tail *uint32
	if q0 := steps * amxStep; q0 < kp {
		// The last pairs into zeroed scratch: TILELOADD reads whole
		// 64-byte rows, and what lies past kp (the next K block, another
		// row, garbage) must not enter the sums (0·NaN).
		r := kp - q0
		for i := range amxMR {
			row := s.a[i*amxStep : (i+1)*amxStep]
			copy(row, a[i*rs+q0:i*rs+kp])
			clear(row[r:])
		}
		copy(s.b[:], b[q0*amxNR:kp*amxNR])
		clear(s.b[r*amxNR:])
		tail = &s.a[0]
	}
	z := 0
	if beta0 {
		z = 1
	}
	f(&amxCfg[0], steps, &a[0], 4*rs, &b[0], tail, &s.sums[0], &c[0], ldc, alpha, beta, z)
}

// catchFault runs f and returns the panic it raised, a memory fault
// included: with SetPanicOnFault a fault at a bad non-nil address (or the
// #GP of a bad tile configuration) panics instead of ending the process.
func catchFault(f func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	f()
	return nil
}
