// Package gemm implements dense matrix multiplication (the BLAS GEMM
// routine) for the CPU backend.
//
// The implementation follows BLIS/GotoBLAS: op(B) is packed, KC×NC at a time,
// into column panels NR wide; op(A) is packed, MC×KC at a time, into row
// panels MR tall; a register-blocked MR×NR micro-kernel multiplies one A panel
// by one B panel. With more than one thread, a wide C is split into column
// slices, one a thread, each a single-threaded product with a packed B of
// its own, where that pays (slicesPay); otherwise blocks of C are split
// across the worker pool of
// package parallel, and B is packed for several K blocks at once (up to 4
// MiB) so that each M block runs through all of them between two waits
// for the pool. On amd64 the single-precision micro-kernel is assembly, 6×64
// with AVX-512 (four 16-wide B panels at once, the 6×16 kernel on the
// columns left over) or 6×16 with AVX2 and FMA, chosen from the CPU's
// features at start-up; elsewhere, and for float64, it is portable Go.
//
// All matrices are row-major. Scratch buffers come from sync.Pools and are
// reused across calls. Results are bitwise the same for every thread count
// (each element of C is summed in the same order however the work is split).
//
// The -tags purego build, and every architecture but amd64, use only the
// portable Go kernels.
package gemm

import (
	"fmt"
	"sync"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// Sgemm computes C = alpha*op(A)*op(B) + beta*C for row-major float32
// matrices, where op(X) is X, or X transposed when the matching trans flag is
// set. op(A) is m×k (A is stored k×m when transA), op(B) is k×n (B is stored
// n×k when transB) and C is m×n; lda, ldb and ldc are the row strides of A, B
// and C as stored. As in BLAS, when beta is 0 C is not read (NaNs and Infs in
// it do not propagate), and when alpha is 0 or k is 0, A and B are not read.
// It panics if a stride is smaller than its row length or a slice is too
// short.
//
// The blocks of C are split across pool[0] when given (a caller's own
// parallel.Pool), else across package parallel's default pool.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, pool ...*parallel.Pool) {
	gemm(sgemmKern, &pools32, poolOf(pool), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// PackFunc produces op(B) for SgemmFunc and DgemmFunc without op(B) being
// stored. The B operand is packed a block at a time, the kc×nc block of
// op(B) at rows [p0, p0+kc) and columns [j0, j0+nc), as panels of nr
// columns: panel jp at dst[jp*nr*kc:], kc groups of nr values,
// dst[jp*nr*kc+p*nr+l] = op(B)[p0+p][j0+jp*nr+l], zero where
// jp*nr+l >= nc. One call writes rows [r0, r1) (0 <= r0 < r1 <= kc) of
// panels [jp0, jp1); calls for disjoint parts of a block run concurrently.
type PackFunc[T ~float32 | ~float64] func(dst []T, p0, kc, j0, nc, r0, r1, jp0, jp1, nr int)

// Packer is a PackFunc and how to split a block among calls: by rows (each
// call gets all panels, best when a row of op(B) is contiguous in memory)
// or by panels (each call gets all rows).
type Packer[T ~float32 | ~float64] struct {
	Pack   PackFunc[T]
	ByRows bool
}

// SgemmFunc is Sgemm with op(B) (k×n) given by a packing function instead
// of a stored matrix: an implicit GEMM, such as a convolution whose im2col
// matrix is never written out.
func SgemmFunc(transA bool, m, n, k int, alpha float32, a []float32, lda int, packB Packer[float32], beta float32, c []float32, ldc int, pool ...*parallel.Pool) {
	gemmFunc(sgemmKern, &pools32, poolOf(pool), transA, m, n, k, alpha, a, lda, packB, beta, c, ldc)
}

// DgemmFunc is SgemmFunc for float64.
func DgemmFunc(transA bool, m, n, k int, alpha float64, a []float64, lda int, packB Packer[float64], beta float64, c []float64, ldc int, pool ...*parallel.Pool) {
	gemmFunc(kernGo64, &pools64, poolOf(pool), transA, m, n, k, alpha, a, lda, packB, beta, c, ldc)
}

// NR is the width of the B panels that a PackFunc of Sgemm (float32) or
// Dgemm (float64) writes.
func NR[T ~float32 | ~float64]() int {
	var z T
	if _, ok := any(z).(float32); ok {
		return sgemmKern.nr
	}
	return kernGo64.nr
}

// PackTransposed writes the transpose of an nr×kc block into a B panel, for
// PackFuncs: dst[nr*p+r] = src[r*ld+p] for r < nr = NR[T](), p < kc. It
// uses the micro-kernel's assembly packing where there is one.
func PackTransposed[T ~float32 | ~float64](src []T, ld, kc int, dst []T) {
	switch s := any(src).(type) {
	case []float32:
		d := any(dst).([]float32)
		if f := sgemmKern.packBT; f != nil {
			f(s, ld, 0, kc, d)
			return
		}
		packBT(s, ld, 0, kc, 0, sgemmKern.nr, sgemmKern.nr, d, nil)
	case []float64:
		packBT(s, ld, 0, kc, 0, kernGo64.nr, kernGo64.nr, any(dst).([]float64), nil)
	}
}

// Dgemm is Sgemm for float64. It is portable Go, written for correctness
// (float64 gradient checks) rather than peak speed.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int, pool ...*parallel.Pool) {
	gemm(kernGo64, &pools64, poolOf(pool), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SetThreads sets the number of threads GEMM (and every other user of
// package parallel) splits work across; n < 1 restores the default,
// runtime.GOMAXPROCS(0) unless HEADROOM_NUM_THREADS says otherwise. It
// returns the previous setting.
func SetThreads(n int) int { return parallel.SetThreads(n) }

// Threads reports the number of threads GEMM uses.
func Threads() int { return parallel.Threads() }

// poolOf is the pool of a variadic pool argument (nil: the default).
func poolOf(p []*parallel.Pool) *parallel.Pool {
	if len(p) > 0 {
		return p[0]
	}
	return nil
}

// Kernel reports which single-precision micro-kernel Sgemm uses: "avx512",
// "avx2" or "go". The best one the CPU supports is chosen at start-up; the
// environment variable HEADROOM_SGEMM_KERNEL names a slower one to use
// instead (for comparisons), and is ignored when the CPU cannot run it.
func Kernel() string { return sgemmKern.name }

const kernelEnv = "HEADROOM_SGEMM_KERNEL"

type float interface{ ~float32 | ~float64 }

// kernel is a micro-kernel: fn multiplies an mr×k packed panel of A by a
// k×nr packed panel of B and stores into the mr×nr tile at c (row stride
// ldc): c = alpha*AB + beta*c, or alpha*AB when beta0 (c not read).
type kernel[T float] struct {
	name   string
	mr, nr int
	fn     func(k int, a, b, c []T, ldc int, alpha, beta T, beta0 bool)
	// fnTiles, if not nil, is fn for tiles full tiles one above the
	// other (A panels consecutive in a, C tiles mr rows apart), with fn's
	// arithmetic: one call per column of tiles. bnext, if not nil, is the
	// B panel of the next call, which it may prefetch.
	fnTiles func(k, tiles int, a, b, c []T, ldc int, alpha, beta T, beta0 bool, bnext []T)
	// fnWide, if not nil, is fnTiles for wide tiles of wideQ A panels by
	// wideP B panels (wideQ*mr × wideP*nr, the panels consecutive in a
	// and b), with fn's arithmetic; the B panels stay nr wide, so every
	// B packer serves it, and the columns and rows left over run on fn.
	fnWide       func(k, tiles int, a, b, c []T, ldc int, alpha, beta T, beta0 bool)
	wideQ, wideP int

	// packBT, if not nil, packs nr full columns of a transposed B:
	// dst[nr*p+r] = x[off+r*ld+p] for p < kc.
	packBT func(x []T, ld, off, kc int, dst []T)

	// half[t-1] (float32 kernels) holds the assembly conversions of 16-bit
	// Type t for packing, or nil: portable Go.
	half [2]*halfConv
}

// Blocking parameters (in elements). KC×NR of B (16 KiB for float32) stays
// in L1, MC×KC of A (144 KiB) in L2, KC×NC of B (4 MiB) in L3. MC is a
// multiple of every MR and NC of every NR in use.
//
// The AVX-512 6×64 tile reads KC×64 of B (64 KiB) a call from L2 (1 MiB a
// core on Zen 4 and AVX-512 Intel cores), next to the A block, with its A
// panel (6 KiB) in L1. On Zen 4 it measured 0-5% faster at KC = 512
// (fewer passes over C), but the K blocks are where each element's sum is
// rounded (alpha·AB + beta·C once per block), so every kernel keeps the
// same KC and results stay bitwise the same on every machine; the 6×64
// kernel's late prefetch of its C tile recovers most of that. MC = 96
// measured even with 144, and NC = 4080 (not a multiple of 64: 3 panels
// a block run on the 6×16 kernel) costs nothing measurable.
const (
	blockMC = 144
	blockKC = 256
	blockNC = 4080
)

// maxPackedB is the most packed B that a product keeps at once (elements):
// 4 MiB of float32, what one KC×NC block took before K blocks were
// grouped, so that grouping adds no memory.
const maxPackedB = 1 << 20

// Products with fewer flops than this run on the calling goroutine only.
const parallelMinFlops = 1 << 21

var (
	sgemmKern = kernGo32 // replaced by an assembly kernel in init where the CPU allows
	kernGo32  = &kernel[float32]{name: "go", mr: 4, nr: 4, fn: kernelGo4x4[float32]}
	kernGo64  = &kernel[float64]{name: "go", mr: 4, nr: 4, fn: kernelGo4x4[float64]}

	pools32 bufPools[float32]
	pools64 bufPools[float64]
)

// bufPools pools the packing buffers and blocked runs of one element type.
type bufPools[T float] struct{ a, b, runs, slices sync.Pool }

func getBuf[T float](p *sync.Pool, n int) *[]T {
	if v, ok := p.Get().(*[]T); ok && cap(*v) >= n {
		*v = (*v)[:n]
		return v
	}
	s := make([]T, n)
	return &s
}

func checkStride(name string, cols, ld int) {
	if ld < max(1, cols) {
		panic(fmt.Sprintf("gemm: ld%s = %d < %d", name, ld, max(1, cols)))
	}
}

func checkLen(name string, have, rows, cols, ld int) {
	if rows > 0 && cols > 0 && have < (rows-1)*ld+cols {
		panic(fmt.Sprintf("gemm: len(%s) = %d, need %d for %d×%d with stride %d", name, have, (rows-1)*ld+cols, rows, cols, ld))
	}
}

func gemm[T float](kern *kernel[T], pools *bufPools[T], pool *parallel.Pool, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	checkStride("b", bc, ldb)
	if m > 0 && n > 0 && alpha != 0 && k > 0 {
		checkLen("b", len(b), br, bc, ldb)
	}
	gemmCore(kern, pools, pool, transA, transB, m, n, k, alpha, a, lda, b, ldb, Packer[T]{}, nil, beta, c, ldc)
}

func gemmFunc[T float](kern *kernel[T], pools *bufPools[T], pool *parallel.Pool, transA bool, m, n, k int, alpha T, a []T, lda int, packB Packer[T], beta T, c []T, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	if packB.Pack == nil {
		panic("gemm: nil packing function")
	}
	gemmCore(kern, pools, pool, transA, false, m, n, k, alpha, a, lda, nil, 0, packB, nil, beta, c, ldc)
}

// gemmCore is the blocked product; op(B) comes from b, or from packB when
// that is not nil. With h (float32 only), a 16-bit A or B in h replaces a
// or b and is converted as it is packed: the packed panels, and so the
// result, are the same as for the operand converted first.
func gemmCore[T float](kern *kernel[T], pools *bufPools[T], pool *parallel.Pool, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, packB Packer[T], h *halves, beta T, c []T, ldc int) {
	alen := len(a)
	if h != nil && h.a.Type != Float32 {
		alen = len(h.a.U16)
	}
	if trivial(transA, m, n, k, alpha, alen, lda, beta, c, ldc) {
		return
	}

	threads := pool.Threads()
	if 2*float64(m)*float64(n)*float64(k) < parallelMinFlops {
		threads = 1
	}
	if slices := columnSlices(threads, n); slices > 1 && (forceSlices || slicesPay(threads, m, n, k)) {
		sr, _ := pools.slices.Get().(*slicesRun[T])
		if sr == nil {
			sr = new(slicesRun[T])
			sr.fn = sr.run
		}
		*sr = slicesRun[T]{kern: kern, pools: pools, pool: pool, w: roundUp(ceilDiv(n, slices), kern.nr), n: n, transA: transA, transB: transB,
			m: m, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, packB: packB, h: h, beta: beta, c: c, ldc: ldc, fn: sr.fn}
		pool.For(slices, 1, sr.fn)
		*sr = slicesRun[T]{fn: sr.fn}
		pools.slices.Put(sr)
		return
	}
	blocked(kern, pools, pool, threads, 0, n, transA, transB, m, k, alpha, a, lda, b, ldb, packB, h, beta, c, ldc)
}

// slicesRun is a product run as column slices, one blocked product a
// slice; pooled with its loop bound once, as blockedRun.
type slicesRun[T float] struct {
	kern           *kernel[T]
	pools          *bufPools[T]
	pool           *parallel.Pool
	w, n, m, k     int
	transA, transB bool
	alpha, beta    T
	a, b, c        []T
	lda, ldb, ldc  int
	packB          Packer[T]
	h              *halves
	fn             func(lo, hi int)
}

func (r *slicesRun[T]) run(lo, hi int) {
	for s := lo; s < hi; s++ {
		blocked(r.kern, r.pools, r.pool, 1, s*r.w, min(r.n, (s+1)*r.w), r.transA, r.transB, r.m, r.k, r.alpha, r.a, r.lda, r.b, r.ldb, r.packB, r.h, r.beta, r.c, r.ldc)
	}
}

// trivial checks A's and C's strides and lengths (A's length is alen,
// elements of any type) and does the products with nothing to multiply:
// none when C is empty, C scaled by beta when alpha or k is 0. It reports
// whether the product is done.
func trivial[T float](transA bool, m, n, k int, alpha T, alen, lda int, beta T, c []T, ldc int) bool {
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	checkStride("a", ac, lda)
	checkStride("c", n, ldc)
	checkLen("c", len(c), m, n, ldc)
	if m == 0 || n == 0 {
		return true
	}
	if alpha == 0 || k == 0 {
		scaleC(m, n, beta, c, ldc)
		return true
	}
	checkLen("a", alen, ar, ac, lda)
	return false
}

// columnSlices is how many column slices of C a product on this many
// threads runs as, one a thread, each a single-threaded blocked product
// with a packed B of its own (1: the threads share every packed block of
// B, splitting C's rows). Slices keep each core's B in its own caches
// (written and read by one core, half the footprint) and need no wait
// between K blocks; the price is A packed once a slice, small next to a
// wide slice. slicesPay says which shapes gain.
func columnSlices(threads, n int) int {
	if threads < 2 || n/threads < minSliceCols {
		return 1
	}
	return threads
}

// minSliceCols is the narrowest column slice columnSlices gives a thread.
const minSliceCols = 256

// slicesPay reports whether column slices (columnSlices) beat splitting C's
// rows over threads that share one packed B, for an m×k by k×n product. A
// slice packs all of A for itself, so A is packed once a thread, a cost
// that falls with the slice's width; what it buys is a B block (KC×width)
// of the thread's own, which pays while that block fits in half of a
// core's L2 (256 KiB on Zen 3), the A block taking much of the rest, and
// every B panel serving all m rows (split rows, a thread's panel serves
// m/threads, and fewer than MC rows a thread load B more often). Past
// that, B streams from the shared L3 either way and sharing it saves the
// duplicated A. Measured on 2 Zen 3 cores, by CPU time, paired runs:
// 1024³ 2-4% faster sharing B (a 512 KiB slice block); 784×1024×128
// (256 KiB) 7%, 512×4096×576 (2048 wide) 10% and 128×1024×1152 (64 rows
// a thread) 10% faster in slices; 2048³, 128×1024×784 and 256×1024×2304
// even.
func slicesPay(threads, m, n, k int) bool {
	w := n / threads
	kc := ceilDiv(k, ceilDiv(k, blockKC))
	// 4: float32's bytes, the measured case; float64 products take the
	// same rule (a block twice the bytes), unmeasured.
	return m < threads*blockMC || w >= minWideSlice || kc*w*4 <= sliceBBytes
}

const (
	// minWideSlice is the slice width from which A's duplicated packing
	// no longer matters.
	minWideSlice = 2048
	// sliceBBytes is the largest slice B block (bytes) that stays in a
	// core's L2 next to the A block.
	sliceBBytes = 256 << 10
)

// forceSlices makes every product columnSlices allows run as slices
// (tests of the slice path).
var forceSlices bool

// blocked runs the blocked product on columns [jLo, jHi) of C with threads
// threads of pool.
func blocked[T float](kern *kernel[T], pools *bufPools[T], pool *parallel.Pool, threads, jLo, jHi int, transA, transB bool, m, k int, alpha T, a []T, lda int, b []T, ldb int, packB Packer[T], h *halves, beta T, c []T, ldc int) {
	mr, nr := kern.mr, kern.nr

	// Even out the K blocks: k=300 runs as 150+150, not 256+44.
	kc := ceilDiv(k, ceilDiv(k, blockKC))
	kc = min(k, kc)
	nc := min(blockNC, roundUp(jHi-jLo, nr))

	// M blocks: at most blockMC rows, and a multiple of threads of them
	// (when there are enough rows) so that the pool stays evenly busy.
	mBlocks := ceilDiv(m, blockMC)
	if threads > 1 {
		mBlocks = roundUp(mBlocks, threads)
	}
	mc := min(roundUp(ceilDiv(m, mBlocks), mr), roundUp(m, mr))
	mBlocks = ceilDiv(m, mc)

	// Packed B is kept for a group of K blocks at once (as many as fit in
	// maxPackedB), so that a group needs one parallel packing loop and one
	// parallel compute loop, each M block running through all the group's
	// K blocks: two waits for the slowest thread per group instead of two
	// per K block, and work units long enough to balance dynamically. For
	// 1024³ the whole of B is one group.
	kBlocks := ceilDiv(k, kc)
	kGroup := max(1, min(kBlocks, maxPackedB/(kc*nc)))
	if threads == 1 {
		// Nothing to wait for: one K block at a time keeps the packed B
		// (1 MiB for KC×1024) likelier to stay in cache than a group.
		kGroup = 1
	}
	bbuf := getBuf[T](&pools.b, min(kGroup*kc, k)*nc)
	defer pools.b.Put(bbuf)

	r := getRun(pools)
	defer r.put(pools)
	*r = blockedRun[T]{kern: kern, pools: pools, transA: transA, transB: transB, m: m, k: k, kc: kc, nc: nc, mc: mc,
		alpha: alpha, beta: beta, a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc, packB: packB, h: h, bAll: *bbuf,
		packFn: r.packFn, computeFn: r.computeFn}

	for jc := jLo; jc < jHi; jc += nc {
		r.jc = jc
		r.ncur = min(nc, jHi-jc)
		r.nPanels = ceilDiv(r.ncur, nr)
		// When M alone gives too few blocks, split the N panels too.
		r.nSplit = 1
		if mBlocks < threads {
			r.nSplit = min(r.nPanels, ceilDiv(threads, mBlocks))
		}
		// Pack B by panels when transposed (a panel then reads nr
		// contiguous rows of B), else by rows of B (reading whole rows
		// keeps the hardware prefetcher busy; a panel would read kc short
		// pieces one row stride apart).
		r.byRows = packB.Pack == nil && !transB || packB.Pack != nil && packB.ByRows
		for g0 := 0; g0 < kBlocks; g0 += kGroup {
			r.g0, r.g1 = g0, min(kBlocks, g0+kGroup)
			// Packing units: block g's units are [(g-g0)*unitsPer, +packN),
			// packN = its rows or panels; the rest of its range is empty.
			r.unitsPer = r.nPanels
			if r.byRows {
				r.unitsPer = kc
			}
			packUnits := (r.g1 - g0) * r.unitsPer
			if threads > 1 {
				pool.For(packUnits, max(1, 4096/(r.ncur+kc)), r.packFn)
				pool.For(mBlocks*r.nSplit, 1, r.computeFn)
			} else {
				r.pack(0, packUnits)
				r.compute(0, mBlocks*r.nSplit)
			}
		}
	}
}

// blockedRun is the state of one blocked product that its packing and
// compute loops share. It is pooled, with its loops bound once as method
// values (packFn, computeFn): closures made a call would be garbage, and
// a training step makes tens of thousands of small products (Winograd's
// tile products), which made most of the Go heap's garbage in a step.
type blockedRun[T float] struct {
	kern                                *kernel[T]
	pools                               *bufPools[T]
	transA, transB, byRows              bool
	m, k, kc, nc, mc                    int
	jc, ncur, nPanels, nSplit, unitsPer int
	g0, g1                              int
	alpha, beta                         T
	a, b, c, bAll                       []T
	lda, ldb, ldc                       int
	packB                               Packer[T]
	h                                   *halves
	packFn, computeFn                   func(lo, hi int)
}

func getRun[T float](pools *bufPools[T]) *blockedRun[T] {
	if r, ok := pools.runs.Get().(*blockedRun[T]); ok {
		return r
	}
	r := new(blockedRun[T])
	r.packFn, r.computeFn = r.pack, r.compute
	return r
}

// put returns r to the pool without the slices it referenced, so that a
// pooled run keeps no operand alive.
func (r *blockedRun[T]) put(pools *bufPools[T]) {
	*r = blockedRun[T]{packFn: r.packFn, computeFn: r.computeFn}
	pools.runs.Put(r)
}

// packBlock packs units [lo, hi) (rows or panels) of K block g of B.
func (r *blockedRun[T]) packBlock(g, lo, hi int) {
	kern, kc, nc, k, nr := r.kern, r.kc, r.nc, r.k, r.kern.nr
	pc := g * kc
	kcur := min(kc, k-pc)
	if r.byRows {
		hi = min(hi, kcur)
	}
	if lo >= hi {
		return
	}
	bp := r.bAll[(g-r.g0)*kc*nc:]
	if h := r.h; h != nil && h.b.Type != Float32 {
		h.packB(any(kern).(*kernel[float32]), r.transB, r.ldb, pc, kcur, r.jc, r.ncur, lo, hi, any(bp).([]float32))
		return
	}
	if packB := r.packB; packB.Pack != nil {
		if packB.ByRows {
			packB.Pack(bp, pc, kcur, r.jc, r.ncur, lo, hi, 0, r.nPanels, nr)
		} else {
			packB.Pack(bp, pc, kcur, r.jc, r.ncur, 0, kcur, lo, hi, nr)
		}
		return
	}
	if !r.transB {
		packBRows(r.b, r.ldb, pc+lo, hi-lo, lo, kcur, r.jc, r.ncur, nr, bp)
		return
	}
	for jp := lo; jp < hi; jp++ {
		j0 := jp * nr
		packBT(r.b, r.ldb, pc, kcur, r.jc+j0, min(nr, r.ncur-j0), nr, bp[jp*nr*kcur:(jp+1)*nr*kcur], kern.packBT)
	}
}

// pack packs units [lo, hi) of the current group's K blocks.
func (r *blockedRun[T]) pack(lo, hi int) {
	for u := lo; u < hi; {
		g := r.g0 + u/r.unitsPer
		end := min(hi, (u/r.unitsPer+1)*r.unitsPer)
		r.packBlock(g, u%r.unitsPer, u%r.unitsPer+end-u)
		u = end
	}
}

// compute runs work units [lo, hi) (M blocks by N splits) through the
// current group's K blocks.
func (r *blockedRun[T]) compute(lo, hi int) {
	kern, mr, nr, mc, kc, nc, k, m := r.kern, r.kern.mr, r.kern.nr, r.mc, r.kc, r.nc, r.k, r.m
	h := r.h
	extra := 0
	if h != nil {
		extra = max(mr*kc, mc) // rows of a 16-bit A converted
	}
	abuf := getBuf[T](&r.pools.a, mc*kc+mr*nr+extra)
	ap := *abuf
	tmp := ap[mc*kc : mc*kc+mr*nr]
	for t := lo; t < hi; t++ {
		ib, jb := t/r.nSplit, t%r.nSplit
		ic := ib * mc
		mcur := min(mc, m-ic)
		mPanels := ceilDiv(mcur, mr)
		jpLo := jb * r.nPanels / r.nSplit
		jpHi := (jb + 1) * r.nPanels / r.nSplit
		for g := r.g0; g < r.g1; g++ {
			pc := g * kc
			kcur := min(kc, k-pc)
			betaCur := r.beta
			if pc > 0 {
				betaCur = 1
			}
			if h != nil && h.a.Type != Float32 {
				h.packA(any(kern).(*kernel[float32]), r.transA, r.lda, pc, kcur, ic, mcur, any(ap).([]float32), any(ap[mc*kc+mr*nr:]).([]float32))
			} else if r.transA {
				// Stored A rows are contiguous in i: read them whole.
				packATRows(r.a, r.lda, pc, kcur, ic, mcur, mr, ap)
			} else {
				for ip := 0; ip < mPanels; ip++ {
					i0 := ip * mr
					packA(r.a, r.lda, ic+i0, min(mr, mcur-i0), pc, kcur, mr, ap[ip*mr*kcur:(ip+1)*mr*kcur])
				}
			}
			macroKernel(kern, mcur, r.ncur, kcur, ap, r.bAll[(g-r.g0)*kc*nc:], jpLo, jpHi, r.alpha, betaCur, r.c, ic*r.ldc+r.jc, r.ldc, tmp)
		}
	}
	r.pools.a.Put(abuf)
}

// macroKernel multiplies the packed mcur×kcur block ap by the B panels
// [jpLo, jpHi) of bp into C at c[coff:] (row stride ldc).
func macroKernel[T float](kern *kernel[T], mcur, ncur, kcur int, ap, bp []T, jpLo, jpHi int, alpha, beta T, c []T, coff, ldc int, tmp []T) {
	mr, nr := kern.mr, kern.nr
	beta0 := beta == 0
	q, wp := kern.wideQ, kern.wideP
	for jp := jpLo; jp < jpHi; {
		// Wide tiles where wideP full panels remain: their full-height
		// tiles in one call, the rows below them panel by panel.
		if kern.fnWide != nil && mcur >= q*mr && jp+wp <= jpHi && (jp+wp)*nr <= ncur {
			wt := mcur / (q * mr)
			kern.fnWide(kcur, wt, ap, bp[jp*nr*kcur:(jp+wp)*nr*kcur], c[coff+jp*nr:], ldc, alpha, beta, beta0)
			for e := 0; e < wp; e++ {
				panelColumn(kern, wt*q*mr, mcur, ncur, kcur, ap, bp, jp+e, jpHi, alpha, beta, c, coff, ldc, tmp)
			}
			jp += wp
			continue
		}
		panelColumn(kern, 0, mcur, ncur, kcur, ap, bp, jp, jpHi, alpha, beta, c, coff, ldc, tmp)
		jp++
	}
}

// panelColumn multiplies rows [i0, mcur) of ap by B panel jp (of panels
// up to jpHi) into C, with fnTiles for full tiles where there is one.
func panelColumn[T float](kern *kernel[T], i0, mcur, ncur, kcur int, ap, bp []T, jp, jpHi int, alpha, beta T, c []T, coff, ldc int, tmp []T) {
	mr, nr := kern.mr, kern.nr
	fn := kern.fn
	beta0 := beta == 0
	j0 := jp * nr
	nn := min(nr, ncur-j0)
	bpan := bp[jp*nr*kcur : (jp+1)*nr*kcur]
	if full := (mcur - i0) / mr; nn == nr && full > 0 && kern.fnTiles != nil {
		var bnext []T
		if jp+1 < jpHi {
			bnext = bp[(jp+1)*nr*kcur : (jp+2)*nr*kcur]
		}
		kern.fnTiles(kcur, full, ap[i0*kcur:], bpan, c[coff+i0*ldc+j0:], ldc, alpha, beta, beta0, bnext)
		i0 += full * mr
	}
	for ; i0 < mcur; i0 += mr {
		mm := min(mr, mcur-i0)
		apan := ap[i0*kcur : (i0+mr)*kcur]
		off := coff + i0*ldc + j0
		if mm == mr && nn == nr {
			fn(kcur, apan, bpan, c[off:], ldc, alpha, beta, beta0)
			continue
		}
		edgeTile(c[off:], ldc, mm, nn, nr, tmp, beta0, func() { fn(kcur, apan, bpan, tmp, nr, alpha, beta, beta0) })
	}
}

// edgeTile runs a micro-kernel (run) on the mm×nn edge tile of C at c
// through tmp, a full nr-wide tile holding C's valid part: every element
// is scaled and rounded as in a full tile, so the result does not depend
// on where the tile edges fall, and so not on the kernel's tile size.
func edgeTile[T any](c []T, ldc, mm, nn, nr int, tmp []T, beta0 bool, run func()) {
	if !beta0 {
		for i := 0; i < mm; i++ {
			copy(tmp[i*nr:i*nr+nn], c[i*ldc:i*ldc+nn])
		}
	}
	run()
	for i := 0; i < mm; i++ {
		copy(c[i*ldc:i*ldc+nn], tmp[i*nr:i*nr+nn])
	}
}

// packA packs rows [i0, i0+mm) and columns [p0, p0+kc) of a non-transposed
// A into dst as kc groups of mr values (rows beyond mm are zero).
func packA[T float](a []T, lda, i0, mm, p0, kc, mr int, dst []T) {
	dst = dst[:kc*mr]
	// op(A)(i, p) = a[i*lda+p]: row i is contiguous in p.
	if mm == 6 && mr == 6 {
		if a32, ok := any(a).([]float32); ok && packRows6F32 != nil {
			packRows6F32(a32, lda, i0*lda+p0, kc, any(dst).([]float32))
			return
		}
		packRows6(a, lda, i0*lda+p0, kc, dst)
		return
	}
	if mm == 4 && mr == 4 {
		packRows4(a, lda, i0*lda+p0, kc, dst)
		return
	}
	for i := 0; i < mm; i++ {
		src := a[(i0+i)*lda+p0 : (i0+i)*lda+p0+kc]
		for p, v := range src {
			dst[p*mr+i] = v
		}
	}
	for i := mm; i < mr; i++ {
		for p := 0; p < kc; p++ {
			dst[p*mr+i] = 0
		}
	}
}

// packBT packs rows [p0, p0+kc) and columns [j0, j0+nn) of op(B) = Bᵀ into
// dst as kc groups of nr values (columns beyond nn are zero), using fast
// (kernel-specific, may be nil) for full panels.
func packBT[T float](b []T, ldb, p0, kc, j0, nn, nr int, dst []T, fast func(x []T, ld, off, kc int, dst []T)) {
	dst = dst[:kc*nr]
	// op(B)(p, j) = b[j*ldb+p]: column j of op(B) is contiguous in p.
	if nn == nr && fast != nil {
		fast(b, ldb, j0*ldb+p0, kc, dst)
		return
	}
	if nn == 4 && nr == 4 {
		packRows4(b, ldb, j0*ldb+p0, kc, dst)
		return
	}
	for j := 0; j < nn; j++ {
		src := b[(j0+j)*ldb+p0 : (j0+j)*ldb+p0+kc]
		for p, v := range src {
			dst[p*nr+j] = v
		}
	}
	for j := nn; j < nr; j++ {
		for p := 0; p < kc; p++ {
			dst[p*nr+j] = 0
		}
	}
}

// packATRows packs rows [i0, i0+mcur) and columns [p0, p0+kc) of op(A) =
// Aᵀ, for a stored A (rows of A are columns of op(A)), into the mr-row
// panels of dst (panel ip holds kc groups of mr values, zero-padded past
// mcur). It reads A row by row.
func packATRows[T float](a []T, lda, p0, kc, i0, mcur, mr int, dst []T) {
	if a32, ok := any(a).([]float32); ok && mr == 6 {
		packATRows6F32(a32, lda, p0, kc, i0, mcur, any(dst).([]float32))
		return
	}
	for p := 0; p < kc; p++ {
		spreadRow(dst, a[(p0+p)*lda+i0:(p0+p)*lda+i0+mcur], p, kc, mr)
	}
}

// spreadRow writes src, row p of a kc-deep block of op(A), across the
// mr-row panels of dst: value i goes to panel i/mr, group p, lane i%mr;
// the last panel's lanes past len(src) are zeroed.
func spreadRow[T float](dst, src []T, p, kc, mr int) {
	mcur := len(src)
	full := mcur / mr * mr
	o := p * mr
	if mr == 6 {
		// Concrete array copies inline; copy of 6 values calls memmove.
		for i := 0; i < full; i += 6 {
			*(*[6]T)(dst[o:]) = *(*[6]T)(src[i:])
			o += 6 * kc
		}
	} else {
		for i := 0; i < full; i += mr {
			copy(dst[o:o+mr], src[i:i+mr])
			o += mr * kc
		}
	}
	if full < mcur {
		d := dst[o : o+mr]
		copy(d, src[full:])
		clear(d[mcur-full:])
	}
}

// packBRows packs rows [p0, p0+np) and columns [j0, j0+ncur) of a
// non-transposed B into the panels of dst (panel jp holds kc groups of nr
// values, zero-padded past ncur); pOff is the row of the first one within
// the kc rows of each panel.
func packBRows[T float](b []T, ldb, p0, np, pOff, kc, j0, ncur, nr int, dst []T) {
	if b32, ok := any(b).([]float32); ok && nr == 16 {
		packBRows16F32(b32, ldb, p0, np, pOff, kc, j0, ncur, any(dst).([]float32))
		return
	}
	for p := 0; p < np; p++ {
		// Row p of B spreads over the panels as a row of Aᵀ does.
		spreadRow(dst, b[(p0+p)*ldb+j0:(p0+p)*ldb+j0+ncur], pOff+p, kc, nr)
	}
}

// packATRows6F32 is packATRows for float32 and mr = 6, with copies of
// concrete array types, which the compiler inlines (generic ones call
// memmove).
func packATRows6F32(a []float32, lda, p0, kc, i0, mcur int, dst []float32) {
	full := mcur / 6 * 6
	start := 0 // rows packed in assembly
	if packATRows6Asm != nil && full > 0 {
		// The Go loop below took up to a third of the time of the weight
		// gradients (k = 2048, A transposed) on 2 Zen 4 threads.
		packATRows6Asm(a, lda, p0*lda+i0, kc, full/6, dst)
		start = full
	}
	for p := 0; p < kc; p++ {
		src := a[(p0+p)*lda+i0 : (p0+p)*lda+i0+mcur]
		o := p*6 + start*kc
		for i := start; i < full; i += 6 {
			d, s := (*[6]float32)(dst[o:o+6]), (*[6]float32)(src[i:i+6])
			d[0], d[1], d[2], d[3], d[4], d[5] = s[0], s[1], s[2], s[3], s[4], s[5]
			o += 6 * kc
		}
		if full < mcur {
			d := dst[o : o+6]
			copy(d, src[full:])
			clear(d[mcur-full:])
		}
	}
}

// packBRows16F32 is packBRows for float32 and nr = 16.
func packBRows16F32(b []float32, ldb, p0, np, pOff, kc, j0, ncur int, dst []float32) {
	full := ncur / 16 * 16
	for p := 0; p < np; p++ {
		src := b[(p0+p)*ldb+j0 : (p0+p)*ldb+j0+ncur]
		o := (pOff + p) * 16
		for j := 0; j < full; j += 16 {
			*(*[16]float32)(dst[o : o+16]) = *(*[16]float32)(src[j : j+16])
			o += 16 * kc
		}
		if full < ncur {
			d := dst[o : o+16]
			copy(d, src[full:])
			clear(d[ncur-full:])
		}
	}
}

// packRows6F32, if not nil, is packRows6 for float32 in assembly (set at
// start-up where the CPU runs it).
var packRows6F32 func(x []float32, ld, off, kc int, dst []float32)

// packATRows6Asm, if not nil, packs the full panels of packATRows6F32 in
// assembly: dst[ip*6*kc+6*p+r] = x[off+p*lda+6*ip+r], ip < panels.
var packATRows6Asm func(x []float32, lda, off, kc, panels int, dst []float32)

// packRows6 interleaves 6 rows of length kc, starting at x[off] with stride
// ld, into dst: dst[6*p+i] = row i [p].
func packRows6[T float](x []T, ld, off, kc int, dst []T) {
	r0 := x[off : off+kc]
	r1 := x[off+ld : off+ld+kc]
	r2 := x[off+2*ld : off+2*ld+kc]
	r3 := x[off+3*ld : off+3*ld+kc]
	r4 := x[off+4*ld : off+4*ld+kc]
	r5 := x[off+5*ld : off+5*ld+kc]
	dst = dst[:6*kc]
	for p := range r0 {
		d := dst[6*p : 6*p+6 : 6*p+6]
		d[0], d[1], d[2], d[3], d[4], d[5] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p]
	}
}

// packRows4 is packRows6 for 4 rows.
func packRows4[T float](x []T, ld, off, kc int, dst []T) {
	r0 := x[off : off+kc]
	r1 := x[off+ld : off+ld+kc]
	r2 := x[off+2*ld : off+2*ld+kc]
	r3 := x[off+3*ld : off+3*ld+kc]
	dst = dst[:4*kc]
	for p := range r0 {
		d := dst[4*p : 4*p+4 : 4*p+4]
		d[0], d[1], d[2], d[3] = r0[p], r1[p], r2[p], r3[p]
	}
}

// scaleC sets C = beta*C (C = 0 when beta is 0, ignoring NaNs in C).
func scaleC[T float](m, n int, beta T, c []T, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// kernelGo4x4 is the portable micro-kernel (mr = nr = 4).
func kernelGo4x4[T float](k int, a, b, c []T, ldc int, alpha, beta T, beta0 bool) {
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 T
	a = a[:4*k]
	b = b[:4*k]
	for len(a) >= 4 && len(b) >= 4 {
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		a, b = a[4:], b[4:]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	store4(c[0:4:4], c00, c01, c02, c03, alpha, beta, beta0)
	store4(c[ldc:ldc+4:ldc+4], c10, c11, c12, c13, alpha, beta, beta0)
	store4(c[2*ldc:2*ldc+4:2*ldc+4], c20, c21, c22, c23, alpha, beta, beta0)
	store4(c[3*ldc:3*ldc+4:3*ldc+4], c30, c31, c32, c33, alpha, beta, beta0)
}

func store4[T float](c []T, v0, v1, v2, v3, alpha, beta T, beta0 bool) {
	if beta0 {
		c[0], c[1], c[2], c[3] = alpha*v0, alpha*v1, alpha*v2, alpha*v3
		return
	}
	c[0] = alpha*v0 + beta*c[0]
	c[1] = alpha*v1 + beta*c[1]
	c[2] = alpha*v2 + beta*c[2]
	c[3] = alpha*v3 + beta*c[3]
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
func roundUp(a, b int) int { return ceilDiv(a, b) * b }
