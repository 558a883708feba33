package cpu

import (
	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
)

// Winograd weight gradient of a 3×3 stride-1 convolution, F(4×4, 3×3)
// transposed. The forward pass computes each output tile as
// Aᵀ [Σ_c U_kc ⊙ V_ct] A with U = G w Gᵀ, so by the chain rule
//
//	ḡ_kc = Gᵀ [Σ_t (A ȳ_kt Aᵀ) ⊙ V_ct] G
//
// where ȳ_kt is output channel k's 4×4 tile t of the output gradient (zero
// past the output's edges) and V_ct = Bᵀ d B the transformed input patch.
// The sum over tiles is, for each of the 36 points, a product
// [K, tiles]·[tiles, C] accumulated over chunks of tiles: 36 multiply-adds
// per 16 outputs of ȳ and channel pair instead of 144. Its cost beyond the
// products is two transforms per tile and channel (input and ȳ) and one
// per weight, on the vector kernels where the forward pass has them (else
// in portable Go). On rrdbnet's layers (4×32×32, 64..192 → 32 or 64
// channels; one thread, Zen 4) the products with their packing are about
// 55% of its time, the input's gather 20%, its transform 7%.

// winoWgrad is the plan of one Winograd weight gradient of forward
// geometry g: its own chunks of tiles (t a multiple of 16) and blocks of
// output channels (kb, whose M[36][kb][C] fits winoWgradMaxU).
type winoWgrad struct {
	winograd
	ldt int // row stride of V and Y: a chunk's tiles
}

// winogradWgrad returns the Winograd plan of the weight gradient of g
// where the forward pass takes Winograd: with its vector transforms it is
// faster than the direct weight gradient (blas.ConvWgrad) from 32 channels
// on both sides (one thread, Zen 4, CPU time a call, medians of 3
// interleaved runs, rrdbnet's layers on 4 images: 64→32 at 32×32 1.24 ms
// against 1.96 direct, 128→32 2.64 and 3.82, 192→64 6.3 and 10.7, 64→64
// 2.1 and 3.5, 64→64 at 128×128 35 and 62; resnet152's 64→64 on 8×32×32
// 4.2 and 7.2; with the AVX2 kernels, before the vector transform of ȳ:
// 64→32 2.19 and 2.49, 192→64 8.3 and 13.2). On Zen 3 a plan with a short
// last chunk of tiles, the input transformed for whole chunks and ȳ in
// portable Go measured 64→64 on 8×32×32 at 13.1 ms against 12.0 direct,
// and took Winograd only from 128 channels.
func winogradWgrad(g prim.ConvGeom) (winoWgrad, bool) {
	w, ok := winogradFor(g)
	if !ok {
		return winoWgrad{}, false
	}
	return wgradPlan(w), true
}

// winoWgradMaxU is the weight gradient's winoMaxU: the blocks of output
// channels set its chunks of tiles (wgradPlan), the order in which it sums
// over tiles, kept as it was when winoMaxU rose to 3 MiB so that weight
// gradients stay bitwise the same (3 MiB ran ResNet-152's 128→128 on
// 8×16×16 4-9% faster, but sums its tiles in other chunks).
const winoWgradMaxU = 2 << 20

// wgradPlan sizes the chunks: V and Y of a chunk together about winoMaxU
// bytes times two (the products' depth is the chunk's tiles: the longer,
// the fewer passes over M, and the fewer waits between the threads: with
// two threads on a loaded machine, rrdbnet's 64→64 on 4×128×128 took 54
// ms of CPU a call against 76 with chunks half as long, the direct weight
// gradient 62; one thread, the same at either length).
func wgradPlan(w winograd) winoWgrad {
	w.kb = w.blockRows(winoWgradMaxU)
	// Chunks of equal sizes (multiples of 16): a short last chunk costs a
	// pass over M for few tiles.
	w.tc = w.chunkTiles(16, 128)
	// Rows 16 longer than the chunk: the vector gathers write whole
	// groups of 8 tiles.
	return winoWgrad{winograd: w, ldt: w.tc + 16}
}

// Per point: V holds C rows of ldt tiles, Y kb rows, M kb rows of C.
func (w winoWgrad) vSize() int { return w.g.C * w.ldt }
func (w winoWgrad) ySize() int { return w.kb * w.ldt }
func (w winoWgrad) mSize() int { return (w.kb*w.g.C+15)/16*16 + 16 }

// scratch is the workspace (float32 elements): V, Y and M of all points.
func (w winoWgrad) scratch() int {
	return winoPts * (w.vSize() + w.ySize() + w.mSize())
}

