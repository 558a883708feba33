package cpu

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/headroom-ml/headroom/cpu/internal/vec"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	Floats[*prim.AttentionOp](attentionKernel[float32], attentionKernel[float64])
	Floats[*prim.AttentionBackward](attentionBackwardKernel[float32], attentionBackwardKernel[float64])
	RegisterWorkspace[*prim.AttentionOp](attentionWorkspace)
	RegisterWorkspace[*prim.AttentionBackward](attentionBackwardWorkspace)
}

const (
	// attnRowBlock is how many query rows are processed together: the
	// score block is attnRowBlock x S, never T x S.
	attnRowBlock = 64
	// attnSlots is the number of work slots, each with its own scratch, that
	// run in parallel. It is a constant so that the workspace is a function
	// of the shapes alone (the meta device plans the same bytes).
	attnSlots = 16
)

// attnGeom is the geometry of one attention node.
type attnGeom struct {
	bh, t, s, d, dv int
	br, nrb         int // rows per block, row blocks per head
	// heads is H of [B, T, H, D] operands (prim.AttentionOp.BTHD), 0 for
	// [..., T, D] ones.
	heads int
	// pack is the row width H*(2D+Dv) of packed gradients
	// (prim.AttentionBackward.Packed), else 0.
	pack int
}

// grad is where gradient i (dq, dk, dv) of head b starts in the
// backward's output i (output 0 when packed) and its row stride.
func (g attnGeom) grad(b, i int) (off, ld int) {
	rows, width := g.s, g.d
	switch i {
	case 0:
		rows = g.t
	case 2:
		width = g.dv
	}
	if g.pack == 0 {
		return g.at(b, rows, width), g.ld(width)
	}
	return (b/g.heads)*rows*g.pack + i*g.heads*g.d + (b%g.heads)*width, g.pack
}

// gradOut is the backward's output holding gradient i.
func gradOut(out []*tensor.Tensor, i int) *tensor.Tensor { return out[min(i, len(out)-1)] }

func newAttnGeom(q, k, v tensor.Shape, bthd bool) (attnGeom, error) {
	batch, t, s, d, dv, err := prim.AttentionDims(prim.HeadsFirst(q, bthd), prim.HeadsFirst(k, bthd), prim.HeadsFirst(v, bthd))
	if err != nil {
		return attnGeom{}, err
	}
	g := attnGeom{bh: batch.NumElements(), t: t, s: s, d: d, dv: dv, br: max(1, min(attnRowBlock, t))}
	if bthd {
		g.heads = batch[1]
	}
	g.nrb = (t + g.br - 1) / g.br
	return g, nil
}

// at is the offset of head b (of bh) of an operand of rows×width per
// head, whose rows are ld(width) apart: heads one after the other, or
// with BTHD, each row of a batch entry holding all its heads side by side.
func (g attnGeom) at(b, rows, width int) int {
	if g.heads == 0 {
		return b * rows * width
	}
	return (b/g.heads)*rows*g.heads*width + (b%g.heads)*width
}

// ld is the row stride of an operand of width columns per head.
func (g attnGeom) ld(width int) int {
	if g.heads == 0 {
		return width
	}
	return g.heads * width
}

// attnLayout is whether attention op op reads and writes [B, T, H, D].
func attnLayout(op trace.Op) bool {
	switch o := op.(type) {
	case *prim.AttentionOp:
		return o.BTHD
	case *prim.AttentionBackward:
		return o.BTHD
	}
	return false
}

// Forward: one unit per (head, row block); a slot holds one score block.
func (g attnGeom) fwdUnits() int     { return g.bh * g.nrb }
func (g attnGeom) fwdSlots() int     { return min(g.fwdUnits(), attnSlots) }
func (g attnGeom) fwdSlotElems() int { return g.br * g.s }

// Backward: one unit per head (its row blocks accumulate into dk and dv); a
// slot holds P and dS blocks and the dk, dv partial products.
func (g attnGeom) bwdSlots() int     { return min(g.bh, attnSlots) }
func (g attnGeom) bwdSlotElems() int { return 2*g.br*g.s + g.s*(g.d+g.dv) }

