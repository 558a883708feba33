package cpu

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"unsafe"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Convolutions are matrix products over the im2col matrix col(x) of the
// input ([C*KH*KW, OH*OW] per image: row (c, kh, kw), column (oh, ow) holds
// x[c, oh*SH-PH+kh*DH, ow*SW-PW+kw*DW], zero in the padding), per group:
//
//	forward      y     = W · col(x)
//	weight grad  W̄     = ȳ · col(x)ᵀ
//	input grad   x̄     = col2im(Wᵀ · ȳ)      (strided convolutions)
//	             x̄     = conv(ȳ, W̃)           (stride 1: a convolution of ȳ
//	                                            with W transposed and flipped)
//
// col(x) is never written out: the GEMM's packing of its B operand reads the
// input directly (blas.SgemmFunc with a convPacker), so there is no im2col
// buffer and the packed panels are built in cache. Images are taken a chunk
// at a time, side by side as the columns of one product, so that the deep
// layers of a network, whose images have few output positions each, still
// make products wide enough to run at full speed; a chunk's output goes
// through a workspace buffer into the [N, K, OH, OW] layout. Strided input
// gradients materialize a chunk of Wᵀ·ȳ and scatter it with col2im.

func init() {
	Floats[*prim.Conv2dOp](convForwardKernel[float32], convForwardKernel[float64])
	Floats[*prim.Conv2dBackwardInput](convInputGradKernel[float32], convInputGradKernel[float64])
	Floats[*prim.Conv2dBackwardWeight](convWeightGradKernel[float32], convWeightGradKernel[float64])
	RegisterWorkspace[*prim.Conv2dOp](convWorkspace)
	RegisterWorkspace[*prim.Conv2dBackwardInput](convWorkspace)
	RegisterWorkspace[*prim.Conv2dBackwardWeight](convWorkspace)
}

// convNodeGeom returns the forward geometry of any of the three conv ops
// from the shapes of its node's inputs.
func convNodeGeom(n *trace.Node, in0, in1 tensor.Shape) (prim.ConvGeom, error) {
	return convOpGeom(n.Op, in0, in1)
}

// convOpGeom is convNodeGeom for op o.
func convOpGeom(op trace.Op, in0, in1 tensor.Shape) (prim.ConvGeom, error) {
	switch o := op.(type) {
	case *prim.Conv2dOp:
		return prim.ConvGeometry(in0, in1, o.Opts)
	case *prim.Conv2dBackwardInput:
		return o.Geom(in1)
	case *prim.Conv2dBackwardWeight:
		return o.Geom(in1)
	}
	return prim.ConvGeom{}, fmt.Errorf("cpu: %T is not a convolution", op)
}

// convTargetCols is the number of output positions (columns of the product)
// a chunk of images aims for: enough that packing the weights is a small
// part of each product and the micro-kernel's panels are full.
const convTargetCols = 1024

// convChunk is the number of images per chunk for a geometry with p output
// positions per image.
func convChunk(n, p int) int {
	if p <= 0 {
		return 1
	}
	return max(1, min(n, (convTargetCols+p-1)/p))
}

// convWgradChunk is the number of images per chunk of the implicit-GEMM
// weight gradient: convChunk's, or for gathered images of at least
// convTargetCols positions (a ResNet's strided stem) up to 4 times as many
// positions, within a gathered ȳ of 1 MiB: each chunk is one product of
// few rows and columns (K by C*KH*KW), whose fixed costs (splitting it
// across threads, packing its short A) one image does not repay (resnet18's
// stem: 1.1 to 2 times faster with two threads; the same with one).
func convWgradChunk(g prim.ConvGeom) int {
	p := g.OH * g.OW
	nb := convChunk(g.N, p)
	if nb == 1 && p > 0 && convGatherOK(convFlat(g)) {
		nb = max(1, min(g.N, 4*convTargetCols/p, (1<<18)/max(1, g.K*p)))
	}
	return nb
}

// convTransposed is the geometry of the stride-1 input gradient as a
// convolution of ȳ ([N, K, OH, OW]) with the transposed weight (C output
// channels): x̄[c, ih, iw] = Σ W[k, c, kh, kw] ȳ[k, ih+PH-kh*DH, iw+PW-kw*DW],
// which is a convolution with padding -PH and dilation -DH (the packing
// only needs window offsets, whatever their sign).
func convTransposed(g prim.ConvGeom) prim.ConvGeom {
	return prim.ConvGeom{N: g.N, C: g.K, H: g.OH, W: g.OW, K: g.C, KH: g.KH, KW: g.KW, OH: g.H, OW: g.W,
		SH: 1, SW: 1, PH: -g.PH, PW: -g.PW, DH: -g.DH, DW: -g.DW, Groups: g.Groups}
}

