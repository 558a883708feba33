package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/cpuid"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// convBF16Geoms are the geometries the native bf16 convolutions are
// checked on: rrdbnet's 3x3 layers, chunks that straddle images (OH not a
// divisor of the chunk's rows), strides, dilation, 1x1, wide rows.
func convBF16Geoms(t *testing.T) []prim.ConvGeom {
	var gs []prim.ConvGeom
	for _, c := range []struct {
		n, c, h, w, k, kh, kw int
		o                     prim.ConvOpts
	}{
		{2, 8, 12, 12, 16, 3, 3, prim.ConvOpts{Stride: [2]int{1, 1}, Padding: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 1}},
		{3, 5, 7, 9, 6, 3, 3, prim.ConvOpts{Stride: [2]int{1, 1}, Padding: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 1}},
		{2, 4, 9, 11, 5, 3, 3, prim.ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 1}},
		{2, 3, 10, 10, 4, 3, 3, prim.ConvOpts{Stride: [2]int{1, 1}, Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}, Groups: 1}},
		{2, 6, 5, 5, 7, 1, 1, prim.ConvOpts{Stride: [2]int{1, 1}, Padding: [2]int{0, 0}, Dilation: [2]int{1, 1}, Groups: 1}},
		{1, 3, 3, 700, 4, 3, 3, prim.ConvOpts{Stride: [2]int{1, 1}, Padding: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 1}},
		{4, 3, 6, 6, 2, 5, 5, prim.ConvOpts{Stride: [2]int{1, 1}, Padding: [2]int{2, 2}, Dilation: [2]int{1, 1}, Groups: 1}},
	} {
		g, err := prim.ConvGeometry(tensor.Shape{c.n, c.c, c.h, c.w}, tensor.Shape{c.k, c.c, c.kh, c.kw}, c.o)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	return gs
}

// colAt is col(x)[r, (n, oh, ow)] by the definition.
func colAt(g prim.ConvGeom, x []uint16, n, r, oh, ow int) uint16 {
	khw := g.KH * g.KW
	c, kh, kw := r/khw, r%khw/g.KW, r%g.KW
	ih, iw := oh*g.SH-g.PH+kh*g.DH, ow*g.SW-g.PW+kw*g.DW
	if ih < 0 || ih >= g.H || iw < 0 || iw >= g.W {
		return 0
	}
	return x[((n*g.C+c)*g.H+ih)*g.W+iw]
}

func randBF16Vals(rng *rand.Rand, n int) []uint16 {
	v := make([]uint16, n)
	for i := range v {
		v[i] = uint16(math.Float32bits(float32(rng.NormFloat64())) >> 16)
	}
	return v
}

func bfF(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// refConvForwardBF16 is the native forward by the reference arithmetic:
// each output sums W[k, r] col(x)[r, p] over r in order.
func refConvForwardBF16(g prim.ConvGeom, x, w []uint16, bias []float32) []float32 {
	kk := g.C * g.KH * g.KW
	y := make([]float32, g.N*g.K*g.OH*g.OW)
	col := make([]uint16, kk)
	for n := 0; n < g.N; n++ {
		for oh := 0; oh < g.OH; oh++ {
			for ow := 0; ow < g.OW; ow++ {
				for r := range col {
					col[r] = colAt(g, x, n, r, oh, ow)
				}
				for k := 0; k < g.K; k++ {
					v := blas.RefDotBF16(col, w[k*kk:(k+1)*kk], 1, 0, 0)
					if bias != nil {
						v += bias[k]
					}
					y[((n*g.K+k)*g.OH+oh)*g.OW+ow] = v
				}
			}
		}
	}
	return y
}

// refConvWeightGradBF16 is the native weight gradient by the reference
// arithmetic: blocks of output positions (of the tiled kernel, or of the
// im2col path's groups, refSumBlocks), each summed over its positions in
// order and added to the previous blocks' sum.
func refConvWeightGradBF16(g prim.ConvGeom, gy, x []uint16, tiled bool) []float32 {
	kk := g.C * g.KH * g.KW
	P := g.OH * g.OW
	gw := make([]float32, g.K*kk)
	if !tiled {
		for k := 0; k < g.K; k++ {
			for r := 0; r < kk; r++ {
				gw[k*kk+r] = refSumBlocks(P, g.N, convWgradColGroup(g),
					func(n, p int) uint16 { return gy[(n*g.K+k)*P+p] },
					func(n, p int) uint16 { return colAt(g, x, n, r, p/g.OW, p%g.OW) })
			}
		}
		return gw
	}
	var blocks [][2]int // global positions n*P+p
	for n := 0; n < g.N; n++ {
		for p0 := 0; p0 < P; p0 += convWgradKC {
			blocks = append(blocks, [2]int{n*P + p0, n*P + min(P, p0+convWgradKC)})
		}
	}
	for bi, bl := range blocks {
		var a, b []uint16
		for k := 0; k < g.K; k++ {
			for r := 0; r < kk; r++ {
				a, b = a[:0], b[:0]
				for q := bl[0]; q < bl[1]; q++ {
					n, oh, ow := q/P, q%P/g.OW, q%g.OW
					a = append(a, colAt(g, x, n, r, oh, ow))
					b = append(b, gy[((n*g.K+k)*g.OH+oh)*g.OW+ow])
				}
				beta := float32(1)
				if bi == 0 {
					beta = 0
				}
				gw[k*kk+r] = blas.RefDotBF16(a, b, 1, beta, gw[k*kk+r])
			}
		}
	}
	return gw
}

// refSumBlocks is Σ a(n, p)·b(n, p) over n images of P positions by the
// reference arithmetic of MulSumBatch over groups of nb images, each
// group's SumBatchBlocks accumulated onto the groups before it.
func refSumBlocks(P, n, nb int, a, b func(n, p int) uint16) float32 {
	var v float32
	first := true
	for n0 := 0; n0 < n; n0 += nb {
		for _, bl := range blas.SumBatchBlocks(P, min(nb, n-n0)) {
			var av, bv []uint16
			for img := bl.B0; img < bl.B1; img++ {
				p0, p1 := 0, P
				if bl.B1-bl.B0 == 1 {
					p0, p1 = bl.P0, bl.P1
				}
				for p := p0; p < p1; p++ {
					av, bv = append(av, a(n0+img, p)), append(bv, b(n0+img, p))
				}
				if (p1-p0)%2 != 0 && img+1 < bl.B1 {
					av, bv = append(av, 0), append(bv, 0)
				}
			}
			beta := float32(1)
			if first {
				beta = 0
			}
			v, first = blas.RefDotBF16(av, bv, 1, beta, v), false
		}
	}
	return v
}

// exactConv is the three convolutions in float64 by their definitions.
func exactConv(g prim.ConvGeom, x, w, gy []uint16) (y, gx, gw []float64) {
	y = make([]float64, g.N*g.K*g.OH*g.OW)
	gx = make([]float64, g.N*g.C*g.H*g.W)
	gw = make([]float64, g.K*g.C*g.KH*g.KW)
	for n := 0; n < g.N; n++ {
		for k := 0; k < g.K; k++ {
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					o := ((n*g.K+k)*g.OH+oh)*g.OW + ow
					for c := 0; c < g.C; c++ {
						for kh := 0; kh < g.KH; kh++ {
							for kw := 0; kw < g.KW; kw++ {
								ih, iw := oh*g.SH-g.PH+kh*g.DH, ow*g.SW-g.PW+kw*g.DW
								if ih < 0 || ih >= g.H || iw < 0 || iw >= g.W {
									continue
								}
								xi := ((n*g.C+c)*g.H+ih)*g.W + iw
								wi := ((k*g.C+c)*g.KH+kh)*g.KW + kw
								y[o] += bfF(w[wi]) * bfF(x[xi])
								gx[xi] += bfF(w[wi]) * bfF(gy[o])
								gw[wi] += bfF(gy[o]) * bfF(x[xi])
							}
						}
					}
				}
			}
		}
	}
	return y, gx, gw
}

