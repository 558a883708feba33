package cpu

import (
	"fmt"
	"math"
	"unsafe"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
)

// Attention with its products in bfloat16 (prim.AttentionOp.BF16): a
// head's q, k, v (and dO) are converted to bfloat16 once (exactly: autocast
// rounded them), the probabilities P and the score gradients dS are
// rounded to bfloat16 for their products, and every product is a bfloat16
// GEMM with float32 accumulation (VDPBF16PS where the CPU has it, else
// the operands widened). Scores, softmax, logsumexp and D = rowsum(dO*O)
// (from dO and O as bfloat16: autocast saves O rounded) are float32 as in
// the float32 path. One unit per head: its
// conversions are shared by its row blocks, and the backward's dk and dv
// accumulate over them in order, so results are the same for any thread
// count.

// attnWS carves a slot's workspace into float32 and bfloat16 arrays.
type attnWS struct {
	b   []byte
	off int
}

func (w *attnWS) u16(n int) []uint16 {
	s := unsafe.Slice((*uint16)(unsafe.Pointer(&w.b[w.off])), n)
	w.off += a64(2 * n)
	return s
}

func (w *attnWS) u32(n int) []uint32 {
	s := unsafe.Slice((*uint32)(unsafe.Pointer(&w.b[w.off])), n)
	w.off += a64(4 * n)
	return s
}

func (w *attnWS) f32(n int) []float32 {
	s := unsafe.Slice((*float32)(unsafe.Pointer(&w.b[w.off])), n)
	w.off += a64(4 * n)
	return s
}

// attnOperand is a float32 or bfloat16 operand of a bf16 attention.
type attnOperand struct {
	f32 []float32
	u16 []uint16
}

func operandOf(t *tensor.Tensor) attnOperand {
	if t.DType == tensor.BFloat16 {
		return attnOperand{u16: t.U16()}
	}
	return attnOperand{f32: t.F32()}
}

// head is head b of g's operand of rows×width per head as bfloat16 and
// its row stride: in place (rows strided with BTHD; the products take
// any stride), or converted into buf, rows contiguous.
func (o attnOperand) head(g attnGeom, b, rows, width int, buf []uint16) ([]uint16, int) {
	at, ld := g.at(b, rows, width), g.ld(width)
	if o.u16 != nil {
		return o.u16[at:], ld
	}
	if ld == width {
		blas.NarrowBF16(buf[:rows*width], o.f32[at:at+rows*width])
		return buf[:rows*width], width
	}
	for r := range rows {
		blas.NarrowBF16(buf[r*width:(r+1)*width], o.f32[at+r*ld:at+r*ld+width])
	}
	return buf[:rows*width], width
}