func attentionWorkspace(n *trace.Node) int64 {
	in := n.Inputs
	g, err := newAttnGeom(in[0].Shape(), in[1].Shape(), in[2].Shape(), attnLayout(n.Op))
	if err != nil {
		return 0
	}
	if attnBF16(n.Op, in[0].DType()) {
		return int64(g.bh16Slots()) * int64(g.fwd16SlotBytes())
	}
	return int64(g.fwdSlots()) * int64(g.fwdSlotElems()) * int64(in[0].DType().Size())
}

func attentionBackwardWorkspace(n *trace.Node) int64 {
	in := n.Inputs
	g, err := newAttnGeom(in[1].Shape(), in[2].Shape(), in[3].Shape(), attnLayout(n.Op))
	if err != nil {
		return 0
	}
	if attnBF16(n.Op, in[1].DType()) {
		return int64(g.bh16Slots()) * int64(g.bwd16SlotBytes())
	}
	return int64(g.bwdSlots()) * int64(g.bwdSlotElems()) * int64(in[1].DType().Size())
}

// attnBF16 reports whether attention op op with output (or operand) type
// dt runs its products in bfloat16 (its BF16: float32 outputs, float32 or
// bfloat16 operands).
func attnBF16(op trace.Op, dt tensor.DType) bool {
	bf := false
	switch o := op.(type) {
	case *prim.AttentionOp:
		bf = o.BF16
	case *prim.AttentionBackward:
		bf = o.BF16
	}
	return bf && (dt == tensor.Float32 || dt == tensor.BFloat16)
}

// The bf16 paths: one unit per head, whose q, k, v (and dO) a slot holds
// as bfloat16, converted once, with its float32 score blocks and their
// bfloat16 roundings. Sizes in bytes, each part 64-byte aligned.
func (g attnGeom) bh16Slots() int { return min(g.bh, attnSlots) }

// attnRowBlock16 is the bf16 paths' row block: a multiple of the bf16
// kernel's 24 rows, so that the products' row tiles (rows of a block, and
// the causal key columns of the transposed products, multiples of it) are
// whole; with 64, a third of them were edge tiles computed whole into a
// buffer. On Zen 4, gpt-sized causal heads (t = 256, d = 64) took about
// 5% less CPU with 48 than with 64, 72 or 96 (less of the masked triangle
// computed, too), and 128 had been no faster than 64; 24 was slower.
const attnRowBlock16 = 48

func (g attnGeom) br16() int { return max(1, min(attnRowBlock16, g.t)) }

// Each slot also holds the head's packed B operands (attnTile's path):
// K^T and V in the forward; K^T, V^T, dO, q and K in the backward.
func (g attnGeom) fwd16SlotBytes() int {
	br := g.br16()
	return a64(2*(g.t*g.d+g.s*g.d+g.s*g.dv)) + a64(4*br*g.s) + a64(2*br*g.s) +
		a64(4*attnPackLen(g.s, g.d)) + a64(4*attnPackLen(g.dv, g.s))
}

func (g attnGeom) bwd16SlotBytes() int {
	br := g.br16()
	return a64(2*(g.t*g.d+g.s*g.d+g.s*g.dv+2*g.t*g.dv)) + 2*a64(4*br*g.s) + 2*a64(2*br*g.s) +
		a64(4*attnPackLen(g.s, g.d)) + a64(4*attnPackLen(g.s, g.dv)) + a64(4*attnPackLen(g.dv, g.t)) +
		a64(4*attnPackLen(g.d, g.t)) + a64(4*attnPackLen(g.d, g.s))
}

func a64(n int) int { return (n + 63) &^ 63 }

// attnScratch views the workspace as n elements of T.
func attnScratch[T Float](ws []byte, n int) ([]T, error) {
	var z T
	if need := n * int(unsafe.Sizeof(z)); len(ws) < need {
		return nil, fmt.Errorf("workspace of %d bytes, need %d", len(ws), need)
	}
	if n == 0 {
		return nil, nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&ws[0])), n), nil
}