func sameF32Bits(a, b []float32) (int, bool) {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return 0, true
}

// closeTo checks got against the exact values within float32 summation
// error (relative to the sum of magnitudes, which the test's small
// operands bound).
func closeTo(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > 1e-4*(1+math.Abs(want[i])) {
			t.Errorf("%s: element %d is %g, exact %g", what, i, got[i], want[i])
			return
		}
	}
}

// The native bf16 convolutions agree bit for bit with the reference of
// VDPBF16PS's arithmetic in the order the driver sums (operands of the
// definition's im2col), and with the exact convolutions to float32
// rounding, for 1 and 2 threads.
func TestConvBF16Native(t *testing.T) {
	tile, ok := blas.NativeBF16Tile()
	if !ok {
		t.Skip("no native bf16 products on this CPU")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range convBF16Geoms(t) {
		kk := g.C * g.KH * g.KW
		x := randBF16Vals(rng, g.N*g.C*g.H*g.W)
		w := randBF16Vals(rng, g.K*kk)
		gy := randBF16Vals(rng, g.N*g.K*g.OH*g.OW)
		bias := make([]float32, g.K)
		for i := range bias {
			bias[i] = float32(rng.NormFloat64())
		}
		ey, egx, egw := exactConv(g, x, w, gy)
		name := fmt.Sprintf("%dx%dx%dx%d k%d %dx%d s%d p%d d%d", g.N, g.C, g.H, g.W, g.K, g.KH, g.KW, g.SH, g.PH, g.DH)
		wantY := refConvForwardBF16(g, x, w, bias)
		wantGW := refConvWeightGradBF16(g, gy, x, false)
		for _, threads := range []int{1, 2} {
			pool := parallel.NewPool(threads)
			what := fmt.Sprintf("%s, %d threads", name, threads)

			y := make([]float32, len(wantY))
			convForwardBF16(pool, tile, g, x, w, bias, y, make([]byte, convColForwardBytes(g)))
			if i, ok := sameF32Bits(y, wantY); !ok {
				t.Errorf("%s: forward element %d is %g, reference %g", what, i, y[i], wantY[i])
			}
			for i := range ey {
				ey[i] += float64(bias[i/(g.OH*g.OW)%g.K])
			}
			closeTo(t, what+" forward", y, ey)
			for i := range ey {
				ey[i] -= float64(bias[i/(g.OH*g.OW)%g.K])
			}

			gw := make([]float32, len(wantGW))
			convWgradColBF16(pool, tile, g, gy, x, gw, make([]byte, convWgradColBytes(g)))
			if i, ok := sameF32Bits(gw, wantGW); !ok {
				t.Errorf("%s: weight gradient element %d is %g, reference %g", what, i, gw[i], wantGW[i])
			}
			closeTo(t, what+" weight gradient", gw, egw)
			if convWgradTiled(g) {
				wantGW := refConvWeightGradBF16(g, gy, x, true)
				clear(gw)
				convWgradTiledBF16(pool, tile, g, gy, nil, x, gw, make([]byte, convWgradTiledBytes(g)))
				if i, ok := sameF32Bits(gw, wantGW); !ok {
					t.Errorf("%s: tiled weight gradient element %d is %g, reference %g", what, i, gw[i], wantGW[i])
				}
				// ȳ as float32 holding its bf16 values: the same sums.
				gy32 := make([]float32, len(gy))
				for i, h := range gy {
					gy32[i] = float32(bfF(h))
				}
				clear(gw)
				if !convWgradTiledBF16(pool, tile, g, nil, gy32, x, gw, make([]byte, convWgradTiledBytes(g))) {
					t.Fatalf("%s: widened bf16 values not found exact", what)
				}
				if i, ok := sameF32Bits(gw, wantGW); !ok {
					t.Errorf("%s: weight gradient of float32 ȳ, element %d is %g, reference %g", what, i, gw[i], wantGW[i])
				}
				// One value that is no bf16 number: declined, gw untouched.
				gy32[len(gy32)-1] += 0x1p-20 * gy32[len(gy32)-1]
				if gy32[len(gy32)-1] == float32(bfF(gy[len(gy)-1])) {
					gy32[len(gy32)-1] = 1 + 0x1p-20
				}
				clear(gw)
				if convWgradTiledBF16(pool, tile, g, nil, gy32, x, gw, make([]byte, convWgradTiledBytes(g))) {
					t.Errorf("%s: float32 ȳ with a value that is no bf16 number taken natively", what)
				}
				for i, v := range gw {
					if v != 0 {
						t.Fatalf("%s: declined weight gradient wrote element %d", what, i)
					}
				}
			}

			if _, flip := convInputGeom(g); g.SH == 1 && g.SW == 1 && flip {
				// The input gradient is the forward convolution of ȳ
				// with the flipped, transposed weight.
				gt, _ := convInputGeom(g)
				wt := make([]uint16, len(w))
				khw := g.KH * g.KW
				for k := 0; k < g.K; k++ {
					for c := 0; c < g.C; c++ {
						for i := 0; i < khw; i++ {
							wt[(c*g.K+k)*khw+khw-1-i] = w[(k*g.C+c)*khw+i]
						}
					}
				}
				wantGX := refConvForwardBF16(gt, gy, wt, nil)
				gx := make([]float32, len(wantGX))
				convInputGradBF16(pool, tile, g, gy, w, gx, make([]byte, align64(2*len(w))+convColForwardBytes(gt)))
				if i, ok := sameF32Bits(gx, wantGX); !ok {
					t.Errorf("%s: input gradient element %d is %g, reference %g", what, i, gx[i], wantGX[i])
				}
				closeTo(t, what+" input gradient", gx, egx)
			}
			pool.Close()
		}
	}
}

func bf16m(shape ...int) trace.Meta {
	return trace.Meta{DType: tensor.BFloat16, Shape: tensor.Shape(shape)}
}

// BenchmarkConvBF16 measures the mixed convolutions on bf16 operands
// (rrdbnet's shapes and ResNet-152's pointwise ones), native (VDPBF16PS, forced whatever the cost model
// says, for the kernels convBF16On enables) and widened to the float32
// kernels (native off).
func BenchmarkConvBF16(b *testing.B) {
	for _, s := range convShapes {
		if s.name[:4] != "rrdb" && s.name != "r152_l1_3x3" && s.name != "r18_l1" && !(strings.HasPrefix(s.name, "r152_") && strings.Contains(s.name, "_1x1")) {
			continue
		}
		opts := op.ConvOpts{Stride: [2]int{s.s, s.s}, Padding: [2]int{s.ks / 2, s.ks / 2}}
		g, err := prim.ConvGeometry(tensor.Shape{s.n, s.c, s.h, s.w}, tensor.Shape{s.k, s.c, s.ks, s.ks}, opts)
		if err != nil {
			b.Fatal(err)
		}
		flops := 2 * float64(g.N*g.K*g.OH*g.OW) * float64(g.ColRows())
		x, w, y := bf16m(s.n, s.c, s.h, s.w), bf16m(s.k, s.c, s.ks, s.ks), bf16m(g.N, g.K, g.OH, g.OW)
		cases := []struct {
			name string
			k    func() *kernelCase
		}{
			{"fwd", func() *kernelCase { return newKernelCase(b, &prim.Conv2dOp{Opts: opts, Mixed: true}, x, w) }},
			{"bwd_input", func() *kernelCase {
				return newKernelCase(b, &prim.Conv2dBackwardInput{Opts: opts, InputShape: x.Shape, Mixed: true}, y, w)
			}},
			{"bwd_weight", func() *kernelCase {
				return newKernelCase(b, &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape, Mixed: true}, y, x)
			}},
			{"bwd_weight_f32gy", func() *kernelCase {
				// ȳ as the float32 copy other readers keep (bf16 values).
				y32 := trace.Meta{DType: tensor.Float32, Shape: y.Shape}
				return newKernelCase(b, &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape, Mixed: true}, y32, x)
			}},
		}
		for _, c := range cases {
			for _, native := range []bool{true, false} {
				b.Run(fmt.Sprintf("%s/%s/native=%v", s.name, c.name, native), func(b *testing.B) {
					defer SetNativeBF16(SetNativeBF16(native))
					defer func(f bool) { convNativeForce = f }(convNativeForce)
					convNativeForce = native
					k := c.k()
					r := rand.New(rand.NewPCG(3, 4))
					for _, t := range k.in {
						if t.DType == tensor.Float32 {
							for i, h := range randBF16Vals(r, len(t.F32())) {
								t.F32()[i] = float32(bfF(h))
							}
							continue
						}
						copy(t.U16(), randBF16Vals(r, len(t.U16())))
					}
					benchKernel(b, k, flops)
				})
			}
		}
	}
}

