package gemm

import (
	"fmt"
	"math"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// Type is the element type of an SgemmMixed operand.
type Type uint8

const (
	Float32  Type = iota
	BFloat16      // the upper 16 bits of a float32
	Float16       // IEEE binary16
)

func (t Type) String() string {
	switch t {
	case Float32:
		return "float32"
	case BFloat16:
		return "bfloat16"
	case Float16:
		return "float16"
	}
	return fmt.Sprintf("Type(%d)", t)
}

// Matrix is an operand of SgemmMixed: float32 values in F32, or the bit
// patterns of bfloat16 or float16 values in U16.
type Matrix struct {
	Type Type
	F32  []float32
	U16  []uint16
}

// F32, BF16 and F16 make Matrix operands.
func F32(x []float32) Matrix { return Matrix{Type: Float32, F32: x} }
func BF16(x []uint16) Matrix { return Matrix{Type: BFloat16, U16: x} }
func F16(x []uint16) Matrix  { return Matrix{Type: Float16, U16: x} }

func (x Matrix) len() int {
	if x.Type == Float32 {
		return len(x.F32)
	}
	return len(x.U16)
}

func (x Matrix) check(name string) {
	if x.Type > Float16 {
		panic(fmt.Sprintf("gemm: operand %s has unknown type %v", name, x.Type))
	}
}

// halves are the operands of a mixed product; a float32 one is read from
// gemmCore's a or b as usual.
type halves struct{ a, b Matrix }

// SgemmMixed is Sgemm with operands that may be bfloat16 or float16 (A and
// B independently). A 16-bit operand is converted to float32 as it is
// packed, and the product accumulates in float32 in Sgemm's micro-kernel
// over the same blocks, so C is bitwise what Sgemm computes from the
// operands converted to float32 first, without the float32 copies (twice
// the operand's bytes) that conversion needs.
//
// Except where both A and B are bfloat16 and the CPU has native bf16
// products (AVX512_BF16; NativeBF16): then the products run on VDPBF16PS,
// still accumulating in float32 (as PyTorch's autocast on oneDNN), but
// with that instruction's rounding (bf16DotPair: two roundings per pair of
// k, denormals flushed), so C differs from the widened product's in its
// last bits. HEADROOM_BF16_NATIVE=0 forces the widened path.
func SgemmMixed(transA, transB bool, m, n, k int, alpha float32, a Matrix, lda int, b Matrix, ldb int, beta float32, c []float32, ldc int, pool ...*parallel.Pool) {
	a.check("a")
	b.check("b")
	if a.Type == Float32 && b.Type == Float32 {
		Sgemm(transA, transB, m, n, k, alpha, a.F32, lda, b.F32, ldb, beta, c, ldc, pool...)
		return
	}
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	checkStride("b", bc, ldb)
	if m > 0 && n > 0 && alpha != 0 && k > 0 {
		checkLen("b", b.len(), br, bc, ldb)
	}
	if a.Type == BFloat16 && b.Type == BFloat16 && bf16Kern != nil {
		gemmBF16(bf16Kern, poolOf(pool), transA, transB, m, n, k, alpha, a.U16, lda, b.U16, ldb, beta, c, ldc)
		return
	}
	gemmCore(sgemmKern, &pools32, poolOf(pool), transA, transB, m, n, k, alpha, a.F32, lda, b.F32, ldb, Packer[float32]{}, &halves{a: a, b: b}, beta, c, ldc)
}

// SgemmFuncMixed is SgemmFunc with an A that may be bfloat16 or float16,
// converted as it is packed (bitwise SgemmFunc's result on A converted
// first). A packing function for 16-bit data can convert with Widen.
func SgemmFuncMixed(transA bool, m, n, k int, alpha float32, a Matrix, lda int, packB Packer[float32], beta float32, c []float32, ldc int, pool ...*parallel.Pool) {
	a.check("a")
	if a.Type == Float32 {
		SgemmFunc(transA, m, n, k, alpha, a.F32, lda, packB, beta, c, ldc, pool...)
		return
	}
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	if packB.Pack == nil {
		panic("gemm: nil packing function")
	}
	gemmCore(sgemmKern, &pools32, poolOf(pool), transA, false, m, n, k, alpha, nil, lda, nil, 0, packB, &halves{a: a, b: F32(nil)}, beta, c, ldc)
}

// Widen converts 16-bit values of type t (BFloat16 or Float16) to float32:
// dst[i] = src[i] for i < len(src). It is exact, and vectorized where the
// CPU allows (NaNs come out quiet with their payload, as x86's F16C
// conversion makes them, on every path).
func Widen(t Type, dst []float32, src []uint16) {
	if t != BFloat16 && t != Float16 {
		panic(fmt.Sprintf("gemm: Widen of %v", t))
	}
	widen(t, sgemmKern.half[t-1], dst[:len(src)], src)
}

// halfConv holds a kernel's assembly conversions of one 16-bit type.
type halfConv struct {
	// rows16 converts 16*blocks values: dst[b*stride+l] = src[16*b+l]
	// for l < 16.
	rows16 func(src *uint16, blocks int, dst *float32, stride int)
	// packT16 is packT16 converting: for 16 rows of src (stride ld) and
	// 8*blocks columns, dst[16*p+r] = src[r*ld+p].
	packT16 func(src *uint16, ld, blocks int, dst *float32)
}

// widen converts src into dst (as long), with hc's assembly if not nil.
func widen(t Type, hc *halfConv, dst []float32, src []uint16) {
	dst = dst[:len(src)]
	if blocks := len(src) / 16; hc != nil && blocks > 0 {
		hc.rows16(&src[0], blocks, &dst[0], 16)
		src, dst = src[16*blocks:], dst[16*blocks:]
	}
	widenGo(t, dst, src)
}

func widenGo(t Type, dst []float32, src []uint16) {
	dst = dst[:len(src)]
	if t == BFloat16 {
		for i, v := range src {
			dst[i] = math.Float32frombits(uint32(v) << 16)
		}
		return
	}
	for i, v := range src {
		dst[i] = f16ToF32(v)
	}
}

func toF32(t Type, v uint16) float32 {
	if t == BFloat16 {
		return math.Float32frombits(uint32(v) << 16)
	}
	return f16ToF32(v)
}

// f16ToF32 converts an IEEE binary16 exactly; NaNs keep sign and payload
// and come out quiet, as VCVTPH2PS (and tensor.Float16ToFloat32) do.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch exp {
	case 0x1f:
		if man != 0 {
			return math.Float32frombits(sign | 0x7fc00000 | man<<13)
		}
		return math.Float32frombits(sign | 0x7f800000)
	case 0:
		// man·2^-24, exact: a subnormal half is a normal float32.
		return math.Float32frombits(sign | math.Float32bits(float32(man)*(1.0/(1<<24))))
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// packB packs the kcur×ncur block of a 16-bit op(B) at (pc, jc) into bp
// as gemmCore's float32 packing would: rows [lo, hi) of the block when B
// is not transposed, else panels [lo, hi).
func (h *halves) packB(kern *kernel[float32], transB bool, ldb, pc, kcur, jc, ncur, lo, hi int, bp []float32) {
	t, b, nr := h.b.Type, h.b.U16, kern.nr
	hc := kern.half[t-1]
	if nr != 16 {
		hc = nil // the assembly writes 16-wide panels
	}
	if !transB {
		full := ncur / nr * nr
		for p := lo; p < hi; p++ {
			src := b[(pc+p)*ldb+jc : (pc+p)*ldb+jc+ncur]
			o := p * nr
			if blocks := full / 16; hc != nil && blocks > 0 {
				_ = bp[o+(blocks-1)*16*kcur+15]
				hc.rows16(&src[0], blocks, &bp[o], 16*kcur)
				o += blocks * 16 * kcur
			} else {
				for j := 0; j < full; j += nr {
					widenGo(t, bp[o:o+nr], src[j:j+nr])
					o += nr * kcur
				}
			}
			if full < ncur {
				d := bp[o : o+nr]
				widenGo(t, d, src[full:])
				clear(d[ncur-full:])
			}
		}
		return
	}
	for jp := lo; jp < hi; jp++ {
		j0 := jp * nr
		nn := min(nr, ncur-j0)
		dst := bp[jp*nr*kcur : (jp+1)*nr*kcur]
		off := (jc+j0)*ldb + pc
		p0 := 0
		if hc != nil && nn == nr {
			_ = b[off+15*ldb+kcur-1]
			if blocks := kcur / 8; blocks > 0 {
				hc.packT16(&b[off], ldb, blocks, &dst[0])
				p0 = blocks * 8
			}
		}
		for j := 0; j < nn; j++ {
			src := b[off+j*ldb+p0 : off+j*ldb+kcur]
			for p, v := range src {
				dst[(p0+p)*nr+j] = toF32(t, v)
			}
		}
		for j := nn; j < nr; j++ {
			for p := 0; p < kcur; p++ {
				dst[p*nr+j] = 0
			}
		}
	}
}

// packA packs rows [ic, ic+mcur) and columns [pc, pc+kcur) of a 16-bit
// op(A) into the mr-row panels of ap, as gemmCore's float32 packing would,
// converting through tmp (at least max(mr*kcur, mcur) floats).
func (h *halves) packA(kern *kernel[float32], transA bool, lda, pc, kcur, ic, mcur int, ap, tmp []float32) {
	t, a, mr := h.a.Type, h.a.U16, kern.mr
	hc := kern.half[t-1]
	if transA {
		// Stored row p is column p of op(A): convert its mcur values, then
		// spread them over the panels.
		row := tmp[:mcur]
		for p := 0; p < kcur; p++ {
			widen(t, hc, row, a[(pc+p)*lda+ic:(pc+p)*lda+ic+mcur])
			spreadRow(ap, row, p, kcur, mr)
		}
		return
	}
	// Convert a panel's rows (row i at tmp[i*kcur:]), then interleave them.
	rows := tmp[:mr*kcur]
	for i0 := 0; i0 < mcur; i0 += mr {
		mm := min(mr, mcur-i0)
		for i := 0; i < mm; i++ {
			r := (ic + i0 + i) * lda
			widen(t, hc, rows[i*kcur:(i+1)*kcur], a[r+pc:r+pc+kcur])
		}
		packA(rows, kcur, 0, mm, 0, kcur, mr, ap[i0*kcur:(i0+mr)*kcur])
	}
}
