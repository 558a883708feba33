package gemm

import (
	"sync"
	"unsafe"

	"github.com/headroom-ml/headroom/internal/env"
	"github.com/headroom-ml/headroom/internal/parallel"
)

// Native bfloat16 products (VDPBF16PS, AVX512_BF16).
//
// The operands are packed as pairs of k: a packed dword holds two bf16
// values, the one of even k in the low half and the next (odd) k in the
// high half, zero past k. An A panel holds, pair by pair, mr such dwords
// (one per row); a B panel nr (one per column). The micro-kernel adds, for
// each pair in order, both products of a dword of A and a dword of B to a
// float32 accumulator (bf16DotPair) and stores as Sgemm's kernels do:
// c = alpha*sum + beta*c, the product rounded and then one fused
// multiply-add. K is cut into blocks of an even number of values, summed
// in order, each block's sum from +0 stored into C with beta = 1 after the
// first. Every element of C thus sees the same sequence of operations for
// any tile, split or thread count: results are bitwise the same.

// bf16Kernel is a native bf16 micro-kernel: fn multiplies an mr-row A panel
// by an nr-column B panel, both kp pairs of k deep, into the mr×nr tile at
// c (row stride ldc).
type bf16Kernel struct {
	name   string
	mr, nr int
	fn     func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool)
	// rows, where not nil, is fn with A row-major: row i's pairs at
	// a[i*bf16RowStride:], kp of them. A non-transposed A packs into that
	// form by copying its rows (its pairs lie in memory as the kernel
	// reads them), far cheaper than gathering them pair-major.
	rows func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool)
	// strided, where not nil, is fn with A row-major rs dwords apart
	// (row i's pairs at a[i*rs:]): a non-transposed A whose rows hold
	// whole pairs read where it lies, not copied.
	strided bf16StridedFn
	// stridedEdge, where not nil, holds strided forms of fewer rows than
	// mr, by their rows: an edge tile of that many rows of a strided A
	// read where it lies, not copied with zero rows and computed whole
	// (gpt's 2048 rows: 85 tiles and 8 rows).
	stridedEdge map[int]bf16StridedFn
	// amx marks an AMX kernel (TDPBF16PS arithmetic, amx.go), not
	// VDPBF16PS's: the tests compare it with its own reference, and the
	// convolutions' tile (BF16Tile) stays on VDPBF16PS.
	amx bool
	// rowsTrans: pack a transposed A into rows for kern.rows too, rather
	// than pair-major panels for fn (the AMX kernel reads A by rows and
	// its fn transposes each panel again for every B panel).
	rowsTrans bool
}

// bf16StridedFn is a micro-kernel with A row-major, row i's pairs at
// a[i*rs:] (bf16Kernel.strided).
type bf16StridedFn func(kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool)

// bf16RowStride is the dwords between rows of a row-major A panel: the
// deepest K block's pairs (bf16KC/2) and a cache line more, so that a
// panel's rows fall into different L1 sets. (gen_bf16.go's rowStride.)
const bf16RowStride = bf16KC/2 + 16

// Blocking (in elements of k and rows/columns): a KC-deep B panel of 16
// columns (16 KiB) stays in L1, an MC×KC A block (144 KiB) in L2, a KC×NC
// B block (4 MiB) in L3. KC is even (pairs), MC a multiple of every mr,
// NC of every nr.
const (
	bf16MC = 144
	bf16KC = 512
	bf16NC = 4032
)

// bf16Threads is how many threads a product uses, as gemmCore decides.
func bf16Threads(pool *parallel.Pool, m, n, k int) int {
	if 2*float64(m)*float64(n)*float64(k) < parallelMinFlops {
		return 1
	}
	return pool.Threads()
}

// bf16Block is the K block of a product with k values: blocks as even as
// possible, an even number of values each (a pair never straddles two).
func bf16Block(k int) int {
	kc := ceilDiv(k, ceilDiv(k, bf16KC))
	return min(roundUp(kc, 2), roundUp(k, 2))
}

// sgemmBF16 is SgemmMixed for bfloat16 A and B on kern. The arguments are
// checked; m, n and k are positive and alpha is not 0.
func sgemmBF16(kern *bf16Kernel, pool *parallel.Pool, transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	sgemmBF16Rows(kern, pool, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nil)
}