// TestConvNativeCheaper holds the choice between the native bf16 kernels
// and float32 Winograd on the widened values to the rates: rrdbnet's 3×3
// layers (where Winograd measured faster) take Winograd, convolutions
// without a Winograd kernel (1×1, too small) the native kernel, and a
// native rate far above the float32 one would take the native kernel.
func TestConvNativeCheaper(t *testing.T) {
	defer func(f bool) { convNativeForce = f }(convNativeForce)
	convNativeForce = false
	ops := []trace.Op{&prim.Conv2dOp{}, &prim.Conv2dBackwardInput{}, &prim.Conv2dBackwardWeight{}}
	for _, c := range []struct {
		n, c, h, k, ks int
		native         bool
	}{
		{4, 64, 32, 32, 3, false},  // rrdbnet's RDB convolutions
		{4, 192, 32, 64, 3, false}, // and their last
		{4, 64, 128, 64, 3, false}, // the upsampled ones
		{4, 64, 32, 64, 1, true},   // 1×1: no Winograd
		{1, 16, 8, 16, 3, true},    // too small for Winograd
	} {
		g, err := prim.ConvGeometry(tensor.Shape{c.n, c.c, c.h, c.h}, tensor.Shape{c.k, c.c, c.ks, c.ks}, op.ConvOpts{Padding: [2]int{c.ks / 2, c.ks / 2}})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range ops {
			if got := convNativeCheaper(o, g); got != c.native {
				t.Errorf("%+v %s: native cheaper %v, want %v", c, o.Name(), got, c.native)
			}
		}
		if !c.native && convBF16Native(&prim.Conv2dBackwardWeight{}, g) {
			t.Errorf("%+v: weight gradient on the native kernel where Winograd is cheaper", c)
		}
	}
	// A native rate 10× the float32 one beats Winograd's 4× fewer products.
	g, _ := prim.ConvGeometry(tensor.Shape{4, 64, 32, 32}, tensor.Shape{32, 64, 3, 3}, op.ConvOpts{Padding: [2]int{1, 1}})
	for _, o := range ops {
		if !convNativeCheaperAt(o, g, Throughput{FLOPS: 1, BF16: 10}) {
			t.Errorf("%s: Winograd chosen against a native kernel 10× as fast", o.Name())
		}
	}
}

