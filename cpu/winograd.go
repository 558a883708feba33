package cpu

import (
	"math"
	"sync"
	"sync/atomic"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/env"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
)

// Winograd convolution F(4×4, 3×3) (Lavin and Gray, "Fast Algorithms for
// Convolutional Neural Networks", 2016), for 3×3 stride-1 ungrouped float32
// convolutions with enough channels, and for their input gradients (a 3×3
// stride-1 convolution of ȳ with the weights transposed and flipped).
//
// The output is cut into 4×4 tiles; tile t of input channel c is the 6×6
// patch d of the input under it, transformed to V = Bᵀ d B, and the weight
// of (k, c) to U = G w Gᵀ. In that domain the convolution is 36 independent
// products M[ξ] = U[ξ] · V[ξ] ([K, C] · [C, tiles]) and the output tile is
// Aᵀ M A: 36 multiply-adds per 16 outputs and channel pair instead of 144.
// The 36 products run on the sgemm micro-kernel: U is written once per call
// in its A-panel layout and V, a chunk of tiles at a time, in its B-panel
// layout, so nothing is packed twice. A chunk's V and M stay in cache
// between the three phases (input transform, products, output transform).
//
// The transforms run on AVX2 kernels (cpu/internal/gemm/winograd_amd64.s)
// in place in V, M and U, 16 tiles (or kernels) a row; elsewhere, and with
// micro-kernels whose panels are not 16 wide, in portable Go. With the
// AVX-512 kernel set the input patches are gathered all six rows of up to
// 8 tiles a call (WinoGatherRows), with the same values.
//
// Tried and not kept: the whole input transform in one AVX-512 call
// (gather, both passes of Bᵀ d B through a buffer in L1, V written once
// instead of three times; bitwise the same values) measured no faster on
// Zen 4 than the gather followed by the two passes in V.
//
// Accuracy: the transforms' constants (1/4, 1/6, 1/24; 2, 4, 5, 8) grow the
// rounding error of a float32 sum: about 10× the direct path's per output
// (winograd_test.go measures both against float64), 1.8e-6 relative (norm)
// to the direct path on the workloads' layers. Gradients that are
// sensitive to rounding show it (see winoMinFlops), so small convolutions
// keep the direct paths.

const (
	winoOut   = 4  // output tile side
	winoIn    = 6  // input tile side
	winoPts   = 36 // points of the transformed domain
	winoKC    = 256
	winoChunk = 1 << 20 // float32 elements of a chunk's V and M together (4 MiB)
)

// winograd is the plan of one Winograd convolution of forward geometry g.
type winograd struct {
	g      prim.ConvGeom
	th, tw int // tiles per image: rows, columns
	tiles  int // N*th*tw
	tc     int // tiles per chunk, a multiple of nr
	kpad   int // K rounded up to the micro-kernel's rows
	kb     int // output channels per block (a multiple of mr, at most kpad)
	mr, nr int
}

// winogradFor returns the Winograd plan of forward geometry g when it has
// one and it is expected to be faster than the other paths: 3×3, stride 1,
// dilation 1, ungrouped, not negatively padded, outputs at least 4×4, and
// enough channels on both sides and tiles that the transforms are cheap
// next to the products.
func winogradFor(g prim.ConvGeom) (winograd, bool) {
	if winogradOff {
		return winograd{}, false
	}
	w, ok := winogradPlan(g)
	// At least twice fewer multiplications than a direct 3×3 convolution
	// once the partial tiles at the edges are counted.
	if !ok || g.OH < winoOut || g.OW < winoOut || 2*winoPts*w.th*w.tw > 9*g.OH*g.OW {
		return winograd{}, false
	}
	// The transforms cost per channel and tile, the products per pair of
	// channels and tile: with fewer than 64 channels on either side the
	// transforms take about as long as they save unless there are many
	// tiles to spread the fixed costs over (measured, one thread, Zen 3:
	// 32→32 channels on 8×16×16 images 1.25× slower, 8×32×32 1.3× faster;
	// 16 channels slower at every size tried; 64→64 on 2×8×8 (8 tiles)
	// 1.5× slower, on 1×16×16 (16 tiles) 1.3× faster).
	if c := min(g.C, g.K); c < 32 || w.tiles < 16 || c < 64 && w.tiles < 256 {
		return winograd{}, false
	}
	// Only convolutions of at least winoMinFlops: Winograd's rounding
	// error is about 10× the direct path's per output (winograd_test.go),
	// and small problems are where that shows and little time is saved.
	if 2*9*float64(g.N)*float64(g.K)*float64(g.C)*float64(g.OH*g.OW) < winoMinFlops {
		return winograd{}, false
	}
	return w, true
}

