package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
)

// refConv64 is the forward convolution (stride 1, dilation 1, 3×3) in
// float64, and the sum of the magnitudes of its terms per output (the
// scale float32 rounding errors are relative to).
func refConv64(g prim.ConvGeom, x, w, bias []float32) (y, mag []float64) {
	y = make([]float64, g.N*g.K*g.OH*g.OW)
	mag = make([]float64, len(y))
	for n := 0; n < g.N; n++ {
		for k := 0; k < g.K; k++ {
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					var s, a float64
					if bias != nil {
						s, a = float64(bias[k]), math.Abs(float64(bias[k]))
					}
					for c := 0; c < g.C; c++ {
						for kh := 0; kh < 3; kh++ {
							ih := oh - g.PH + kh
							if ih < 0 || ih >= g.H {
								continue
							}
							for kw := 0; kw < 3; kw++ {
								iw := ow - g.PW + kw
								if iw < 0 || iw >= g.W {
									continue
								}
								p := float64(x[((n*g.C+c)*g.H+ih)*g.W+iw]) * float64(w[((k*g.C+c)*3+kh)*3+kw])
								s += p
								a += math.Abs(p)
							}
						}
					}
					i := ((n*g.K+k)*g.OH+oh)*g.OW + ow
					y[i], mag[i] = s, a
				}
			}
		}
	}
	return y, mag
}

// refInputGrad64 is the input gradient of forward convolution g in float64
// and the magnitudes of its terms.
func refInputGrad64(g prim.ConvGeom, gy, w []float32) (gx, mag []float64) {
	gx = make([]float64, g.N*g.C*g.H*g.W)
	mag = make([]float64, len(gx))
	for n := 0; n < g.N; n++ {
		for k := 0; k < g.K; k++ {
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					v := float64(gy[((n*g.K+k)*g.OH+oh)*g.OW+ow])
					for c := 0; c < g.C; c++ {
						for kh := 0; kh < 3; kh++ {
							ih := oh - g.PH + kh
							if ih < 0 || ih >= g.H {
								continue
							}
							for kw := 0; kw < 3; kw++ {
								iw := ow - g.PW + kw
								if iw < 0 || iw >= g.W {
									continue
								}
								p := v * float64(w[((k*g.C+c)*3+kh)*3+kw])
								i := ((n*g.C+c)*g.H+ih)*g.W + iw
								gx[i] += p
								mag[i] += math.Abs(p)
							}
						}
					}
				}
			}
		}
	}
	return gx, mag
}

// worstErr is the largest error of got against want relative to the
// magnitude of the terms summed (the bound float32 summation errors scale
// with; a plain relative error is unbounded where terms cancel).
func worstErr(got []float32, want, mag []float64) float64 {
	var e float64
	for i, v := range want {
		d := math.Abs(float64(got[i]) - v)
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		e = max(e, d/max(mag[i], 1e-30))
	}
	return e
}