// convInputGeom is the convolution the stride-1 input gradient of g is
// computed as, and whether its weight is flipped: of ȳ padded by
// (KH-1)*DH-PH rows and (KW-1)*DW-PW columns with the flipped weight,
// when those paddings are not negative (a forward convolution like any
// other), else convTransposed's.
func convInputGeom(g prim.ConvGeom) (gt prim.ConvGeom, flip bool) {
	qh, qw := (g.KH-1)*g.DH-g.PH, (g.KW-1)*g.DW-g.PW
	if qh < 0 || qw < 0 {
		return convTransposed(g), false
	}
	return prim.ConvGeom{N: g.N, C: g.K, H: g.OH, W: g.OW, K: g.C, KH: g.KH, KW: g.KW, OH: g.H, OW: g.W,
		SH: 1, SW: 1, PH: qh, PW: qw, DH: g.DH, DW: g.DW, Groups: g.Groups}, true
}

// convInputGradDirect reports whether the input gradient is computed as a
// convolution of ȳ (stride 1) rather than with col2im. For images with few
// positions (deep layers) col2im is cheaper: the convolution of ȳ handles
// the weight three times (transposed copy, packing) for a product with few
// columns, where col2im only scatters C*KH*KW values per column, fewer as
// long as a chunk has fewer than 2K columns.
func convInputGradDirect(g prim.ConvGeom) bool {
	if g.SH != 1 || g.SW != 1 {
		return false
	}
	p := g.OH * g.OW
	return convChunk(g.N, p)*p >= 2*g.K || !convWeightTransposed(g)
}

// convWeightTransposed reports whether the direct input gradient needs the
// weight permuted to [C, K/groups, KH, KW] (else, for 1x1 kernels, the
// product reads W transposed in place).
func convWeightTransposed(g prim.ConvGeom) bool { return g.KH*g.KW > 1 }

// convPointwiseInPlace reports whether pointwise convolution g runs as one
// sgemm an image, reading the image and writing its output in place,
// rather than on chunks of images side by side (which packs them by the
// general packer and copies the output out of a workspace): from images
// of 256 positions on, for at least 64 channels in and out (ResNet-152's
// 16×16 1×1 convolutions, one thread, Zen 4: 1.2-1.3× faster where the
// output has 512 channels, the same where it has 128; at 8×8 the chunks
// were faster, and direct kernel is slower than either at 32×32).
func convPointwiseInPlace(g prim.ConvGeom) bool {
	return g.Pointwise() && g.H*g.W >= 256 && min(g.C, g.K)/g.Groups >= 64
}

// convForwardChunk is the number of images per chunk of convForward.
func convForwardChunk(g prim.ConvGeom) int {
	if convPointwiseInPlace(g) {
		return 1
	}
	return convChunk(g.N, g.OH*g.OW)
}

// convForwardScratch is the workspace (elements) of a forward convolution:
// the output of one chunk, when chunks hold more than one image.
func convForwardScratch(g prim.ConvGeom) int {
	p := g.OH * g.OW
	nb := convForwardChunk(g)
	n := convGatherScratch(convFlat(g), nb)
	if nb > 1 {
		n += g.K * nb * p
	}
	return n
}

// convWorkspace is the scratch a conv node needs. It depends on the node's
// shapes and dtypes only.
func convWorkspace(n *trace.Node) int64 {
	if convMixedNode(n) {
		return convMixedWorkspace(n)
	}
	return convFloatWorkspace(n)
}

// convFloatWorkspace is convWorkspace for float operands (of a mixed
// node: of its float32 kernel, on widened operands).
func convFloatWorkspace(n *trace.Node) int64 {
	g, err := convNodeGeom(n, n.Inputs[0].Shape(), n.Inputs[1].Shape())
	if err != nil {
		return 0
	}
	p := g.OH * g.OW
	nb := convChunk(g.N, p)
	f32 := n.Outputs[0].DType() == tensor.Float32 // Winograd is float32 only
	var elems int
	switch n.Op.(type) {
	case *prim.Conv2dOp:
		elems = convForwardScratch(g)
		if d, ok := directForward(g); ok {
			elems = max(elems, d.scratch())
		}
		if w, ok := winogradFor(g); ok && f32 {
			elems = max(elems, w.scratch())
		}
		if ct, ok := convTapsPlan(g); ok && f32 {
			elems = max(elems, ct.bScratch(false))
		}
		if g2, ok := s2dGeom(g); ok && f32 {
			d, _ := directForward(g2)
			elems = max(elems, d.scratch())
		}
	case *prim.Conv2dBackwardWeight:
		nb := convWgradChunk(g)
		if nb > 1 {
			elems = g.K * nb * p // ȳ of a chunk, gathered
		}
		elems += convGatherScratch(convFlat(g), nb)
		if d, ok := directWgrad(g); ok {
			elems = max(elems, d.wgradScratch(g.N))
		}
		if w, ok := winogradWgrad(g); ok && f32 {
			elems = max(elems, w.scratch())
		}
	case *prim.Conv2dBackwardInput:
		if convInputGradDirect(g) {
			gt, _ := convInputGeom(g)
			elems = convForwardScratch(gt)
			if convWeightTransposed(g) {
				elems += g.K * (g.C / g.Groups) * g.KH * g.KW
			}
		} else {
			elems = g.ColRows() * nb * p
			if nb > 1 {
				elems += g.K * nb * p
			}
		}
		if d, ok := directInputGrad(g); ok {
			elems = max(elems, d.scratch())
		}
		if w, ok := winogradInputGrad(g); ok && f32 {
			elems = max(elems, w.scratch())
		}
		if ct, ok := convTapsPlan(g); ok && f32 {
			elems = max(elems, ct.bScratch(true))
		}
	}
	return int64(elems) * int64(n.Outputs[0].DType().Size())
}