// winoMaxU is the most bytes of transformed weights a Winograd
// convolution holds at a time. The transformed weights are 4× the weights
// (36 values per 9) and part of the peak (a workspace): deep layers would
// add 9.5 MiB (256→256) to 38 MiB (512→512), so they are transformed a
// block of output channels at a time. The products of one point read its
// block's U from the L2 cache (C=256: 48 KiB a point), and it stays
// there between the weight transform and the products. 3 MiB holds all
// of a 128→128 layer's U (2.4 MiB) in one block: with two, each chunk of
// tiles transforms the weights once a block, and ResNet-152's 128→128 on
// 8×16×16 (two chunks) ran its forward and input gradient 9-15% slower
// (two Zen 4 cores, AVX2 and AVX-512, CPU time, interleaved medians of
// 11; 256→256 on 8×8 and rrdbnet's 192→64 the same or 1-5% faster).
const winoMaxU = 3 << 20

// winoMinFlops is the size (flops of the direct convolution) below which
// convolutions keep the direct paths. It lies above every convolution of
// the PyTorch parity tests (zoo/parity_test.go; the largest, vgg19's
// 64→64 on one 32×32 image, is 75 MFLOP), whose gradients are sensitive
// to rounding (an L1 loss takes signs of near-zero differences, batch
// norm over 6 values divides by tiny deviations): with Winograd on those,
// vgg19_conv54's gradients differ from PyTorch's by 1.1e-2 and
// resnet_bottleneck's by 0.24 (tolerance 1e-4), against a per-output
// error of 1.8e-6 relative (norm) to the direct path. Below it the gain
// is at most about 1.3× (measured); the standard workloads' 3×3
// convolutions are 151 MFLOP (rrdbnet) and up.
const winoMinFlops = 1e8

// winogradPlan is the Winograd plan of any geometry it can compute.
func winogradPlan(g prim.ConvGeom) (winograd, bool) {
	if g.KH != 3 || g.KW != 3 || g.SH != 1 || g.SW != 1 || g.DH != 1 || g.DW != 1 || g.Groups != 1 ||
		g.PH < 0 || g.PW < 0 || g.N <= 0 || g.OH <= 0 || g.OW <= 0 || g.C <= 0 || g.K <= 0 {
		return winograd{}, false
	}
	th, tw := (g.OH+winoOut-1)/winoOut, (g.OW+winoOut-1)/winoOut
	mr, nr := blas.Tile()
	w := winograd{g: g, th: th, tw: tw, tiles: g.N * th * tw, mr: mr, nr: nr}
	w.kpad = (g.K + mr - 1) / mr * mr
	w.kb = w.blockRows(winoMaxU)
	// Chunks of about winoChunk elements of V and M, but at least 64
	// tiles: each chunk reads all of U (and transforms it again when it
	// is cut into blocks), which for deep layers (many channels, few
	// tiles) is the larger part. Long chunks, of equal sizes: each chunk
	// is three parallel loops, and on a loaded machine the threads' waits
	// between them cost more than V and M falling out of L2 (rrdbnet's
	// 64→64 on 4×128×128, two threads, CPU time a call: forward 46 ms
	// with chunks of 224 tiles, 85 with 64; one thread about the same).
	w.tc = w.chunkTiles(nr, 64)
	return w, true
}

// blockRows is the rows of the blocks of output channels, of about equal
// sizes (multiples of mr), whose U fits maxU bytes (at least mr rows
// whatever C).
func (w winograd) blockRows(maxU int) int {
	q := max(maxU/(4*winoPts*w.g.C*w.mr), 1) // most micro-kernel rows a block
	nb := (w.kpad/w.mr + q - 1) / q
	return (w.kpad/w.mr + nb - 1) / nb * w.mr
}

// chunkTiles is the tiles of a chunk, a multiple of mult, chunks of equal
// sizes: V and M of a chunk (V and Y for the weight gradient) about
// winoChunk elements, but at most a quarter of the convolution's input and
// output together unless that is under least tiles, and never under 64
// tiles. The workspace is part of the step's peak, and a chunk as large
// as a small convolution's tensors costs a small model's memory for
// little time (one thread, Zen 4, CPU time a call, medians of 7
// interleaved runs against chunks of about winoChunk: the forward and
// input gradient of rrdbnet's and resnet's layers 0.88-1.07× at 64
// tiles; the weight gradient 1.15-1.35× at 64 tiles, 0.96-1.02× at 128;
// the cnn's planned peak at batch 32 15.29 MiB against 17.01).
func (w winograd) chunkTiles(mult, least int) int {
	g := w.g
	perTile := winoPts * (g.C + w.kb)
	tc := winoChunk / perTile / mult * mult
	small := g.N * (g.C*g.H*g.W + g.K*g.OH*g.OW) / 4 / perTile / mult * mult
	tc = max(min(tc, max(small, least)), 64, mult)
	n := (w.tiles + tc - 1) / tc
	return ((w.tiles+n-1)/n + mult - 1) / mult * mult
}