// sgemmBF16Rows is sgemmBF16 that, where rows is not nil and each M block
// is one thread's whole (C in one column block, not split among threads),
// calls rows(i0, i1) for each block's rows of C once they are final, from
// the thread that computed them, and reports true; else it calls rows
// for none and reports false.
func sgemmBF16Rows(kern *bf16Kernel, pool *parallel.Pool, transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int, rows func(i0, i1 int)) bool {
	mr, nr := kern.mr, kern.nr
	threads := bf16Threads(pool, m, n, k)
	kc := bf16Block(k)
	kpc := kc / 2
	nc := min(bf16NC, roundUp(n, nr))

	// M blocks: at most bf16MC rows, a multiple of threads of them, each
	// a whole number of mr-row tiles and the blocks' tile counts differing
	// by at most one, so that the threads get even shares (2048 rows in
	// uniform 144-row blocks would be 15 blocks, 8 for one thread and 7
	// for the other).
	tiles := ceilDiv(m, mr)
	mBlocks := ceilDiv(m, bf16MC)
	if threads > 1 {
		mBlocks = roundUp(mBlocks, threads)
	}
	mBlocks = min(mBlocks, tiles)
	mc := ceilDiv(tiles, mBlocks) * mr // the largest block
	block := func(ib int) (ic, mcur int) {
		t0, t1 := ib*tiles/mBlocks, (ib+1)*tiles/mBlocks
		return t0 * mr, min(m, t1*mr) - t0*mr
	}

	// A row-major where the kernel has that form and A's pairs lie in
	// its rows.
	rowsA := kern.rows != nil && (!transA || kern.rowsTrans)
	aLen := (kpc + bf16APad) * mc
	if rowsA {
		aLen = bf16RowStride * mc
	}
	// A read where it lies (kern.strided) where its rows hold whole
	// pairs, dword-aligned; per block where the block's k is even and its
	// tiles whole (else its rows are copied: zeros past k and past m).
	// Copying cost gpt's products with n = 384 (k = 384, 1152, 1536:
	// rows 768 to 3072 bytes apart) 5-9% of their CPU time on Zen 4.
	var a32 []uint32
	var sfn func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool)
	if rowsA && !transA && kern.strided != nil && lda%2 == 0 {
		a32 = pairsOf(a[:len(a)&^1])
		rs := lda / 2
		sfn = func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
			kern.strided(kp, a, rs, b, c, ldc, alpha, beta, beta0)
		}
	}
	// B is packed one K block at a time, all threads packing a block,
	// then all computing it. (Packing all of K at once, two waits a
	// product instead of two per K block, was tried: on the quiet
	// 2-thread bf16-mixed gpt step no faster, 554-610 ms against 525-579
	// ms interleaved, and 37 MiB more resident: its 8 MiB buffers share
	// the pool with the small A buffers and are re-made.)
	// B panel jp at bp[jp*bps:] in every K block: a cache line more
	// than the deepest block's panel, so that packing B pair by pair
	// (writing one line to each panel in turn) does not write lines that
	// fall into the same L1 set (panels 12 or 16 KiB apart: all of them
	// in one set) and evict each other. That cost gpt's weight gradient
	// 384×1536×2048 8-12% of its CPU time packing B on Zen 4.
	bps := nr*kpc + bf16PanelPad
	bLen := bps * ceilDiv(nc, nr)
	bbuf := getU32(&bf16BBufs, bLen)
	defer bf16BBufs.Put(bbuf)
	bp := *bbuf
	// A transposed A (packed pair-major per M block) with far fewer rows
	// than B has columns: the threads split the columns, each packing and
	// reading only its own B panels, each packing all of A (at most half
	// as much as B, hence n >= 2*threads*m). Split by M blocks, each
	// thread read the B panels the others packed, their lines in another
	// core's cache: on Zen 4, gpt's weight gradient 384×1536×2048 spent
	// 15% of its CPU time packing B on 2 threads against 6% on one.
	colSplit := bf16ColSplit && threads > 1 && transA && !rowsA && n >= 2*threads*m && n <= nc
	// No more columns than rows (m >= n): the threads split the M
	// blocks, each packing all of B into a buffer of its own, rather than
	// packing a shared one in turns: writing lines the other core read in
	// the previous K block cost gpt's 1536×384×2048 weight gradient 9% of
	// its CPU time packing B on 2 threads against 3% on one. (Taken from
	// m >= 2*threads*n down to m >= n, gpt's 2048×1536×384,
	// 2048×1152×384 and 1152×384×2048 products took 2-7% less CPU time
	// on 2 threads: no waits between K blocks and for the packing, at the
	// cost of B packed once more, about 1% of such a product's time.)
	rowPriv := bf16RowPriv && threads > 1 && !colSplit && m >= n && n <= nc && mBlocks >= threads
	if rows != nil && (n > nc || colSplit || (mBlocks < threads && ceilDiv(n, nr) > 1)) {
		rows = nil // blocks of C's rows are not final in one thread
	}
	for jc := 0; jc < n; jc += nc {
		ncur := min(nc, n-jc)
		nPanels := ceilDiv(ncur, nr)
		nSplit := 1
		if mBlocks < threads {
			nSplit = min(nPanels, ceilDiv(threads, mBlocks))
		}
		// stepAt is K block pc's B packing (panels [lo, hi) into bp) and
		// its computing of M block ib on the B panels [jpLo, jpHi) of bp,
		// A packed into ap (the edge tile's floats in ctile).
		stepAt := func(pc int) (pack func(bp []uint32, lo, hi int), run func(bp, ap []uint32, ctile []float32, ib, jpLo, jpHi int)) {
			kcur := min(kc, k-pc)
			kp := ceilDiv(kcur, 2)
			betaCur := beta
			if pc > 0 {
				betaCur = 1
			}
			var done func(i0, i1 int) // rows, in the last K block
			if pc+kcur == k {
				done = rows
			}
			pack = func(bp []uint32, lo, hi int) {
				if !transB {
					// Pair by pair over the panels: whole rows of B read in turn.
					packPanelsIlv(bp, nr, bps, kp, b, pc*ldb+jc, ldb, ncur, kcur, lo, hi)
					return
				}
				for jp := lo; jp < hi; jp++ {
					j0 := jp * nr
					dst := bp[jp*bps : jp*bps+nr*kp]
					// Row j of the stored B is column j of op(B).
					if nr == 16 {
						packPairsTr(dst, b, (jc+j0)*ldb+pc, ldb, min(nr, ncur-j0), kcur)
						continue
					}
					packPairsAdj(dst, nr, b, (jc+j0)*ldb+pc, ldb, min(nr, ncur-j0), kcur)
				}
			}
			run = func(bp, ap []uint32, ctile []float32, ib, jpLo, jpHi int) {
				ic, mcur := block(ib)
				switch {
				case a32 != nil && kcur%2 == 0:
					// The whole tiles read where A lies; an edge tile's rows
					// copied (zeros past m). Copying the whole block for
					// its edge tile (gpt's 2048 rows: 85 tiles and 8 rows)
					// cost the products with n = 384 2-4% of their CPU time.
					var edge bf16Edge
					if mfull := mcur / mr * mr; mfull < mcur {
						if f := kern.stridedEdge[mcur-mfull]; f != nil {
							rs := lda / 2
							edge = bf16Edge{func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
								f(kp, a, rs, b, c, ldc, alpha, beta, beta0)
							}, a32[((ic+mfull)*lda+pc)/2:], mcur - mfull}
						} else {
							packRows(ap[:aLen], a, (ic+mfull)*lda+pc, lda, mcur-mfull, mr, kcur)
							edge = bf16Edge{kern.rows, ap, mr}
						}
					}
					bf16Macro(sfn, mr, nr, lda/2, mcur, ncur, kp, a32[(ic*lda+pc)/2:], bp, bps, jpLo, jpHi, alpha, betaCur, c, ic*ldc+jc, ldc, ctile, edge)
				case rowsA && transA:
					packRowsTr(ap[:aLen], a, pc*lda+ic, lda, mcur, roundUp(mcur, mr), kcur)
					bf16Macro(kern.rows, mr, nr, bf16RowStride, mcur, ncur, kp, ap, bp, bps, jpLo, jpHi, alpha, betaCur, c, ic*ldc+jc, ldc, ctile, bf16Edge{})
				case rowsA:
					packRows(ap[:aLen], a, ic*lda+pc, lda, mcur, roundUp(mcur, mr), kcur)
					bf16Macro(kern.rows, mr, nr, bf16RowStride, mcur, ncur, kp, ap, bp, bps, jpLo, jpHi, alpha, betaCur, c, ic*ldc+jc, ldc, ctile, bf16Edge{})
				default:
					// Tile i0/mr at ap[i0*astride:], bf16APad pairs of
					// rows apart past its kp (tiles packed side by side
					// write lines of different L1 sets).
					astride := kp + bf16APad
					if transA {
						packBlockIlv(ap, mr, mr*astride, a, pc*lda+ic, lda, mcur, kcur)
					} else {
						for i0 := 0; i0 < mcur; i0 += mr {
							packPairsAdj(ap[i0*astride:i0*astride+mr*kp], mr, a, (ic+i0)*lda+pc, lda, min(mr, mcur-i0), kcur)
						}
					}
					bf16Macro(kern.fn, mr, nr, astride, mcur, ncur, kp, ap, bp, bps, jpLo, jpHi, alpha, betaCur, c, ic*ldc+jc, ldc, ctile, bf16Edge{})
				}
				if done != nil {
					done(ic, ic+mcur)
				}
			}
			return pack, run
		}
		buffers := func() (abuf *[]uint32, ap []uint32, ctile []float32) {
			abuf = getU32(&bf16Bufs, aLen+mr*nr)
			ap = *abuf
			// The edge tile's floats, in the buffer's tail.
			return abuf, ap, unsafe.Slice((*float32)(unsafe.Pointer(&ap[aLen])), mr*nr)
		}
		switch {
		case colSplit:
			// Each thread packs its own columns' B panels and runs every
			// M block on them, A packed again for each, all K blocks in
			// turn: no other thread reads its panels, so none waits for
			// another between K blocks.
			pool.For(threads, 1, func(lo, hi int) {
				abuf, ap, ctile := buffers()
				defer bf16Bufs.Put(abuf)
				for jb := lo; jb < hi; jb++ {
					jpLo, jpHi := jb*nPanels/threads, (jb+1)*nPanels/threads
					for pc := 0; pc < k; pc += kc {
						pack, run := stepAt(pc)
						pack(bp, jpLo, jpHi)
						for ib := range mBlocks {
							run(bp, ap, ctile, ib, jpLo, jpHi)
						}
					}
				}
			})
		case rowPriv:
			// Each thread packs all of B into a buffer of its own and runs
			// its share of the M blocks on it, all K blocks in turn (no
			// waits between them).
			pool.For(threads, 1, func(lo, hi int) {
				abuf, ap, ctile := buffers()
				defer bf16Bufs.Put(abuf)
				for tt := lo; tt < hi; tt++ {
					own := bp // share 0's; the others take one each
					if tt > 0 {
						pbuf := getU32(&bf16BBufs, bLen)
						defer bf16BBufs.Put(pbuf)
						own = *pbuf
					}
					for pc := 0; pc < k; pc += kc {
						pack, run := stepAt(pc)
						pack(own, 0, nPanels)
						for ib := tt * mBlocks / threads; ib < (tt+1)*mBlocks/threads; ib++ {
							run(own, ap, ctile, ib, 0, nPanels)
						}
					}
				}
			})
		default:
			for pc := 0; pc < k; pc += kc {
				pack, run := stepAt(pc)
				compute := func(lo, hi int) {
					abuf, ap, ctile := buffers()
					defer bf16Bufs.Put(abuf)
					for t := lo; t < hi; t++ {
						ib, jb := t/nSplit, t%nSplit
						run(bp, ap, ctile, ib, jb*nPanels/nSplit, (jb+1)*nPanels/nSplit)
					}
				}
				if threads > 1 {
					pool.For(nPanels, 1, func(lo, hi int) { pack(bp, lo, hi) })
					pool.For(mBlocks*nSplit, 1, compute)
				} else {
					pack(bp, 0, nPanels)
					compute(0, mBlocks*nSplit)
				}
			}
		}
	}
	return rows != nil
}