// weightGrad computes gw ([K, C, 3, 3]) from the output gradient gy and the
// input x with ws of at least scratch() elements. Blocks of output channels
// outside, chunks of tiles inside (M of a block accumulates over all
// tiles); the input is transformed again for each block unless one chunk
// holds all tiles.
func (w winoWgrad) weightGrad(pool *parallel.Pool, gy, x, gw, ws []float32) {
	w.weightGradSrc(pool, gy, nil, x, nil, gw, ws)
}

// weightGradSrc is weightGrad on ȳ and the input x, or where gyb or xb is
// not nil on that bfloat16 operand, gathered and widened tile by tile
// (with the vector kernels and WinoGatherRowsBF16OK only; see runSrc).
func (w winoWgrad) weightGradSrc(pool *parallel.Pool, gy []float32, gyb []uint16, x []float32, xb []uint16, gw, ws []float32) {
	g := w.g
	C, K := g.C, g.K
	v := ws[:winoPts*w.vSize()]
	yt := ws[len(v):][:winoPts*w.ySize()]
	m := ws[len(v)+len(yt):][:winoPts*w.mSize()]
	oneChunk := w.tc >= w.tiles
	vec := blas.WinoOK() && !winogradScalar
	for k0 := 0; k0 < K; k0 += w.kb {
		rows := min(w.kb, K-k0)
		for t0 := 0; t0 < w.tiles; t0 += w.tc {
			cnt := min(w.tc, w.tiles-t0)
			// The input's channels (unless transformed already) and the
			// block's rows of ȳ in one parallel loop: one wait fewer a
			// chunk.
			nc := C
			if oneChunk && k0 > 0 {
				nc = 0
			}
			pool.For(nc+rows, max(1, 512/cnt), func(a, b int) {
				for i := a; i < b; i++ {
					switch {
					case i >= nc:
						if k := i - nc; vec {
							w.gradVec(gy, gyb, k0+k, k, t0, cnt, yt)
						} else {
							w.transformGrad(gy, k0+k, k, t0, cnt, yt, false)
						}
					case vec:
						w.inputVec(x, xb, i, t0, cnt, v, w.vSize(), 16, w.ldt)
					default:
						w.transformInputRows(x, i, t0, cnt, v)
					}
				}
			})
			var beta float32
			if t0 > 0 {
				beta = 1
			}
			pool.For(winoPts, 1, func(a, b int) {
				for xi := a; xi < b; xi++ {
					blas.Sgemm(false, true, rows, C, cnt, 1,
						yt[xi*w.ySize():], w.ldt, v[xi*w.vSize():], w.ldt,
						beta, m[xi*w.mSize():], C, pool)
				}
			})
		}
		if vec {
			w.wgradOutputVec(pool, m, rows*C, gw[k0*C*9:][:rows*C*9])
			continue
		}
		pool.For(rows, max(1, 64/C), func(a, b int) {
			for k := a; k < b; k++ {
				w.transformWgradOutput(m, k, C, gw[(k0+k)*C*9:][:C*9])
			}
		})
	}
}

// transformInputRows writes V = Bᵀ d B of input channel c for the chunk's
// tiles [t0, t0+cnt): point ξ = 6i+j, v[ξ*vSize() + c*ldt + t].
func (w winoWgrad) transformInputRows(x []float32, c, t0, cnt int, v []float32) {
	g := w.g
	C, H, W := g.C, g.H, g.W
	var d, o [winoPts]float32
	per := w.th * w.tw
	vs := w.vSize()
	for t := 0; t < cnt; t++ {
		tt := t0 + t
		n, r := tt/per, tt%per
		ih0, iw0 := r/w.tw*winoOut-g.PH, r%w.tw*winoOut-g.PW
		plane := x[(n*C+c)*H*W:][:H*W]
		if ih0 >= 0 && iw0 >= 0 && ih0+winoIn <= H && iw0+winoIn <= W {
			for i := 0; i < winoIn; i++ {
				*(*[winoIn]float32)(d[i*winoIn:]) = *(*[winoIn]float32)(plane[(ih0+i)*W+iw0:])
			}
		} else {
			for i := 0; i < winoIn; i++ {
				row := d[i*winoIn : (i+1)*winoIn]
				ih := ih0 + i
				if uint(ih) >= uint(H) {
					clear(row)
					continue
				}
				src := plane[ih*W : (ih+1)*W]
				for j := range row {
					row[j] = rowAt(src, iw0+j)
				}
			}
		}
		winoInput(&d, &o)
		base := c*w.ldt + t
		for xi, val := range o {
			v[xi*vs+base] = val
		}
	}
}