// winogradOff turns Winograd off: $HEADROOM_WINOGRAD=0 (read once, so
// that planned workspaces and kernels agree), and benchmarks timing the
// paths side by side.
var winogradOff bool

func init() {
	on, err := env.Bool(env.Winograd, true)
	winogradOff = err != nil || !on
}

// scratch is the workspace (float32 elements): U, then a chunk's V and M.
func (w winograd) scratch() int {
	return winoPts * (w.uStride() + w.vStride() + w.mStride())
}

// Strides of U, V and M, in elements. U holds, per point, kb×C values (a
// block of output channels); V, per point, tc/nr panels of C×nr values;
// M, per point, kb rows of tc. Each is padded by a cache line: unpadded, a panel of 64 channels is 4 KiB, and the 36 points'
// rows of one channel would all fall in the same sets of the L1 cache.
func (w winograd) vPanel() int  { return w.g.C*w.nr + 16 }
func (w winograd) uStride() int { return (w.kb*w.g.C+15)/16*16 + 16 }
func (w winograd) vStride() int { return w.tc/w.nr*w.vPanel() + 16 }
func (w winograd) mStride() int { return w.kb*w.tc + 16 }

// kcBlock is the split of the C input channels into blocks of at most
// winoKC (the depth of one micro-kernel call, so that its B panel stays in
// L1), of even sizes.
func (w winograd) kcBlock() int {
	c := w.g.C
	return (c + (c+winoKC-1)/winoKC - 1) / ((c + winoKC - 1) / winoKC)
}

// run computes y = conv(x, weight) + bias (bias nil: none) with ws of at
// least scratch() elements, for the weight wt: [K, C, 3, 3], or with flip
// the weight of the convolution whose input gradient this is ([C, K, 3, 3],
// each kernel mirrored).
//
// Chunks of tiles outside, blocks of output channels inside: a chunk's V is
// transformed once and read by every block. With more than one block, each
// chunk transforms the weights again (a small cost next to its products:
// about 1/(2tc) of their flops).
func (w winograd) run(pool *parallel.Pool, x, wt []float32, flip bool, bias, y, ws []float32) {
	w.runSrc(pool, x, nil, wt, flip, bias, y, ws)
}

// runSrc is run on the input x, or where xb is not nil on the bfloat16
// input xb, gathered and widened tile by tile (blas.WinoGatherRowsBF16:
// only with the vector kernels, w.vec() and WinoGatherRowsBF16OK) with
// the values of the widened tensor: a mixed convolution without a
// float32 copy of its input.
func (w winograd) runSrc(pool *parallel.Pool, x []float32, xb []uint16, wt []float32, flip bool, bias, y, ws []float32) {
	g := w.g
	C, K := g.C, g.K
	u := ws[:winoPts*w.uStride()]
	v := ws[len(u):][:winoPts*w.vStride()]
	m := ws[len(u)+len(v):][:winoPts*w.mStride()]
	kc := w.kcBlock()
	fast := w.vec()
	for t0 := 0; t0 < w.tiles; t0 += w.tc {
		cnt := min(w.tc, w.tiles-t0)
		pool.For(C, max(1, 2048/w.tc), func(c0, c1 int) {
			for c := c0; c < c1; c++ {
				if fast {
					w.transformInputVec(x, xb, c, t0, cnt, v)
				} else {
					w.transformInput(x, c, t0, cnt, v)
				}
			}
		})
		npc := (cnt + w.nr - 1) / w.nr // panels holding tiles of this chunk
		for k0 := 0; k0 < w.kpad; k0 += w.kb {
			rows := min(w.kb, w.kpad-k0)
			if t0 == 0 || w.kb < w.kpad {
				w.transformWeights(pool, wt, flip, u, k0, rows)
			}
			pool.For(winoPts*npc, 1, func(q0, q1 int) {
				for q := q0; q < q1; q++ {
					xi, p := q/npc, q%npc
					ux := u[xi*w.uStride():][:rows*C]
					vx := v[xi*w.vStride()+p*w.vPanel():][:C*w.nr]
					mx := m[xi*w.mStride()+p*w.nr:]
					for c0 := 0; c0 < C; c0 += kc {
						l := min(kc, C-c0)
						ub := ux[c0*rows:]
						vb := vx[c0*w.nr : (c0+l)*w.nr]
						blas.KernelPackedTiles(l, rows/w.mr, ub, vb, mx, w.tc, c0 > 0)
					}
				}
			})
			k1 := min(k0+rows, K)
			pool.For(k1-k0, max(1, 1024/cnt), func(a, b int) {
				for k := k0 + a; k < k0+b; k++ {
					var bk float32
					if bias != nil {
						bk = bias[k]
					}
					if fast {
						w.transformOutputVec(m, k-k0, k, t0, cnt, bk, y)
					} else {
						w.transformOutput(m, k-k0, k, t0, cnt, bk, y)
					}
				}
			})
		}
	}
}