// bf16ColSplit and bf16RowPriv let sgemmBF16Rows split a product among
// threads by columns, or by rows with B packed by each thread (else both
// by rows with B packed together): for tests and measurements of both.
var bf16ColSplit, bf16RowPriv = true, true

// bf16APad is the pairs of k a packed A tile's stride has past the K
// block's: mr dwords, so that tiles side by side (packed a pair of rows at
// a time) do not fall into the same L1 sets.
const bf16APad = 1

// bf16PanelPad is the dwords (a cache line) between packed B panels past
// the deepest K block's pairs.
const bf16PanelPad = 16

// bf16Bufs and bf16BBufs hold packing buffers for reuse, A's and B's
// apart: a B buffer (up to megabytes) asked for and handed an A one (a
// few hundred KiB) makes a new one, and the splits with B packed by each
// thread ask for one a thread.
var bf16Bufs, bf16BBufs sync.Pool

// getU32 is a buffer of n dwords from pool, or a new one.
func getU32(pool *sync.Pool, n int) *[]uint32 {
	if v, ok := pool.Get().(*[]uint32); ok && cap(*v) >= n {
		*v = (*v)[:n]
		return v
	}
	s := make([]uint32, n)
	return &s
}

// bf16Macro multiplies the mcur-row A block ap by the B panels [jpLo,
// jpHi) of bp (kp pairs deep, panel jp at bp[jp*bps:]) into C at
// c[coff:] with the micro-kernel fn, whose A panels start every astride
// dwords (row i0's at i0*astride): kern.fn on packed panels (astride
// kp+bf16APad), kern.rows on rows bf16RowStride apart.
//
// Where edge.fn is not nil, a last tile of fewer than mr rows is edge.fn
// on the A panel edge.a instead: a strided A's edge rows read in place by
// a kernel of exactly as many rows, or copied with zeros past m as rows
// bf16RowStride dwords apart.
func bf16Macro(fn func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool), mr, nr, astride, mcur, ncur, kp int, ap, bp []uint32, bps, jpLo, jpHi int, alpha, beta float32, c []float32, coff, ldc int, tmp []float32, edge bf16Edge) {
	beta0 := beta == 0
	for jp := jpLo; jp < jpHi; jp++ {
		j0 := jp * nr
		nn := min(nr, ncur-j0)
		bpan := bp[jp*bps : jp*bps+nr*kp]
		for i0 := 0; i0 < mcur; i0 += mr {
			mm := min(mr, mcur-i0)
			fn, apan, rows := fn, ap[i0*astride:], mr // the kernel wrappers check its bounds
			if mm < mr && edge.fn != nil {
				fn, apan, rows = edge.fn, edge.a, edge.mr
			}
			off := coff + i0*ldc + j0
			if mm == rows && nn == nr {
				fn(kp, apan, bpan, c[off:], ldc, alpha, beta, beta0)
				continue
			}
			edgeTile(c[off:], ldc, mm, nn, nr, tmp, beta0, func() { fn(kp, apan, bpan, tmp, nr, alpha, beta, beta0) })
		}
	}
}