// convScratch views count elements of ws starting at element off as []T.
func convScratch[T Float](ws []byte, off, count int) []T {
	if count == 0 {
		return nil
	}
	var z T
	es := int(unsafe.Sizeof(z))
	if (off+count)*es > len(ws) {
		panic(fmt.Sprintf("cpu: conv workspace of %d bytes is too small for %d elements", len(ws), off+count))
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&ws[off*es])), count)
}

// gemmFunc is gemm with op(B) produced by a packing function.
func gemmFunc[T Float](pool *parallel.Pool, transA bool, m, n, k int, a []T, lda int, pack blas.PackFunc[T], byRows bool, beta T, c []T, ldc int) {
	switch a := any(a).(type) {
	case []float32:
		p := blas.Packer[float32]{Pack: any(pack).(blas.PackFunc[float32]), ByRows: byRows}
		blas.SgemmFunc(transA, m, n, k, 1, a, lda, p, float32(beta), any(c).([]float32), ldc, pool)
	case []float64:
		p := blas.Packer[float64]{Pack: any(pack).(blas.PackFunc[float64]), ByRows: byRows}
		blas.DgemmFunc(transA, m, n, k, 1, a, lda, p, float64(beta), any(c).([]float64), ldc, pool)
	}
}

// gemmBeta is gemm with C = op(A)op(B) + beta*C.
func gemmBeta[T Float](pool *parallel.Pool, transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	switch a := any(a).(type) {
	case []float32:
		blas.Sgemm(transA, transB, m, n, k, 1, a, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc, pool)
	case []float64:
		blas.Dgemm(transA, transB, m, n, k, 1, a, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc, pool)
	}
}

// convSeg is a run of columns of a chunk's im2col matrix that lie in one
// output row of one image: columns [j, j+n) are output positions (oh,
// ow0..ow0+n-1), whose windows start at input row ih0 and column iw0 (for
// kh = kw = 0); xoff is the offset in x of that input position (which may
// lie outside the image).
type convSeg struct {
	j, n, ih0, iw0 int32
	xoff           int
}

var (
	convSegPool = sync.Pool{New: func() any { return new([]convSeg) }}
	convTiles   sync.Pool // *[]T scratch panels for packWeightGrad
)

// getTile returns a pooled scratch slice of at least n elements.
func getTile[T Float](n int) *[]T {
	if p, ok := convTiles.Get().(*[]T); ok && len(*p) >= n {
		return p
	}
	t := make([]T, n)
	return &t
}

// convSegments splits the columns of the chunk of nb images starting at
// image img0 into output rows.
func convSegments(g prim.ConvGeom, img0, nb int, buf []convSeg) []convSeg {
	segs := buf[:0]
	j := 0
	for img := img0; img < img0+nb; img++ {
		for oh := 0; oh < g.OH; oh++ {
			ih0, iw0 := oh*g.SH-g.PH, -g.PW
			segs = append(segs, convSeg{j: int32(j), n: int32(g.OW), ih0: int32(ih0), iw0: int32(iw0),
				xoff: img*g.C*g.H*g.W + ih0*g.W + iw0})
			j += g.OW
		}
	}
	return segs
}

// convFlat returns g with the output positions of an image as one row when
// the convolution is pointwise (1x1, stride 1, unpadded): the same
// products, in longer runs.
func convFlat(g prim.ConvGeom) prim.ConvGeom {
	if g.Pointwise() {
		g.W, g.H = g.H*g.W, 1
		g.OW, g.OH = g.OH*g.OW, 1
	}
	return g
}

// convPacker produces panels of the im2col matrix of a chunk of images of
// x (segs), rows from rowBase on (the first row of a group).
type convPacker[T Float] struct {
	g       prim.ConvGeom
	x       []T
	rowBase int
	segs    []convSeg
}

// span returns the segments overlapping columns [lo, hi).
func (cp *convPacker[T]) span(lo, hi int) []convSeg {
	s0 := sort.Search(len(cp.segs), func(i int) bool { return int(cp.segs[i].j+cp.segs[i].n) > lo })
	s1 := s0
	for s1 < len(cp.segs) && int(cp.segs[s1].j) < hi {
		s1++
	}
	return cp.segs[s0:s1]
}

// rowOffsets splits row r of the im2col matrix into the kernel offsets it
// reads at (dh, dw) and the offset of its channel and kernel position in x.
func (cp *convPacker[T]) rowOffsets(r int) (dh, dw, add int) {
	g := &cp.g
	khw := g.KH * g.KW
	c, kk := r/khw, r%khw
	dh, dw = kk/g.KW*g.DH, kk%g.KW*g.DW
	return dh, dw, c*g.H*g.W + dh*g.W + dw
}