// transformWeights writes U = G w Gᵀ for output channels [k0, k0+rows)
// (rows a multiple of mr; those at or past K are zero) and every input
// channel, in the micro-kernel's A-panel layout: for point ξ, block of
// input channels [c0, c0+l) and block of mr output channels kb (counted
// from k0), u[ξ*uStride() + c0*rows + kb*mr*l + (c-c0)*mr + i] holds
// output channel k0+kb*mr+i.
//
// The layout's 16-element blocks are cut between the threads, and each
// piece is gathered (the 9 values of a kernel into 9 rows of U, 8 lanes
// at a time) and then transformed while it is in cache.
func (w winograd) transformWeights(pool *parallel.Pool, wt []float32, flip bool, u []float32, k0, rows int) {
	C, K := w.g.C, w.g.K
	kc := w.kcBlock()
	us := w.uStride()
	vec := w.vec()
	// Where kernel element e = 3kh+kw of (k, c) is read (portable path).
	var src [9]int
	for e := range src {
		src[e] = e
		if flip {
			src[e] = 8 - e
		}
	}
	total := rows * C
	n16 := (total + 15) / 16
	const piece = winoPiece
	// blocks transforms the 16-element blocks [b0, b1) of the layout, a
	// piece at a time; idx holds the vector path's lane indices: where
	// each lane's kernel starts, -1: none.
	blocks := func(b0, b1 int, idx []int32) {
		var gk [9]float64
		var uk [winoPts]float32
		for p0 := b0; p0 < b1; p0 += piece {
			p1 := min(p0+piece, b1)
			s, e := p0*16, min(p1*16, total)
			// The element at s: its channel block c0 (all but the last
			// hold kc channels), then kb, c, i.
			c0 := s / (rows * kc) * kc
			l := min(kc, C-c0)
			rel := s - c0*rows
			kb, r := rel/(w.mr*l), rel%(w.mr*l)
			c, i := c0+r/w.mr, r%w.mr
			for off := s; off < e; off++ {
				k := k0 + kb*w.mr + i
				x := -1
				switch {
				case k >= K:
				case flip:
					x = (c*K + k) * 9
				default:
					x = (k*C + c) * 9
				}
				if vec {
					idx[off-s] = int32(x)
				} else {
					for e := range gk {
						gk[e] = 0
						if x >= 0 {
							gk[e] = float64(wt[x+src[e]])
						}
					}
					winoWeight(&gk, &uk)
					for xi, val := range uk {
						u[winoRow[xi]*us+off] = val
					}
				}
				// The next element: i, then c, kb, the channel block.
				if i++; i == w.mr {
					i = 0
					if c++; c == c0+l {
						if kb++; kb == rows/w.mr {
							kb = 0
							c0 += l
							l = min(kc, C-c0)
						}
						c = c0
					}
				}
			}
			if !vec {
				continue
			}
			// The tail of the last block (past rows×C) is padding.
			for off := e; off < p1*16; off++ {
				idx[off-s] = -1
			}
			// Each kernel element e = 3kh+kw into row 6kw+kh, then G down
			// the columns (rows 6j..6j+2 to 6j..6j+5, j < 3) and along the
			// rows (rows i, 6+i, 12+i to i, 6+i, ..., 30+i): point (i, j)
			// in row 6j+i.
			blas.WinoWeightGather(2*(p1-p0), wt, idx[:16*(p1-p0)], flip, u, s, us)
			for j := 0; j < 3; j++ {
				blas.WinoWeight(p1-p0, u, s+6*j*us, us, 16)
			}
			for i := 0; i < winoIn; i++ {
				blas.WinoWeight(p1-p0, u, s+i*us, 6*us, 16)
			}
		}
	}
	// The lane indices are pooled, since the gather's indirect call
	// moves a local array to the heap (13 MB of garbage a resnet152
	// step).
	if sc := winoStripC; vec && flip && !winoNoStrips && sc*w.mr%16 == 0 && kc%sc == 0 && C%kc == 0 {
		// The flipped weight ([C][K] of this convolution) holds the
		// kernels of an input channel c side by side, and the block's
		// output channels are a piece of each such row (rows*9 values
		// of K*9): in the layout's order (mr output channels, then
		// every c) the gathers walk down all C rows a few cache lines
		// at a time, each row's piece a new start for the prefetchers,
		// from memory in the backward pass (the input gradient's gather
		// took 2.4× the forward's in a resnet152 step). Instead each
		// task takes a strip of sc channels c (sc*mr values of the
		// layout, whole blocks of 16) through the block's output
		// channels, first touching a value of every cache line of the
		// strip's pieces, so that their loads overlap (the touching is
		// what pays: resnet152 step, input gradients' transforms 0.08-
		// 0.11 s of CPU in 6 steps with it, 0.24-0.32 s by strips
		// without it, as in the layout's order). Same values.
		per := sc * w.mr / 16 // blocks of a strip, per mr output channels
		lo, hi := k0, min(k0+rows, K)
		pool.For(C/sc, 1, func(s0, s1 int) {
			idxp := winoIdxPool.Get().(*[winoPiece * 16]int32)
			defer winoIdxPool.Put(idxp)
			var sink float32
			for st := s0; st < s1; st++ {
				c := st * sc
				c0 := c / kc * kc
				if lo < hi {
					for r := c; r < c+sc; r++ {
						row := wt[(r*K+lo)*9 : (r*K+hi)*9]
						for i := 0; i < len(row); i += 16 {
							sink += row[i]
						}
						sink += row[len(row)-1]
					}
				}
				for kb := 0; kb < rows/w.mr; kb++ {
					b0 := (c0*rows + kb*w.mr*kc + (c-c0)*w.mr) / 16
					blocks(b0, b0+per, idxp[:])
				}
			}
			winoSink.Store(math.Float32bits(sink))
		})
		return
	}
	pool.For(n16, piece, func(b0, b1 int) {
		idxp := winoIdxPool.Get().(*[winoPiece * 16]int32)
		defer winoIdxPool.Put(idxp)
		blocks(b0, b1, idxp[:])
	})
}