// bf16Edge is bf16Macro's edge tile form: the kernel fn of mr rows on
// the A panel a.
type bf16Edge struct {
	fn func(kp int, a, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool)
	a  []uint32
	mr int
}

// packRows packs rows [0, rows) of a row-major A panel (bf16RowStride
// dwords apart): row i < lines holds the pairs of src[off+i*ld:][:kcur]
// (even k low, zero past kcur), rows from lines on zeros.
func packRows(dst []uint32, src []uint16, off, ld, lines, rows, kcur int) {
	kp := ceilDiv(kcur, 2)
	full := kcur / 2
	for i := 0; i < rows; i++ {
		d := dst[i*bf16RowStride : i*bf16RowStride+kp]
		if i >= lines {
			clear(d)
			continue
		}
		s := src[off+i*ld : off+i*ld+kcur]
		if p := pairsOf(s[:2*full]); p != nil {
			copy(d, p)
		} else {
			for q := 0; q < full; q++ {
				d[q] = uint32(s[2*q]) | uint32(s[2*q+1])<<16
			}
		}
		if full < kp {
			d[full] = uint32(s[2*full])
		}
	}
}

// packPairsAdj packs w-wide panel lanes from lines whose k runs along
// memory: lane r < lanes reads src[off+r*ld+p] for p < kcur, and
// dst[q*w+r] = (value 2q) | (value 2q+1)<<16, zero past kcur and in lanes
// [lanes, w). (A, and a transposed B.)
func packPairsAdj(dst []uint32, w int, src []uint16, off, ld, lanes, kcur int) {
	kp := ceilDiv(kcur, 2)
	dst = dst[:kp*w]
	full := kcur / 2
	if gatherAsm != nil && lanes == w && (w == 16 || w == 24) && full > 0 && 2*(w-1)*ld < 1<<31 {
		// All lanes, the pairs gathered (reading the lanes row by row
		// would write dst with a stride of w dwords).
		_ = src[off+(w-1)*ld+2*full-1]
		var offs [24]int32
		for r := 0; r < w; r++ {
			offs[r] = int32(2 * r * ld)
		}
		gatherAsm(&src[off], &offs[0], full, &dst[0], w)
		if full < kp {
			d := dst[full*w : full*w+w]
			for r := range d {
				d[r] = uint32(src[off+r*ld+2*full])
			}
		}
		return
	}
	for r := 0; r < lanes; r++ {
		s := src[off+r*ld : off+r*ld+kcur]
		d := dst[r:]
		if p := pairsOf(s[:2*full]); p != nil {
			// The pairs as they lie in memory (little endian: even k low).
			for q, v := range p {
				d[q*w] = v
			}
		} else {
			for q := 0; q < full; q++ {
				d[q*w] = uint32(s[2*q]) | uint32(s[2*q+1])<<16
			}
		}
		if full < kp {
			d[full*w] = uint32(s[2*full])
		}
	}
	if lanes < w {
		for q := 0; q < kp; q++ {
			clear(dst[q*w+lanes : q*w+w])
		}
	}
}