// fill writes columns [s.j+skip, s.j+skip+len(d)) of an im2col row (kernel
// offsets dh, dw, x offset add) into d.
func (cp *convPacker[T]) fill(d []T, s *convSeg, skip, dh, dw, add int) {
	g := &cp.g
	if uint(int(s.ih0)+dh) >= uint(g.H) {
		clear(d)
		return
	}
	n := len(d)
	iw := int(s.iw0) + skip*g.SW + dw
	src := s.xoff + add + skip*g.SW
	if g.SW == 1 {
		lo, hi := max(0, -iw), min(n, g.W-iw)
		if lo >= hi {
			clear(d)
			return
		}
		if src >= 0 && src+n <= len(cp.x) {
			// Copy the whole run, reading past the row's ends into the
			// neighbouring rows, then zero the padding: one copy per run.
			copyRun(d, cp.x[src:src+n])
			for q := 0; q < lo; q++ {
				d[q] = 0
			}
			for q := hi; q < n; q++ {
				d[q] = 0
			}
			return
		}
		clear(d[:lo])
		copy(d[lo:hi], cp.x[src+lo:src+hi])
		clear(d[hi:])
		return
	}
	for q := range d {
		if w := iw + q*g.SW; uint(w) < uint(g.W) {
			d[q] = cp.x[src+q*g.SW]
		} else {
			d[q] = 0
		}
	}
}

// copyRun is copy(d, s) for len(d) == len(s), inline for the short runs of
// packing, where a call to memmove would cost more than the copy.
func copyRun[T Float](d, s []T) {
	if d32, ok := any(d).([]float32); ok {
		copyRunF32(d32, any(s).([]float32))
		return
	}
	copy(d, s[:len(d)])
}

// copyRunF32 is copyRun for float32, with fixed-size copies the compiler
// does inline (a generic [8]T copy becomes a call to memmove, and so does
// an array copy between two pointers, which may overlap: through a local
// the 16 values move in vector registers, 1.7× faster).
func copyRunF32(d, s []float32) {
	s = s[:len(d)]
	for len(d) >= 16 {
		v := *(*[16]float32)(s)
		*(*[16]float32)(d) = v
		d, s = d[16:], s[16:]
	}
	if len(d) >= 8 {
		d8, s8 := (*[8]float32)(d), (*[8]float32)(s)
		d8[0], d8[1], d8[2], d8[3] = s8[0], s8[1], s8[2], s8[3]
		d8[4], d8[5], d8[6], d8[7] = s8[4], s8[5], s8[6], s8[7]
		d, s = d[8:], s[8:]
	}
	for i := range d {
		d[i] = s[i]
	}
}

// putRun writes src (zeros when src is nil), which continues an im2col row
// at block column jr, into the panels of dst (panel stride pstride, row
// offset rowOff within a panel).
func putRun[T Float](dst []T, jr, n, rowOff, pstride, nr int, src []T) {
	lane := jr % nr
	o := jr/nr*pstride + rowOff + lane
	for n > 0 {
		m := min(nr-lane, n)
		d := dst[o : o+m]
		switch {
		case src == nil:
			clear(d)
		default:
			copyRun(d, src[:m])
		}
		if src != nil {
			src = src[m:]
		}
		n -= m
		o += pstride - lane
		lane = 0
	}
}

// putZero zeros elements [lo, hi) of a run that starts at block column jr.
func putZero[T Float](dst []T, jr, lo, hi, rowOff, pstride, nr int) {
	for q := lo; q < hi; q++ {
		c := jr + q
		dst[c/nr*pstride+rowOff+c%nr] = 0
	}
}

// packForward is a blas.PackFunc for op(B) = col(x): rows are (c, kh, kw),
// columns output positions. It is meant to be called by rows (each row is
// contiguous runs of x).
func (cp *convPacker[T]) packForward(dst []T, p0, kc, j0, nc, r0, r1, jpLo, jpHi, nr int) {
	g := &cp.g
	jLo, jHi := j0+jpLo*nr, min(j0+jpHi*nr, j0+nc)
	segs := cp.span(jLo, jHi)
	pstride := nr * kc
	var buf [256]T
	for p := r0; p < r1; p++ {
		dh, dw, add := cp.rowOffsets(cp.rowBase + p0 + p)
		rowOff := p * nr
		for i := range segs {
			s := &segs[i]
			a, b := max(int(s.j), jLo), min(int(s.j+s.n), jHi)
			skip, n, jr := a-int(s.j), b-a, a-j0
			if uint(int(s.ih0)+dh) >= uint(g.H) {
				putRun(dst, jr, n, rowOff, pstride, nr, nil)
				continue
			}
			if g.SW != 1 {
				for q := 0; q < n; q += len(buf) {
					m := min(len(buf), n-q)
					cp.fill(buf[:m], s, skip+q, dh, dw, add)
					putRun(dst, jr+q, m, rowOff, pstride, nr, buf[:m])
				}
				continue
			}
			iw := int(s.iw0) + skip + dw
			src := s.xoff + add + skip
			lo, hi := max(0, -iw), min(n, g.W-iw)
			switch {
			case lo >= hi:
				putRun(dst, jr, n, rowOff, pstride, nr, nil)
			case src >= 0 && src+n <= len(cp.x):
				// The whole run, then zeros over what it read of the
				// neighbouring rows.
				putRun(dst, jr, n, rowOff, pstride, nr, cp.x[src:src+n])
				putZero(dst, jr, 0, lo, rowOff, pstride, nr)
				putZero(dst, jr, hi, n, rowOff, pstride, nr)
			default:
				putRun(dst, jr, lo, rowOff, pstride, nr, nil)
				putRun(dst, jr+lo, hi-lo, rowOff, pstride, nr, cp.x[src+lo:src+hi])
				putRun(dst, jr+hi, n-hi, rowOff, pstride, nr, nil)
			}
		}
	}
	// Lanes past the last column of a partial last panel.
	if jHi == j0+nc && nc%nr != 0 {
		jp := (nc - 1) / nr
		pan := dst[jp*pstride : (jp+1)*pstride]
		for p := r0; p < r1; p++ {
			clear(pan[p*nr+nc%nr : (p+1)*nr])
		}
	}
}