// winoStripC is the channels of a strip of the flipped weight transform
// (a multiple of 8: whole blocks of 16 layout values for mr = 6).
const winoStripC = 16

// winoNoStrips makes the flipped weight transform take the layout's
// order (tests of the strips).
var winoNoStrips bool

// winoSink keeps the flipped weight transform's touching loads from
// being optimized away.
var winoSink atomic.Uint32

// winoPiece is how many blocks of 16 transformWeights transforms at a time.
const winoPiece = 32

var winoIdxPool = sync.Pool{New: func() any { return new([winoPiece * 16]int32) }}

// winoRow is the row of V, U and M (the point ξ) holding element (i, j) of
// a transformed 6×6 tile, at index 6i+j: 6j+i, the order the vector
// transforms leave them in (the input's columns are transformed in place
// after its rows).
var winoRow = func() (r [winoPts]int) {
	for i := 0; i < winoIn; i++ {
		for j := 0; j < winoIn; j++ {
			r[i*winoIn+j] = j*winoIn + i
		}
	}
	return r
}()

// vec reports whether the transforms run on the vector kernels (which work
// on blocks of 16 tiles, the B panels of a 16-column micro-kernel).
func (w winograd) vec() bool { return w.nr == 16 && blas.WinoOK() && !winogradScalar }

// winogradScalar forces the portable transforms, for tests.
var winogradScalar bool

// transformInputVec is transformInput on the vector kernels: the chunk's
// 6×6 patches of channel c are gathered into V's rows (element (r, j) of
// tile t into row 6j+r, column t), then transformed in place, down the
// columns of each patch (rows 6j..6j+5, for each j), then along its rows
// (rows i, 6+i, ..., for each i).
func (w winograd) transformInputVec(x []float32, xb []uint16, c, t0, cnt int, v []float32) {
	w.inputVec(x, xb, c, t0, cnt, v, w.vStride(), w.vPanel(), 16)
}

