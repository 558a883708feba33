package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
)

// refWgrad64 is the weight gradient of forward convolution g (3×3, stride
// 1) in float64, and the magnitudes of its terms.
func refWgrad64(g prim.ConvGeom, gy, x []float32) (gw, mag []float64) {
	gw = make([]float64, g.K*g.C*9)
	mag = make([]float64, len(gw))
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
								p := v * float64(x[((n*g.C+c)*g.H+ih)*g.W+iw])
								i := ((k*g.C+c)*3+kh)*3 + kw
								gw[i] += p
								mag[i] += math.Abs(p)
							}
						}
					}
				}
			}
		}
	}
	return gw, mag
}

// Winograd's weight gradient agrees with a float64 direct one on every
// shape class: partial edge tiles, paddings 0–2, several chunks of tiles,
// several blocks of output channels (the last one short), one chunk
// holding all tiles (the input transformed once for all blocks).
//
// Tolerance as for the forward pass (TestWinogradMatchesDirect): relative
// to Σ|terms| of each weight, 100·√n·2⁻²⁴ for a sum of n = N·OH·OW terms
// (the transforms' constants: A's up to 8, Gᵀ's 1/4 to 1/24).
func TestWinogradWgradMatchesDirect(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 5))
	for _, tc := range []struct {
		n, c, h, w, k, ph, pw int
	}{
		{1, 1, 4, 4, 1, 0, 0},
		{1, 3, 6, 6, 2, 1, 1},
		{2, 16, 16, 16, 16, 1, 1},
		{1, 17, 7, 9, 19, 1, 1},
		{3, 16, 13, 11, 7, 0, 0},
		{1, 8, 5, 5, 8, 2, 2},
		{2, 5, 10, 6, 33, 2, 0},
		{3, 24, 40, 40, 20, 1, 1},   // several chunks
		{1, 128, 8, 8, 130, 1, 1},   // blocks of output channels, one chunk
		{4, 128, 20, 20, 130, 1, 1}, // blocks and chunks
	} {
		name := fmt.Sprintf("%+v", tc)
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.w}, tensor.Shape{tc.k, tc.c, 3, 3}, op.ConvOpts{Padding: [2]int{tc.ph, tc.pw}})
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
		x, gy := rnd(g.N*g.C*g.H*g.W), rnd(g.N*g.K*g.OH*g.OW)
		wf, ok := winogradPlan(g)
		if !ok {
			t.Fatalf("%s: no Winograd plan", name)
		}
		want, mag := refWgrad64(g, gy, x)
		// The plan's chunks, and chunks of 32 tiles (several chunks,
		// starting inside tile rows; with several blocks of output
		// channels, the input transformed again for each).
		for _, tc := range []int{0, 32} {
			w := wgradPlan(wf)
			if tc > 0 {
				if w.tiles <= tc {
					continue
				}
				w.tc, w.ldt = tc, tc+16
			}
			name := fmt.Sprintf("%s tc %d", name, w.tc)
			got := make([]float32, len(want))
			for i := range got {
				got[i] = float32(math.NaN())
			}
			ws := make([]float32, w.scratch())
			for i := range ws {
				ws[i] = float32(math.NaN())
			}
			w.weightGrad(nil, gy, x, got, ws)
			bound := 100 * math.Sqrt(float64(g.N*g.OH*g.OW)) * 0x1p-24
			e := worstErr(got, want, mag)
			t.Logf("%s weight gradient: winograd error %.2g (bound %.2g), %d chunks, blocks of %d", name, e, bound, (w.tiles+w.tc-1)/w.tc, w.kb)
			if e > bound {
				t.Errorf("%s weight gradient: error %.3g > %.3g", name, e, bound)
			}
			if w.vec() {
				// The portable transforms (another order of the points).
				winogradScalar = true
				w.weightGrad(nil, gy, x, got, ws)
				winogradScalar = false
				if e := worstErr(got, want, mag); e > bound {
					t.Errorf("%s weight gradient, portable transforms: error %.3g > %.3g", name, e, bound)
				}
			}
		}
	}
}

// The weight gradient takes Winograd by shape only (the registered
// workspace covers it), where it was measured faster.
func TestWinogradWgradChosenByShape(t *testing.T) {
	defer func(off bool) { winogradOff = off }(winogradOff)
	winogradOff = false
	for _, tc := range []struct {
		name          string
		n, c, h, k, s int
		want          bool
	}{
		{"resnet152 stage 2", 8, 128, 16, 128, 1, true},
		{"resnet152 stage 3", 8, 256, 8, 256, 1, true},
		{"resnet18 stage 3", 32, 256, 4, 256, 1, true},
		{"resnet152 stage 1", 8, 64, 32, 64, 1, true},
		{"rrdbnet (32 output channels)", 4, 128, 32, 32, 1, true},
		{"16 output channels", 4, 128, 32, 16, 1, false},
		{"stride 2", 8, 256, 16, 256, 2, false},
		{"small", 1, 128, 8, 128, 1, false},
	} {
		opts := op.ConvOpts{Stride: [2]int{tc.s, tc.s}, Padding: [2]int{1, 1}}
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.h}, tensor.Shape{tc.k, tc.c, 3, 3}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := winogradWgrad(g); ok != tc.want {
			t.Errorf("%s: Winograd weight gradient %v, want %v", tc.name, ok, tc.want)
		}
	}
}

