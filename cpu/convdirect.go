package cpu

import (
	"sync"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
)

// Direct convolution, for stride-1 ungrouped float32 convolutions whose
// output rows are a multiple of 16 wide (most of an ESRGAN's or a ResNet's
// first stage). The micro-kernel (blas.ConvTile) computes 6 output channels
// × 16 positions of one output row, reading the input in place from a
// zero-padded copy of the image: for kernel tap r (input channel c, kernel
// row kh, column kw) the 16 inputs of the tile are consecutive in the
// padded row, at a fixed offset from the tile's. Nothing is expanded 9
// times as im2col would, so convolutions with few output channels, whose
// im2col matrix is used too few times to repay building it, run near the
// kernel's speed. The input gradient of such a convolution is one too: of
// ȳ, with the taps mirrored.

const (
	directKC = 256 // taps per pass over a row, so a pass's input stays in L1
	directMR = blas.ConvTileRows
	directNR = blas.ConvTileCols
)

// directConv describes one direct convolution: source images [cin, h, w],
// padded by padT rows and padL columns in front into [cin, hp, wp], output
// [cout, oh, ow] with ow a multiple of 16, and kk taps, tap r reading the
// padded source at offs[r] from the output position (row o, column j) at
// o*wp + j.
type directConv struct {
	cin, h, w  int
	padT, padL int
	hp, wp     int
	cout, oh   int
	ow         int
	kk         int
}

// scratch is the workspace (float32 elements) of the convolution: one
// padded image and the packed weights.
func (d directConv) scratch() int {
	bs := directBlocks(d.cout, d.kk)
	last := bs[len(bs)-1]
	return d.cin*d.hp*d.wp + last.off + last.width*d.kk
}

// directBlock is a block of output channels [k0, k0+rows) computed by one
// kernel: the 6-row one, or the 4-row one (rows 4). A block of fewer rows
// (at most one, the last) runs the 6-row kernel into a scratch tile. Its
// weights are packed at a[off:], rows values per tap (6 for a short
// block, zero-padded).
type directBlock struct{ k0, rows, width, off int }

// directBlocks splits cout output channels into blocks of 6 and 4 rows
// (K = 32 is 4×6 + 2×4 rather than 5×6 + 2 wasting 4 rows of every tap),
// with at most one shorter block at the end.
func directBlocks(cout, kk int) []directBlock {
	n6, n4 := cout/6, 0
	switch cout % 6 {
	case 2:
		if n6 > 0 {
			n6, n4 = n6-1, 2
		}
	case 4, 5:
		n4 = 1
	}
	var bs []directBlock
	k, off := 0, 0
	for i := 0; i < n6+n4; i++ {
		w := directMR
		if i >= n6 {
			w = 4
		}
		bs = append(bs, directBlock{k0: k, rows: w, width: w, off: off})
		k += w
		off += w * kk
	}
	if k < cout {
		bs = append(bs, directBlock{k0: k, rows: cout - k, width: directMR, off: off})
	}
	return bs
}

// packDirect packs weights for blocks bs: for output channel k of a block
// and tap r, a[off + r*width + (k-k0)] = weight(k, r), zero past the
// block's rows.
func packDirect(pool *parallel.Pool, bs []directBlock, kk int, a []float32, weight func(k, r int) float32) {
	pool.For(len(bs), 1, func(b0, b1 int) {
		for _, b := range bs[b0:b1] {
			pan := a[b.off : b.off+b.width*kk]
			for i := 0; i < b.width; i++ {
				if i >= b.rows {
					for r := 0; r < kk; r++ {
						pan[r*b.width+i] = 0
					}
					continue
				}
				for r := 0; r < kk; r++ {
					pan[r*b.width+i] = weight(b.k0+i, r)
				}
			}
		}
	})
}

// directForward is the direct form of the forward convolution g.
func directForward(g prim.ConvGeom) (directConv, bool) {
	if g.SH != 1 || g.SW != 1 || g.Groups != 1 || g.OW%directNR != 0 || g.OW == 0 || g.OH == 0 || directGemmBetter(g) {
		return directConv{}, false
	}
	return directConv{cin: g.C, h: g.H, w: g.W, padT: g.PH, padL: g.PW,
		hp: g.OH + (g.KH-1)*g.DH, wp: g.OW + (g.KW-1)*g.DW,
		cout: g.K, oh: g.OH, ow: g.OW, kk: g.C * g.KH * g.KW}, true
}