// packWeightGrad is a blas.PackFunc for op(B) = col(x)ᵀ: rows are output
// positions, columns (c, kh, kw). Each panel's nr rows of col(x) are
// written to a tile, which is then transposed into the panel. It is meant
// to be called by panels (r0, r1 = 0, kc).
func (cp *convPacker[T]) packWeightGrad(dst []T, p0, kc, j0, nc, r0, r1, jpLo, jpHi, nr int) {
	if r0 != 0 || r1 != kc {
		panic("cpu: conv weight-gradient packing split by rows")
	}
	pEnd := p0 + kc
	segs := cp.span(p0, pEnd)
	tp := getTile[T](nr * kc)
	defer convTiles.Put(tp)
	tl := (*tp)[:nr*kc]
	for jp := jpLo; jp < jpHi; jp++ {
		for l := 0; l < nr; l++ {
			row := tl[l*kc : (l+1)*kc]
			rr := jp*nr + l
			if rr >= nc {
				clear(row)
				continue
			}
			dh, dw, add := cp.rowOffsets(cp.rowBase + j0 + rr)
			for i := range segs {
				s := &segs[i]
				a, b := max(int(s.j), p0), min(int(s.j+s.n), pEnd)
				cp.fill(row[a-p0:b-p0], s, a-int(s.j), dh, dw, add)
			}
		}
		blas.PackTransposed(tl, kc, kc, dst[jp*nr*kc:(jp+1)*nr*kc])
	}
}

// convForward computes y = conv(x, w) + bias for geometry g, with ws of at
// least convForwardScratch(g) elements. With transW, each group's weight
// matrix is stored transposed ([C/groups*KH*KW, K/groups]).
func convForward[T Float](pool *parallel.Pool, g prim.ConvGeom, x, w, bias, y, ws []T, transW bool) {
	g = convFlat(g)
	P := g.OH * g.OW
	kg, cg := g.K/g.Groups, g.C/g.Groups
	kk := cg * g.KH * g.KW
	nb := convForwardChunk(g)
	segp := convSegPool.Get().(*[]convSeg)
	defer convSegPool.Put(segp)
	for n0 := 0; n0 < g.N; n0 += nb {
		cnt := min(nb, g.N-n0)
		cols := cnt * P
		*segp = convSegments(g, n0, cnt, *segp)
		// The chunk's product [K, cols]: straight into y for one image.
		out, ldo := y[n0*g.K*P:], P
		if cnt > 1 {
			out, ldo = ws[:g.K*cols], cols
		}
		xp := ws[g.K*nb*P*min(1, nb-1):]
		for gi := 0; gi < g.Groups; gi++ {
			lda := kk
			if transW {
				lda = kg
			}
			if g.Pointwise() && cnt == 1 {
				// col(x) is the image itself.
				xi := x[(n0*g.C+gi*cg)*P:]
				gemmBeta(pool, transW, false, kg, cols, kk, w[gi*kg*kk:], lda, xi, P, 0, out[gi*kg*ldo:], ldo)
				continue
			}
			if convGatherOK(g) {
				bp := getInt32s(kk + cols)
				ga := newConvGather(pool, g, x, n0, cnt, gi, xp, gi == 0, *bp)
				gemmFunc(pool, transW, kg, cols, kk, w[gi*kg*kk:], lda, ga.packForward, true, 0, out[gi*kg*ldo:], ldo)
				convGatherPool.Put(bp)
				continue
			}
			cp := &convPacker[T]{g: g, x: x, rowBase: gi * kk, segs: *segp}
			gemmFunc(pool, transW, kg, cols, kk, w[gi*kg*kk:], lda, cp.packForward, true, 0, out[gi*kg*ldo:], ldo)
		}
		if cnt == 1 && bias == nil {
			continue
		}
		pool.For(g.K, max(1, 16384/cols), func(k0, k1 int) {
			for k := k0; k < k1; k++ {
				var b T
				if bias != nil {
					b = bias[k]
				}
				for i := 0; i < cnt; i++ {
					dst := y[((n0+i)*g.K+k)*P:][:P]
					src := out[k*ldo+i*P:][:P]
					if cnt == 1 {
						for j := range dst {
							dst[j] += b
						}
						continue
					}
					for j, v := range src {
						dst[j] = v + b
					}
				}
			}
		})
	}
}

func convForwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	if convMixed(in) {
		return convMixedKernel(pool, n, in, out, ws, convForwardKernel[float32])
	}
	g, err := convNodeGeom(n, in[0].Shape, in[1].Shape)
	if err != nil {
		return err
	}
	var bias []T
	if len(in) == 3 {
		bias = slice[T](in[2])
	}
	x, w, y := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	if x32, ok := any(x).([]float32); ok {
		b32, _ := any(bias).([]float32)
		if wg, ok := winogradFor(g); ok {
			wg.forward(pool, x32, any(w).([]float32), b32, any(y).([]float32), convScratch[float32](ws, 0, wg.scratch()))
			return nil
		}
		if d, ok := directForward(g); ok {
			if convDirectForward(pool, g, x32, any(w).([]float32), b32, any(y).([]float32), convScratch[float32](ws, 0, d.scratch())) {
				return nil
			}
		}
		if g2, ok := s2dGeom(g); ok {
			if d, _ := directForward(g2); convS2DForward(pool, g, x32, any(w).([]float32), b32, any(y).([]float32), convScratch[float32](ws, 0, d.scratch())) {
				return nil
			}
		}
		if ct, ok := convTapsPlan(g); ok {
			ct.forward(pool, x32, any(w).([]float32), b32, any(y).([]float32), convScratch[float32](ws, 0, ct.bScratch(false)))
			return nil
		}
	}
	convForward(pool, g, x, w, bias, y, convScratch[T](ws, 0, convForwardScratch(g)), false)
	return nil
}

// gatherChunk copies rows of images [n0, n0+cnt) of t ([N, K, P]) side by
// side into dst ([K, cnt*P]).
func gatherChunk[T any](pool *parallel.Pool, t []T, K, P, n0, cnt int, dst []T) {
	chunkRows(pool, t, K, P, n0, cnt, dst, true)
}

// scatterChunk is gatherChunk's inverse: src's rows into images [n0,
// n0+cnt) of t.
func scatterChunk[T any](pool *parallel.Pool, t []T, K, P, n0, cnt int, src []T) {
	chunkRows(pool, t, K, P, n0, cnt, src, false)
}

// chunkRows copies between images [n0, n0+cnt) of t and chunk ([K,
// cnt*P]): into chunk where gather, else out of it.
func chunkRows[T any](pool *parallel.Pool, t []T, K, P, n0, cnt int, chunk []T, gather bool) {
	cols := cnt * P
	pool.For(K, max(1, 16384/cols), func(k0, k1 int) {
		for k := k0; k < k1; k++ {
			for i := 0; i < cnt; i++ {
				c, img := chunk[k*cols+i*P:][:P], t[((n0+i)*K+k)*P:][:P]
				if gather {
					copy(c, img)
				} else {
					copy(img, c)
				}
			}
		}
	})
}

func convInputGradKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	if convMixed(in) {
		return convMixedKernel(pool, n, in, out, ws, convInputGradKernel[float32])
	}
	g, err := convNodeGeom(n, in[0].Shape, in[1].Shape)
	if err != nil {
		return err
	}
	gy, w, gx := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	kg, cg := g.K/g.Groups, g.C/g.Groups
	if gy32, ok := any(gy).([]float32); ok {
		if wi, ok := winogradInputGrad(g); ok {
			wi.inputGrad(pool, gy32, any(w).([]float32), any(gx).([]float32), convScratch[float32](ws, 0, wi.scratch()))
			return nil
		}
		if d, ok := directInputGrad(g); ok {
			if convDirectInputGrad(pool, g, gy32, any(w).([]float32), any(gx).([]float32), convScratch[float32](ws, 0, d.scratch())) {
				return nil
			}
		}
		if ct, ok := convTapsPlan(g); ok {
			ct.inputGrad(pool, gy32, any(w).([]float32), any(gx).([]float32), convScratch[float32](ws, 0, ct.bScratch(true)))
			return nil
		}
	}
	if convInputGradDirect(g) {
		gt, flip := convInputGeom(g)
		if !convWeightTransposed(g) {
			// 1x1: group gi's weight [kg, cg] is the transposed matrix.
			convForward(pool, gt, gy, w, nil, gx, convScratch[T](ws, 0, convForwardScratch(gt)), true)
			return nil
		}
		// wt[gi][c][k][kh][kw] = W[gi*kg+k][c][kh][kw], or with kh, kw
		// mirrored when flip.
		khw := g.KH * g.KW
		wt := convScratch[T](ws, 0, len(w))
		pool.For(g.K, max(1, 4096/(cg*khw)), func(k0, k1 int) {
			for k := k0; k < k1; k++ {
				gi, kl := k/kg, k%kg
				for c := 0; c < cg; c++ {
					src := w[(k*cg+c)*khw:][:khw]
					dst := wt[((gi*cg+c)*kg+kl)*khw:][:khw]
					if flip {
						for i, v := range src {
							dst[khw-1-i] = v
						}
					} else {
						copy(dst, src)
					}
				}
			}
		})
		convForward(pool, gt, gy, wt, nil, gx, convScratch[T](ws, len(w), convForwardScratch(gt)), false)
		return nil
	}
	P := g.OH * g.OW
	kk := cg * g.KH * g.KW
	nb := convChunk(g.N, P)
	col := convScratch[T](ws, 0, g.ColRows()*nb*P)
	var gyc []T
	if nb > 1 {
		gyc = convScratch[T](ws, len(col), g.K*nb*P)
	}
	for n0 := 0; n0 < g.N; n0 += nb {
		cnt := min(nb, g.N-n0)
		cols := cnt * P
		src, lds := gy[n0*g.K*P:], P
		if cnt > 1 {
			gatherChunk(pool, gy, g.K, P, n0, cnt, gyc)
			src, lds = gyc, cols
		}
		for gi := 0; gi < g.Groups; gi++ {
			gemm(pool, true, false, kk, cols, kg, w[gi*kg*kk:], kk, src[gi*kg*lds:], lds, col[gi*kk*cols:], cols)
		}
		col2im(pool, g, col, cols, cnt, gx[n0*g.C*g.H*g.W:][:cnt*g.C*g.H*g.W])
	}
	return nil
}

func convWeightGradKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	if convMixed(in) {
		return convMixedKernel(pool, n, in, out, ws, convWeightGradKernel[float32])
	}
	g, err := convNodeGeom(n, in[0].Shape, in[1].Shape)
	if err != nil {
		return err
	}
	gy, x, gw := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	if g.N == 0 {
		clear(gw)
		return nil
	}
	if gy32, ok := any(gy).([]float32); ok {
		if wg, ok := winogradWgrad(g); ok {
			wg.weightGrad(pool, gy32, any(x).([]float32), any(gw).([]float32), convScratch[float32](ws, 0, wg.scratch()))
			return nil
		}
		if d, ok := directWgrad(g); ok {
			if convDirectWgrad(pool, g, gy32, any(x).([]float32), any(gw).([]float32), convScratch[float32](ws, 0, d.wgradScratch(g.N))) {
				return nil
			}
		}
	}
	var gyc []T
	nb := convWgradChunk(g)
	if nb > 1 {
		gyc = convScratch[T](ws, 0, g.K*nb*g.OH*g.OW)
	}
	xp := convScratch[T](ws, len(gyc), convGatherScratch(convFlat(g), nb))
	convWeightGrad(pool, g, gy, x, gw, gyc, xp)
	return nil
}

// convWeightGrad computes the weight gradient by implicit GEMM over chunks
// of images; gyc holds a chunk of ȳ when chunks have more than one image,
// xp a padded chunk of x when the packing gathers.
func convWeightGrad[T Float](pool *parallel.Pool, g prim.ConvGeom, gy, x, gw, gyc, xp []T) {
	P := g.OH * g.OW
	kg, cg := g.K/g.Groups, g.C/g.Groups
	kk := cg * g.KH * g.KW
	nb := convWgradChunk(g)
	g = convFlat(g)
	segp := convSegPool.Get().(*[]convSeg)
	defer convSegPool.Put(segp)
	for n0 := 0; n0 < g.N; n0 += nb {
		cnt := min(nb, g.N-n0)
		cols := cnt * P
		*segp = convSegments(g, n0, cnt, *segp)
		src, lds := gy[n0*g.K*P:], P
		if cnt > 1 {
			gatherChunk(pool, gy, g.K, P, n0, cnt, gyc)
			src, lds = gyc, cols
		}
		var beta T
		if n0 > 0 {
			beta = 1
		}
		for gi := 0; gi < g.Groups; gi++ {
			if g.Pointwise() && cnt == 1 {
				// col(x) is the image itself.
				xi := x[(n0*g.C+gi*cg)*P:]
				gemmBeta(pool, false, true, kg, kk, cols, src[gi*kg*lds:], lds, xi, P, beta, gw[gi*kg*kk:], kk)
				continue
			}
			if convGatherOK(g) {
				bp := getInt32s(kk + cols)
				ga := newConvGather(pool, g, x, n0, cnt, gi, xp, gi == 0, *bp)
				gemmFunc(pool, false, kg, kk, cols, src[gi*kg*lds:], lds, ga.packWeightGrad, false, beta, gw[gi*kg*kk:], kk)
				convGatherPool.Put(bp)
				continue
			}
			cp := &convPacker[T]{g: g, x: x, rowBase: gi * kk, segs: *segp}
			gemmFunc(pool, false, kg, kk, cols, src[gi*kg*lds:], lds, cp.packWeightGrad, false, beta, gw[gi*kg*kk:], kk)
		}
	}
}

