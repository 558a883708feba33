package cpu

import (
	"testing"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/internal/cpuid"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// convMetas is the op, inputs and outputs of a conv op of kind ("forward", "input",
// "weight") over input x [N, C, H, W] and weight w [K, C, kh, kw].
func convMetas(t *testing.T, kind string, dt tensor.DType, x, w tensor.Shape, o prim.ConvOpts) (trace.Op, []trace.Meta, []trace.Meta) {
	t.Helper()
	o = o.Normalized()
	m := func(s tensor.Shape) trace.Meta { return trace.Meta{DType: dt, Shape: s} }
	fwd := &prim.Conv2dOp{Opts: o}
	y, err := fwd.Infer([]trace.Meta{m(x), m(w)})
	if err != nil {
		t.Fatal(err)
	}
	var op trace.Op
	var in []trace.Meta
	switch kind {
	case "forward":
		return fwd, []trace.Meta{m(x), m(w)}, y
	case "input":
		op, in = &prim.Conv2dBackwardInput{Opts: o, InputShape: x}, []trace.Meta{y[0], m(w)}
	case "weight":
		op, in = &prim.Conv2dBackwardWeight{Opts: o, WeightShape: w}, []trace.Meta{y[0], m(x)}
	}
	out, err := op.(prim.Primitive).Infer(in)
	if err != nil {
		t.Fatal(err)
	}
	return op, in, out
}

// The cpu backend reports the arithmetic of the Winograd paths where its
// kernels take them, and declines (the op's direct count holds) wherever
// they do not. Expected values are counted from the shapes: for F(4×4,
// 3×3), 36 multiply-adds per 4×4 output tile (edge tiles whole) and pair
// of channels, plus the transforms as the portable code computes them:
// 12 one-dimensional input transforms of 19 operations per tile and input
// channel, 10 output transforms of 13 per tile and output channel, 9
// weight transforms of 17 per kernel; for the weight gradient 10
// transforms of ȳ of 11 per tile and output channel and 9 of 16 per
// kernel's gradient.
func TestWinogradFlops(t *testing.T) {
	defer func(off bool) { winogradOff = off }(winogradOff)
	winogradOff = false // whatever $HEADROOM_WINOGRAD says
	coster, ok := Backend().(backend.Coster)
	if !ok {
		t.Fatal("the cpu backend is not a backend.Coster")
	}
	pad1 := prim.ConvOpts{Padding: [2]int{1, 1}}
	// 2 images, 64→64 channels, 8×8 tiles each (32×32 or 30×30 outputs):
	// 128 tiles.
	const fwd64 = 2*36*64*64*128 + 12*19*64*128 + 10*13*64*128 + 9*17*64*64
	// 1 image, 128→128 channels, 32×32 output: 64 tiles, one chunk.
	const wgrad128 = 2*36*128*128*64 + 12*19*128*64 + 10*11*128*64 + 9*16*128*128
	// 2 images, 64→64, 32×32: 128 tiles in two chunks, one block of
	// output channels (the input transformed once).
	const wgrad64 = 2*36*64*64*128 + 12*19*64*128 + 10*11*64*128 + 9*16*64*64
	for _, c := range []struct {
		name    string
		kind    string
		dt      tensor.DType
		x, w    tensor.Shape
		o       prim.ConvOpts
		want    float64 // 0: declines
		speedup float64 // direct over Winograd, at least
	}{
		{"forward 64→64 32×32", "forward", tensor.Float32, tensor.Shape{2, 64, 32, 32}, tensor.Shape{64, 64, 3, 3}, pad1, fwd64, 3.6},
		{"forward 64→64 30×30: edge tiles count whole", "forward", tensor.Float32, tensor.Shape{2, 64, 30, 30}, tensor.Shape{64, 64, 3, 3}, pad1, fwd64, 3.2},
		{"input gradient 64→64 32×32", "input", tensor.Float32, tensor.Shape{2, 64, 32, 32}, tensor.Shape{64, 64, 3, 3}, pad1, fwd64, 3.6},
		{"weight gradient 128→128 32×32", "weight", tensor.Float32, tensor.Shape{1, 128, 32, 32}, tensor.Shape{128, 128, 3, 3}, pad1, wgrad128, 3.7},
		{"weight gradient 64→64 32×32", "weight", tensor.Float32, tensor.Shape{2, 64, 32, 32}, tensor.Shape{64, 64, 3, 3}, pad1, wgrad64, 3.6},
		{"float64", "forward", tensor.Float64, tensor.Shape{2, 64, 32, 32}, tensor.Shape{64, 64, 3, 3}, pad1, 0, 0},
		{"stride 2", "forward", tensor.Float32, tensor.Shape{2, 64, 64, 64}, tensor.Shape{64, 64, 3, 3}, prim.ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, 0, 0},
		{"input gradient of stride 2", "input", tensor.Float32, tensor.Shape{2, 64, 64, 64}, tensor.Shape{64, 64, 3, 3}, prim.ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, 0, 0},
		{"16 channels", "forward", tensor.Float32, tensor.Shape{16, 16, 64, 64}, tensor.Shape{16, 16, 3, 3}, pad1, 0, 0},
		{"1×1", "forward", tensor.Float32, tensor.Shape{2, 256, 32, 32}, tensor.Shape{256, 256, 1, 1}, prim.ConvOpts{}, 0, 0},
		{"under 100 MFLOP", "forward", tensor.Float32, tensor.Shape{1, 64, 32, 32}, tensor.Shape{64, 64, 3, 3}, pad1, 0, 0},
	} {
		op, in, out := convMetas(t, c.kind, c.dt, c.x, c.w, c.o)
		got, ok := coster.Flops(op, in, out)
		direct := prim.Of(op).Cost(in, out).Flops
		switch {
		case c.want == 0 && ok:
			t.Errorf("%s: reports %g flops; the kernel does not take Winograd (direct %g)", c.name, got, direct)
		case c.want != 0 && (!ok || got != c.want):
			t.Errorf("%s: %g, %v; want %g (direct %g)", c.name, got, ok, c.want, direct)
		case c.want != 0 && direct/got < c.speedup:
			t.Errorf("%s: direct/Winograd %.3f, want at least %.2f", c.name, direct/got, c.speedup)
		}
		if c.want != 0 {
			t.Logf("%s: direct %.4g flops, Winograd %.4g (%.2f× fewer)", c.name, direct, got, direct/got)
		}
	}

	// Turned off ($HEADROOM_WINOGRAD=0), the kernels and the cost agree.
	winogradOff = true
	op, in, out := convMetas(t, "forward", tensor.Float32, tensor.Shape{2, 64, 32, 32}, tensor.Shape{64, 64, 3, 3}, pad1)
	if f, ok := coster.Flops(op, in, out); ok {
		t.Errorf("Winograd off: reports %g flops", f)
	}
	winogradOff = false

	// Other ops: the declaration holds.
	mm := &prim.MatMul{}
	a := trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{64, 64}}
	if f, ok := coster.Flops(mm, []trace.Meta{a, a}, []trace.Meta{a}); ok {
		t.Errorf("matmul: reports %g flops", f)
	}
}