// directGemmBetter reports whether pointwise convolution g (or its input
// gradient, the same shapes) runs as one sgemm an image in place
// (convPointwiseInPlace), which is faster than the direct kernel: its taps
// are whole planes apart, so a tile's 256 taps load from as many pages
// (ResNet-152's 1×1 convolutions of 32×32 images, one thread, Zen 4: 1.6×
// faster forward, 2.2× input gradient).
func directGemmBetter(g prim.ConvGeom) bool { return convPointwiseInPlace(g) }

// directInputGrad is the direct form of the input gradient of g: a
// convolution of ȳ ([K, OH, OW]) giving x̄ ([C, H, W]).
func directInputGrad(g prim.ConvGeom) (directConv, bool) {
	qh, qw := (g.KH-1)*g.DH-g.PH, (g.KW-1)*g.DW-g.PW
	if g.SH != 1 || g.SW != 1 || g.Groups != 1 || g.W%directNR != 0 || g.W == 0 || g.H == 0 || qh < 0 || qw < 0 || directGemmBetter(g) {
		return directConv{}, false
	}
	return directConv{cin: g.K, h: g.OH, w: g.OW, padT: qh, padL: qw,
		hp: g.H + (g.KH-1)*g.DH, wp: g.W + (g.KW-1)*g.DW,
		cout: g.C, oh: g.H, ow: g.W, kk: g.K * g.KH * g.KW}, true
}

var directOffsPool sync.Pool // *[]int32

// run computes out ([n, cout, oh, ow]) = conv(src ([n, cin, h, w])) +
// bias (nil: none), with the packed weights a (panels of 6 output
// channels, kk steps each: a[(b*kk+r)*6+i] is the weight of output channel
// 6b+i at tap r), the tap offsets offs and scratch xp for a padded image.
func (d directConv) run(pool *parallel.Pool, n int, src, a, bias, out []float32, offs []int32, xp []float32) {
	plane := d.h * d.w
	unpadded := d.padT == 0 && d.padL == 0 && d.hp == d.h && d.wp == d.w
	d.runFill(pool, n, func(img int, xp []float32) []float32 {
		xi := src[img*d.cin*plane:][:d.cin*plane]
		if unpadded {
			// A pointwise convolution's image is its own padded copy.
			return xi
		}
		d.pad(pool, xi, xp)
		return xp
	}, a, bias, out, offs, xp)
}

// runFill is run with the padded image img given by fill(img, xp), which
// writes it into xp or returns another slice holding it.
func (d directConv) runFill(pool *parallel.Pool, n int, fill func(img int, xp []float32) []float32, a, bias, out []float32, offs []int32, xp0 []float32) {
	P := d.oh * d.ow
	maxOff := 0
	for _, o := range offs[:d.kk] {
		maxOff = max(maxOff, int(o))
	}
	bs := directBlocks(d.cout, d.kk)
	for img := 0; img < n; img++ {
		xp := fill(img, xp0)
		oi := out[img*d.cout*P:][:d.cout*P]
		pool.For(d.oh, 1, func(o0, o1 int) {
			var tmp [directMR * directNR]float32
			for o := o0; o < o1; o++ {
				// The output row starts as the bias, here rather than in a
				// parallel loop of its own: one wait for the threads less
				// an image, and the row is in cache when the kernel adds
				// to it.
				for k := 0; k < d.cout; k++ {
					row := oi[k*P+o*d.ow:][:d.ow]
					if bias == nil {
						clear(row)
						continue
					}
					b := bias[k]
					for j := range row {
						row[j] = b
					}
				}
				for rb := 0; rb < d.kk; rb += directKC {
					kc := min(directKC, d.kk-rb)
					for _, b := range bs {
						ap := a[b.off+rb*b.width:]
						for j := 0; j < d.ow; j += directNR {
							base := o*d.wp + j
							coff := b.k0*P + o*d.ow + j
							switch {
							case b.rows == directMR:
								blas.ConvTile(kc, ap, xp, base, offs[rb:], maxOff, oi, coff, P)
								continue
							case b.rows == 4 && b.width == 4:
								blas.ConvTile4(kc, ap, xp, base, offs[rb:], maxOff, oi, coff, P)
								continue
							}
							clear(tmp[:])
							blas.ConvTile(kc, ap, xp, base, offs[rb:], maxOff, tmp[:], 0, directNR)
							for i := 0; i < b.rows; i++ {
								dst := oi[coff+i*P:][:directNR]
								for q, v := range tmp[i*directNR : (i+1)*directNR] {
									dst[q] += v
								}
							}
						}
					}
				}
			}
		})
	}
}