// rrdbnet-like 3×3 layers (C 64 to 192, K 32 and 64) keep float32
// Winograd for all three convolutions at the native kernels' rates, which
// are the VDPBF16PS row on every CPU (the AMX kernel runs only the matrix
// products); and the AMX row is the one a CPU with the AMX kernel gets.
func TestConvNativeCheaperAMX(t *testing.T) {
	if r := convNativeRates(); !strings.HasPrefix(r.Name, "avx512-bf16") {
		t.Errorf("native convolution rates %+v: want the VDPBF16PS row", r)
	}
	for _, c := range []struct{ n, c, h, k int }{
		{4, 64, 32, 32}, {4, 96, 32, 32}, {4, 128, 32, 32}, {4, 160, 32, 32}, {4, 192, 32, 64}, {4, 64, 128, 64}, {1, 64, 64, 64},
	} {
		g, err := prim.ConvGeometry(tensor.Shape{c.n, c.c, c.h, c.h}, tensor.Shape{c.k, c.c, 3, 3}, op.ConvOpts{Padding: [2]int{1, 1}})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []trace.Op{&prim.Conv2dOp{}, &prim.Conv2dBackwardInput{}, &prim.Conv2dBackwardWeight{}} {
			if convNativeCheaperAt(o, g, convNativeRates()) {
				t.Errorf("%+v %s: native chosen over Winograd", c, o.Name())
			}
		}
	}
	amx := cpuid.Features{AVX2: true, FMA: true, AVX512F: true, AVX512BF16: true, AMXTile: true, AMXBF16: true}
	if r := ThroughputOf(amx, Capabilities{AVX512: true, NativeBF16: true, AMX: true}); !strings.HasPrefix(r.Name, "amx") || r.BF16 < 4*r.FLOPS {
		t.Errorf("AMX machine's row %+v: want the AMX row, bf16 above 4× float32", r)
	}
	if r := ThroughputOf(amx, Capabilities{AVX512: true, NativeBF16: true}); strings.HasPrefix(r.Name, "amx") {
		t.Errorf("AMX CPU without the AMX kernel got %+v", r)
	}
}