// transformGrad writes A ȳ Aᵀ of output channel k (row kl of the block)
// for the chunk's tiles: point ξ = 6i+j (tr: 6j+i, the order the vector
// input transforms leave V in, and gradVec's, which the tests hold it to),
// yt[ξ*ySize() + kl*ldt + t], where
//
//	A = [1  0 0  0]
//	    [1  1 1  1]
//	    [1 -1 1 -1]
//	    [1  2 4  8]
//	    [1 -2 4 -8]
//	    [0  0 0  1]
func (w winoWgrad) transformGrad(gy []float32, k, kl, t0, cnt int, yt []float32, tr bool) {
	g := w.g
	K, OH, OW := g.K, g.OH, g.OW
	per := w.th * w.tw
	ys := w.ySize()
	ri, rj := 6*ys, ys // point (i, j) in row 6i+j
	if tr {
		ri, rj = ys, 6*ys // in row 6j+i
	}
	var d [winoOut * winoOut]float32
	var t6 [winoIn * winoOut]float32
	for t := 0; t < cnt; t++ {
		tt := t0 + t
		n, r := tt/per, tt%per
		oh0, ow0 := r/w.tw*winoOut, r%w.tw*winoOut
		plane := gy[(n*K+k)*OH*OW:][:OH*OW]
		rows, cols := min(winoOut, OH-oh0), min(winoOut, OW-ow0)
		if rows == winoOut && cols == winoOut {
			for i := 0; i < winoOut; i++ {
				*(*[winoOut]float32)(d[i*winoOut:]) = *(*[winoOut]float32)(plane[(oh0+i)*OW+ow0:])
			}
		} else {
			clear(d[:])
			for i := 0; i < rows; i++ {
				copy(d[i*winoOut:][:cols], plane[(oh0+i)*OW+ow0:])
			}
		}
		// Down the columns: t6 (6×4) = A d.
		for j := 0; j < winoOut; j++ {
			d0, d1, d2, d3 := d[j], d[4+j], d[8+j], d[12+j]
			a, b := d0+d2, d1+d3
			c, e := d0+4*d2, 2*d1+8*d3
			t6[j] = d0
			t6[4+j] = a + b
			t6[8+j] = a - b
			t6[12+j] = c + e
			t6[16+j] = c - e
			t6[20+j] = d3
		}
		// Along the rows: (A d) Aᵀ.
		base := kl*w.ldt + t
		for i := 0; i < winoIn; i++ {
			d0, d1, d2, d3 := t6[4*i], t6[4*i+1], t6[4*i+2], t6[4*i+3]
			a, b := d0+d2, d1+d3
			c, e := d0+4*d2, 2*d1+8*d3
			q := yt[i*ri+base:]
			q[0] = d0
			q[rj] = a + b
			q[2*rj] = a - b
			q[3*rj] = c + e
			q[4*rj] = c - e
			q[5*rj] = d3
		}
	}
}

// gradVec is transformGrad (tr) on the vector kernels: the chunk's 4×4
// tiles of output channel k are gathered into Y's rows (element (r, j) of
// tile t into row 6j+r of row kl, column t; rows 6j+r for j = 4, 5 take
// the next tile's columns and are overwritten), then transformed in place,
// down the columns of each tile (rows 6j..6j+3 to 6j..6j+5, j < 4), then
// along its rows (rows i, 6+i, 12+i, 18+i to i, 6+i, ..., 30+i).
func (w winoWgrad) gradVec(gy []float32, gyb []uint16, k, kl, t0, cnt int, yt []float32) {
	g := w.g
	K, OH, OW := g.K, g.OH, g.OW
	R := w.ySize()
	per := w.th * w.tw
	rows := blas.WinoGatherRowsOK()
	for t := 0; t < cnt; {
		tt := t0 + t
		n, q := tt/per, tt%per
		ty, tx := q/w.tw, q%w.tw
		l := min(w.tw-tx, cnt-t)
		base := kl*w.ldt + t
		oh0, ow0 := ty*winoOut, tx*winoOut
		if gyb != nil {
			plane := gyb[(n*K+k)*OH*OW:][:OH*OW]
			for i := 0; i < l; i += 8 {
				blas.WinoGatherRowsBF16(min(8, l-i), plane, oh0, OH, OW, ow0+4*i, yt, base+i, R, winoOut)
			}
			t += l
			continue
		}
		plane := gy[(n*K+k)*OH*OW:][:OH*OW]
		if rows {
			// All four rows of up to 8 tiles a call (AVX-512).
			for i := 0; i < l; i += 8 {
				blas.WinoGatherRows(min(8, l-i), plane, oh0, OH, OW, ow0+4*i, yt, base+i, R, winoOut)
			}
			t += l
			continue
		}
		for r := 0; r < winoOut; r++ {
			if oh0+r >= OH {
				for j := 0; j < winoOut; j++ {
					clear(yt[base+(6*j+r)*R:][:l])
				}
				continue
			}
			row := plane[(oh0+r)*OW : (oh0+r+1)*OW]
			// Whole groups of 8 lanes: the lanes past the run are later
			// tiles, written after this, or the row's padding.
			for i := 0; i < l; i += 8 {
				blas.WinoGather(8, row, ow0+4*i, yt, base+r*R+i, R)
			}
		}
		t += l
	}
	np := (cnt + 15) / 16
	off := kl * w.ldt
	for j := 0; j < winoOut; j++ {
		blas.WinoGradA(np, yt, off+6*j*R, R, 16)
	}
	for i := 0; i < winoIn; i++ {
		blas.WinoGradA(np, yt, off+i*R, 6*R, 16)
	}
}