// packPanelsIlv is packPairsIlv for the nr-wide panels [jpLo, jpHi) of
// an ncols-wide block whose rows start at src[off] (panel jp at
// dst[jp*bps:]), a pair of rows at a time.
func packPanelsIlv(dst []uint32, nr, bps, kp int, src []uint16, off, ld, ncols, kcur, jpLo, jpHi int) {
	c0, c1 := jpLo*nr, min(ncols, jpHi*nr)
	for q := 0; q < kp; q++ {
		lo := src[off+2*q*ld+c0 : off+2*q*ld+c1]
		var hi []uint16
		if 2*q+1 < kcur {
			hi = src[off+(2*q+1)*ld+c0 : off+(2*q+1)*ld+c1]
		}
		jp := jpLo
		if full := min(jpHi, jpLo+len(lo)/nr) - jpLo; ilvAsm != nil && hi != nil && nr == 16 && full > 0 {
			o := jpLo*bps + q*nr
			_ = dst[o+(full-1)*bps+nr-1]
			ilvAsm(&lo[0], &hi[0], full, &dst[o], bps)
			jp += full
		}
		if full := min(jpHi, jpLo+len(lo)/nr) - jpLo; ilvAsm != nil && hi != nil && nr == 32 && full > 0 {
			// The AMX kernel's 32-column panels: a call a panel, its two
			// 16-column halves side by side.
			for p := range full {
				o := (jpLo+p)*bps + q*nr
				_ = dst[o+nr-1]
				ilvAsm(&lo[p*nr], &hi[p*nr], 2, &dst[o], 16)
			}
			jp += full
		}
		for ; jp < jpHi; jp++ {
			d := dst[jp*bps+q*nr : jp*bps+q*nr+nr]
			j0 := jp*nr - c0
			n := min(nr, len(lo)-j0)
			l := lo[j0 : j0+n]
			if hi != nil {
				h := hi[j0 : j0+n]
				for j, v := range l {
					d[j] = uint32(v) | uint32(h[j])<<16
				}
			} else {
				for j, v := range l {
					d[j] = uint32(v)
				}
			}
			clear(d[n:])
		}
	}
}

