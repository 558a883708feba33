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

// head is elements [b*n, (b+1)*n) as bfloat16: in place, or converted into
// buf.
func (o attnOperand) head(b, n int, buf []uint16) []uint16 {
	if o.u16 != nil {
		return o.u16[b*n : (b+1)*n]
	}
	blas.NarrowBF16(buf[:n], o.f32[b*n:(b+1)*n])
	return buf[:n]
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
		q16 := q.head(b, t*d, qkv)
		k16 := k.head(b, s*d, qkv[t*d:])
		v16 := v.head(b, s*dv, qkv[t*d+s*d:])
		for i0 := 0; i0 < t; i0 += br {
			i1 := min(t, i0+br)
			rows := i1 - i0
			cols := g.attnCols(o.Causal, i1)
			sc := scF[:rows*cols]
			blas.SgemmMixed(false, true, rows, cols, d, 1, blas.BF16(q16[i0*d:]), d, blas.BF16(k16), d, 0, sc, cols, pool)
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
			blas.SgemmMixed(false, false, rows, dv, cols, 1, blas.BF16(p16), cols, blas.BF16(v16), dv, 0, y[(b*t+i0)*dv:], dv, pool)
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
	dq, dk, dv := out[0].F32(), out[1].F32(), out[2].F32()
	t, s, d, dvw, br := g.t, g.s, g.d, g.dv, g.br16()
	attnForSlots(pool, slots, g.bh, func(slot, b int) {
		w := attnWS{b: ws[slot*per : (slot+1)*per]}
		all := w.u16(t*d + s*d + s*dvw + 2*t*dvw)
		pF, dsF := w.f32(br*s), w.f32(br*s)
		p16, ds16 := w.u16(br*s), w.u16(br*s)
		q16 := q.head(b, t*d, all)
		k16 := k.head(b, s*d, all[t*d:])
		v16 := v.head(b, s*dvw, all[t*d+s*d:])
		g16 := gy.head(b, t*dvw, all[t*d+s*d+s*dvw:])
		y16 := y.head(b, t*dvw, all[t*d+s*d+s*dvw+t*dvw:])
		dqh := dq[b*t*d : (b+1)*t*d]
		dkh, dvh := dk[b*s*d:(b+1)*s*d], dv[b*s*dvw:(b+1)*s*dvw]
		clear(dkh)
		clear(dvh)
		for i0 := 0; i0 < t; i0 += br {
			i1 := min(t, i0+br)
			rows := i1 - i0
			cols := g.attnCols(o.Causal, i1)
			p, ds := pF[:rows*cols], dsF[:rows*cols]
			// P = exp(q k^T * scale - lse), recomputed; dP = dO v^T.
			blas.SgemmMixed(false, true, rows, cols, d, 1, blas.BF16(q16[i0*d:]), d, blas.BF16(k16), d, 0, p, cols, pool)
			blas.SgemmMixed(false, true, rows, cols, dvw, 1, blas.BF16(g16[i0*dvw:]), dvw, blas.BF16(v16), dvw, 0, ds, cols, pool)
			for r := 0; r < rows; r++ {
				i := i0 + r
				lim := cols
				if o.Causal {
					lim = min(cols, i+1)
				}
				// D_i = rowsum(dO * O), from their bfloat16 values.
				var di float64
				gr, yr := g16[i*dvw:(i+1)*dvw], y16[i*dvw:(i+1)*dvw]
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
			blas.SgemmMixed(true, false, cols, dvw, rows, 1, blas.BF16(pb), cols, blas.BF16(g16[i0*dvw:]), dvw, 1, dvh, dvw, pool)
			blas.SgemmMixed(false, false, rows, d, cols, 1, blas.BF16(dsb), cols, blas.BF16(k16), d, 0, dqh[i0*d:], d, pool)
			blas.SgemmMixed(true, false, cols, d, rows, 1, blas.BF16(dsb), cols, blas.BF16(q16[i0*d:]), d, 1, dkh, d, pool)
		}
	})
	return nil
}