// TestConvWinoBF16 checks that mixed convolutions taking float32 Winograd
// with their bf16 input gathered and widened tile by tile (convWinoBF16)
// give bitwise the widened path's results, on workspaces filled with
// NaNs: forward with and without bias, input gradient, weight gradient
// with ȳ and x bf16 and either float32 (bf16 values), on rrdbnet's layers and one with
// partial tiles at the edges and a short last chunk.
func TestConvWinoBF16(t *testing.T) {
	if !blas.WinoGatherRowsBF16OK() || !blas.WinoOK() {
		t.Skip("no AVX-512 BW bf16 gather on this CPU")
	}
	defer func(f bool) { convWinoBF16Off = f }(convWinoBF16Off)
	defer func(f bool) { convNativeForce = f }(convNativeForce)
	convNativeForce = false
	shapes := []struct{ n, c, h, w, k int }{
		{4, 64, 32, 32, 32},
		{4, 72, 30, 34, 64},
	}
	if !testing.Short() {
		shapes = append(shapes, struct{ n, c, h, w, k int }{4, 192, 32, 32, 64})
	}
	for _, s := range shapes {
		opts := op.ConvOpts{Padding: [2]int{1, 1}}
		g, err := prim.ConvGeometry(tensor.Shape{s.n, s.c, s.h, s.w}, tensor.Shape{s.k, s.c, 3, 3}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := winogradFor(g); !ok {
			t.Fatalf("%+v: no Winograd plan: the test checks nothing", s)
		}
		x, w, y := bf16m(s.n, s.c, s.h, s.w), bf16m(s.k, s.c, 3, 3), bf16m(g.N, g.K, g.OH, g.OW)
		y32 := trace.Meta{DType: tensor.Float32, Shape: y.Shape}
		cases := []struct {
			name string
			o    trace.Op
			in   []trace.Meta
		}{
			{"fwd", &prim.Conv2dOp{Opts: opts, Mixed: true}, []trace.Meta{x, w}},
			{"fwd_bias", &prim.Conv2dOp{Opts: opts, Mixed: true}, []trace.Meta{x, w, bf16m(s.k)}},
			{"bwd_input", &prim.Conv2dBackwardInput{Opts: opts, InputShape: x.Shape, Mixed: true}, []trace.Meta{y, w}},
			{"bwd_weight", &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape, Mixed: true}, []trace.Meta{y, x}},
			{"bwd_weight_f32gy", &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape, Mixed: true}, []trace.Meta{y32, x}},
			{"bwd_weight_f32x", &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape, Mixed: true}, []trace.Meta{y, {DType: tensor.Float32, Shape: x.Shape}}},
		}
		for _, c := range cases {
			k := newKernelCase(t, c.o, c.in...)
			r := rand.New(rand.NewPCG(5, 6))
			for _, tt := range k.in {
				if tt.DType == tensor.Float32 {
					for i, h := range randBF16Vals(r, len(tt.F32())) {
						tt.F32()[i] = float32(bfF(h))
					}
					continue
				}
				copy(tt.U16(), randBF16Vals(r, len(tt.U16())))
			}
			var outs [2][]float32
			for i, off := range []bool{true, false} {
				convWinoBF16Off = off
				for j := range k.ws {
					k.ws[j] = 0xff
				}
				k.run(t)
				outs[i] = append([]float32(nil), k.out[0].F32()...)
			}
			for i := range outs[0] {
				if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
					t.Fatalf("%+v %s: out[%d] = %g, widened %g", s, c.name, i, outs[1][i], outs[0][i])
				}
			}
		}
	}
}

// BenchmarkConvWinoBF16 measures mixed convolutions on float32 Winograd
// with the bf16 input gathered tile by tile (gather) against the widened
// copy (widen), rrdbnet's layers.
func BenchmarkConvWinoBF16(b *testing.B) {
	defer func(f bool) { convWinoBF16Off = f }(convWinoBF16Off)
	for _, s := range convShapes {
		if s.name[:4] != "rrdb" {
			continue
		}
		opts := op.ConvOpts{Padding: [2]int{1, 1}}
		x, w, y := bf16m(s.n, s.c, s.h, s.w), bf16m(s.k, s.c, 3, 3), bf16m(s.n, s.k, s.h, s.w)
		y32 := trace.Meta{DType: tensor.Float32, Shape: y.Shape}
		cases := []struct {
			name string
			o    trace.Op
			in   []trace.Meta
		}{
			{"fwd", &prim.Conv2dOp{Opts: opts, Mixed: true}, []trace.Meta{x, w}},
			{"bwd_input", &prim.Conv2dBackwardInput{Opts: opts, InputShape: x.Shape, Mixed: true}, []trace.Meta{y, w}},
			{"bwd_weight", &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape, Mixed: true}, []trace.Meta{y, x}},
			{"bwd_weight_f32gy", &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape, Mixed: true}, []trace.Meta{y32, x}},
		}
		for _, c := range cases {
			k := newKernelCase(b, c.o, c.in...)
			r := rand.New(rand.NewPCG(3, 4))
			for _, t := range k.in {
				if t.DType == tensor.Float32 {
					for i, h := range randBF16Vals(r, len(t.F32())) {
						t.F32()[i] = float32(bfF(h))
					}
					continue
				}
				copy(t.U16(), randBF16Vals(r, len(t.U16())))
			}
			for _, off := range []bool{true, false} {
				name := "gather"
				if off {
					name = "widen"
				}
				b.Run(fmt.Sprintf("%s/%s/%s", s.name, c.name, name), func(b *testing.B) {
					convWinoBF16Off = off
					benchKernel(b, k, 0)
				})
			}
		}
	}
}