// packBlockIlv packs the mr-row tiles of an mcur-row block of a
// transposed A (rows of k: value p of lane i at src[off+p*ld+i]) as
// packPairsIlv does, tile t at dst[t*tstride:]: the whole tiles by
// ilv24NAsm where it can, a pair of rows for all of them at once.
func packBlockIlv(dst []uint32, mr, tstride int, src []uint16, off, ld, mcur, kcur int) {
	kp := ceilDiv(kcur, 2)
	full := kcur / 2
	i0 := 0
	if tiles := mcur / mr; ilv24NAsm != nil && mr == 24 && tiles > 0 && full > 0 {
		_ = src[off+(2*full-1)*ld+24*tiles-1]
		_ = dst[(tiles-1)*tstride+24*full-1]
		ilv24NAsm(&src[off], ld, full, &dst[0], tiles, tstride)
		if full < kp {
			// Odd k: the last pair's even values alone.
			s := src[off+2*full*ld : off+2*full*ld+24*tiles]
			for t := range tiles {
				d := dst[t*tstride+24*full : t*tstride+24*full+24]
				for l, v := range s[24*t : 24*t+24] {
					d[l] = uint32(v)
				}
			}
		}
		i0 = tiles * mr
	}
	for ; i0 < mcur; i0 += mr {
		t := i0 / mr
		packPairsIlv(dst[t*tstride:t*tstride+mr*kp], mr, src, off+i0, ld, min(mr, mcur-i0), kcur)
	}
}