// Winograd's forward pass and input gradient agree with float64 direct
// convolutions on every shape class: channels below and above one
// micro-kernel depth (256), output channels not a multiple of its rows,
// outputs not a multiple of the tile (partial edge tiles), paddings 0–2
// (the input gradient of padding 0 is padded by 2), batches whose tiles
// span several chunks.
//
// Tolerance: errors are measured relative to Σ|terms| of each output. A
// float32 sum of n terms errs by up to about n·2⁻²⁴ of that (n = 9C here);
// in practice ~√n. The transforms multiply the error by their constants'
// growth (‖Bᵀ‖‖B‖‖G‖‖Gᵀ‖‖Aᵀ‖‖A‖ is about 10² for F(4×4,3×3)), so the
// bound is 100·√(9C)·2⁻²⁴ plus the same for the direct path. The test also
// logs the implicit-GEMM path's error on the same data for comparison.
func TestWinogradMatchesDirect(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 4))
	// Cases run with chunks of 32 tiles (the plans' chunks are longer
	// than these batches' tiles).
	short := map[int]bool{7: true, 11: true}
	for ci, tc := range []struct {
		n, c, h, w, k, ph, pw int
		bias                  bool
	}{
		{1, 1, 4, 4, 1, 0, 0, false},       // one tile, nothing padded
		{1, 3, 6, 6, 2, 1, 1, true},        // 6×6 output: 2×2 tiles, the last ones partial
		{2, 16, 16, 16, 16, 1, 1, true},    // resnet-like, exact tiles
		{1, 17, 7, 9, 19, 1, 1, false},     // odd sizes: partial tiles both ways; K not a multiple of rows
		{3, 16, 13, 11, 7, 0, 0, true},     // unpadded (input gradient padded by 2)
		{1, 8, 5, 5, 8, 2, 2, false},       // padding 2
		{2, 5, 10, 6, 33, 2, 0, true},      // asymmetric padding
		{3, 24, 40, 40, 20, 1, 1, false},   // several chunks (short)
		{1, 300, 8, 8, 12, 1, 1, true},     // two blocks of input channels
		{2, 12, 9, 9, 290, 1, 1, false},    // input gradient: two channel blocks
		{1, 128, 8, 8, 130, 1, 1, true},    // two blocks of output channels, the last partly past K
		{3, 128, 20, 20, 130, 1, 1, false}, // blocks of output channels in each of several chunks (short)
		{1, 300, 6, 6, 64, 1, 1, true},     // blocks of output channels (input gradient: of input channels too)
	} {
		name := fmt.Sprintf("%+v", tc)
		opts := op.ConvOpts{Padding: [2]int{tc.ph, tc.pw}}
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.w}, tensor.Shape{tc.k, tc.c, 3, 3}, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rnd := func(n int) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			return v
		}
		x, w := rnd(g.N*g.C*g.H*g.W), rnd(g.K*g.C*9)
		var bias []float32
		if tc.bias {
			bias = rnd(g.K)
		}
		// Bounds: forward sums 9C terms, the input gradient 9K.
		bound := func(n int) float64 { return 100 * math.Sqrt(float64(n)) * 0x1p-24 }

		wf, ok := winogradPlan(g)
		if !ok {
			t.Fatalf("%s: no Winograd plan", name)
		}
		if short[ci] {
			wf.tc = 32
		}
		want, mag := refConv64(g, x, w, bias)
		got := make([]float32, len(want))
		for i := range got {
			got[i] = float32(math.NaN()) // every output must be written
		}
		ws := make([]float32, wf.scratch())
		for i := range ws {
			ws[i] = float32(math.NaN()) // the workspace is not assumed clear
		}
		wf.forward(nil, x, w, bias, got, ws)
		if wf.vec() {
			// The portable transforms give the same result to rounding.
			winogradScalar = true
			port := make([]float32, len(want))
			wf.forward(nil, x, w, bias, port, ws)
			winogradScalar = false
			if ep := worstErr(port, want, mag); ep > bound(9*g.C) {
				t.Errorf("%s forward, portable transforms: error %.3g > %.3g", name, ep, bound(9*g.C))
			}
		}
		gemmY := make([]float32, len(want))
		convForward(nil, g, x, w, bias, gemmY, make([]float32, convForwardScratch(g)), false)
		e, eg := worstErr(got, want, mag), worstErr(gemmY, want, mag)
		t.Logf("%s forward: winograd error %.2g, implicit GEMM %.2g (of Σ|terms|)", name, e, eg)
		if e > bound(9*g.C) {
			t.Errorf("%s forward: error %.3g > %.3g", name, e, bound(9*g.C))
		}

		gt, ok := winogradInputGeom(g)
		wi, ok2 := winogradPlan(gt)
		if !ok || !ok2 {
			t.Fatalf("%s: no Winograd plan for the input gradient", name)
		}
		if short[ci] {
			wi.tc = 32
		}
		if ci == 7 || ci == 11 {
			t.Logf("%s: %d and %d chunks", name, (wf.tiles+wf.tc-1)/wf.tc, (wi.tiles+wi.tc-1)/wi.tc)
		}
		gy := rnd(len(want))
		wantX, magX := refInputGrad64(g, gy, w)
		gotX := make([]float32, len(wantX))
		for i := range gotX {
			gotX[i] = float32(math.NaN())
		}
		wi.inputGrad(nil, gy, w, gotX, make([]float32, wi.scratch()))
		e = worstErr(gotX, wantX, magX)
		t.Logf("%s input gradient: winograd error %.2g", name, e)
		if e > bound(9*g.K) {
			t.Errorf("%s input gradient: error %.3g > %.3g", name, e, bound(9*g.K))
		}
	}
}