// Deep layers transform their weights a block of output channels at a
// time, once per chunk of tiles: the cost counts each pass, so it is above
// the one-pass count and still far below the direct count.
func TestWinogradFlopsRepeatedTransforms(t *testing.T) {
	defer func(off bool) { winogradOff = off }(winogradOff)
	winogradOff = false
	g := prim.ConvGeom{N: 64, C: 512, H: 8, W: 8, K: 512, KH: 3, KW: 3, OH: 8, OW: 8, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, Groups: 1}
	w, ok := winogradFor(g)
	if !ok || w.kb >= w.kpad || w.tc >= w.tiles {
		t.Fatalf("want a plan of several blocks and chunks: %v %+v", ok, w)
	}
	T := float64(w.tiles)
	once := 2*36*512*512*T + 12*19*512*T + 10*13*512*T + 9*17*512*512
	direct := 2 * 9 * 512 * 512 * float64(g.N*g.OH*g.OW)
	if f := w.flops(); f <= once || f >= direct/2 {
		t.Errorf("flops %g: want above one pass's %g and below half the direct %g", f, once, direct)
	}
}

// The rates of the kernel families: float32 by vector width; 16-bit
// products no faster than float32 wherever bf16 is emulated (AVX2, and
// AVX-512 with or without AVX512-BF16 while no native kernel runs), faster
// only where a native bf16 kernel runs.
func TestThroughputOf(t *testing.T) {
	avx2 := cpuid.Features{AVX2: true, FMA: true, F16C: true}
	skx := avx2
	skx.AVX512F, skx.AVX512BW, skx.AVX512VL = true, true, true
	cpl := skx
	cpl.AVX512BF16 = true
	for _, c := range []struct {
		name       string
		f          cpuid.Features
		k          Capabilities
		row        string
		halfFaster bool
	}{
		{"zen3", avx2, Capabilities{}, "avx2", false},
		{"skylake-x", skx, Capabilities{AVX512: true}, "avx512", false},
		{"cooper lake, bf16 emulated", cpl, Capabilities{AVX512: true}, "avx512", false},
		{"cooper lake, native bf16 kernel", cpl, Capabilities{AVX512: true, NativeBF16: true}, "avx512-bf16 (native bf16 kernel)", true},
		{"native bf16 kernel claimed without the instructions", skx, Capabilities{AVX512: true, NativeBF16: true}, "avx512", false},
		{"no vector extensions", cpuid.Features{}, Capabilities{}, "portable", false},
	} {
		r := ThroughputOf(c.f, c.k)
		if r.Name != c.row || (r.BF16 > r.FLOPS) != c.halfFaster || r.BF16 < r.FLOPS {
			t.Errorf("%s: %+v; want row %q, 16-bit faster %v", c.name, r, c.row, c.halfFaster)
		}
		// Native convolutions no faster than the products, and no slower
		// than float32 (else they would not run); memory at least the
		// default's.
		if v := r.ConvBF16(); v > r.BF16 || v < r.FLOPS || (v > r.FLOPS) != c.halfFaster || r.MemoryRate() < 1 {
			t.Errorf("%s: convolutions %g (products %g, float32 %g), memory %g", c.name, v, r.BF16, r.FLOPS, r.MemoryRate())
		}
	}
	if r := HostThroughput(); r != ThroughputOf(cpuid.X86, Caps()) {
		t.Errorf("HostThroughput %+v", r)
	}
}