// wgradOutputVec is transformWgradOutput on the vector kernels for the
// block's n = rows×C weights, whose M lies flat in each point's row, point
// (i, j) in row 6j+i: Gᵀ along the rows of M (rows j, 6+j, ..., 30+j to j,
// 6+j, 12+j), then down its columns (rows 6a..6a+5 to 6a..6a+2), leaving
// ḡ(b, a) in row 6a+b, copied out a piece at a time.
func (w winoWgrad) wgradOutputVec(pool *parallel.Pool, m []float32, n int, gw []float32) {
	ms := w.mSize()
	const piece = 32 // blocks of 16
	pool.For((n+15)/16, piece, func(b0, b1 int) {
		for p0 := b0; p0 < b1; p0 += piece {
			p1 := min(p0+piece, b1)
			s, e := p0*16, min(p1*16, n)
			for j := 0; j < winoIn; j++ {
				blas.WinoWgradOutput(p1-p0, m, s+j*ms, 6*ms, 16)
			}
			for a := 0; a < 3; a++ {
				blas.WinoWgradOutput(p1-p0, m, s+6*a*ms, ms, 16)
			}
			var r [9][]float32 // r[3kh+kw]
			for a := 0; a < 3; a++ {
				for b := 0; b < 3; b++ {
					r[3*b+a] = m[(6*a+b)*ms+s : (6*a+b)*ms+e]
				}
			}
			out := gw[s*9 : e*9]
			for f := range e - s {
				o := (*[9]float32)(out[9*f:])
				o[0], o[1], o[2] = r[0][f], r[1][f], r[2][f]
				o[3], o[4], o[5] = r[3][f], r[4][f], r[5][f]
				o[6], o[7], o[8] = r[6][f], r[7][f], r[8][f]
			}
		}
	})
}

// transformWgradOutput writes the 3×3 kernels ḡ = Gᵀ M G of output channel
// row kl of the block and every input channel into gw ([C, 3, 3]), in
// float64 (rounded once), where
//
//	Gᵀ = [1/4  -1/6 -1/6 1/24  1/24 0]
//	     [  0  -1/6  1/6 1/12 -1/12 0]
//	     [  0  -1/6 -1/6  1/6   1/6 1]
func (w winoWgrad) transformWgradOutput(m []float32, kl, C int, gw []float32) {
	ms := w.mSize()
	var t3 [3 * winoIn]float64
	for c := 0; c < C; c++ {
		base := kl*C + c
		// Down the columns: t3 (3×6) = Gᵀ M.
		for j := 0; j < winoIn; j++ {
			m0 := float64(m[j*ms+base])
			m1 := float64(m[(6+j)*ms+base])
			m2 := float64(m[(12+j)*ms+base])
			m3 := float64(m[(18+j)*ms+base])
			m4 := float64(m[(24+j)*ms+base])
			m5 := float64(m[(30+j)*ms+base])
			s12, d12 := m1+m2, m2-m1
			s34, d34 := m3+m4, m3-m4
			t3[j] = m0/4 - s12/6 + s34/24
			t3[6+j] = d12/6 + d34/12
			t3[12+j] = -s12/6 + s34/6 + m5
		}
		// Along the rows: (Gᵀ M) G.
		out := (*[9]float32)(gw[c*9:])
		for i := 0; i < 3; i++ {
			r := t3[6*i:][:6]
			s12, d12 := r[1]+r[2], r[2]-r[1]
			s34, d34 := r[3]+r[4], r[3]-r[4]
			out[3*i] = float32(r[0]/4 - s12/6 + s34/24)
			out[3*i+1] = float32(d12/6 + d34/12)
			out[3*i+2] = float32(-s12/6 + s34/6 + r[5])
		}
	}
}
