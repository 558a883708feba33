package gemm

import (
	"fmt"
	"unsafe"
)

// Products against a B packed once. Attention multiplies every row block
// of a head by the same K, V (and in the backward dO, Q, K as B operands):
// SgemmMixed packed them again for each block and dispatched each small
// product to the pool. PackB packs such a B whole, in the native kernel's
// panels, and MulPacked runs the kernel on a row block against it on the
// calling thread. Each element of C sees the operations SgemmMixed (alpha
// 1, beta 0 or 1) gives it: the same K blocks, each summed in order from
// +0, so the results are bitwise the same.

// PackedBLen is the number of dwords PackB writes for a B of n columns
// and k rows.
func (t BF16Tile) PackedBLen(n, k int) int { return roundUp(n, t.kern.nr) * ceilDiv(k, 2) }

// PackB packs op(B), k×n (b[p*ldb+j], or with transB b[j*ldb+p]), into
// dst as the kernel's B panels, all of k deep: panel jp (columns
// [jp*NR, jp*NR+NR)) at dst[jp*NR*kp:], kp = ceil(k/2) pairs of NR
// dwords, zero past k and past n.
func (t BF16Tile) PackB(dst []uint32, transB bool, n, k int, b []uint16, ldb int) {
	nr := t.kern.nr
	kp, panels := ceilDiv(k, 2), ceilDiv(n, nr)
	if n <= 0 || k <= 0 {
		return
	}
	dst = dst[:panels*nr*kp]
	if !transB {
		packPanelsIlv(dst, nr, nr*kp, kp, b, 0, ldb, n, k, 0, panels)
		return
	}
	for jp := range panels {
		j0 := jp * nr
		d := dst[jp*nr*kp : (jp+1)*nr*kp]
		if nr == 16 {
			packPairsTr(d, b, j0*ldb, ldb, min(nr, n-j0), k)
			continue
		}
		packPairsAdj(d, nr, b, j0*ldb, ldb, min(nr, n-j0), k)
	}
}

// MulPacked sets C = op(A)·B' (set) or adds it to C (C += op(A)·B', the
// sum rounded once), C m×n at row stride ldc, where B' is rows [k0, k0+k)
// and columns [0, n) of a B that PackB packed bk deep (k0 even, k0+k <=
// bk, n at most its columns) and op(A) is m×k: a[i*lda+p], or with transA
// a[p*lda+i]. It runs on the calling thread.
func (t BF16Tile) MulPacked(transA bool, m, n, k int, a []uint16, lda int, bp []uint32, bk, k0 int, c []float32, ldc int, set bool) {
	if m <= 0 || n <= 0 || k <= 0 {
		if k <= 0 && set {
			for i := range m {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		return
	}
	kern := t.kern
	mr, nr := kern.mr, kern.nr
	bkp := ceilDiv(bk, 2)
	if k0%2 != 0 || k0 < 0 || k0+k > bk || len(bp) < ceilDiv(n, nr)*nr*bkp {
		panic(fmt.Sprintf("gemm: MulPacked: rows [%d, %d) of a B packed %d deep in %d dwords, %d columns", k0, k0+k, bk, len(bp), n))
	}
	panels := ceilDiv(n, nr)
	kc := bf16Block(k)
	kpc := kc / 2
	buf := getU32(&bf16Bufs, mr*kpc+mr*nr+panels*nr*kpc)
	defer bf16Bufs.Put(buf)
	ap := (*buf)[:mr*kpc]
	tmp := f32Of((*buf)[mr*kpc : mr*kpc+mr*nr])
	bodd := (*buf)[mr*kpc+mr*nr:]
	// A read where it lies where its rows hold whole pairs (as
	// sgemmBF16Rows does); else each tile packed.
	var a32 []uint32
	if !transA && kern.strided != nil && lda%2 == 0 {
		a32 = pairsOf(a[:len(a)&^1])
	}
	for pc := 0; pc < k; pc += kc {
		kcur := min(kc, k-pc)
		kp := ceilDiv(kcur, 2)
		beta0 := set && pc == 0
		// The B panels of this K block: kp pairs from pair (k0+pc)/2 of
		// each. An odd last K block inside B has B's next row in the high
		// halves of its last pair, where SgemmMixed packs zeros: those
		// panels are copied with them cleared.
		boff, bstride := (k0+pc)/2*nr, nr*bkp
		bsrc := bp
		if kcur%2 != 0 && k0+pc+kcur < bk {
			for jp := range panels {
				d := bodd[jp*nr*kp : (jp+1)*nr*kp]
				copy(d, bp[jp*nr*bkp+boff:])
				for j := range nr {
					d[(kp-1)*nr+j] &= 0xffff
				}
			}
			bsrc, boff, bstride = bodd, 0, nr*kp
		}
		strided := a32 != nil && kcur%2 == 0
		for i0 := 0; i0 < m; i0 += mr {
			mm := min(mr, m-i0)
			var apan []uint32
			inPlace := strided && mm == mr
			switch {
			case inPlace:
				apan = a32[(i0*lda+pc)/2:]
			case transA:
				apan = ap[:mr*kp]
				packPairsIlv(apan, mr, a, pc*lda+i0, lda, mm, kcur)
			default:
				apan = ap[:mr*kp]
				packPairsAdj(apan, mr, a, i0*lda+pc, lda, mm, kcur)
			}
			for jp := range panels {
				j0 := jp * nr
				nn := min(nr, n-j0)
				bpan := bsrc[jp*bstride+boff : jp*bstride+boff+nr*kp]
				cc, ld := c[i0*ldc+j0:], ldc
				edge := mm < mr || nn < nr
				if edge {
					// The tile computed whole into tmp (edgeTile).
					cc, ld = tmp, nr
					if !beta0 {
						for i := range mm {
							copy(tmp[i*nr:i*nr+nn], c[(i0+i)*ldc+j0:])
						}
					}
				}
				if inPlace {
					kern.strided(kp, apan, lda/2, bpan, cc, ld, 1, 1, beta0)
				} else {
					kern.fn(kp, apan, bpan, cc, ld, 1, 1, beta0)
				}
				if edge {
					for i := range mm {
						copy(c[(i0+i)*ldc+j0:(i0+i)*ldc+j0+nn], tmp[i*nr:i*nr+nn])
					}
				}
			}
		}
	}
}

// f32Of is the dwords of s as float32s.
func f32Of(s []uint32) []float32 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&s[0])), len(s))
}