// bf16f is bfloat16 h as float32 (exact).
func bf16f(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func attentionBF16(pool *parallel.Pool, o *prim.AttentionOp, g attnGeom, in, out []*tensor.Tensor, ws []byte) error {
	slots, per := g.bh16Slots(), g.fwd16SlotBytes()
	if len(ws) < slots*per {
		return fmt.Errorf("workspace of %d bytes, need %d", len(ws), slots*per)
	}
	q, k, v := operandOf(in[0]), operandOf(in[1]), operandOf(in[2])
	y, lse := out[0].F32(), out[1].F32()
	t, s, d, dv, br := g.t, g.s, g.d, g.dv, g.br16()
	attnForSlots(pool, slots, g.bh, func(slot, b int) {
		w := attnWS{b: ws[slot*per : (slot+1)*per]}
		qkv := w.u16(t*d + s*d + s*dv)
		scF, p16 := w.f32(br*s), w.u16(br*s)
		q16, sq := q.head(g, b, t, d, qkv)
		k16, sk := k.head(g, b, s, d, qkv[t*d:])
		v16, sv := v.head(g, b, s, dv, qkv[t*d+s*d:])
		yh, ldy := y[g.at(b, t, dv):], g.ld(dv)
		if tile, ok := attnTile(pool, g); ok {
			// K^T and V packed once for all row blocks.
			kT, vP := w.u32(attnPackLen(s, d)), w.u32(attnPackLen(dv, s))
			tile.PackB(kT, true, s, d, k16, sk)
			tile.PackB(vP, false, dv, s, v16, sv)
			for i0 := 0; i0 < t; i0 += br {
				i1 := min(t, i0+br)
				rows := i1 - i0
				cols := g.attnCols(o.Causal, i1)
				sc := scF[:rows*cols]
				attnScores(tile, o.Causal, rows, cols, i0, d, q16[i0*sq:], sq, kT, sc)
				attnSoftmaxBlock(sc, p16[:rows*cols], lse[b*t+i0:b*t+i1], rows, cols, i0, o.Causal, o.Scale)
				tile.MulPacked(false, rows, dv, cols, p16, cols, vP, s, 0, yh[i0*ldy:], ldy, true)
			}
			return
		}
		for i0 := 0; i0 < t; i0 += br {
			i1 := min(t, i0+br)
			rows := i1 - i0
			cols := g.attnCols(o.Causal, i1)
			sc := scF[:rows*cols]
			blas.SgemmMixed(false, true, rows, cols, d, 1, blas.BF16(q16[i0*sq:]), sq, blas.BF16(k16), sk, 0, sc, cols, pool)
			for r := 0; r < rows; r++ {
				row := sc[r*cols : (r+1)*cols]
				lim := cols
				if o.Causal {
					lim = min(cols, i0+r+1)
				}
				lse[b*t+i0+r] = float32(attnSoftmaxRow(row[:lim], o.Scale))
				clear(row[lim:])
			}
			blas.NarrowBF16(p16[:rows*cols], sc)
			blas.SgemmMixed(false, false, rows, dv, cols, 1, blas.BF16(p16), cols, blas.BF16(v16), sv, 0, yh[i0*ldy:], ldy, pool)
		}
	})
	return nil
}

func attentionBackwardBF16(pool *parallel.Pool, o *prim.AttentionBackward, g attnGeom, in, out []*tensor.Tensor, ws []byte) error {
	slots, per := g.bh16Slots(), g.bwd16SlotBytes()
	if len(ws) < slots*per {
		return fmt.Errorf("workspace of %d bytes, need %d", len(ws), slots*per)
	}
	gy, q, k, v := operandOf(in[0]), operandOf(in[1]), operandOf(in[2]), operandOf(in[3])
	y, lse := operandOf(in[4]), in[5].F32()
	dq, dk, dv := gradOut(out, 0).F32(), gradOut(out, 1).F32(), gradOut(out, 2).F32()
	t, s, d, dvw, br := g.t, g.s, g.d, g.dv, g.br16()
	attnForSlots(pool, slots, g.bh, func(slot, b int) {
		w := attnWS{b: ws[slot*per : (slot+1)*per]}
		all := w.u16(t*d + s*d + s*dvw + 2*t*dvw)
		pF, dsF := w.f32(br*s), w.f32(br*s)
		p16, ds16 := w.u16(br*s), w.u16(br*s)
		q16, sq := q.head(g, b, t, d, all)
		k16, sk := k.head(g, b, s, d, all[t*d:])
		v16, sv := v.head(g, b, s, dvw, all[t*d+s*d:])
		g16, sg := gy.head(g, b, t, dvw, all[t*d+s*d+s*dvw:])
		y16, sy := y.head(g, b, t, dvw, all[t*d+s*d+s*dvw+t*dvw:])
		// The gradients' rows, ldq, ldk, ldv apart (d, dvw unless BTHD).
		dqo, ldq := g.grad(b, 0)
		dko, ldk := g.grad(b, 1)
		dvo, ldv := g.grad(b, 2)
		dqh, dkh, dvh := dq[dqo:], dk[dko:], dv[dvo:]
		for j := range s {
			clear(dkh[j*ldk : j*ldk+d])
			clear(dvh[j*ldv : j*ldv+dvw])
		}
		if tile, ok := attnTile(pool, g); ok {
			// The B operands packed once for all row blocks: K^T and V^T
			// (scores and dP), dO and q (dv and dk: a row block's rows of
			// them), K (dq).
			kT, vT := w.u32(attnPackLen(s, d)), w.u32(attnPackLen(s, dvw))
			gP, qP, kP := w.u32(attnPackLen(dvw, t)), w.u32(attnPackLen(d, t)), w.u32(attnPackLen(d, s))
			tile.PackB(kT, true, s, d, k16, sk)
			tile.PackB(vT, true, s, dvw, v16, sv)
			tile.PackB(gP, false, dvw, t, g16, sg)
			tile.PackB(qP, false, d, t, q16, sq)
			tile.PackB(kP, false, d, s, k16, sk)
			for i0 := 0; i0 < t; i0 += br {
				i1 := min(t, i0+br)
				rows := i1 - i0
				cols := g.attnCols(o.Causal, i1)
				p, ds := pF[:rows*cols], dsF[:rows*cols]
				attnScores(tile, o.Causal, rows, cols, i0, d, q16[i0*sq:], sq, kT, p)
				attnScores(tile, o.Causal, rows, cols, i0, dvw, g16[i0*sg:], sg, vT, ds)
				pb, dsb := p16[:rows*cols], ds16[:rows*cols]
				attnGradBlock(p, ds, pb, dsb, g16, sg, y16, sy, lse[b*t:], rows, cols, i0, dvw, o.Causal, o.Scale)
				tile.MulPacked(true, cols, dvw, rows, pb, cols, gP, t, i0, dvh, ldv, false)
				tile.MulPacked(false, rows, d, cols, dsb, cols, kP, s, 0, dqh[i0*ldq:], ldq, true)
				tile.MulPacked(true, cols, d, rows, dsb, cols, qP, t, i0, dkh, ldk, false)
			}
			return
		}
		for i0 := 0; i0 < t; i0 += br {
			i1 := min(t, i0+br)
			rows := i1 - i0
			cols := g.attnCols(o.Causal, i1)
			p, ds := pF[:rows*cols], dsF[:rows*cols]
			// P = exp(q k^T * scale - lse), recomputed; dP = dO v^T.
			blas.SgemmMixed(false, true, rows, cols, d, 1, blas.BF16(q16[i0*sq:]), sq, blas.BF16(k16), sk, 0, p, cols, pool)
			blas.SgemmMixed(false, true, rows, cols, dvw, 1, blas.BF16(g16[i0*sg:]), sg, blas.BF16(v16), sv, 0, ds, cols, pool)
			for r := 0; r < rows; r++ {
				i := i0 + r
				lim := cols
				if o.Causal {
					lim = min(cols, i+1)
				}
				// D_i = rowsum(dO * O), from their bfloat16 values.
				var di float64
				gr, yr := g16[i*sg:i*sg+dvw], y16[i*sy:i*sy+dvw]
				for c, h := range gr {
					di += float64(bf16f(h)) * float64(bf16f(yr[c]))
				}
				pr, dr := p[r*cols:(r+1)*cols], ds[r*cols:(r+1)*cols]
				attnGradRow(pr[:lim], dr[:lim], o.Scale, float64(lse[b*t+i]), di)
				clear(pr[lim:])
				clear(dr[lim:])
			}
			pb, dsb := p16[:rows*cols], ds16[:rows*cols]
			blas.NarrowBF16(pb, p)
			blas.NarrowBF16(dsb, ds)
			// dv += P^T dO, dq = dS k (this block's rows), dk += dS^T q:
			// the sums of earlier row blocks added in order (beta 1).
			blas.SgemmMixed(true, false, cols, dvw, rows, 1, blas.BF16(pb), cols, blas.BF16(g16[i0*sg:]), sg, 1, dvh, ldv, pool)
			blas.SgemmMixed(false, false, rows, d, cols, 1, blas.BF16(dsb), cols, blas.BF16(k16), sk, 0, dqh[i0*ldq:], ldq, pool)
			blas.SgemmMixed(true, false, cols, d, rows, 1, blas.BF16(dsb), cols, blas.BF16(q16[i0*sq:]), sq, 1, dkh, ldk, pool)
		}
	})
	return nil
}

// attnTile is the native bf16 kernel where a head's products run on it
// against operands packed once per head (MulPacked, on the head's
// thread): where the CPU has one and the heads keep the threads busy
// (fewer heads than threads leave the products to SgemmMixed, which
// splits them). Both give the same bits.
func attnTile(pool *parallel.Pool, g attnGeom) (blas.BF16Tile, bool) {
	tile, ok := blas.NativeBF16Tile()
	if !ok || !attnPacked || g.bh < pool.Threads() || tile.NR() > attnMaxNR {
		return tile, false
	}
	return tile, true
}

// attnPacked lets attnTile choose the packed path: off, the tests get the
// SgemmMixed path to compare with.
var attnPacked = true

// attnMaxNR bounds the native kernels' NR (columns of a B panel): the
// workspace, a function of the shapes alone, holds packed B operands of
// any kernel.
const attnMaxNR = 32

// attnPackLen is the dwords of a packed B of n columns and k rows, for
// any kernel (PackedBLen with NR at most attnMaxNR).
func attnPackLen(n, k int) int { return (n + attnMaxNR - 1) / attnMaxNR * attnMaxNR * ((k + 1) / 2) }

// attnScores sets c (rows×cols) = a·B for a row block [i0, i0+rows) of a
// head, a its rows of q (or dO), k deep and lda apart, and B the packed
// K^T (or V^T).
// With a causal mask each tile of MR rows stops at its last row's
// diagonal (the columns past it, masked for all its rows, are left as
// they were: the softmax clears them), about 5% of the products.
func attnScores(tile blas.BF16Tile, causal bool, rows, cols, i0, k int, a []uint16, lda int, bp []uint32, c []float32) {
	if !causal {
		tile.MulPacked(false, rows, cols, k, a, lda, bp, k, 0, c, cols, true)
		return
	}
	mr := tile.MR()
	for r0 := 0; r0 < rows; r0 += mr {
		n := min(cols, i0+r0+mr)
		tile.MulPacked(false, min(mr, rows-r0), n, k, a[r0*lda:], lda, bp, k, 0, c[r0*cols:], cols, true)
	}
}

// attnSoftmaxBlock replaces the score rows of a row block (rows i0.. of
// the head, cols key columns each) by their probabilities, masked ones
// zero, writes their logsumexp to lse[:rows] and their bfloat16 roundings
// to p16.
func attnSoftmaxBlock(sc []float32, p16 []uint16, lse []float32, rows, cols, i0 int, causal bool, scale float64) {
	for r := 0; r < rows; r++ {
		row := sc[r*cols : (r+1)*cols]
		lim := cols
		if causal {
			lim = min(cols, i0+r+1)
		}
		lse[r] = float32(attnSoftmaxRow(row[:lim], scale))
		clear(row[lim:])
		// Rounded while the row is in cache.
		blas.NarrowBF16(p16[r*cols:(r+1)*cols], row)
	}
}

// attnGradBlock turns a row block's recomputed scores p and dP ds (rows
// i0.. of the head, cols key columns each) into P and dS (attnGradRow,
// masked ones zero) and writes their bfloat16 roundings to pb and dsb;
// g16, y16 (dO and O, rows ldg and ldy apart) and lse are the head's.
func attnGradBlock(p, ds []float32, pb, dsb []uint16, g16 []uint16, ldg int, y16 []uint16, ldy int, lse []float32, rows, cols, i0, dv int, causal bool, scale float64) {
	var di [4]float64
	for r := 0; r < rows; r++ {
		i := i0 + r
		lim := cols
		if causal {
			lim = min(cols, i+1)
		}
		if r%4 == 0 {
			di = attnRowDots(g16, ldg, y16, ldy, i, min(4, rows-r), dv)
		}
		pr, dr := p[r*cols:(r+1)*cols], ds[r*cols:(r+1)*cols]
		attnGradRow(pr[:lim], dr[:lim], scale, float64(lse[i]), di[r%4])
		clear(pr[lim:])
		clear(dr[lim:])
		// Rounded while the row is in cache.
		blas.NarrowBF16(pb[r*cols:(r+1)*cols], pr)
		blas.NarrowBF16(dsb[r*cols:(r+1)*cols], dr)
	}
}

// attnRowDots returns D_i = rowsum(dO * O) of rows [i, i+n) (n <= 4),
// from their bfloat16 values, each summed in order in float64: the rows'
// sums run side by side (one alone waits on each addition's latency).
func attnRowDots(g16 []uint16, ldg int, y16 []uint16, ldy int, i, n, dv int) (di [4]float64) {
	if n < 4 {
		for r := range n {
			gr, yr := g16[(i+r)*ldg:(i+r)*ldg+dv], y16[(i+r)*ldy:(i+r)*ldy+dv]
			for c, h := range gr {
				di[r] += float64(bf16f(h)) * float64(bf16f(yr[c]))
			}
		}
		return di
	}
	g0, g1, g2, g3 := g16[i*ldg:i*ldg+dv], g16[(i+1)*ldg:(i+1)*ldg+dv], g16[(i+2)*ldg:(i+2)*ldg+dv], g16[(i+3)*ldg:(i+3)*ldg+dv]
	y0, y1, y2, y3 := y16[i*ldy:i*ldy+dv], y16[(i+1)*ldy:(i+1)*ldy+dv], y16[(i+2)*ldy:(i+2)*ldy+dv], y16[(i+3)*ldy:(i+3)*ldy+dv]
	var d0, d1, d2, d3 float64
	for c := range dv {
		d0 += float64(bf16f(g0[c])) * float64(bf16f(y0[c]))
		d1 += float64(bf16f(g1[c])) * float64(bf16f(y1[c]))
		d2 += float64(bf16f(g2[c])) * float64(bf16f(y2[c]))
		d3 += float64(bf16f(g3[c])) * float64(bf16f(y3[c]))
	}
	return [4]float64{d0, d1, d2, d3}
}