// NativeLow says which kernel runs a product on bf16 operands, as the
// kernels decide (convBF16PathOf): matrix products natively; rrdbnet's
// 64→32 weight gradient at batch 2 natively (tiled; its forward and input
// gradient widen: im2col would take more than widening), its 64→64 weight
// gradient as float32 Winograd; the
// pointwise ones (1x1, stride 1: all three natively,
// convPwBF16); ResNet-18's strided ones natively, its 2x2 layer's
// forward in float32 (padding-bound), its gradients natively.
func TestNativeLow(t *testing.T) {
	defer func(off, force bool, on int) { winogradOff, convNativeForce, convBF16On = off, force, on }(winogradOff, convNativeForce, convBF16On)
	winogradOff, convNativeForce, convBF16On = false, false, convBF16Fwd|convBF16Bwi|convBF16Bww
	lc, ok := Backend().(backend.LowCoster)
	if !ok {
		t.Fatal("the cpu backend is not a backend.LowCoster")
	}
	bf := func(s ...int) trace.Meta { return trace.Meta{DType: tensor.BFloat16, Shape: tensor.Shape(s)} }
	pad1 := prim.ConvOpts{Padding: [2]int{1, 1}}.Normalized()
	s2 := prim.ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}.Normalized()
	fwd := &prim.Conv2dOp{Opts: pad1, Mixed: true}
	for _, c := range []struct {
		name string
		o    trace.Op
		in   []trace.Meta
		want bool
	}{
		{"matmul", &prim.MatMul{Mixed: true}, []trace.Meta{bf(64, 32), bf(32, 16)}, true},
		{"weight gradient 64→32", &prim.Conv2dBackwardWeight{Opts: pad1, WeightShape: tensor.Shape{32, 64, 3, 3}, Mixed: true}, []trace.Meta{bf(2, 32, 32, 32), bf(2, 64, 32, 32)}, true},
		{"weight gradient 64→64 (Winograd)", &prim.Conv2dBackwardWeight{Opts: pad1, WeightShape: tensor.Shape{64, 64, 3, 3}, Mixed: true}, []trace.Meta{bf(2, 64, 32, 32), bf(2, 64, 32, 32)}, false},
		// At batch 2 an image's im2col matrix (9 times its plane) is more
		// than the float32 copy widening makes (convColFits).
		{"forward 64→32", fwd, []trace.Meta{bf(2, 64, 32, 32), bf(32, 64, 3, 3)}, false},
		{"input gradient 32→64", &prim.Conv2dBackwardInput{Opts: pad1, InputShape: tensor.Shape{2, 64, 32, 32}, Mixed: true}, []trace.Meta{bf(2, 32, 32, 32), bf(32, 64, 3, 3)}, false},
		{"fused forward 64→32", &prim.Fused{Producer: fwd, NProd: 2, NProdOut: 1}, []trace.Meta{bf(2, 64, 32, 32), bf(32, 64, 3, 3)}, false},
		{"fused forward 64→64 (Winograd)", &prim.Fused{Producer: fwd, NProd: 2, NProdOut: 1}, []trace.Meta{bf(4, 64, 32, 32), bf(64, 64, 3, 3)}, false},
		{"pointwise forward 256→64", &prim.Conv2dOp{Mixed: true}, []trace.Meta{bf(8, 256, 32, 32), bf(64, 256, 1, 1)}, true},
		{"pointwise input gradient 64→256", &prim.Conv2dBackwardInput{InputShape: tensor.Shape{8, 256, 32, 32}, Mixed: true}, []trace.Meta{bf(8, 64, 32, 32), bf(64, 256, 1, 1)}, true},
		{"pointwise weight gradient 256→64", &prim.Conv2dBackwardWeight{WeightShape: tensor.Shape{64, 256, 1, 1}, Mixed: true}, []trace.Meta{bf(8, 64, 32, 32), bf(8, 256, 32, 32)}, true},
		{"1×1 stride 2 forward (not pointwise)", &prim.Conv2dOp{Opts: prim.ConvOpts{Stride: [2]int{2, 2}}.Normalized(), Mixed: true}, []trace.Meta{bf(8, 256, 32, 32), bf(512, 256, 1, 1)}, true},
		{"3×3 stride 2 forward", &prim.Conv2dOp{Opts: s2, Mixed: true}, []trace.Meta{bf(32, 64, 16, 16), bf(128, 64, 3, 3)}, true},
		{"3×3 stride 2 input gradient", &prim.Conv2dBackwardInput{Opts: s2, InputShape: tensor.Shape{32, 128, 8, 8}, Mixed: true}, []trace.Meta{bf(32, 256, 4, 4), bf(256, 128, 3, 3)}, true},
		{"3×3 stride 2 weight gradient", &prim.Conv2dBackwardWeight{Opts: s2, WeightShape: tensor.Shape{512, 256, 3, 3}, Mixed: true}, []trace.Meta{bf(32, 512, 2, 2), bf(32, 256, 4, 4)}, true},
		{"2×2 forward (padding-bound)", fwd, []trace.Meta{bf(32, 512, 2, 2), bf(512, 512, 3, 3)}, false},
		{"2×2 input gradient", &prim.Conv2dBackwardInput{Opts: pad1, InputShape: tensor.Shape{32, 512, 2, 2}, Mixed: true}, []trace.Meta{bf(32, 512, 2, 2), bf(512, 512, 3, 3)}, true},
		{"2×2 weight gradient", &prim.Conv2dBackwardWeight{Opts: pad1, WeightShape: tensor.Shape{512, 512, 3, 3}, Mixed: true}, []trace.Meta{bf(32, 512, 2, 2), bf(32, 512, 2, 2)}, true},
		{"16×16 forward (Winograd)", fwd, []trace.Meta{bf(32, 64, 16, 16), bf(64, 64, 3, 3)}, false},
	} {
		if got := lc.NativeLow(c.o, c.in, nil); got != c.want {
			t.Errorf("%s: native %v, want %v", c.name, got, c.want)
		}
	}
}
