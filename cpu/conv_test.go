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

// The direct convolution (forward and input gradient) agrees with the
// implicit-GEMM path on the geometries it takes.
func TestDirectConvMatchesGEMM(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, tc := range []struct {
		n, c, h, w, k, kh, kw, ph, pw, dh, dw int
		bias                                  bool
	}{
		{2, 3, 5, 16, 7, 3, 3, 1, 1, 1, 1, true},
		{1, 5, 4, 32, 6, 3, 3, 1, 1, 1, 1, false},
		{2, 4, 6, 18, 13, 3, 3, 0, 0, 1, 1, true}, // output width 16
		{1, 2, 7, 16, 5, 5, 5, 2, 2, 1, 1, false},
		{1, 3, 6, 20, 4, 3, 3, 2, 0, 2, 2, true}, // dilation; output 16 wide
		{2, 8, 3, 16, 32, 1, 1, 0, 0, 1, 1, true},
		{1, 300, 2, 16, 2, 3, 3, 1, 1, 1, 1, false}, // more taps than one pass
		{3, 4, 16, 16, 9, 3, 3, 1, 1, 1, 1, false},  // 9 output channels: overlapping groups of 4
		{2, 2, 20, 16, 4, 5, 3, 2, 1, 1, 1, true},
		{1, 3, 4, 16, 5, 3, 3, 1, 1, 1, 1, true},  // blocks 4 + 1
		{1, 3, 4, 16, 32, 3, 3, 1, 1, 1, 1, true}, // blocks 6,6,6,6,4,4
		{1, 3, 4, 16, 2, 3, 3, 1, 1, 1, 1, true},  // one short block
		{1, 3, 4, 16, 11, 3, 3, 1, 1, 1, 1, true}, // 6 + 4 + 1
	} {
		name := fmt.Sprintf("%+v", tc)
		opts := op.ConvOpts{Padding: [2]int{tc.ph, tc.pw}, Dilation: [2]int{tc.dh, tc.dw}}
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.w}, tensor.Shape{tc.k, tc.c, tc.kh, tc.kw}, opts)
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
		x, w := rnd(g.N*g.C*g.H*g.W), rnd(g.K*g.C*g.KH*g.KW)
		var bias []float32
		if tc.bias {
			bias = rnd(g.K)
		}
		P := g.OH * g.OW
		d, ok := directForward(g)
		if !ok {
			t.Fatalf("%s: not a direct geometry", name)
		}
		want := make([]float32, g.N*g.K*P)
		convForward(nil, g, x, w, bias, want, make([]float32, convForwardScratch(g)), false)
		got := make([]float32, len(want))
		if !convDirectForward(nil, g, x, w, bias, got, make([]float32, d.scratch())) {
			t.Skip("no direct-convolution kernel on this CPU")
		}
		closeF32(t, name+" forward", got, want)

		if dw, ok := directWgrad(g); ok {
			gy := rnd(len(want))
			wantW := make([]float32, len(w))
			convWeightGrad(nil, g, gy, x, wantW, make([]float32, g.K*g.N*P), nil)
			gotW := make([]float32, len(w))
			if !convDirectWgrad(nil, g, gy, x, gotW, make([]float32, dw.wgradScratch(g.N))) {
				t.Fatalf("%s: no direct weight gradient", name)
			}
			closeF32(t, name+" weight gradient", gotW, wantW)
		}
		if di, ok := directInputGrad(g); ok {
			gy := rnd(len(want))
			wantX := make([]float32, len(x))
			ws := make([]float32, 4*len(x)+len(w)+g.K*g.C*g.KH*g.KW*4+1<<16)
			gt := convTransposed(g)
			wt := make([]float32, len(w))
			khw := g.KH * g.KW
			for k := 0; k < g.K; k++ {
				for c := 0; c < g.C; c++ {
					copy(wt[(c*g.K+k)*khw:][:khw], w[(k*g.C+c)*khw:][:khw])
				}
			}
			convForward(nil, gt, gy, wt, nil, wantX, ws, false)
			gotX := make([]float32, len(x))
			convDirectInputGrad(nil, g, gy, w, gotX, make([]float32, di.scratch()))
			closeF32(t, name+" input gradient", gotX, wantX)
		}
	}
}