// convRange returns the output positions [lo, hi) whose input position
// o*s - p + off falls inside [0, in), clamped to [0, out).
func convRange(in, out, s, p, off int) (lo, hi int) {
	if a := p - off; a > 0 {
		lo = (a + s - 1) / s
	}
	b := in - 1 + p - off
	if b < 0 {
		return 0, 0
	}
	hi = min(b/s+1, out)
	lo = min(lo, hi)
	return lo, hi
}

// convGrain is how many channels one parallel task handles in col2im so
// that each does a useful amount of work.
func convGrain(g prim.ConvGeom) int {
	return max(1, 32768/max(1, g.KH*g.KW*g.OH*g.OW))
}

// col2im sets images x ([cnt, C, H, W]) to the sums of the entries of col
// (rows (c, kh, kw), cnt*OH*OW columns, image i's from column i*OH*OW on,
// row stride ld) that im2col would have read from each position. Images
// and channels are split across threads together (one image of a deep
// layer is too little work to split).
func col2im[T Float](pool *parallel.Pool, g prim.ConvGeom, col []T, ld, cnt int, x []T) {
	// (The pairs are int32 offsets.)
	if g.OW < col2imPairsOW && int64(g.KH*g.KW)*int64(ld) <= math.MaxInt32 && int64(g.H)*int64(g.W) <= math.MaxInt32 {
		col2imPairs(pool, g, col, ld, cnt, x)
		return
	}
	col2imRuns(pool, g, col, ld, cnt, x)
}

// col2imRuns is col2im by runs of output columns.
func col2imRuns[T Float](pool *parallel.Pool, g prim.ConvGeom, col []T, ld, cnt int, x []T) {
	plane := g.H * g.W
	P := g.OH * g.OW
	pool.For(cnt*g.C, convGrain(g), func(u0, u1 int) {
		for u := u0; u < u1; u++ {
			img, c := u/g.C, u%g.C
			col := col[img*P:]
			xc := x[u*plane : (u+1)*plane]
			clear(xc)
			for kh := 0; kh < g.KH; kh++ {
				ohLo, ohHi := convRange(g.H, g.OH, g.SH, g.PH, kh*g.DH)
				for kw := 0; kw < g.KW; kw++ {
					owLo, owHi := convRange(g.W, g.OW, g.SW, g.PW, kw*g.DW)
					if owLo >= owHi {
						continue
					}
					row := col[((c*g.KH+kh)*g.KW+kw)*ld:]
					iw0 := owLo*g.SW - g.PW + kw*g.DW
					for oh := ohLo; oh < ohHi; oh++ {
						s := row[oh*g.OW+owLo : oh*g.OW+owHi]
						dst := xc[(oh*g.SH-g.PH+kh*g.DH)*g.W:]
						if g.SW == 1 {
							d := dst[iw0 : iw0+len(s)]
							for i, v := range s {
								d[i] += v
							}
							continue
						}
						for i, iw := 0, iw0; i < len(s); i, iw = i+1, iw+g.SW {
							dst[iw] += s[i]
						}
					}
				}
			}
		}
	})
}

// col2imPairsOW is the output width below which col2im scatters by a list
// of (col entry, x position) pairs: there a kernel tap's runs are a few
// elements long, and the run loop's bounds cost more than its additions
// (ResNet-152's 4×4 outputs, one thread, Zen 4, interleaved: 1.02-1.25×
// faster; at 8 wide the runs were faster).
const col2imPairsOW = 8

// col2imPairs is col2im by pairs: one (col entry, x position) pair per
// valid (kernel tap, output position) of a channel, listed taps outer,
// output rows and columns inner, col2im's order of additions, so the sums
// are the same.
func col2imPairs[T Float](pool *parallel.Pool, g prim.ConvGeom, col []T, ld, cnt int, x []T) {
	plane := g.H * g.W
	P := g.OH * g.OW
	khw := g.KH * g.KW
	pp := getInt32s(2 * khw * P)
	defer convGatherPool.Put(pp)
	co, xo := (*pp)[:0:khw*P], (*pp)[khw*P:khw*P]
	for kh := 0; kh < g.KH; kh++ {
		ohLo, ohHi := convRange(g.H, g.OH, g.SH, g.PH, kh*g.DH)
		for kw := 0; kw < g.KW; kw++ {
			owLo, owHi := convRange(g.W, g.OW, g.SW, g.PW, kw*g.DW)
			for oh := ohLo; oh < ohHi; oh++ {
				for ow := owLo; ow < owHi; ow++ {
					co = append(co, int32((kh*g.KW+kw)*ld+oh*g.OW+ow))
					xo = append(xo, int32((oh*g.SH-g.PH+kh*g.DH)*g.W+ow*g.SW-g.PW+kw*g.DW))
				}
			}
		}
	}
	// Channel-major: the images of a channel read the same rows of col,
	// side by side.
	pool.For(cnt*g.C, convGrain(g), func(u0, u1 int) {
		for u := u0; u < u1; u++ {
			c, img := u/cnt, u%cnt
			src := col[c*khw*ld+img*P:]
			xc := x[(img*g.C+c)*plane:][:plane]
			clear(xc)
			for i, o := range co {
				xc[xo[i]] += src[o]
			}
		}
	})
}