// pad copies image xi ([cin, h, w]) into xp ([cin, hp, wp]) with zeros
// around it.
func (d directConv) pad(pool *parallel.Pool, xi, xp []float32) {
	plane, pplane := d.h*d.w, d.hp*d.wp
	pool.For(d.cin, max(1, 8192/pplane), func(c0, c1 int) {
		for c := c0; c < c1; c++ {
			d.padPlane(xi[c*plane:(c+1)*plane], xp[c*pplane:(c+1)*pplane])
		}
	})
}

// padPlane copies plane src ([h, w]) into dst ([hp, wp]) with zeros
// around it.
func (d directConv) padPlane(src, dst []float32) {
	padR := d.wp - d.padL - d.w
	clear(dst[:d.padT*d.wp])
	// Row by row: the interior copied, the few padding columns stored one
	// by one (clear and copy calls would cost more than they move).
	o := d.padT * d.wp
	for i := 0; i < d.h; i++ {
		row := dst[o : o+d.wp]
		for j := 0; j < d.padL; j++ {
			row[j] = 0
		}
		copyRunF32(row[d.padL:d.padL+d.w], src[i*d.w:(i+1)*d.w])
		for j := d.wp - padR; j < d.wp; j++ {
			row[j] = 0
		}
		o += d.wp
	}
	clear(dst[o:])
}

// directWgrad is the geometry of the direct weight gradient of g (a padded
// input image, as for the forward pass) when it has one: stride 1,
// ungrouped, kernel rows 3 wide, output rows a multiple of 8 wide, at least
// 4 output channels, and images of at least 256 output positions (below
// that a pass is too short to repay reducing its 12 sums, and the implicit
// GEMM is faster).
func directWgrad(g prim.ConvGeom) (directConv, bool) {
	if g.SH != 1 || g.SW != 1 || g.Groups != 1 || g.KW != 3 || g.OW%8 != 0 || g.OW == 0 || g.OH*g.OW < 256 || g.K < 4 {
		return directConv{}, false
	}
	return directConv{cin: g.C, h: g.H, w: g.W, padT: g.PH, padL: g.PW,
		hp: g.OH + (g.KH-1)*g.DH, wp: g.OW + (g.KW-1)*g.DW,
		cout: g.K, oh: g.OH, ow: g.OW, kk: g.C * g.KH * g.KW}, true
}

// wgradChunk is the number of images a pass of the direct weight
// gradient's kernel covers (for images of fewer than convTargetCols
// positions, those of a chunk stacked: a channel's padded images one under
// the other, and the gradient rows of the rows between them zero, so that
// one kernel call runs over all, and its sums' reduction and the call are
// paid once a chunk, not once an image), and the rows of such a pass.
func (d directConv) wgradChunk(n int) (nb, rows int) {
	nb = max(1, min(n, convTargetCols/(d.oh*d.ow)))
	return nb, (nb-1)*d.hp + d.oh
}

// wgradScratch is the workspace of the direct weight gradient of n images:
// a chunk of padded images, and of gathered gradient rows when a chunk
// has more than one image.
func (d directConv) wgradScratch(n int) int {
	nb, rows := d.wgradChunk(n)
	s := nb * d.cin * d.hp * d.wp
	if nb > 1 {
		s += d.cout * rows * d.ow
	}
	return s
}