// attnForSlots runs units 0..units-1 over slots in parallel; slot s runs
// units s, s+slots, ... so that each slot's scratch has one user at a time
// and causal heads' uneven row blocks interleave.
func attnForSlots(pool *parallel.Pool, slots, units int, f func(slot, unit int)) {
	pool.For(slots, 1, func(lo, hi int) {
		for s := lo; s < hi; s++ {
			for u := s; u < units; u += slots {
				f(s, u)
			}
		}
	})
}

// attnCols is the number of key columns row block [i0, i1) reads: all of
// them, or with a causal mask those up to the last row's diagonal.
func (g attnGeom) attnCols(causal bool, i1 int) int {
	if causal {
		return min(g.s, i1)
	}
	return g.s
}

func attentionKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	o := n.Op.(*prim.AttentionOp)
	g, err := newAttnGeom(in[0].Shape, in[1].Shape, in[2].Shape, o.BTHD)
	if err != nil {
		return err
	}
	if g.t == 0 || g.bh == 0 {
		return nil
	}
	if attnBF16(o, out[0].DType) {
		return attentionBF16(pool, o, g, in, out, ws)
	}
	q, k, v := slice[T](in[0]), slice[T](in[1]), slice[T](in[2])
	y, lse := slice[T](out[0]), slice[T](out[1])
	per := g.fwdSlotElems()
	scratch, err := attnScratch[T](ws, g.fwdSlots()*per)
	if err != nil {
		return err
	}
	scale := o.Scale
	ldq, ldk, ldv := g.ld(g.d), g.ld(g.d), g.ld(g.dv)
	attnForSlots(pool, g.fwdSlots(), g.fwdUnits(), func(slot, u int) {
		b, rb := u/g.nrb, u%g.nrb
		i0 := rb * g.br
		i1 := min(g.t, i0+g.br)
		rows := i1 - i0
		cols := g.attnCols(o.Causal, i1)
		qb := q[g.at(b, g.t, g.d)+i0*ldq:]
		kb, vb := k[g.at(b, g.s, g.d):], v[g.at(b, g.s, g.dv):]
		sc := scratch[slot*per : slot*per+rows*cols]
		gemm(pool, false, true, rows, cols, g.d, qb, ldq, kb, ldk, sc, cols)
		for r := 0; r < rows; r++ {
			row := sc[r*cols : (r+1)*cols]
			lim := cols
			if o.Causal {
				lim = min(cols, i0+r+1)
			}
			lse[b*g.t+i0+r] = T(attnSoftmaxRow(row[:lim], scale))
			clear(row[lim:])
		}
		gemm(pool, false, false, rows, g.dv, cols, sc, cols, vb, ldv, y[g.at(b, g.t, g.dv)+i0*ldv:], ldv)
	})
	return nil
}

// attnSoftmaxRow replaces the scores of one row by softmax(scale*scores)
// and returns the log of the normalizer, max + log(sum of exponentials).
// float32 rows take the vectorized exponential; sums are in float64.
func attnSoftmaxRow[T Float](row []T, scale float64) float64 {
	if len(row) == 0 {
		return math.Inf(-1)
	}
	m := math.Inf(-1)
	r32, f32 := any(row).([]float32)
	if f32 && scale > 0 {
		// The float32 maximum scaled once: float64(x)*scale is monotone
		// in x, so this is the loop below's m, at a compare an element.
		m = float64(max32(r32)) * scale
	} else {
		for _, x := range row {
			if f := float64(x) * scale; f > m {
				m = f
			}
		}
	}
	var sum float64
	if f32 {
		expAffineRow(r32, float32(scale), float32(-m))
		sum = sum64(r32)
		inv := float32(1 / sum)
		// x*inv+0 is x*inv for the exponentials (never -0).
		for j := vec.Affine(r32, r32, inv, 0); j < len(r32); j++ {
			r32[j] *= inv
		}
		return m + math.Log(sum)
	}
	for j, x := range row {
		e := math.Exp(float64(x)*scale - m)
		row[j] = T(e)
		sum += e
	}
	inv := 1 / sum
	for j := range row {
		row[j] = T(float64(row[j]) * inv)
	}
	return m + math.Log(sum)
}