// Every convolution of winoBenchShapes takes Winograd, both ways (else
// the benchmark would time the old path twice).
func TestWinogradBenchShapes(t *testing.T) {
	defer func(off bool) { winogradOff = off }(winogradOff)
	winogradOff = false
	for _, s := range winoBenchShapes {
		g, err := prim.ConvGeometry(tensor.Shape{s.n, s.c, s.h, s.w}, tensor.Shape{s.k, s.c, 3, 3}, op.ConvOpts{Padding: [2]int{1, 1}})
		if err != nil {
			t.Fatal(err)
		}
		wf, f := winogradFor(g)
		wb, b := winogradInputGrad(g)
		if !f || !b {
			t.Errorf("%s: Winograd forward %v, input gradient %v", s.name, f, b)
			continue
		}
		if s.name != "r18_l2" {
			continue
		}
		// The planned workspace (what the arena gives the kernel) holds it.
		x, w, y := f32(s.n, s.c, s.h, s.w), f32(s.k, s.c, 3, 3), f32(g.N, g.K, g.OH, g.OW)
		opts := op.ConvOpts{Padding: [2]int{1, 1}}
		kf := newKernelCase(t, &prim.Conv2dOp{Opts: opts}, x, w)
		kb := newKernelCase(t, &prim.Conv2dBackwardInput{Opts: opts, InputShape: x.Shape}, y, w)
		if len(kf.ws) < 4*wf.scratch() || len(kb.ws) < 4*wb.scratch() {
			t.Errorf("%s: workspaces %d and %d bytes, Winograd needs %d and %d", s.name, len(kf.ws), len(kb.ws), 4*wf.scratch(), 4*wb.scratch())
		}
	}
}

// Winograd is chosen by shape only (so that the registered workspace,
// which the planner and the meta device use, covers it).
func TestWinogradChosenByShape(t *testing.T) {
	defer func(off bool) { winogradOff = off }(winogradOff)
	winogradOff = false // whatever $HEADROOM_WINOGRAD says
	for _, tc := range []struct {
		name                     string
		n, c, h, w, k, ks, s, pd int
		fwd, bwd                 bool
	}{
		{"resnet stage 1", 32, 64, 16, 16, 64, 3, 1, 1, true, true},
		{"resnet stage 2", 32, 128, 8, 8, 128, 3, 1, 1, true, true},
		{"resnet stage 3 (transformed weights 9.5 MiB, in blocks)", 32, 256, 4, 4, 256, 3, 1, 1, true, true},
		{"resnet stage 4 at 8x8 (in blocks)", 8, 512, 8, 8, 512, 3, 1, 1, true, true},
		{"rrdbnet", 4, 64, 32, 32, 32, 3, 1, 1, true, true},
		{"32 channels, 128 tiles", 8, 32, 16, 16, 32, 3, 1, 1, false, false},
		{"32 channels, 512 tiles", 8, 32, 32, 32, 32, 3, 1, 1, true, true},
		{"small: vgg19 parity", 1, 64, 32, 32, 64, 3, 1, 1, false, false},
		{"small: resnet parity", 3, 64, 10, 8, 64, 3, 1, 1, false, false},
		{"16 channels", 8, 16, 32, 32, 64, 3, 1, 1, false, false},
		{"8 tiles", 2, 64, 8, 8, 64, 3, 1, 1, false, false},
		{"few input channels", 4, 3, 32, 32, 64, 3, 1, 1, false, false},
		{"few output channels", 4, 64, 32, 32, 3, 3, 1, 1, false, false},
		{"2x2 output", 8, 512, 2, 2, 512, 3, 1, 1, false, false},
		{"stride 2", 8, 64, 16, 16, 64, 3, 2, 1, false, false},
		{"5x5", 8, 64, 16, 16, 64, 5, 1, 2, false, false},
		{"1x1", 8, 64, 16, 16, 64, 1, 1, 0, false, false},
		{"padding 3", 8, 64, 16, 16, 64, 3, 1, 3, true, false}, // the input gradient's padding would be -1
	} {
		opts := op.ConvOpts{Stride: [2]int{tc.s, tc.s}, Padding: [2]int{tc.pd, tc.pd}}
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.w}, tensor.Shape{tc.k, tc.c, tc.ks, tc.ks}, opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, fwd := winogradFor(g)
		_, bwd := winogradInputGrad(g)
		if fwd != tc.fwd || bwd != tc.bwd {
			t.Errorf("%s: Winograd forward %v, input gradient %v; want %v, %v", tc.name, fwd, bwd, tc.fwd, tc.bwd)
		}
	}
}