// convDirectWgrad computes the weight gradient gw of g from the output
// gradient gy and the input x directly if it can: for each group of 8 (or
// 4) output channels, input channel and kernel row, one pass of
// blas.ConvWgrad8 (ConvWgrad) over a chunk of images' positions gives the
// 24 (12) weights' terms.
func convDirectWgrad(pool *parallel.Pool, g prim.ConvGeom, gy, x, gw []float32, ws []float32) bool {
	d, ok := directWgrad(g)
	if !ok || !blas.ConvWgradOK() {
		return false
	}
	clear(gw)
	P := g.OH * g.OW
	plane, pplane := g.H*g.W, d.hp*d.wp
	nb, rows := d.wgradChunk(g.N)
	xp := ws[:nb*g.C*pplane]
	ldk := rows * g.OW
	var gyc []float32
	if nb > 1 {
		gyc = ws[len(xp):][:g.K*ldk]
	}
	// Groups of 8 output channels where the CPU has the kernel (each input
	// vector loaded then serves 8 gradient rows), else of 4.
	kg, kern := 4, blas.ConvWgrad
	if blas.ConvWgrad8OK() && g.K >= 8 {
		kg, kern = 8, blas.ConvWgrad8
	}
	nkg := (g.K + kg - 1) / kg
	for n0 := 0; n0 < g.N; n0 += nb {
		cnt := min(nb, g.N-n0)
		// Channel c of image n0+i at plane c*nb+i.
		pool.For(g.C*cnt, max(1, 8192/pplane), func(p0, p1 int) {
			for p := p0; p < p1; p++ {
				c, i := p/cnt, p%cnt
				d.padPlane(x[((n0+i)*g.C+c)*plane:][:plane], xp[(c*nb+i)*pplane:][:pplane])
			}
		})
		src, lds, oh := gy[n0*g.K*P:][:g.K*P], P, g.OH
		if nb > 1 {
			oh = (cnt-1)*d.hp + g.OH
			pool.For(g.K, max(1, 8192/ldk), func(k0, k1 int) {
				for k := k0; k < k1; k++ {
					dst := gyc[k*ldk:][:ldk]
					for i := 0; i < cnt; i++ {
						copy(dst[i*d.hp*g.OW:][:P], gy[((n0+i)*g.K+k)*P:][:P])
						clear(dst[(i*d.hp+g.OH)*g.OW : min((i+1)*d.hp*g.OW, ldk)])
					}
				}
			})
			src, lds = gyc, ldk
		}
		pool.For(nkg*g.C, max(1, 4096/(oh*g.OW*g.KH)), func(u0, u1 int) {
			var out [24]float32
			for u := u0; u < u1; u++ {
				kgi, c := u/g.C, u%g.C
				k0 := min(kgi*kg, g.K-kg) // the last group may overlap the one before
				for kh := 0; kh < g.KH; kh++ {
					clear(out[:])
					kern(src, k0*lds, lds, xp, c*nb*pplane+kh*g.DH*d.wp, g.DW, d.wp, g.OW, oh, out[:])
					for k := max(k0, kgi*kg); k < k0+kg; k++ {
						w := gw[((k*g.C+c)*g.KH+kh)*3:][:3]
						o := out[3*(k-k0):][:3]
						w[0] += o[0]
						w[1] += o[1]
						w[2] += o[2]
					}
				}
			}
		})
	}
	return true
}

// getOffs returns a pooled []int32 of length n.
func getOffs(n int) *[]int32 {
	if p, ok := directOffsPool.Get().(*[]int32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]int32, n)
	return &s
}

// convDirectForward runs forward convolution g directly if it can (float32
// with the assembly kernel, a direct geometry) and reports whether it did.
func convDirectForward(pool *parallel.Pool, g prim.ConvGeom, x, w, bias, y []float32, ws []float32) bool {
	d, ok := directForward(g)
	if !ok || !blas.ConvTileOK() {
		return false
	}
	khw := g.KH * g.KW
	op := getOffs(d.kk)
	defer directOffsPool.Put(op)
	offs := *op
	for c := 0; c < g.C; c++ {
		for kh := 0; kh < g.KH; kh++ {
			for kw := 0; kw < g.KW; kw++ {
				offs[c*khw+kh*g.KW+kw] = int32(c*d.hp*d.wp + kh*g.DH*d.wp + kw*g.DW)
			}
		}
	}
	xp := ws[:d.cin*d.hp*d.wp]
	a := ws[len(xp):d.scratch()]
	packDirect(pool, directBlocks(d.cout, d.kk), d.kk, a, func(k, r int) float32 { return w[k*d.kk+r] })
	d.run(pool, g.N, x, a, bias, y, offs, xp)
	return true
}

// Space to depth, for stride-2 convolutions with large kernels (a ResNet's
// 7×7 stem): with kernel row kh = 2a+b, the input row 2·oh+kh of the padded
// image is row oh+a of its phase-b rows, so the convolution is a stride-1
// one of the image's four phases (4C channels of the padded image's even
// and odd rows and columns) with a ⌈KH/2⌉×⌈KW/2⌉ kernel (zero where 2a+b
// passes the kernel's edge), which the direct kernel runs: 7×7 becomes 4×4
// on 12 channels, 64 taps a channel for 49 (1.5× faster on resnet18's stem,
// one thread, Zen 4, than the implicit GEMM's strided gather).