// inputVec is transformInputVec into any layout of blocks of 16 tiles:
// rows R apart (the points), tile t of channel c at t/16*ps + c*cs + t%16;
// from the bfloat16 input xb where it is not nil (AVX-512 BW only).
func (w winograd) inputVec(x []float32, xb []uint16, c, t0, cnt int, v []float32, R, ps, cs int) {
	g := w.g
	C, H, W := g.C, g.H, g.W
	// Only the blocks holding the chunk's tiles: the products read no
	// further (the forward pass's panels, the weight gradient's depth).
	np := (cnt + 15) / 16
	for t := cnt; t < 16*np; t++ {
		vt := v[t/16*ps+c*cs+t%16:]
		for xi := 0; xi < winoPts; xi++ {
			vt[xi*R] = 0
		}
	}
	per := w.th * w.tw
	rows := blas.WinoGatherRowsOK()
	// A run at a time: tiles of one tile row within one panel, whose
	// patches' rows are strided copies of input rows (stride 4), gathered
	// 8 tiles at a time.
	for t := 0; t < cnt; {
		tt := t0 + t
		n, q := tt/per, tt%per
		ty, tx := q/w.tw, q%w.tw
		l := min(w.tw-tx, 16-t%16, cnt-t)
		base := t/16*ps + c*cs + t%16
		ih0, iw0 := ty*winoOut-g.PH, tx*winoOut-g.PW
		if xb != nil {
			plane := xb[(n*C+c)*H*W:][:H*W]
			for i := 0; i < l; i += 8 {
				blas.WinoGatherRowsBF16(min(8, l-i), plane, ih0, H, W, iw0+4*i, v, base+i, R, winoIn)
			}
			t += l
			continue
		}
		plane := x[(n*C+c)*H*W:][:H*W]
		if rows {
			// All six rows of up to 8 tiles a call (AVX-512).
			for i := 0; i < l; i += 8 {
				blas.WinoGatherRows(min(8, l-i), plane, ih0, H, W, iw0+4*i, v, base+i, R, winoIn)
			}
			t += l
			continue
		}
		for r := 0; r < winoIn; r++ {
			ih := ih0 + r
			if uint(ih) >= uint(H) {
				for j := 0; j < winoIn; j++ {
					clear(v[base+(6*j+r)*R:][:l])
				}
				continue
			}
			row := plane[ih*W : (ih+1)*W]
			for i := 0; i < l; i += 8 {
				// All 8 lanes where they stay inside the panel (lanes
				// past the run hold later tiles, written after this):
				// masked stores are slow.
				k := min(8, l-i)
				if t%16+i+8 <= 16 {
					k = 8
				}
				blas.WinoGather(k, row, iw0+4*i, v, base+r*R+i, R)
			}
		}
		t += l
	}
	off := c * cs
	for j := 0; j < winoIn; j++ {
		blas.WinoInput(np, v, off+6*j*R, R, ps)
	}
	for i := 0; i < winoIn; i++ {
		blas.WinoInput(np, v, off+i*R, 6*R, ps)
	}
}

// rowAt is row[i], zero outside the row.
func rowAt(row []float32, i int) float32 {
	if uint(i) < uint(len(row)) {
		return row[i]
	}
	return 0
}

// transformOutputVec is transformOutput on the vector kernels: output
// channel k's rows of M (row kl of the block's M) are transformed in place, down the columns (rows
// 6j..6j+5 to 6j..6j+3), then along the rows (rows i, 6+i, ..., 30+i to
// i, ..., 18+i), leaving output (i, j) of every tile in row 6j+i.
func (w winograd) transformOutputVec(m []float32, kl, k, t0, cnt int, b float32, y []float32) {
	g := w.g
	K, OH, OW := g.K, g.OH, g.OW
	R := w.mStride()
	off := kl * w.tc
	nb := (cnt + 15) / 16
	for j := 0; j < winoIn; j++ {
		blas.WinoOutput(nb, m, off+6*j*R, R, 16)
	}
	for i := 0; i < winoOut; i++ {
		blas.WinoOutput(nb, m, off+i*R, 6*R, 16)
	}
	per := w.th * w.tw
	for t := 0; t < cnt; {
		tt := t0 + t
		n, q := tt/per, tt%per
		ty, tx := q/w.tw, q%w.tw
		l := min(w.tw-tx, 8, cnt-t)
		oh0, ow0 := ty*winoOut, tx*winoOut
		blas.WinoScatter(l, m, off+t, R, b, y, (n*K+k)*OH*OW+oh0*OW+ow0, OW, min(winoOut, OH-oh0), OW-ow0)
		t += l
	}
}

