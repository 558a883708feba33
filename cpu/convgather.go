package cpu

import (
	"sync"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
)

// Gather packing, for convolutions whose output rows are short (the deep
// layers of a network: 8, 4, 2 positions wide) or strided. The im2col
// matrix of a chunk of images is read from a zero-padded copy of the chunk,
// xp, as xp[tap[r] + pos[j]]: tap[r] is the offset of kernel tap r (input
// channel, kernel row and column) and pos[j] that of output position j
// (image, output row and column, strides applied). Every element is one
// load at a sum of two precomputed offsets, with no run boundaries or
// padding tests, which is what short rows need.

// convGatherOK reports whether convolution g (after convFlat) packs by
// gathering rather than by runs (not the transposed geometry of
// convTransposed, whose padding and dilation are negative).
func convGatherOK(g prim.ConvGeom) bool {
	return (g.SW != 1 || g.OW < 16) && g.PH >= 0 && g.PW >= 0 && g.DH > 0 && g.DW > 0
}

// convPadded is the size of one padded image.
func convPadded(g prim.ConvGeom) (hp, wp int) { return g.H + 2*g.PH, g.W + 2*g.PW }

// convGatherScratch is the workspace (elements) of the padded copy of a
// chunk of nb images.
func convGatherScratch(g prim.ConvGeom, nb int) int {
	if !convGatherOK(g) {
		return 0
	}
	hp, wp := convPadded(g)
	return nb * g.C * hp * wp
}

type convGather[T Float] struct {
	xp    []T
	taps  []int32 // per im2col row of the group, from its first row
	lanes []int32 // per column (output position of the chunk)
}

var convGatherPool sync.Pool // *[]int32

func getInt32s(n int) *[]int32 {
	if p, ok := convGatherPool.Get().(*[]int32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]int32, n)
	return &s
}

// newConvGather pads images [n0, n0+cnt) of x into xp and computes the
// offsets for group gi. buf receives the offsets (pooled by the caller).
func newConvGather[T Float](pool *parallel.Pool, g prim.ConvGeom, x []T, n0, cnt, gi int, xp []T, pad bool, buf []int32) *convGather[T] {
	hp, wp := convPadded(g)
	plane, pplane := g.H*g.W, hp*wp
	if pad {
		pool.For(cnt*g.C, max(1, 8192/pplane), func(p0, p1 int) {
			for p := p0; p < p1; p++ {
				src := x[(n0*g.C+p)*plane:][:plane]
				dst := xp[p*pplane : (p+1)*pplane]
				clear(dst[:g.PH*wp])
				for i := 0; i < g.H; i++ {
					row := dst[(g.PH+i)*wp : (g.PH+i+1)*wp]
					clear(row[:g.PW])
					copy(row[g.PW:g.PW+g.W], src[i*g.W:(i+1)*g.W])
					clear(row[g.PW+g.W:])
				}
				clear(dst[(g.PH+g.H)*wp:])
			}
		})
	}
	cg := g.C / g.Groups
	khw := g.KH * g.KW
	kk := cg * khw
	P := g.OH * g.OW
	taps, lanes := buf[:kk], buf[kk:kk+cnt*P]
	for r := range taps {
		c, t := gi*cg+r/khw, r%khw
		taps[r] = int32(c*pplane + t/g.KW*g.DH*wp + t%g.KW*g.DW)
	}
	j := 0
	for img := 0; img < cnt; img++ {
		for oh := 0; oh < g.OH; oh++ {
			for ow := 0; ow < g.OW; ow++ {
				lanes[j] = int32(img*g.C*pplane + oh*g.SH*wp + ow*g.SW)
				j++
			}
		}
	}
	return &convGather[T]{xp: xp[:cnt*g.C*pplane], taps: taps, lanes: lanes}
}

// packForward is a blas.PackFunc for op(B) = col(x) (rows taps, columns
// positions), called by rows.
func (cg *convGather[T]) packForward(dst []T, p0, kc, j0, nc, r0, r1, jpLo, jpHi, nr int) {
	xp := cg.xp
	for p := r0; p < r1; p++ {
		t := int(cg.taps[p0+p])
		for jp := jpLo; jp < jpHi; jp++ {
			d := dst[jp*nr*kc+p*nr:][:nr]
			lo := j0 + jp*nr
			n := min(nr, j0+nc-lo)
			ls := cg.lanes[lo : lo+n]
			for l, o := range ls {
				d[l] = xp[t+int(o)]
			}
			clear(d[n:])
		}
	}
}

// packWeightGrad is a blas.PackFunc for op(B) = col(x)ᵀ (rows positions,
// columns taps), called by panels.
func (cg *convGather[T]) packWeightGrad(dst []T, p0, kc, j0, nc, r0, r1, jpLo, jpHi, nr int) {
	xp := cg.xp
	for jp := jpLo; jp < jpHi; jp++ {
		pan := dst[jp*nr*kc : (jp+1)*nr*kc]
		n := min(nr, nc-jp*nr)
		ts := cg.taps[j0+jp*nr : j0+jp*nr+n]
		for p := r0; p < r1; p++ {
			d := pan[p*nr : (p+1)*nr]
			o := int(cg.lanes[p0+p])
			for l, t := range ts {
				d[l] = xp[o+int(t)]
			}
			clear(d[n:])
		}
	}
}