// convPwGeoms are pointwise convolutions for the pointwise path: channels
// and planes not multiples of the tiles (odd C, K; 5x5 and 3x7 planes),
// one image and several, and planes of 16, 64 and 256 positions (ResNet's
// 1x1 layers at 4x4, 8x8 and 16x16), chunks of images that end inside
// the batch (32x31: 3 images a chunk) and planes of more positions than
// a K block of the weight gradient.
var convPwGeoms = []struct{ n, c, h, w, k int }{
	{1, 7, 5, 5, 9},
	{3, 33, 3, 7, 26},
	{8, 40, 4, 4, 50},
	{2, 64, 8, 8, 27},
	{5, 31, 16, 16, 64},
	{1, 300, 4, 4, 600},
	{9, 24, 16, 24, 17},
	{5, 20, 32, 31, 12},
}

// The pointwise path (convPwBF16) runs the three mixed convolutions of
// bf16 operands as convMixedKernel dispatches them (bias in the forward):
// bitwise the reference arithmetic of VDPBF16PS (RefDotBF16) over the
// blocks the products sum in (the forward and input gradient each image
// a product, K blocks of SgemmMixed; the weight gradient over
// blas.SumBatchBlocks of the images' positions) and within float32
// rounding of the exact convolutions (closeTo, as the widened path, native
// off, is held to as well), on 1 and 2 threads, on workspaces and outputs
// filled with NaNs.
func TestConvPwBF16(t *testing.T) {
	if _, ok := blas.NativeBF16Tile(); !ok {
		t.Skip("no native bf16 products on this CPU")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, s := range convPwGeoms {
		opts := op.ConvOpts{}
		g, err := prim.ConvGeometry(tensor.Shape{s.n, s.c, s.h, s.w}, tensor.Shape{s.k, s.c, 1, 1}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !convPwBF16(&prim.Conv2dOp{}, g) || !convPwBF16(&prim.Conv2dBackwardInput{}, g) || !convPwBF16(&prim.Conv2dBackwardWeight{}, g) {
			t.Fatalf("%+v: not on the pointwise path: the test checks nothing", s)
		}
		P := s.h * s.w
		x := randBF16Vals(rng, s.n*s.c*P)
		w := randBF16Vals(rng, s.k*s.c)
		gy := randBF16Vals(rng, s.n*s.k*P)
		bias := randBF16Vals(rng, s.k)
		ey, egx, egw := exactConv(g, x, w, gy)
		// The reference: RefDotBF16 over each output's operands.
		refY := make([]float32, len(ey))
		refGX := make([]float32, len(egx))
		col := func(v []uint16, off, stride, cnt int) []uint16 {
			r := make([]uint16, cnt)
			for i := range r {
				r[i] = v[off+i*stride]
			}
			return r
		}
		for n := range s.n {
			for p := range P {
				xc := col(x, n*s.c*P+p, P, s.c)
				gyc := col(gy, n*s.k*P+p, P, s.k)
				for k := range s.k {
					i := (n*s.k+k)*P + p
					refY[i] = blas.RefDotBF16(w[k*s.c:(k+1)*s.c], xc, 1, 0, 0) + float32(bfF(bias[k]))
					ey[i] += bfF(bias[k])
				}
				for c := range s.c {
					refGX[(n*s.c+c)*P+p] = blas.RefDotBF16(col(w, c, s.c, s.k), gyc, 1, 0, 0)
				}
			}
		}
		refGW := make([]float32, len(egw))
		for k := range s.k {
			for c := range s.c {
				refGW[k*s.c+c] = refSumBlocks(P, s.n, s.n,
					func(n, p int) uint16 { return gy[(n*s.k+k)*P+p] },
					func(n, p int) uint16 { return x[(n*s.c+c)*P+p] })
			}
		}
		cases := []struct {
			name  string
			o     trace.Op
			in    [][]uint16
			metas []trace.Meta
			ref   []float32
			exact []float64
		}{
			{"forward", &prim.Conv2dOp{Opts: opts, Mixed: true}, [][]uint16{x, w, bias},
				[]trace.Meta{bf16m(s.n, s.c, s.h, s.w), bf16m(s.k, s.c, 1, 1), bf16m(s.k)}, refY, ey},
			{"input gradient", &prim.Conv2dBackwardInput{Opts: opts, InputShape: tensor.Shape{s.n, s.c, s.h, s.w}, Mixed: true}, [][]uint16{gy, w},
				[]trace.Meta{bf16m(s.n, s.k, s.h, s.w), bf16m(s.k, s.c, 1, 1)}, refGX, egx},
			{"weight gradient", &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: tensor.Shape{s.k, s.c, 1, 1}, Mixed: true}, [][]uint16{gy, x},
				[]trace.Meta{bf16m(s.n, s.k, s.h, s.w), bf16m(s.n, s.c, s.h, s.w)}, refGW, egw},
		}
		for _, c := range cases {
			k := newKernelCase(t, c.o, c.metas...)
			for i, v := range c.in {
				copy(k.in[i].U16(), v)
			}
			run := func(threads int) []float32 {
				k.runPoisoned(t, threads)
				return append([]float32(nil), k.out[0].F32()...)
			}
			what := fmt.Sprintf("%+v %s", s, c.name)
			for _, threads := range []int{1, 2} {
				got := run(threads)
				if i, ok := sameF32Bits(got, c.ref); !ok {
					t.Errorf("%s, %d threads: element %d is %g, reference %g", what, threads, i, got[i], c.ref[i])
				}
				closeTo(t, fmt.Sprintf("%s, %d threads", what, threads), got, c.exact)
			}
			// Widened: planned (its workspace) with the native kernel off.
			was := SetNativeBF16(false)
			k.ws = make([]byte, Workspace(k.n))
			wide := run(2)
			SetNativeBF16(was)
			closeTo(t, what+" widened", wide, c.exact)
		}
	}
}

// convColCases are the geometries of TestConvColBF16: strides 1 to 3,
// paddings 0 to 3, kernels 3x3, 7x7, 1x3 and 2x2, dilation, batches 1
// to 9, channels off multiples of 16, planes from 1x1 to 17x17 (output
// rows odd and even, planes that fill the tile's panels and ones joined).
var convColCases = []struct {
	n, c, h, w, k, kh, kw, s, p, d int
}{
	{1, 3, 1, 1, 5, 3, 3, 1, 1, 1},
	{2, 5, 7, 9, 6, 3, 3, 1, 1, 1},
	{3, 17, 8, 8, 18, 3, 3, 1, 1, 1},
	{9, 7, 4, 4, 33, 3, 3, 1, 1, 1},
	{4, 9, 2, 2, 20, 3, 3, 1, 1, 1},
	{5, 6, 9, 11, 7, 3, 3, 2, 1, 1},
	{2, 11, 17, 17, 10, 3, 3, 2, 1, 1},
	{6, 19, 4, 4, 24, 3, 3, 2, 1, 1},
	{2, 3, 17, 15, 8, 7, 7, 2, 3, 1},
	{3, 4, 6, 13, 5, 1, 3, 1, 0, 1},
	{2, 5, 10, 10, 4, 3, 3, 1, 2, 2},
	{7, 6, 5, 6, 9, 2, 2, 3, 0, 1},
	{1, 20, 16, 16, 3, 3, 3, 1, 0, 1},
	// A bottleneck ResNet's at 32×32, batch 2: stem, strided 3×3 down to
	// 1×1 planes, strided 1×1 downsample.
	{2, 3, 32, 32, 64, 7, 7, 2, 3, 1},
	{2, 128, 8, 8, 128, 3, 3, 2, 1, 1},
	{2, 256, 4, 4, 256, 3, 3, 2, 1, 1},
	{2, 512, 2, 2, 512, 3, 3, 2, 1, 1},
	{2, 1024, 2, 2, 2048, 1, 1, 2, 0, 1},
	{2, 64, 8, 8, 64, 3, 3, 1, 1, 1},
	{2, 256, 8, 8, 512, 1, 1, 2, 0, 1},
	{2, 512, 4, 4, 1024, 1, 1, 2, 0, 1},
}

// The im2col paths of the native bf16 convolutions (convbf16_col.go),
// and the tiled weight gradient, run through the kernel dispatch with
// the path forced and the planned workspace (filled with NaNs), agree
// bit for bit on 1 and 2 threads with the reference arithmetic over the
// definition's im2col (RefDotBF16; col2im's order of additions for the
// input gradient; the groups' SumBatchBlocks for the weight gradient)
// and with the exact convolutions to float32 rounding; with groups of
// one image's bytes and of the default.
func TestConvColBF16(t *testing.T) {
	if _, ok := blas.NativeBF16Tile(); !ok {
		t.Skip("no native bf16 products on this CPU")
	}
	defer func(b int) { convColGroupBytes = b }(convColGroupBytes)
	defer func() { convPathHook = nil }()
	rng := rand.New(rand.NewPCG(13, 14))
	for _, s := range convColCases {
		opts := op.ConvOpts{Stride: [2]int{s.s, s.s}, Padding: [2]int{s.p, s.p}, Dilation: [2]int{s.d, s.d}}
		xs, ws := tensor.Shape{s.n, s.c, s.h, s.w}, tensor.Shape{s.k, s.c, s.kh, s.kw}
		g, err := prim.ConvGeometry(xs, ws, opts)
		if err != nil {
			t.Fatal(err)
		}
		P, kk := g.OH*g.OW, g.ColRows()
		x := randBF16Vals(rng, g.N*g.C*g.H*g.W)
		w := randBF16Vals(rng, g.K*kk)
		gy := randBF16Vals(rng, g.N*g.K*P)
		bias := randBF16Vals(rng, g.K)
		ey, egx, egw := exactConv(g, x, w, gy)
		biasF := make([]float32, g.K)
		for k, h := range bias {
			biasF[k] = float32(bfF(h))
		}
		for i := range ey {
			ey[i] += bfF(bias[i/P%g.K])
		}
		// The input gradient by col2im: Wᵀ·ȳ's entries by RefDotBF16,
		// added into x̄ tap by tap from +0.
		refGX := make([]float32, len(egx))
		wc, gyc := make([]uint16, g.K), make([]uint16, g.K)
		for n := range g.N {
			for r := range kk {
				c, kh, kw := r/(g.KH*g.KW), r%(g.KH*g.KW)/g.KW, r%g.KW
				for k := range g.K {
					wc[k] = w[k*kk+r]
				}
				for oh := range g.OH {
					for ow := range g.OW {
						ih, iw := oh*g.SH-g.PH+kh*g.DH, ow*g.SW-g.PW+kw*g.DW
						if ih < 0 || ih >= g.H || iw < 0 || iw >= g.W {
							continue
						}
						for k := range g.K {
							gyc[k] = gy[(n*g.K+k)*P+oh*g.OW+ow]
						}
						refGX[((n*g.C+c)*g.H+ih)*g.W+iw] += blas.RefDotBF16(wc, gyc, 1, 0, 0)
					}
				}
			}
		}
		type pathCase struct {
			name string
			o    trace.Op
			path convBF16Path
			in   [][]uint16
			ref  func() []float32
			ex   []float64
		}
		fwd := &prim.Conv2dOp{Opts: opts, Mixed: true}
		bwi := &prim.Conv2dBackwardInput{Opts: opts, InputShape: xs, Mixed: true}
		bww := &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: ws, Mixed: true}
		cases := []pathCase{
			{"forward", fwd, convPathCol, [][]uint16{x, w, bias}, func() []float32 { return refConvForwardBF16(g, x, w, biasF) }, ey},
			{"input gradient col2im", bwi, convPathCol, [][]uint16{gy, w}, func() []float32 { return refGX }, egx},
			{"weight gradient im2col", bww, convPathCol, [][]uint16{gy, x}, func() []float32 { return refConvWeightGradBF16(g, gy, x, false) }, egw},
		}
		if gt, flip := convInputGeom(g); flip && g.SH == 1 && g.SW == 1 {
			cases = append(cases, pathCase{"input gradient flipped", bwi, convPathFlip, [][]uint16{gy, w}, func() []float32 {
				wt := make([]uint16, len(w))
				khw := g.KH * g.KW
				for k := range g.K {
					for c := range g.C {
						for i := range khw {
							wt[(c*g.K+k)*khw+khw-1-i] = w[(k*g.C+c)*khw+i]
						}
					}
				}
				return refConvForwardBF16(gt, gy, wt, nil)
			}, egx})
		}
		if convWgradTiled(g) {
			cases = append(cases, pathCase{"weight gradient tiled", bww, convPathTiled, [][]uint16{gy, x}, func() []float32 { return refConvWeightGradBF16(g, gy, x, true) }, egw})
		}
		for _, groupBytes := range []int{1, 1 << 20} {
			convColGroupBytes = groupBytes
			for _, c := range cases {
				convPathHook = func(trace.Op, prim.ConvGeom) (convBF16Path, bool) { return c.path, true }
				metas := make([]trace.Meta, len(c.in))
				metas[0] = bf16m(g.N, g.C, g.H, g.W)
				switch c.o.(type) {
				case *prim.Conv2dOp:
					metas[1], metas[2] = bf16m(g.K, g.C, g.KH, g.KW), bf16m(g.K)
				case *prim.Conv2dBackwardInput:
					metas[0], metas[1] = bf16m(g.N, g.K, g.OH, g.OW), bf16m(g.K, g.C, g.KH, g.KW)
				case *prim.Conv2dBackwardWeight:
					metas[0], metas[1] = bf16m(g.N, g.K, g.OH, g.OW), bf16m(g.N, g.C, g.H, g.W)
				}
				k := newKernelCase(t, c.o, metas...)
				for i, v := range c.in {
					copy(k.in[i].U16(), v)
				}
				ref := c.ref()
				what := fmt.Sprintf("%+v %s, groups of %d bytes", s, c.name, groupBytes)
				for _, threads := range []int{1, 2} {
					k.runPoisoned(t, threads)
					got := k.out[0].F32()
					if i, ok := sameF32Bits(got, ref); !ok {
						t.Errorf("%s, %d threads: element %d is %g, reference %g", what, threads, i, got[i], ref[i])
					}
					closeTo(t, fmt.Sprintf("%s, %d threads", what, threads), got, c.ex)
				}
			}
		}
	}
}