// transformInput writes V = Bᵀ d B for input channel c and the tiles
// [t0, t0+cnt) of the chunk (zeros for the chunk's tiles past cnt) into
// v in the B-panel layout: point ξ (the row winoRow gives), panel p of nr
// tiles: v[ξ*vStride() + p*vPanel() + c*nr + t%nr].
func (w winograd) transformInput(x []float32, c, t0, cnt int, v []float32) {
	g := w.g
	C, H, W := g.C, g.H, g.W
	nr := w.nr
	stride, ps := w.vStride(), w.vPanel()
	var d, o [winoPts]float32
	for t := 0; t < w.tc; t++ {
		base := t/nr*ps + c*nr + t%nr
		if t >= cnt {
			for xi := 0; xi < winoPts; xi++ {
				v[xi*stride+base] = 0
			}
			continue
		}
		tt := t0 + t
		n, r := tt/(w.th*w.tw), tt%(w.th*w.tw)
		ih0, iw0 := r/w.tw*winoOut-g.PH, r%w.tw*winoOut-g.PW
		plane := x[(n*C+c)*H*W:][:H*W]
		if ih0 >= 0 && iw0 >= 0 && ih0+winoIn <= H && iw0+winoIn <= W {
			for i := 0; i < winoIn; i++ {
				*(*[winoIn]float32)(d[i*winoIn:]) = *(*[winoIn]float32)(plane[(ih0+i)*W+iw0:])
			}
		} else {
			for i := 0; i < winoIn; i++ {
				ih := ih0 + i
				row := d[i*winoIn : (i+1)*winoIn]
				if uint(ih) >= uint(H) {
					clear(row)
					continue
				}
				src := plane[ih*W : (ih+1)*W]
				for j := range row {
					if iw := iw0 + j; uint(iw) < uint(W) {
						row[j] = src[iw]
					} else {
						row[j] = 0
					}
				}
			}
		}
		winoInput(&d, &o)
		for xi, val := range o {
			v[winoRow[xi]*stride+base] = val
		}
	}
}

// transformOutput writes y = Aᵀ M A + b for output channel k (row kl of
// the block's M) and the
// chunk's tiles [t0, t0+cnt), dropping the parts of edge tiles outside the
// output.
func (w winograd) transformOutput(m []float32, kl, k, t0, cnt int, b float32, y []float32) {
	g := w.g
	K, OH, OW := g.K, g.OH, g.OW
	stride := w.mStride()
	mk := m[kl*w.tc:]
	var mt [winoPts]float32
	var o [winoOut * winoOut]float32
	for t := 0; t < cnt; t++ {
		for xi := range mt {
			mt[xi] = mk[winoRow[xi]*stride+t]
		}
		winoOutput(&mt, &o)
		tt := t0 + t
		n, r := tt/(w.th*w.tw), tt%(w.th*w.tw)
		oh0, ow0 := r/w.tw*winoOut, r%w.tw*winoOut
		out := y[(n*K+k)*OH*OW:][:OH*OW]
		rows, cols := min(winoOut, OH-oh0), min(winoOut, OW-ow0)
		for i := 0; i < rows; i++ {
			dst := out[(oh0+i)*OW+ow0:][:cols]
			src := o[i*winoOut:][:cols]
			for j := range dst {
				dst[j] = src[j] + b
			}
		}
	}
}

// winoInput computes o = Bᵀ d B for a 6×6 tile d (row-major), where
//
//	Bᵀ = [4  0 -5  0 1 0]
//	     [0 -4 -4  1 1 0]
//	     [0  4 -4 -1 1 0]
//	     [0 -2 -1  2 1 0]
//	     [0  2 -1 -2 1 0]
//	     [0  4  0 -5 0 1]
func winoInput(d, o *[winoPts]float32) {
	var t [winoPts]float32
	for j := 0; j < winoIn; j++ {
		d0, d1, d2, d3, d4, d5 := d[j], d[6+j], d[12+j], d[18+j], d[24+j], d[30+j]
		a, b := d4-4*d2, d3-4*d1
		c, e := d4-d2, 2*(d3-d1)
		t[j] = 4*d0 - 5*d2 + d4
		t[6+j] = a + b
		t[12+j] = a - b
		t[18+j] = c + e
		t[24+j] = c - e
		t[30+j] = 4*d1 - 5*d3 + d5
	}
	for i := 0; i < winoIn; i++ {
		r := (*[winoIn]float32)(t[i*winoIn:])
		q := (*[winoIn]float32)(o[i*winoIn:])
		d0, d1, d2, d3, d4, d5 := r[0], r[1], r[2], r[3], r[4], r[5]
		a, b := d4-4*d2, d3-4*d1
		c, e := d4-d2, 2*(d3-d1)
		q[0] = 4*d0 - 5*d2 + d4
		q[1] = a + b
		q[2] = a - b
		q[3] = c + e
		q[4] = c - e
		q[5] = 4*d1 - 5*d3 + d5
	}
}