// winoBenchShapes are the 3×3 stride-1 convolutions of the standard
// workloads (internal/bench) that Winograd takes.
var winoBenchShapes = []struct {
	name          string
	n, c, h, w, k int
}{
	{"r18_l1", 32, 64, 16, 16, 64},
	{"r18_l2", 32, 128, 8, 8, 128},
	{"rrdb_c1", 4, 64, 32, 32, 32},
	{"rrdb_c2", 4, 96, 32, 32, 32},
	{"rrdb_c3", 4, 128, 32, 32, 32},
	{"rrdb_c4", 4, 160, 32, 32, 32},
	{"rrdb_c5", 4, 192, 32, 32, 64},
	{"rrdb_trunk", 4, 64, 32, 32, 64},
	{"rrdb_up1", 4, 64, 64, 64, 64},
	{"rrdb_hr", 4, 64, 128, 128, 64},
	{"r152_l1", 8, 64, 32, 32, 64},
	{"r152_l2", 8, 128, 16, 16, 128},
	{"r152_l3", 8, 256, 8, 8, 256},
	{"r18_l3", 32, 256, 4, 4, 256},
}

// BenchmarkConvWinograd times the 3×3 stride-1 convolutions of the
// standard workloads with Winograd and with the paths it replaces
// (cpu-ms/op is the process's CPU time per call: run with
// HEADROOM_NUM_THREADS=1 on a loaded machine).
func BenchmarkConvWinograd(b *testing.B) {
	for _, s := range winoBenchShapes {
		opts := op.ConvOpts{Padding: [2]int{1, 1}}
		g, err := prim.ConvGeometry(tensor.Shape{s.n, s.c, s.h, s.w}, tensor.Shape{s.k, s.c, 3, 3}, opts)
		if err != nil {
			b.Fatal(err)
		}
		flops := 2 * float64(g.N*g.K*g.OH*g.OW) * float64(g.ColRows())
		x, w, y := f32(s.n, s.c, s.h, s.w), f32(s.k, s.c, 3, 3), f32(g.N, g.K, g.OH, g.OW)
		for _, path := range []string{"old", "winograd"} {
			cases := []struct {
				name string
				o    func() *kernelCase
			}{
				{"fwd", func() *kernelCase { return newKernelCase(b, &prim.Conv2dOp{Opts: opts}, x, w) }},
				{"bwd_input", func() *kernelCase {
					return newKernelCase(b, &prim.Conv2dBackwardInput{Opts: opts, InputShape: x.Shape}, y, w)
				}},
				{"bwd_weight", func() *kernelCase {
					return newKernelCase(b, &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape}, y, x)
				}},
			}
			for _, c := range cases {
				b.Run(s.name+"/"+c.name+"/"+path, func(b *testing.B) {
					defer func(off bool) { winogradOff = off }(winogradOff)
					winogradOff = path == "old"
					benchKernel(b, c.o(), flops)
				})
			}
		}
	}
}

// Deep layers cut their transformed weights into blocks of output channels
// that each fit winoMaxU, of equal sizes (multiples of the micro-kernel's
// rows), so the workspace stays small whatever the channels.
func TestWinogradBlocks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		n, c, h, k int
		blocks     int // at least
	}{
		{"resnet stage 2", 8, 128, 16, 128, 1},
		{"resnet stage 3", 8, 256, 8, 256, 4},
		{"resnet stage 4", 8, 512, 8, 512, 12},
		{"rrdbnet", 4, 64, 32, 32, 1},
		{"160→162", 1, 160, 8, 162, 2},
	} {
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.h}, tensor.Shape{tc.k, tc.c, 3, 3}, op.ConvOpts{Padding: [2]int{1, 1}})
		if err != nil {
			t.Fatal(err)
		}
		w, ok := winogradPlan(g)
		if !ok {
			t.Fatalf("%s: no plan", tc.name)
		}
		blocks := (w.kpad + w.kb - 1) / w.kb
		if w.kb%w.mr != 0 || w.kb > w.kpad || blocks < tc.blocks {
			t.Errorf("%s: %d blocks of %d rows (of %d), want at least %d blocks of a multiple of %d", tc.name, blocks, w.kb, w.kpad, tc.blocks, w.mr)
		}
		if u := 4 * winoPts * w.kb * w.g.C; u > winoMaxU {
			t.Errorf("%s: transformed weights of a block %d bytes > %d", tc.name, u, winoMaxU)
		}
		// U's block, and a chunk's V (at most 64 tiles here) and M.
		if 4*w.scratch() > 6<<20 {
			t.Errorf("%s: workspace %d bytes", tc.name, 4*w.scratch())
		}
	}
}