// ilv24NAsm, where the CPU has it (bf16_amd64.go), is packBlockIlv's
// whole 24-row tiles and full pairs: dst[t*tstride+24q+l] =
// src[2q*ld+24t+l] | src[(2q+1)*ld+24t+l]<<16.
var ilv24NAsm func(src *uint16, ld, kp int, dst *uint32, tiles, tstride int)

// ilv24Asm, where the CPU has it (bf16_amd64.go), is packPairsIlv for 24
// full lanes and kp full pairs: dst[24q+l] = src[2q*ld+l] |
// src[(2q+1)*ld+l]<<16.
var ilv24Asm func(src *uint16, ld, kp int, dst *uint32)

// tr16Asm, where the CPU has it (bf16_amd64.go), packs 16 lanes of pairs
// whose k runs along memory 16 pairs at a time: for q < 16*blocks and
// r < 16, dst[16q+r] = src[r*ld+2q] | src[r*ld+2q+1]<<16.
var tr16Asm func(src *uint16, ld, blocks int, dst *uint32)

// packPairsTr is packPairsAdj for w = 16, by tr16Asm where it can.
func packPairsTr(dst []uint32, src []uint16, off, ld, lanes, kcur int) {
	blocks := kcur / 32
	if tr16Asm == nil || lanes != 16 || blocks == 0 {
		packPairsAdj(dst, 16, src, off, ld, lanes, kcur)
		return
	}
	_ = src[off+15*ld+32*blocks-1]
	_ = dst[256*blocks-1]
	tr16Asm(&src[off], ld, blocks, &dst[0])
	if q0 := 16 * blocks; 2*q0 < kcur {
		packPairsAdj(dst[q0*16:], 16, src, off+2*q0, ld, lanes, kcur-2*q0)
	}
}