// winoOutput computes o = Aᵀ m A for a 6×6 tile m, where
//
//	Aᵀ = [1 1  1 1  1 0]
//	     [0 1 -1 2 -2 0]
//	     [0 1  1 4  4 0]
//	     [0 1 -1 8 -8 1]
func winoOutput(m *[winoPts]float32, o *[winoOut * winoOut]float32) {
	var t [winoOut * winoIn]float32
	for j := 0; j < winoIn; j++ {
		m0, m1, m2, m3, m4, m5 := m[j], m[6+j], m[12+j], m[18+j], m[24+j], m[30+j]
		a, b := m1+m2, m1-m2
		c, e := m3+m4, m3-m4
		t[j] = m0 + a + c
		t[6+j] = b + 2*e
		t[12+j] = a + 4*c
		t[18+j] = b + 8*e + m5
	}
	for i := 0; i < winoOut; i++ {
		r := (*[winoIn]float32)(t[i*winoIn:])
		q := (*[winoOut]float32)(o[i*winoOut:])
		m0, m1, m2, m3, m4, m5 := r[0], r[1], r[2], r[3], r[4], r[5]
		a, b := m1+m2, m1-m2
		c, e := m3+m4, m3-m4
		q[0] = m0 + a + c
		q[1] = b + 2*e
		q[2] = a + 4*c
		q[3] = b + 8*e + m5
	}
}

// winoWeight computes u = G g Gᵀ for a 3×3 kernel g (in float64, rounded
// once), where
//
//	G = [ 1/4     0    0 ]
//	    [-1/6  -1/6 -1/6 ]
//	    [-1/6   1/6 -1/6 ]
//	    [1/24  1/12  1/6 ]
//	    [1/24 -1/12  1/6 ]
//	    [   0     0    1 ]
func winoWeight(g *[9]float64, u *[winoPts]float32) {
	var t [winoIn * 3]float64
	for j := 0; j < 3; j++ {
		g0, g1, g2 := g[j], g[3+j], g[6+j]
		t[j] = g0 / 4
		t[3+j] = -(g0 + g1 + g2) / 6
		t[6+j] = -(g0 - g1 + g2) / 6
		t[9+j] = g0/24 + g1/12 + g2/6
		t[12+j] = g0/24 - g1/12 + g2/6
		t[15+j] = g2
	}
	for i := 0; i < winoIn; i++ {
		g0, g1, g2 := t[3*i], t[3*i+1], t[3*i+2]
		q := u[i*winoIn:]
		q[0] = float32(g0 / 4)
		q[1] = float32(-(g0 + g1 + g2) / 6)
		q[2] = float32(-(g0 - g1 + g2) / 6)
		q[3] = float32(g0/24 + g1/12 + g2/6)
		q[4] = float32(g0/24 - g1/12 + g2/6)
		q[5] = float32(g2)
	}
}

// forward computes the forward convolution of its geometry with weight wt
// ([K, C, 3, 3]).
func (w winograd) forward(pool *parallel.Pool, x, wt, bias, y, ws []float32) {
	w.run(pool, x, wt, false, bias, y, ws[:w.scratch()])
}

// winogradInputGrad is the Winograd plan of the input gradient of g, a
// convolution of ȳ with the flipped, transposed weight (convInputGeom).
func winogradInputGrad(g prim.ConvGeom) (winograd, bool) {
	gt, ok := winogradInputGeom(g)
	if !ok {
		return winograd{}, false
	}
	return winogradFor(gt)
}

// winogradInputGeom is the forward geometry of the input gradient of g
// (stride 1, padding at most 2) as a convolution of ȳ.
func winogradInputGeom(g prim.ConvGeom) (prim.ConvGeom, bool) {
	if g.SH != 1 || g.SW != 1 {
		return prim.ConvGeom{}, false
	}
	gt, flip := convInputGeom(g)
	return gt, flip
}

// inputGrad computes the input gradient gx of the convolution whose input
// gradient's geometry it has, from gy and that convolution's weight wt
// ([K, C, 3, 3], K being the gradient's input channels).
func (w winograd) inputGrad(pool *parallel.Pool, gy, wt, gx, ws []float32) {
	w.run(pool, gy, wt, true, nil, gx, ws[:w.scratch()])
}