// Small convolutions get chunks no larger than their tensors need (the
// workspace is part of a small model's peak); large ones keep long chunks.
func TestWinogradChunksFitTheConvolution(t *testing.T) {
	for _, tc := range []struct {
		name          string
		n, c, h, w, k int
		long          bool // chunks of about winoChunk elements
	}{
		{"cnn conv2", 32, 32, 14, 14, 64, false},
		{"rrdbnet dense", 4, 64, 32, 32, 32, false},
		{"rrdbnet hr", 4, 64, 128, 128, 64, true},
	} {
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.w}, tensor.Shape{tc.k, tc.c, 3, 3}, op.ConvOpts{Padding: [2]int{1, 1}})
		if err != nil {
			t.Fatal(err)
		}
		wf, ok := winogradFor(g)
		if !ok {
			t.Fatalf("%s: no Winograd plan", tc.name)
		}
		wg := wgradPlan(wf)
		io := g.N * (g.C*g.H*g.W + g.K*g.OH*g.OW) // elements
		perTile := winoPts * (g.C + wf.kb)
		for _, c := range []struct {
			what            string
			tc, least, mult int
		}{{"forward", wf.tc, 64, wf.nr}, {"weight gradient", wg.tc, 128, 16}} {
			if c.tc%c.mult != 0 || c.tc >= wf.tiles+c.mult {
				t.Errorf("%s %s: chunks of %d tiles (of %d)", tc.name, c.what, c.tc, wf.tiles)
			}
			long := c.tc*perTile > winoChunk/2
			if small := c.tc*perTile > io/4 && c.tc > c.least; small || long != tc.long {
				t.Errorf("%s %s: chunks of %d tiles, %d elements of V and M against %d of input and output (long: %v, want %v)",
					tc.name, c.what, c.tc, c.tc*perTile, io, long, tc.long)
			}
		}
	}
}

// The flipped weight transform by strips of input channels writes the
// same transformed weights as in the layout's order, bit for bit, for
// every block of output channels.
func TestWinogradFlipStrips(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	for _, tc := range []struct{ n, c, h, k int }{
		{8, 256, 8, 256}, // resnet152's stage 3: 5 blocks of output channels
		{1, 300, 6, 64},  // input gradient: 300 output channels in blocks, the last partly past C
		{2, 16, 16, 16},  // one strip
		{1, 512, 8, 96},  // two blocks of input channels (of 256)
		{1, 40, 8, 40},   // no strips: 40 channels are not whole blocks of 16
	} {
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.h}, tensor.Shape{tc.k, tc.c, 3, 3}, op.ConvOpts{Padding: [2]int{1, 1}})
		if err != nil {
			t.Fatal(err)
		}
		gt, _ := winogradInputGeom(g)
		w, ok := winogradPlan(gt)
		if !ok || !w.vec() {
			t.Skipf("%+v: no vector Winograd plan", tc)
		}
		wt := make([]float32, g.K*g.C*9)
		for i := range wt {
			wt[i] = float32(r.NormFloat64())
		}
		n := winoPts * w.uStride()
		for k0 := 0; k0 < w.kpad; k0 += w.kb {
			rows := min(w.kb, w.kpad-k0)
			got, want := make([]float32, n), make([]float32, n)
			w.transformWeights(nil, wt, true, got, k0, rows)
			winoNoStrips = true
			w.transformWeights(nil, wt, true, want, k0, rows)
			winoNoStrips = false
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%+v block at %d: U[%d] = %g by strips, %g in order", tc, k0, i, got[i], want[i])
				}
			}
		}
	}
}