// rrdbWgradShapes are the weight gradients of rrdbnet's convolutions (and
// resnet152's first stage) for BenchmarkWinogradWgrad.
var rrdbWgradShapes = []struct {
	name          string
	n, c, h, w, k int
}{
	{"rrdb_c1", 4, 64, 32, 32, 32},
	{"rrdb_c2", 4, 96, 32, 32, 32},
	{"rrdb_c3", 4, 128, 32, 32, 32},
	{"rrdb_c4", 4, 160, 32, 32, 32},
	{"rrdb_c5", 4, 192, 32, 32, 64},
	{"rrdb_trunk", 4, 64, 32, 32, 64},
	{"r152_l1", 8, 64, 32, 32, 64},
}

// BenchmarkWinogradWgrad times the Winograd weight gradient against the
// direct one on the same geometry, whatever winogradWgrad would choose
// (cpu-ms/op: the process's CPU time per call; HEADROOM_NUM_THREADS sets
// the threads).
func BenchmarkWinogradWgrad(b *testing.B) {
	for _, s := range rrdbWgradShapes {
		g, err := prim.ConvGeometry(tensor.Shape{s.n, s.c, s.h, s.w}, tensor.Shape{s.k, s.c, 3, 3}, op.ConvOpts{Padding: [2]int{1, 1}})
		if err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 2))
		rnd := func(n int) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			return v
		}
		x, gy := rnd(g.N*g.C*g.H*g.W), rnd(g.N*g.K*g.OH*g.OW)
		gw := make([]float32, g.K*g.C*9)
		wf, _ := winogradPlan(g)
		w := wgradPlan(wf)
		wws := make([]float32, w.scratch())
		d, _ := directWgrad(g)
		dws := make([]float32, d.wgradScratch(g.N))
		for _, path := range []string{"direct", "wino"} {
			run := func() { w.weightGrad(nil, gy, x, gw, wws) }
			if path == "direct" {
				run = func() { convDirectWgrad(nil, g, gy, x, gw, dws) }
			}
			b.Run(s.name+"/"+path, func(b *testing.B) {
				run()
				b.ResetTimer()
				c0 := cpuTime()
				for range b.N {
					run()
				}
				cpu := cpuTime() - c0
				b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// gradVec (the output gradient's gather and transform on the vector
// kernels) gives transformGrad's values in the same order of points,
// bitwise, on every tile of a chunk: partial tiles at the bottom and right
// edges, runs longer than 8 tiles, chunks starting inside a tile row.
func TestWinogradGradVecMatchesPortable(t *testing.T) {
	if !blas.WinoOK() {
		t.Skip("no vector Winograd kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []struct{ n, c, h, w, k int }{
		{2, 8, 13, 11, 5},
		{1, 4, 40, 42, 3},
		{3, 4, 32, 32, 7},
	} {
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.w}, tensor.Shape{tc.k, tc.c, 3, 3}, op.ConvOpts{Padding: [2]int{1, 1}})
		if err != nil {
			t.Fatal(err)
		}
		wf, _ := winogradPlan(g)
		w := wgradPlan(wf)
		w.tc = 48 // chunks starting inside tile rows
		w.ldt = w.tc + 16
		gy := make([]float32, g.N*g.K*g.OH*g.OW)
		for i := range gy {
			gy[i] = float32(r.NormFloat64())
		}
		for t0 := 0; t0 < w.tiles; t0 += w.tc {
			cnt := min(w.tc, w.tiles-t0)
			got := make([]float32, winoPts*w.ySize())
			want := make([]float32, len(got))
			for i := range got {
				got[i] = float32(math.NaN())
			}
			for k := 0; k < g.K; k++ { // one block: row kl = k
				kl := k
				w.gradVec(gy, nil, k, kl, t0, cnt, got)
				w.transformGrad(gy, k, kl, t0, cnt, want, true)
				for xi := 0; xi < winoPts; xi++ {
					for tt := 0; tt < cnt; tt++ {
						i := xi*w.ySize() + kl*w.ldt + tt
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%+v chunk at %d, channel %d, point row %d, tile %d: %g, want %g", tc, t0, k, xi, tt, got[i], want[i])
						}
					}
				}
			}
		}
	}
}
