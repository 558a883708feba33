package gemm

import (
	"unsafe"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// Batches of native bf16 products for the pointwise (1x1) convolutions,
// whose operands in NCHW are a weight shared by all images and a matrix
// per image (the image's [channels, positions] plane):
//
//	forward       Y[b] = W · X[b]         MulBatch, A = W
//	input grad    X̄[b] = Wᵀ · Ȳ[b]        MulBatch, A = Wᵀ
//	weight grad   W̄ = Σ_b Ȳ[b] · X[b]ᵀ    MulSumBatch
//
// Each output written where it lies: no im2col, no transposed product
// to copy back. The images' columns (MulBatch) or positions (MulSumBatch)
// are laid side by side in the packed B panels, so that small planes
// (ResNet's 8x8 and 4x4 stages: 64 and 16 positions) still make long
// products, and the shared operand is packed once per column chunk
// rather than once per image.

// MulBatch sets C_b = op(A)·B_b for each b < batch, on the native tile
// kernel: op(A) is m×k (a[i*lda+p], or with transA a[p*lda+i]), shared;
// B_b is k×n at b[b*strideB:] (row stride ldb, not transposed); C_b is
// m×n at c[b*strideC:] (row stride ldc). Every C_b is bitwise SgemmMixed's
// product of the same operands on this kernel (alpha 1, beta 0): the
// same K blocks, each summed in order from +0 and added to the previous
// ones.
func (t BF16Tile) MulBatch(pool *parallel.Pool, transA bool, m, n, k int, a []uint16, lda int, batch int, b []uint16, ldb, strideB int, c []float32, ldc, strideC int) {
	if m <= 0 || n <= 0 || batch <= 0 {
		return
	}
	if k <= 0 {
		for bi := range batch {
			for i := range m {
				clear(c[bi*strideC+i*ldc : bi*strideC+i*ldc+n])
			}
		}
		return
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	checkStride("a", ac, lda)
	checkLen("a", len(a), ar, ac, lda)
	checkStride("b", n, ldb)
	checkStride("c", n, ldc)
	_ = b[(batch-1)*strideB+(k-1)*ldb+n-1]
	_ = c[(batch-1)*strideC+(m-1)*ldc+n-1]
	kern := t.kern
	mr, nr := kern.mr, kern.nr
	threads := bf16Threads(pool, m, n*batch, k)
	kc := bf16Block(k)
	kpc := kc / 2

	// M blocks as sgemmBF16Rows makes them: even shares for the threads.
	mBlocks, mc, block := batchMBlocks(m, mr, threads)
	// A row-major (its rows copied) where the kernel has that form and A
	// is not transposed, as sgemmBF16Rows packs it; else pair-major
	// panels, astride dwords a row apart.
	rowsA := kern.rows != nil && !transA
	astride := kpc + bf16APad
	aLen := astride * mc
	if rowsA {
		astride, aLen = bf16RowStride, bf16RowStride*mc
	}

	// Column chunks: whole images, about bf16NC columns (B's K block in
	// L3), each image's columns in panels of their own (a panel never
	// spans two images, so that its tile of C lies in one C_b).
	ppi := ceilDiv(n, nr)
	ipc := max(1, min(batch, bf16NC/(ppi*nr)))
	bps := nr*kpc + bf16PanelPad
	bbuf := getU32(&bf16BBufs, bps*ppi*ipc)
	defer bf16BBufs.Put(bbuf)
	bp := *bbuf
	for b0 := 0; b0 < batch; b0 += ipc {
		nb := min(ipc, batch-b0)
		panels := nb * ppi
		nSplit := batchSplit(threads, mBlocks, panels)
		for pc := 0; pc < k; pc += kc {
			kcur := min(kc, k-pc)
			kp := ceilDiv(kcur, 2)
			var beta float32
			if pc > 0 {
				beta = 1
			}
			// eachImage calls f for the panels [u0, u1) of the chunk
			// (image-major) split by image: its panels [jp0, jp1).
			eachImage := func(u0, u1 int, f func(img, jp0, jp1 int)) {
				for u := u0; u < u1; {
					img, jp := u/ppi, u%ppi
					jp1 := min(ppi, jp+u1-u)
					f(img, jp, jp1)
					u += jp1 - jp
				}
			}
			pack := func(lo, hi int) {
				eachImage(lo, hi, func(img, jp0, jp1 int) {
					packPanelsIlv(bp[img*ppi*bps:], nr, bps, kp, b, (b0+img)*strideB+pc*ldb, ldb, n, kcur, jp0, jp1)
				})
			}
			compute := func(lo, hi int) {
				abuf := getU32(&bf16Bufs, aLen+mr*nr)
				defer bf16Bufs.Put(abuf)
				ap := *abuf
				ctile := unsafe.Slice((*float32)(unsafe.Pointer(&ap[aLen])), mr*nr)
				for task := lo; task < hi; task++ {
					ib, jb := task/nSplit, task%nSplit
					ic, mcur := block(ib)
					fn := kern.fn
					switch {
					case rowsA:
						packRows(ap[:aLen], a, ic*lda+pc, lda, mcur, roundUp(mcur, mr), kcur)
						fn = kern.rows
					case transA:
						packBlockIlv(ap, mr, mr*astride, a, pc*lda+ic, lda, mcur, kcur)
					default:
						for i0 := 0; i0 < mcur; i0 += mr {
							packPairsAdj(ap[i0*astride:i0*astride+mr*kp], mr, a, (ic+i0)*lda+pc, lda, min(mr, mcur-i0), kcur)
						}
					}
					eachImage(jb*panels/nSplit, (jb+1)*panels/nSplit, func(img, jp0, jp1 int) {
						bf16Macro(fn, mr, nr, astride, mcur, n, kp, ap, bp[img*ppi*bps:], bps, jp0, jp1, 1, beta, c, (b0+img)*strideC+ic*ldc, ldc, ctile, bf16Edge{})
					})
				}
			}
			if threads > 1 {
				pool.For(panels, 1, pack)
				pool.For(mBlocks*nSplit, 1, compute)
			} else {
				pack(0, panels)
				compute(0, mBlocks*nSplit)
			}
		}
	}
}

// MulSumBatch sets C = Σ_b A_b·B_bᵀ over b < batch, on the native tile
// kernel: A_b is m×k at a[b*strideA:] (row stride lda), B_b n×k at
// b[b*strideB:] (row stride ldb: op(B) is B_b transposed), C m×n (row
// stride ldc). The sum runs over the batch's positions (b, p) in order, in
// the blocks SumBatchBlocks gives, each summed from +0 (pairs of
// positions, an image's odd last position paired with zero) and added to
// the previous blocks' sum: the same for any thread count. With acc the
// first block too is added to C's values (C += Σ), so that a batch
// summed in several calls is the concatenation of their blocks.
func (t BF16Tile) MulSumBatch(pool *parallel.Pool, m, n, k int, batch int, a []uint16, lda, strideA int, b []uint16, ldb, strideB int, c []float32, ldc int, acc bool) {
	if m <= 0 || n <= 0 {
		return
	}
	if k <= 0 || batch <= 0 {
		if !acc {
			for i := range m {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		return
	}
	checkStride("a", k, lda)
	checkStride("b", k, ldb)
	checkStride("c", n, ldc)
	_ = a[(batch-1)*strideA+(m-1)*lda+k-1]
	_ = b[(batch-1)*strideB+(n-1)*ldb+k-1]
	_ = c[(m-1)*ldc+n-1]
	kern := t.kern
	mr, nr := kern.mr, kern.nr
	threads := bf16Threads(pool, m, n, k*batch)
	blocks := SumBatchBlocks(k, batch)
	kpc := 0
	for _, bl := range blocks {
		kpc = max(kpc, bl.Pairs(k))
	}
	nc := min(bf16NC, roundUp(n, nr))

	mBlocks, mc, block := batchMBlocks(m, mr, threads)
	// A's rows copied (row-major) where the kernel has that form, else
	// pair-major panels.
	rowsA := kern.rows != nil
	astride := kpc + bf16APad
	aLen := astride * mc
	if rowsA {
		astride, aLen = bf16RowStride, bf16RowStride*mc
	}
	bps := nr*kpc + bf16PanelPad
	bbuf := getU32(&bf16BBufs, bps*ceilDiv(nc, nr))
	defer bf16BBufs.Put(bbuf)
	bp := *bbuf
	for jc := 0; jc < n; jc += nc {
		ncur := min(nc, n-jc)
		panels := ceilDiv(ncur, nr)
		nSplit := batchSplit(threads, mBlocks, panels)
		for bi, bl := range blocks {
			kp := bl.Pairs(k)
			var beta float32
			if bi > 0 || acc {
				beta = 1
			}
			// segs calls f for each image's run of positions in the
			// block: image img, positions [p0, p0+cnt), its pairs from
			// pair q of the block on.
			segs := func(f func(img, p0, cnt, q int)) {
				q := 0
				for img := bl.B0; img < bl.B1; img++ {
					p0, p1 := 0, k
					if bl.B1-bl.B0 == 1 {
						p0, p1 = bl.P0, bl.P1
					}
					f(img, p0, p1-p0, q)
					q += ceilDiv(p1-p0, 2)
				}
			}
			pack := func(lo, hi int) {
				for jp := lo; jp < hi; jp++ {
					j0 := jc + jp*nr
					lanes := min(nr, n-j0)
					d := bp[jp*bps : jp*bps+nr*kp]
					segs(func(img, p0, cnt, q int) {
						off := img*strideB + j0*ldb + p0
						if nr == 16 {
							packPairsTr(d[q*nr:], b, off, ldb, lanes, cnt)
							return
						}
						packPairsAdj(d[q*nr:], nr, b, off, ldb, lanes, cnt)
					})
				}
			}
			compute := func(lo, hi int) {
				abuf := getU32(&bf16Bufs, aLen+mr*nr)
				defer bf16Bufs.Put(abuf)
				ap := *abuf
				ctile := unsafe.Slice((*float32)(unsafe.Pointer(&ap[aLen])), mr*nr)
				for task := lo; task < hi; task++ {
					ib, jb := task/nSplit, task%nSplit
					ic, mcur := block(ib)
					fn := kern.fn
					segs(func(img, p0, cnt, q int) {
						off := img*strideA + ic*lda + p0
						if rowsA {
							packRows(ap[q:aLen], a, off, lda, mcur, roundUp(mcur, mr), cnt)
							return
						}
						for i0 := 0; i0 < mcur; i0 += mr {
							packPairsAdj(ap[i0*astride+q*mr:], mr, a, off+i0*lda, lda, min(mr, mcur-i0), cnt)
						}
					})
					if rowsA {
						fn = kern.rows
					}
					bf16Macro(fn, mr, nr, astride, mcur, ncur, kp, ap, bp, bps, jb*panels/nSplit, (jb+1)*panels/nSplit, 1, beta, c, ic*ldc+jc, ldc, ctile, bf16Edge{})
				}
			}
			if threads > 1 {
				pool.For(panels, 1, pack)
				pool.For(mBlocks*nSplit, 1, compute)
			} else {
				pack(0, panels)
				compute(0, mBlocks*nSplit)
			}
		}
	}
}

// SumBlock is a block of MulSumBatch's sum: images [B0, B1) whole, or
// positions [P0, P1) of the one image B0 (B1 = B0+1).
type SumBlock struct{ B0, B1, P0, P1 int }

// Pairs is the number of pairs of positions of the block, for images of
// k positions (an image's odd last position a pair of its own).
func (s SumBlock) Pairs(k int) int {
	if s.B1-s.B0 == 1 {
		return ceilDiv(s.P1-s.P0, 2)
	}
	return (s.B1 - s.B0) * ceilDiv(k, 2)
}

// SumBatchBlocks are the blocks MulSumBatch sums batch images of k
// positions in, in order: as many whole images as fit in bf16KC
// positions (pairs, as evenly as possible), or where one image does not
// fit, its positions in bf16Block(k) blocks.
func SumBatchBlocks(k, batch int) []SumBlock {
	var bl []SumBlock
	if k2 := roundUp(k, 2); k2 <= bf16KC {
		per := max(1, bf16KC/k2)
		nb := ceilDiv(batch, per)
		for i := range nb {
			bl = append(bl, SumBlock{B0: i * batch / nb, B1: (i + 1) * batch / nb, P0: 0, P1: k})
		}
		return bl
	}
	kc := bf16Block(k)
	for img := range batch {
		for p := 0; p < k; p += kc {
			bl = append(bl, SumBlock{B0: img, B1: img + 1, P0: p, P1: min(k, p+kc)})
		}
	}
	return bl
}

// batchSplit is the number of column ranges each M block is split into
// for threads: where the M blocks alone make fewer than 4 tasks a
// thread, enough ranges for that many (pool.For hands tasks out as the
// threads come, so that ResNet's 64 and 256 output channels, 3 and 11
// tiles of 24 rows in 2 and 2 blocks, do not leave one thread waiting
// for the other's extra tile), each range packing its block's A again.
func batchSplit(threads, mBlocks, panels int) int {
	if threads <= 1 || mBlocks >= 4*threads {
		return 1
	}
	return max(1, min(panels, ceilDiv(4*threads, mBlocks)))
}

// batchMBlocks splits m rows of mr-row tiles into blocks as sgemmBF16Rows
// does (even shares for the threads): their count, the largest's rows, and
// block ib's first row and rows.
func batchMBlocks(m, mr, threads int) (mBlocks, mc int, block func(ib int) (ic, mcur int)) {
	tiles := ceilDiv(m, mr)
	mBlocks = ceilDiv(m, bf16MC)
	if threads > 1 {
		mBlocks = roundUp(mBlocks, threads)
	}
	mBlocks = min(mBlocks, tiles)
	mc = ceilDiv(tiles, mBlocks) * mr
	return mBlocks, mc, func(ib int) (ic, mcur int) {
		t0, t1 := ib*tiles/mBlocks, (ib+1)*tiles/mBlocks
		return t0 * mr, min(m, t1*mr) - t0*mr
	}
}