func closeF32(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-4+1e-5*math.Abs(float64(want[i])) {
			t.Fatalf("%s: element %d: got %v, want %v", what, i, got[i], want[i])
		}
	}
}

// The space-to-depth form of stride-2 convolutions agrees with the
// implicit GEMM.
func TestS2DConvMatchesGEMM(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, tc := range []struct {
		n, c, h, w, k, kh, kw, ph, pw int
		bias                          bool
	}{
		{2, 3, 64, 64, 64, 7, 7, 3, 3, true},  // a ResNet's stem
		{1, 3, 63, 63, 10, 7, 7, 3, 3, false}, // odd sizes: the last phase rows past the image
		{2, 2, 32, 33, 7, 4, 4, 1, 1, true},
		{1, 5, 31, 64, 13, 6, 7, 0, 3, false},
		{1, 1, 40, 32, 3, 7, 6, 4, 2, true},
	} {
		name := fmt.Sprintf("%+v", tc)
		opts := op.ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{tc.ph, tc.pw}}
		g, err := prim.ConvGeometry(tensor.Shape{tc.n, tc.c, tc.h, tc.w}, tensor.Shape{tc.k, tc.c, tc.kh, tc.kw}, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		g2, ok := s2dGeom(g)
		if !ok {
			t.Fatalf("%s: no space-to-depth form (output %dx%d)", name, g.OH, g.OW)
		}
		rnd := func(n int) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			return v
		}
		x, w := rnd(g.N*g.C*g.H*g.W), rnd(g.K*g.C*g.KH*g.KW)
		var bias []float32
		if tc.bias {
			bias = rnd(g.K)
		}
		want := make([]float32, g.N*g.K*g.OH*g.OW)
		convForward(nil, g, x, w, bias, want, make([]float32, convForwardScratch(g)), false)
		got := make([]float32, len(want))
		d, _ := directForward(g2)
		if !convS2DForward(nil, g, x, w, bias, got, make([]float32, d.scratch())) {
			t.Skip("no direct-convolution kernel on this CPU")
		}
		closeF32(t, name, got, want)
	}
	// 3x3 stride 2 would add 7/9 more taps: not taken.
	g, _ := prim.ConvGeometry(tensor.Shape{1, 8, 32, 32}, tensor.Shape{8, 8, 3, 3}, op.ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}})
	if _, ok := s2dGeom(g); ok {
		t.Error("3x3 stride 2 taken")
	}
}

// col2im's pair scatter (short output rows) gives col2im's run scatter's
// sums bit for bit.
func TestCol2imPairsMatchRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []struct{ c, h, w, kh, kw, s, p, d, cnt int }{
		{3, 4, 4, 3, 3, 1, 1, 1, 2},   // ResNet's 4×4 layer
		{2, 8, 8, 3, 3, 2, 1, 1, 3},   // stride 2
		{4, 8, 8, 1, 1, 2, 0, 1, 2},   // 1×1 stride 2 (downsample)
		{2, 9, 7, 5, 3, 2, 2, 1, 1},   // odd sizes
		{2, 7, 7, 3, 3, 1, 2, 2, 2},   // dilation
		{1, 5, 40, 3, 3, 1, 1, 1, 2},  // output 40 wide
		{2, 16, 16, 3, 3, 2, 1, 1, 2}, // output 8 wide
		{2, 2, 2, 3, 3, 1, 1, 1, 4},
	} {
		opts := op.ConvOpts{Stride: [2]int{tc.s, tc.s}, Padding: [2]int{tc.p, tc.p}, Dilation: [2]int{tc.d, tc.d}}
		g, err := prim.ConvGeometry(tensor.Shape{tc.cnt, tc.c, tc.h, tc.w}, tensor.Shape{1, tc.c, tc.kh, tc.kw}, opts)
		if err != nil {
			t.Fatal(err)
		}
		P := g.OH * g.OW
		ld := tc.cnt*P + 3 // a row stride past the columns
		col := make([]float32, g.ColRows()*ld)
		for i := range col {
			col[i] = float32(r.NormFloat64())
		}
		want := make([]float32, tc.cnt*g.C*g.H*g.W)
		got := make([]float32, len(want))
		for i := range got {
			got[i] = float32(i) // col2im must overwrite
		}
		col2imRuns(nil, g, col, ld, tc.cnt, want)
		col2imPairs(nil, g, col, ld, tc.cnt, got)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: x[%d] = %v, want %v", tc, i, got[i], want[i])
			}
		}
	}
}