// A step planned with the native bf16 kernels on and run with them off
// fails with an error naming the node rather than overrunning its
// workspace: the native path reserves no float32 copies of the operands,
// which the widened one needs.
func TestConvNativeOffAfterPlanning(t *testing.T) {
	if _, ok := blas.NativeBF16Tile(); !ok {
		t.Skip("no native bf16 products on this CPU")
	}
	k := newKernelCase(t, &prim.Conv2dOp{Opts: prim.ConvOpts{}.Normalized(), Mixed: true}, bf16m(2, 16, 4, 4), bf16m(8, 16, 1, 1))
	k.run(t) // as planned
	defer SetNativeBF16(SetNativeBF16(false))
	err := Run(k.n, k.in, k.out, k.ws)
	if err == nil || !strings.Contains(err.Error(), "plan the step again") || !strings.Contains(err.Error(), "conv2d") {
		t.Fatalf("run with the native kernels off after planning with them on: %v", err)
	}
}

// runPoisoned runs k on threads threads with its workspace filled with
// 0xff bytes (NaNs as float32) and its float32 output with NaNs, so that
// a kernel reading what it did not write, or leaving an element
// unwritten, shows.
func (k *kernelCase) runPoisoned(tb testing.TB, threads int) {
	defer parallel.SetThreads(parallel.SetThreads(threads))
	for i := range k.ws {
		k.ws[i] = 0xff
	}
	for i := range k.out[0].F32() {
		k.out[0].F32()[i] = float32(math.NaN())
	}
	k.run(tb)
}
