package cpu

import (
	"sync"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
)

// Tap-pair convolution, for images of few positions (a ResNet's last
// stages: 4×4 and 2×2 outputs). There most kernel taps of most output
// positions fall on the padding: a 3×3 convolution of a 2×2 image reads
// 16 of its 36 (position, tap) pairs, a 4×4 one 100 of 144, and the
// implicit GEMM multiplies the zeros of the others like any value. Here
// every valid pair (output position o, tap t, input position q) is one
// product over channels, with the images as the product's columns:
//
//	y[·, k, o] += W[k, ·, t] · x[·, ·, q]	([K, C] · [C, N])
//
// so the arithmetic is the valid pairs' alone. The weights of a tap are
// an A operand of the sgemm micro-kernel (packed once per block of output
// channels), the input at a position a B operand (packed once per call),
// and an output tile sums its position's pairs in a fixed order (taps in
// order), so results do not depend on the thread count. The input
// gradient is the same computation the other way round (x̄[·, c, q] +=
// W[·, c, t]ᵀ · ȳ[·, ·, o]). (The weight gradient as one product per tap
// over its pairs' images was no faster than the implicit GEMM on a 2×2
// image: writing the taps' tiles into W̄, whose taps are innermost, cost
// what the arithmetic saved.)

// tapPair is one valid (tap, position) pair of an output position: tap t
// reads position v of the operand the product's B comes from.
type tapPair struct{ t, v int32 }

// convTaps is the plan of the tap-pair form of convolution g.
type convTaps struct {
	g      prim.ConvGeom
	pin    int         // input positions per image (H*W)
	pout   int         // output positions (OH*OW)
	taps   int         // KH*KW
	fwd    [][]tapPair // per output position: (tap, input position), taps in order
	bwd    [][]tapPair // per input position: (tap, output position), taps in order
	pairs  int
	mr, nr int
}

// convTapsPlan returns the tap-pair plan of g when g has one: ungrouped,
// at most 64 output positions, and the valid pairs' arithmetic, with the
// images rounded up to whole panels of the micro-kernel's columns, at most
// 9/10 of the implicit GEMM's (measured, one thread, Zen 4, batch 32:
// 0.84 (8×8 to 4×4, stride 2) 1.2× faster forward and 1.3× input
// gradient; 0.92 (16×16 to 8×8) no faster).
func convTapsPlan(g prim.ConvGeom) (convTaps, bool) {
	if g.Groups != 1 || g.N == 0 || g.OH*g.OW > 64 || g.KH*g.KW < 2 || g.OH*g.OW == 0 {
		return convTaps{}, false
	}
	c := newConvTaps(g)
	np := (g.N + c.nr - 1) / c.nr
	return c, 10*c.pairs*np*c.nr <= 9*c.pout*c.taps*g.N
}

// newConvTaps lists the valid pairs of ungrouped convolution g.
func newConvTaps(g prim.ConvGeom) convTaps {
	mr, nr := blas.Tile()
	c := convTaps{g: g, pin: g.H * g.W, pout: g.OH * g.OW, taps: g.KH * g.KW, mr: mr, nr: nr}
	c.fwd = make([][]tapPair, c.pout)
	c.bwd = make([][]tapPair, c.pin)
	for oh := 0; oh < g.OH; oh++ {
		for ow := 0; ow < g.OW; ow++ {
			o := oh*g.OW + ow
			for kh := 0; kh < g.KH; kh++ {
				ih := oh*g.SH - g.PH + kh*g.DH
				if ih < 0 || ih >= g.H {
					continue
				}
				for kw := 0; kw < g.KW; kw++ {
					iw := ow*g.SW - g.PW + kw*g.DW
					if iw < 0 || iw >= g.W {
						continue
					}
					t, q := kh*g.KW+kw, ih*g.W+iw
					c.fwd[o] = append(c.fwd[o], tapPair{t: int32(t), v: int32(q)})
					c.pairs++
				}
			}
		}
	}
	// bwd in tap order: taps outer, output positions inner.
	for t := 0; t < c.taps; t++ {
		for o, ps := range c.fwd {
			for _, p := range ps {
				if int(p.t) == t {
					c.bwd[p.v] = append(c.bwd[p.v], tapPair{t: int32(t), v: int32(o)})
				}
			}
		}
	}
	return c
}

// bScratch is the workspace (elements) of the packed B operands of the
// forward product (inputGrad false: x at each input position) or of the
// input gradient's (true: ȳ at each output position).
func (c convTaps) bScratch(inputGrad bool) int {
	np := (c.g.N + c.nr - 1) / c.nr
	if inputGrad {
		return c.pout * np * c.g.K * c.nr
	}
	return c.pin * np * c.g.C * c.nr
}