// Pointwise convolutions that run one in-place sgemm an image (and their
// input gradients) agree with the definition.
func TestPointwiseInPlace(t *testing.T) {
	for _, tc := range []struct{ n, c, h, w, k, groups int }{
		{3, 64, 16, 16, 128, 1},
		{2, 128, 16, 20, 64, 1},
		{2, 128, 32, 32, 256, 2},
		{2, 64, 8, 8, 64, 1}, // chunked: too few positions
	} {
		opts := op.ConvOpts{Groups: tc.groups}
		x, w := f32(tc.n, tc.c, tc.h, tc.w), f32(tc.k, tc.c/tc.groups, 1, 1)
		g, err := prim.ConvGeometry(x.Shape, w.Shape, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := convPointwiseInPlace(g), tc.h*tc.w >= 256; got != want {
			t.Fatalf("%+v: in place %v, want %v", tc, got, want)
		}
		P, kg, cg := tc.h*tc.w, tc.k/tc.groups, tc.c/tc.groups
		fwd := newKernelCase(t, &prim.Conv2dOp{Opts: opts}, x, w)
		fwd.run(t)
		xs, ws, ys := fwd.in[0].F32(), fwd.in[1].F32(), fwd.out[0].F32()
		for n := 0; n < tc.n; n++ {
			for k := 0; k < tc.k; k++ {
				gi := k / kg
				for p := 0; p < P; p++ {
					var s float64
					for c := 0; c < cg; c++ {
						s += float64(ws[k*cg+c]) * float64(xs[(n*tc.c+gi*cg+c)*P+p])
					}
					if got := ys[(n*tc.k+k)*P+p]; math.Abs(float64(got)-s) > 1e-3*(1+math.Abs(s)) {
						t.Fatalf("%+v: y[%d,%d,%d] = %v, want %v", tc, n, k, p, got, s)
					}
				}
			}
		}
		bwd := newKernelCase(t, &prim.Conv2dBackwardInput{Opts: opts, InputShape: x.Shape}, f32(tc.n, tc.k, tc.h, tc.w), w)
		bwd.run(t)
		gys, ws, gxs := bwd.in[0].F32(), bwd.in[1].F32(), bwd.out[0].F32()
		for n := 0; n < tc.n; n++ {
			for c := 0; c < tc.c; c++ {
				gi := c / cg
				for p := 0; p < P; p++ {
					var s float64
					for k := 0; k < kg; k++ {
						s += float64(ws[(gi*kg+k)*cg+c%cg]) * float64(gys[(n*tc.k+gi*kg+k)*P+p])
					}
					if got := gxs[(n*tc.c+c)*P+p]; math.Abs(float64(got)-s) > 1e-3*(1+math.Abs(s)) {
						t.Fatalf("%+v: x̄[%d,%d,%d] = %v, want %v", tc, n, c, p, got, s)
					}
				}
			}
		}
	}
}