// expAffineRow sets x[j] = exp(x[j]*a + b) with the vectorized
// exponential, the tail past the last whole vector in a padded one (not
// expf, whose argument x*a + b is rounded twice: every element of a row
// sees the same formula, and a scalar tail cost gpt's bf16 attention
// about 5% of its CPU time), or with expf where there is no vector code.
func expAffineRow(x []float32, a, b float32) {
	j := vec.ExpAffine(x, x, a, b)
	if n := len(x) - j; n > 0 && vec.Enabled() {
		var t [8]float32
		copy(t[:], x[j:])
		vec.ExpAffine(t[:], t[:], a, b)
		copy(x[j:], t[:n])
		return
	}
	for ; j < len(x); j++ {
		x[j] = expf(x[j]*a + b)
	}
}

// max32 is the largest of x, NaNs skipped (-Inf if none is a number), in
// four running maxima.
func max32(x []float32) float32 {
	inf := float32(math.Inf(-1))
	m0, m1, m2, m3 := inf, inf, inf, inf
	// Vectorized where it can (the branches below mispredict on scores:
	// 8% of gpt's bf16 attention). Which of +0 and -0 wins a tie may
	// differ; the softmax's m + log(sum) and exp(x*scale - m) do not see it.
	m0, done := vec.Max(x)
	x = x[done:]
	for len(x) >= 4 {
		if x[0] > m0 {
			m0 = x[0]
		}
		if x[1] > m1 {
			m1 = x[1]
		}
		if x[2] > m2 {
			m2 = x[2]
		}
		if x[3] > m3 {
			m3 = x[3]
		}
		x = x[4:]
	}
	for _, v := range x {
		if v > m0 {
			m0 = v
		}
	}
	return max(max(m0, m1), max(m2, m3))
}

// attnGradRow turns a row of recomputed scores p into probabilities
// exp(scale*p - l) and a row of dP into dS = P*(dP - di)*scale (the scale
// of the scores folded in).
func attnGradRow[T Float](pr, dr []T, scale, l, di float64) {
	dr = dr[:len(pr)]
	if p32, ok := any(pr).([]float32); ok {
		d32 := any(dr).([]float32)
		expAffineRow(p32, float32(scale), float32(-l))
		s, d := float32(scale), float32(di)
		j := vec.ScoreGrad(p32, d32, d32, d, s)
		if n := len(p32) - j; n > 0 && vec.Enabled() {
			// The tail in a whole vector.
			var pt, dt [8]float32
			copy(pt[:], p32[j:])
			copy(dt[:], d32[j:])
			vec.ScoreGrad(pt[:], dt[:], dt[:], d, s)
			copy(d32[j:], dt[:n])
			return
		}
		for ; j < len(p32); j++ {
			d32[j] = p32[j] * (d32[j] - d) * s
		}
		return
	}
	for j := range pr {
		pj := math.Exp(float64(pr[j])*scale - l)
		pr[j] = T(pj)
		dr[j] = T(pj * (float64(dr[j]) - di) * scale)
	}
}

func attentionBackwardKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	o := n.Op.(*prim.AttentionBackward)
	g, err := newAttnGeom(in[1].Shape, in[2].Shape, in[3].Shape, o.BTHD)
	if err != nil {
		return err
	}
	if o.Packed {
		g.pack = out[0].Shape[2]
	}
	if g.bh == 0 {
		return nil
	}
	if attnBF16(o, out[0].DType) {
		return attentionBackwardBF16(pool, o, g, in, out, ws)
	}
	gy, q, k, v := slice[T](in[0]), slice[T](in[1]), slice[T](in[2]), slice[T](in[3])
	y, lse := slice[T](in[4]), slice[T](in[5])
	dq, dk, dv := slice[T](gradOut(out, 0)), slice[T](gradOut(out, 1)), slice[T](gradOut(out, 2))
	per := g.bwdSlotElems()
	scratch, err := attnScratch[T](ws, g.bwdSlots()*per)
	if err != nil {
		return err
	}
	scale := o.Scale
	// Row strides of the [..., D] and [..., Dv] operands.
	lk, lv := g.ld(g.d), g.ld(g.dv)
	attnForSlots(pool, g.bwdSlots(), g.bh, func(slot, b int) {
		sl := scratch[slot*per : (slot+1)*per]
		pBuf, dsBuf := sl[:g.br*g.s], sl[g.br*g.s:2*g.br*g.s]
		tmpK := sl[2*g.br*g.s : 2*g.br*g.s+g.s*g.d]
		tmpV := sl[2*g.br*g.s+g.s*g.d:]
		qh, kh, vh := q[g.at(b, g.t, g.d):], k[g.at(b, g.s, g.d):], v[g.at(b, g.s, g.dv):]
		// The gradients' rows are oq, ok, ov apart.
		dqo, oq := g.grad(b, 0)
		dko, ok := g.grad(b, 1)
		dvo, ov := g.grad(b, 2)
		dqh, dkh, dvh := dq[dqo:], dk[dko:], dv[dvo:]
		for j := range g.s {
			clear(dkh[j*ok : j*ok+g.d])
			clear(dvh[j*ov : j*ov+g.dv])
		}
		for i0 := 0; i0 < g.t; i0 += g.br {
			i1 := min(g.t, i0+g.br)
			rows := i1 - i0
			cols := g.attnCols(o.Causal, i1)
			p, ds := pBuf[:rows*cols], dsBuf[:rows*cols]
			gyb := gy[g.at(b, g.t, g.dv)+i0*lv:]
			// P = exp(q k^T * scale - lse), recomputed.
			gemm(pool, false, true, rows, cols, g.d, qh[i0*lk:], lk, kh, lk, p, cols)
			// dP = dO v^T.
			gemm(pool, false, true, rows, cols, g.dv, gyb, lv, vh, lv, ds, cols)
			for r := 0; r < rows; r++ {
				i := i0 + r
				lim := cols
				if o.Causal {
					lim = min(cols, i+1)
				}
				l := float64(lse[b*g.t+i])
				// D_i = rowsum(dO * O).
				var di float64
				yi := g.at(b, g.t, g.dv) + i*lv
				gr, yr := gyb[r*lv:r*lv+g.dv], y[yi:yi+g.dv]
				for c, x := range gr {
					di += float64(x) * float64(yr[c])
				}
				pr, dr := p[r*cols:(r+1)*cols], ds[r*cols:(r+1)*cols]
				attnGradRow(pr[:lim], dr[:lim], scale, l, di)
				clear(pr[lim:])
				clear(dr[lim:])
			}
			// dv += P^T dO.
			gemm(pool, true, false, cols, g.dv, rows, p, cols, gyb, lv, tmpV, g.dv)
			attnAddRows(dvh, ov, tmpV, cols, g.dv)
			// dq = dS k (rows of this block only).
			gemm(pool, false, false, rows, g.d, cols, ds, cols, kh, lk, dqh[i0*oq:], oq)
			// dk += dS^T q.
			gemm(pool, true, false, cols, g.d, rows, ds, cols, qh[i0*lk:], lk, tmpK, g.d)
			attnAddRows(dkh, ok, tmpK, cols, g.d)
		}
	})
	return nil
}

// attnAddRows adds rows×width x (contiguous) to the rows of dst, ld apart.
func attnAddRows[T Float](dst []T, ld int, x []T, rows, width int) {
	for r := range rows {
		d, xr := dst[r*ld:r*ld+width], x[r*width:(r+1)*width]
		for j, v := range xr {
			d[j] += v
		}
	}
}