var tapPanels sync.Pool // *[]float32: one block's A panels

func getPanels(n int) *[]float32 {
	if p, ok := tapPanels.Get().(*[]float32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]float32, n)
	return &s
}

// packB writes src ([N, R, V]) as B panels: for position v and panel jp
// of images, b[((v*np+jp)*R + r)*nr + l] = src[jp*nr+l, r, v], zero past
// the last image.
func (c convTaps) packB(pool *parallel.Pool, src []float32, R, V int, b []float32) {
	n, nr := c.g.N, c.nr
	np := (n + nr - 1) / nr
	pool.For(np*R, max(1, 4096/(nr*V)), func(u0, u1 int) {
		for u := u0; u < u1; u++ {
			jp, r := u/R, u%R
			for l := 0; l < nr; l++ {
				img := jp*nr + l
				if img >= n {
					for v := 0; v < V; v++ {
						b[((v*np+jp)*R+r)*nr+l] = 0
					}
					continue
				}
				row := src[(img*R+r)*V:][:V]
				for v, x := range row {
					b[((v*np+jp)*R+r)*nr+l] = x
				}
			}
		}
	})
}

// tapStride is the distance (elements) between the A panels of
// consecutive taps for an inner dimension R: R*mr and 16 more, so that the
// packers' streams, one a tap, do not all fall in the same L1 sets (with
// R*mr*4 bytes a multiple of 4 KiB, as for 512 channels, nine taps'
// stores evicted each other and packing took longer than the products).
func (c convTaps) tapStride(R int) int { return R*c.mr + 16 }

// tapGroup is the number of blocks of mr rows a task packs and computes
// together: the input gradient's A panels are columns of W (W[k, c0:c0+mr,
// :] for every k), and reading 4 blocks' columns at once reads 864
// contiguous bytes of each row of W rather than 216 (1.3× faster input
// gradient on resnet18's 2×2 stage, one thread, Zen 4).
const tapGroup = 4

// product computes out[img, m, u] = bias[m] + Σ_{(t, v) ∈ pairs[u]} Σ_r
// A_t[m, r] · B_v[r, img] for M rows m, R inner r, U positions u, with B
// packed by packB and packA(mb0, mb1, a) writing the A panels of the
// blocks of rows [mb*mr, mb*mr+mr) for mb in [mb0, mb1) and every tap:
// a[((mb-mb0)*taps + t)*tapStride(R) + r*mr + i] = A_t[mb*mr+i, r] (zero
// past M).
func (c convTaps) product(pool *parallel.Pool, M, R, U int, pairs [][]tapPair, packA func(mb0, mb1 int, a []float32), b, bias, out []float32) {
	mr, nr, n := c.mr, c.nr, c.g.N
	np := (n + nr - 1) / nr
	nmb := (M + mr - 1) / mr
	ts := c.tapStride(R)
	pool.For((nmb+tapGroup-1)/tapGroup, 1, func(g0, g1 int) {
		ap := getPanels(tapGroup * c.taps * ts)
		defer tapPanels.Put(ap)
		tile := make([]float32, mr*nr)
		for mb := g0 * tapGroup; mb < min(nmb, g1*tapGroup); mb++ {
			if (mb-g0*tapGroup)%tapGroup == 0 {
				packA(mb, min(nmb, mb+tapGroup), *ap)
			}
			a := (*ap)[(mb-g0*tapGroup)%tapGroup*c.taps*ts:]
			rows := min(mr, M-mb*mr)
			for u := 0; u < U; u++ {
				for jp := 0; jp < np; jp++ {
					for i, p := range pairs[u] {
						blas.KernelPacked(R, a[int(p.t)*ts:][:R*mr], b[(int(p.v)*np+jp)*R*nr:][:R*nr], tile, nr, i > 0)
					}
					if len(pairs[u]) == 0 {
						clear(tile)
					}
					cols := min(nr, n-jp*nr)
					for i := 0; i < rows; i++ {
						m := mb*mr + i
						var bv float32
						if bias != nil {
							bv = bias[m]
						}
						dst := out[(jp*nr*M+m)*U+u:]
						for l, v := range tile[i*nr : i*nr+cols] {
							dst[l*M*U] = v + bv
						}
					}
				}
			}
		}
	})
}