// packPairsIlv packs w-wide panel lanes from rows of k: lane j < lanes of
// pair q is dst[q*w+j] = src[off+2q*ld+j] | src[off+(2q+1)*ld+j]<<16, zero
// past kcur and in lanes [lanes, w). (B, and a transposed A.)
func packPairsIlv(dst []uint32, w int, src []uint16, off, ld, lanes, kcur int) {
	kp := ceilDiv(kcur, 2)
	dst = dst[:kp*w]
	q0 := 0
	if full := kcur / 2; ilv24Asm != nil && w == 24 && lanes == 24 && full > 0 {
		_ = src[off+(2*full-1)*ld+23]
		ilv24Asm(&src[off], ld, full, &dst[0])
		q0 = full
	}
	for q := q0; q < kp; q++ {
		d := dst[q*w : q*w+w]
		lo := src[off+2*q*ld : off+2*q*ld+lanes]
		if 2*q+1 < kcur {
			hi := src[off+(2*q+1)*ld : off+(2*q+1)*ld+lanes]
			j0 := 0
			if ilvAsm != nil && lanes >= 16 {
				j0 = lanes / 16 * 16
				ilvAsm(&lo[0], &hi[0], lanes/16, &d[0], 16)
			}
			for j := j0; j < len(lo); j++ {
				d[j] = uint32(lo[j]) | uint32(hi[j])<<16
			}
		} else {
			for j := range lo {
				d[j] = uint32(lo[j])
			}
		}
		clear(d[lanes:])
	}
}

// bf16Kern is the native bf16 kernel SgemmMixed uses for bfloat16 A and B,
// nil where the CPU has none or HEADROOM_BF16_NATIVE=0 turns it off.
var bf16Kern *bf16Kernel

func init() {
	// The switch first: listing the kernels may ask the OS for AMX and
	// self-check it (amxKernel), which a process with native bf16 off
	// need not do.
	if on, err := env.Bool(env.BF16Native, true); !on || err != nil {
		return
	}
	if ks := bf16Kernels(); len(ks) > 0 {
		bf16Kern = ks[0]
	}
}

// SetNativeBF16 turns the native bf16 kernel on (where the CPU has one) or
// off (bf16 operands widened, bitwise the float32 product's result) and
// reports whether it was on: for tests and comparisons that need the
// float32 arithmetic, as HEADROOM_BF16_NATIVE=0 does for a process. Not
// safe while products run.
func SetNativeBF16(on bool) (was bool) {
	was = bf16Kern != nil
	bf16Kern = nil
	if ks := bf16Kernels(); on && len(ks) > 0 {
		bf16Kern = ks[0]
	}
	return was
}

// gemmBF16 is SgemmMixed for bfloat16 A and B on kern, from the checks
// gemmCore makes (SgemmMixed checked B).
func gemmBF16(kern *bf16Kernel, pool *parallel.Pool, transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if trivial(transA, m, n, k, alpha, len(a), lda, beta, c, ldc) {
		return
	}
	sgemmBF16(kern, pool, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmMixedRows is SgemmMixed (with a pool) that may call rows(i0, i1)
// for disjoint ranges of C's rows covering [0, m), each once its values
// are final, possibly concurrently from the pool's threads, while the
// product runs on: an elementwise epilogue then finds its rows in cache.
// It reports whether it did; where it did not (no native bf16 product for
// these operands, or one whose row blocks are split among threads) it
// called rows for none, and C is SgemmMixed's.
func SgemmMixedRows(transA, transB bool, m, n, k int, alpha float32, a Matrix, lda int, b Matrix, ldb int, beta float32, c []float32, ldc int, pool *parallel.Pool, rows func(i0, i1 int)) bool {
	kern := bf16Kern
	if kern == nil || rows == nil || a.Type != BFloat16 || b.Type != BFloat16 || m <= 0 || n <= 0 || k <= 0 || alpha == 0 {
		SgemmMixed(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool)
		return false
	}
	a.check("a")
	b.check("b")
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	checkStride("b", bc, ldb)
	checkLen("b", b.len(), br, bc, ldb)
	if trivial(transA, m, n, k, alpha, len(a.U16), lda, beta, c, ldc) {
		return false // not reached: m, n, k > 0 and alpha != 0
	}
	return sgemmBF16Rows(kern, pool, transA, transB, m, n, k, alpha, a.U16, lda, b.U16, ldb, beta, c, ldc, rows)
}

// pairsOf is s (of even length) as dwords, each two consecutive values
// (the first low), where s is 4-byte aligned on a little-endian machine;
// else nil.
func pairsOf(s []uint16) []uint32 {
	if len(s) == 0 || !littleEndian || uintptr(unsafe.Pointer(&s[0]))%4 != 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&s[0])), len(s)/2)
}

// littleEndian is true where the low half of a dword comes first in memory.
var littleEndian = func() bool {
	x := uint32(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()