// s2dGeom is the stride-1 geometry of g's space-to-depth form, when g has
// one the direct convolution runs and the zero taps add at most 40%.
func s2dGeom(g prim.ConvGeom) (prim.ConvGeom, bool) {
	if g.SH != 2 || g.SW != 2 || g.DH != 1 || g.DW != 1 || g.Groups != 1 || g.PH < 0 || g.PW < 0 || g.KH < 2 || g.KW < 2 {
		return prim.ConvGeom{}, false
	}
	ah, aw := (g.KH+1)/2, (g.KW+1)/2
	if 10*4*ah*aw > 14*g.KH*g.KW {
		return prim.ConvGeom{}, false
	}
	g2 := prim.ConvGeom{N: g.N, C: 4 * g.C, H: g.OH + ah - 1, W: g.OW + aw - 1, K: g.K, KH: ah, KW: aw,
		OH: g.OH, OW: g.OW, SH: 1, SW: 1, DH: 1, DW: 1, Groups: 1}
	_, ok := directForward(g2)
	return g2, ok
}

// convS2DForward runs forward convolution g in its space-to-depth form if
// it has one and reports whether it did.
func convS2DForward(pool *parallel.Pool, g prim.ConvGeom, x, w, bias, y []float32, ws []float32) bool {
	g2, ok := s2dGeom(g)
	if !ok || !blas.ConvTileOK() {
		return false
	}
	d, _ := directForward(g2)
	ah, aw := g2.KH, g2.KW
	khw := ah * aw
	op := getOffs(d.kk)
	defer directOffsPool.Put(op)
	offs := *op
	for c := 0; c < g2.C; c++ {
		for a := 0; a < ah; a++ {
			for a2 := 0; a2 < aw; a2++ {
				offs[c*khw+a*aw+a2] = int32(c*d.hp*d.wp + a*d.wp + a2)
			}
		}
	}
	xp := ws[:d.cin*d.hp*d.wp]
	pk := ws[len(xp):d.scratch()]
	// Channel 4c+2b+b' of the phases is phase (b, b') of channel c.
	packDirect(pool, directBlocks(d.cout, d.kk), d.kk, pk, func(k, r int) float32 {
		c2, t := r/khw, r%khw
		kh, kw := 2*(t/aw)+c2/2%2, 2*(t%aw)+c2%2
		if kh >= g.KH || kw >= g.KW {
			return 0
		}
		return w[((k*g.C+c2/4)*g.KH+kh)*g.KW+kw]
	})
	plane, pplane := g.H*g.W, d.hp*d.wp
	d.runFill(pool, g.N, func(img int, xp []float32) []float32 {
		xi := x[img*g.C*plane:][:g.C*plane]
		pool.For(g2.C, max(1, 8192/pplane), func(p0, p1 int) {
			for c2 := p0; c2 < p1; c2++ {
				src := xi[c2/4*plane:][:plane]
				b, b2 := c2/2%2, c2%2
				dst := xp[c2*pplane:][:pplane]
				for i := 0; i < d.hp; i++ {
					row := dst[i*d.wp:][:d.wp]
					ih := 2*i + b - g.PH
					if ih < 0 || ih >= g.H {
						clear(row)
						continue
					}
					sr := src[ih*g.W:][:g.W]
					for j := range row {
						if iw := 2*j + b2 - g.PW; iw >= 0 && iw < g.W {
							row[j] = sr[iw]
						} else {
							row[j] = 0
						}
					}
				}
			}
		})
		return xp
	}, pk, bias, y, offs, xp)
	return true
}

// convDirectInputGrad computes the input gradient of g directly if it can.
func convDirectInputGrad(pool *parallel.Pool, g prim.ConvGeom, gy, w, gx []float32, ws []float32) bool {
	d, ok := directInputGrad(g)
	if !ok || !blas.ConvTileOK() {
		return false
	}
	khw := g.KH * g.KW
	op := getOffs(d.kk)
	defer directOffsPool.Put(op)
	offs := *op
	for k := 0; k < g.K; k++ {
		for kh := 0; kh < g.KH; kh++ {
			for kw := 0; kw < g.KW; kw++ {
				offs[k*khw+kh*g.KW+kw] = int32(k*d.hp*d.wp + (g.KH-1-kh)*g.DH*d.wp + (g.KW-1-kw)*g.DW)
			}
		}
	}
	xp := ws[:d.cin*d.hp*d.wp]
	a := ws[len(xp):d.scratch()]
	// The weight of output channel c at tap r = (k, kh, kw) is W[k][c][kh][kw].
	packDirect(pool, directBlocks(d.cout, d.kk), d.kk, a, func(c, r int) float32 { return w[(r/khw*g.C+c)*khw+r%khw] })
	d.run(pool, g.N, gy, a, nil, gx, offs, xp)
	return true
}