// forward computes y = conv(x, w) + bias (bias nil: none), ws holding
// bScratch(false) elements.
func (c convTaps) forward(pool *parallel.Pool, x, w, bias, y, ws []float32) {
	g := c.g
	b := ws[:c.bScratch(false)]
	c.packB(pool, x, g.C, c.pin, b)
	c.product(pool, g.K, g.C, c.pout, c.fwd, func(mb0, mb1 int, a []float32) {
		for mb := mb0; mb < mb1; mb++ {
			c.packAForward(w, mb, a[(mb-mb0)*c.taps*c.tapStride(g.C):])
		}
	}, b, bias, y)
}

// inputGrad computes x̄ from ȳ and w, ws holding bScratch(true) elements.
func (c convTaps) inputGrad(pool *parallel.Pool, gy, w, gx, ws []float32) {
	g := c.g
	b := ws[:c.bScratch(true)]
	c.packB(pool, gy, g.K, c.pout, b)
	C, K := g.C, g.K
	c.product(pool, C, K, c.pin, c.bwd, func(mb0, mb1 int, a []float32) { c.packAInput(w, mb0, mb1, a) }, b, nil, gx)
}

// packAForward writes the forward product's A panels of output channels
// [mb*mr, mb*mr+mr): a[t*ts + c*mr + i] = W[mb*mr+i, c, t] (ts =
// tapStride(C)), zero past K.
// Packing is as much of the work as the products on a 2×2 image (every
// weight is packed once a call and used for one panel of images or two),
// so full blocks of 6 rows go through an unrolled loop without bounds
// checks (2–3× faster than the general one, Zen 4).
func (c convTaps) packAForward(w []float32, mb int, a []float32) {
	T, C, K, mr := c.taps, c.g.C, c.g.K, c.mr
	rows := min(mr, K-mb*mr)
	CT, ts := C*T, c.tapStride(C)
	wb := w[mb*mr*CT:][:rows*CT]
	if mr == 6 && rows == 6 {
		r0, r1, r2 := wb[:CT], wb[CT:2*CT], wb[2*CT:3*CT]
		r3, r4, r5 := wb[3*CT:4*CT], wb[4*CT:5*CT], wb[5*CT:6*CT]
		r1, r2, r3, r4, r5 = r1[:len(r0)], r2[:len(r0)], r3[:len(r0)], r4[:len(r0)], r5[:len(r0)]
		q := 0
		for ci := 0; ci < C; ci++ {
			for t := 0; t < T; t++ {
				d := (*[6]float32)(a[t*ts+ci*6:])
				d[0], d[1], d[2], d[3], d[4], d[5] = r0[q], r1[q], r2[q], r3[q], r4[q], r5[q]
				q++
			}
		}
		return
	}
	for ci := 0; ci < C; ci++ {
		for t := 0; t < T; t++ {
			d := a[t*ts+ci*mr:][:mr]
			src := wb[ci*T+t:]
			for i := 0; i < rows; i++ {
				d[i] = src[i*CT]
			}
			clear(d[rows:])
		}
	}
}

// packAInput writes the input gradient's A panels of the blocks of input
// channels [mb*mr, mb*mr+mr), mb in [mb0, mb1): a[((mb-mb0)*T + t)*ts +
// k*mr + i] = W[k, mb*mr+i, t] (ts = tapStride(K)), zero past C. W[k,
// mb0*mr:mb1*mr, :] is contiguous: it is read row by row of W. Full blocks
// of 6 are unrolled as in packAForward.
func (c convTaps) packAInput(w []float32, mb0, mb1 int, a []float32) {
	T, C, K, mr := c.taps, c.g.C, c.g.K, c.mr
	ts := c.tapStride(K)
	for k := 0; k < K; k++ {
		for mb := mb0; mb < mb1; mb++ {
			ab := a[(mb-mb0)*T*ts:]
			rows := min(mr, C-mb*mr)
			if mr == 6 && rows == 6 {
				src := w[(k*C+mb*6)*T:][:6*T]
				s0, s1, s2 := src[:T], src[T:2*T], src[2*T:3*T]
				s3, s4, s5 := src[3*T:4*T], src[4*T:5*T], src[5*T:6*T]
				s1, s2, s3, s4, s5 = s1[:len(s0)], s2[:len(s0)], s3[:len(s0)], s4[:len(s0)], s5[:len(s0)]
				for t := range s0 {
					d := (*[6]float32)(ab[t*ts+k*6:])
					d[0], d[1], d[2], d[3], d[4], d[5] = s0[t], s1[t], s2[t], s3[t], s4[t], s5[t]
				}
				continue
			}
			src := w[(k*C+mb*mr)*T:][:rows*T]
			for t := 0; t < T; t++ {
				d := ab[t*ts+k*mr:][:mr]
				for i := 0; i < rows; i++ {
					d[i] = src[i*T+t]
				}
				clear(d[rows:])
			}
		}
	}
}
