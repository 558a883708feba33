package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

func gelu(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func geluGrad(x float64) float64 {
	return 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
}

func TestGELU(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(1, 2))
	n := 4099
	x, g, y, gy := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 3)
		g[i] = float32(r.NormFloat64())
	}
	x[0], x[1], x[2], x[3] = 0, 40, -40, float32(math.NaN())
	done := GELU(x, y)
	if done != n&^7 {
		t.Fatalf("GELU did %d of %d", done, n)
	}
	if GELUBackward(g, x, gy) != done {
		t.Fatal("GELUBackward did a different prefix")
	}
	for i := 4; i < done; i++ {
		want := gelu(float64(x[i]))
		if d := math.Abs(float64(y[i]) - want); d > 1e-6+1e-5*math.Abs(want) {
			t.Errorf("GELU(%v) = %v, want %v", x[i], y[i], want)
		}
		want = float64(g[i]) * geluGrad(float64(x[i]))
		if d := math.Abs(float64(gy[i]) - want); d > 1e-6+1e-5*math.Abs(want) {
			t.Errorf("GELUBackward(%v, %v) = %v, want %v", g[i], x[i], gy[i], want)
		}
	}
	if y[0] != 0 || y[1] != 40 || y[2] != 0 || y[3] == y[3] {
		t.Errorf("GELU(0, 40, -40, NaN) = %v", y[:4])
	}
	if gy[3] == gy[3] {
		t.Errorf("GELUBackward(NaN) = %v", gy[3])
	}
}

func TestExpAffine(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	x := make([]float32, 1003)
	for i := range x {
		x[i] = float32(i)*0.21 - 110
	}
	y := make([]float32, len(x))
	n := ExpAffine(x, y, 0.5, -3)
	if n != 1000 {
		t.Fatalf("did %d", n)
	}
	for i := 0; i < n; i++ {
		arg := float64(float32(math.FMA(float64(x[i]), 0.5, -3))) // as rounded in the kernel
		want := math.Exp(min(max(arg, -87.33654), 88.37626))
		if d := math.Abs(float64(y[i])-want) / want; d > 3e-7 {
			t.Errorf("exp(%v) = %v, want %v (rel %v)", arg, y[i], want, d)
		}
	}
	// In place; large arguments saturate below +Inf.
	x900 := x[900]
	ExpAffine(x, x, 1, 0)
	if want := math.Exp(float64(x900)); math.Abs(float64(x[900])-want) > 1e-6*want {
		t.Errorf("in place: exp(%v) = %v, want %v", x900, x[900], want)
	}
	if v := x[999]; math.IsInf(float64(v), 0) || v < 2e38 {
		t.Errorf("exp(99.8) = %v, want about 2.4e38", v)
	}
}

func TestActivationsAndSums(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(3, 4))
	n := 1000
	x, g, y := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
		g[i] = float32(r.NormFloat64())
	}
	nan := float32(math.NaN())
	x[0], x[1], x[2] = nan, float32(math.Copysign(0, -1)), 0
	done := ReLU(x, y)
	for i := 0; i < done; i++ {
		want := float32(0)
		if x[i] > 0 || x[i] != x[i] {
			want = x[i]
		}
		if math.Float32bits(y[i]) != math.Float32bits(want) && !(want != want && y[i] != y[i]) {
			t.Fatalf("ReLU(%v) = %v, want %v", x[i], y[i], want)
		}
	}
	ReLUBackward(g, x, y)
	for i := 0; i < done; i++ {
		want := float32(0)
		if x[i] > 0 || x[i] != x[i] {
			want = g[i]
		}
		if y[i] != want {
			t.Fatalf("ReLUBackward(%v, %v) = %v, want %v", g[i], x[i], y[i], want)
		}
	}
	for _, grad := range []bool{false, true} {
		var gg []float32
		if grad {
			gg = g
		}
		LeakyReLU(gg, x, y, 0.2)
		for i := 3; i < done; i++ {
			k := float32(0.2)
			if x[i] > 0 {
				k = 1
			}
			want := x[i] * k
			if grad {
				want = g[i] * k
			}
			if y[i] != want {
				t.Fatalf("LeakyReLU(grad=%v, %v) = %v, want %v", grad, x[i], y[i], want)
			}
		}
	}
	x[0] = 0.5
	var s, q, sg, sd float64
	m := 0.25
	s1, n1 := SumX(x)
	q1, _ := SumSqDev(x, m)
	sg1, sd1, _ := SumDot(g, x, m)
	for i := 0; i < n1; i++ {
		s += float64(x[i])
		q += (float64(x[i]) - m) * (float64(x[i]) - m)
		sg += float64(g[i])
		sd += float64(g[i]) * (float64(x[i]) - m)
	}
	if n1 != n&^15 || math.Abs(s1-s) > 1e-12 || math.Abs(q1-q) > 1e-10 || math.Abs(sg1-sg) > 1e-12 || math.Abs(sd1-sd) > 1e-10 {
		t.Errorf("sums over %d: %v %v %v %v, want %v %v %v %v", n1, s1, q1, sg1, sd1, s, q, sg, sd)
	}
}

func TestNormLoops(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	n := 203
	x, g, y := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(i)*0.37 - 20
		g[i] = float32(i%13) - 6
	}
	done := Affine(x, y, 1.5, -0.25)
	for i := 0; i < done; i++ {
		if want := x[i]*1.5 + -0.25; y[i] != want {
			t.Fatalf("Affine: y[%d] = %v, want %v", i, y[i], want)
		}
	}
	done = NormGrad(g, x, y, 0.5, 2, 0.125, 3)
	for i := 0; i < done; i++ {
		if want := (g[i] - 0.5 - (x[i]-2)*0.125) * 3; y[i] != want {
			t.Fatalf("NormGrad: y[%d] = %v, want %v", i, y[i], want)
		}
	}
	done = ScoreGrad(x, g, y, 0.3, 0.125)
	for i := 0; i < done; i++ {
		if want := x[i] * (g[i] - 0.3) * 0.125; math.Float32bits(y[i]) != math.Float32bits(want) {
			t.Fatalf("ScoreGrad: y[%d] = %v, want %v", i, y[i], want)
		}
	}
}

func TestAdd(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	a, b := make([]float32, 37), make([]float32, 37)
	for i := range a {
		a[i], b[i] = float32(i)*1.5, float32(i)*0.25-3
	}
	y := make([]float32, 37)
	done := Add(a, b, y)
	for i := 0; i < done; i++ {
		if y[i] != a[i]+b[i] {
			t.Fatalf("y[%d] = %v", i, y[i])
		}
	}
	Add(a, b, a) // in place
	if a[5] != y[5] {
		t.Fatal("in place")
	}
}

// ExpAffine on a row of attention scores (gpt: up to 256 keys).
func BenchmarkExpAffine(b *testing.B) {
	x := make([]float32, 256)
	for i := range x {
		x[i] = float32(i%37) - 18
	}
	y := make([]float32, len(x))
	for b.Loop() {
		ExpAffine(x, y, 0.125, -2)
	}
}

// The AVX-512 gelu loops give the AVX2 loops' bits, lane for lane, on
// lengths around the 16-lane blocks and on edge values (zeros, infinities,
// NaNs, the exponential's clamps, subnormals).
func TestGELU512MatchesAVX2(t *testing.T) {
	if !use512 {
		t.Skip("no AVX-512 assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(3, 4))
	edge := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 13.3, -13.3, 14, -14, 88, -88, 200, -200,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -1e-40, 1e-20, math.MaxFloat32, -math.MaxFloat32}
	for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 24, 31, 33, 40, 1000, 4099} {
		x, g := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 4)
			g[i] = float32(r.NormFloat64())
			if i < len(edge) && n >= 24 {
				x[i] = edge[(i+n)%len(edge)]
			}
		}
		run := func(avx512 bool) (y, gy []float32, done, bdone int) {
			saved := use512
			use512 = avx512
			defer func() { use512 = saved }()
			y, gy = make([]float32, n), make([]float32, n)
			return y, gy, GELU(x, y), GELUBackward(g, x, gy)
		}
		y0, gy0, d0, b0 := run(false)
		y1, gy1, d1, b1 := run(true)
		if d0 != d1 || b0 != b1 {
			t.Fatalf("n=%d: prefixes %d, %d (AVX2) and %d, %d (AVX-512)", n, d0, b0, d1, b1)
		}
		for i := range d0 {
			if math.Float32bits(y0[i]) != math.Float32bits(y1[i]) {
				t.Errorf("n=%d: GELU(%v) = %v (AVX-512), %v (AVX2)", n, x[i], y1[i], y0[i])
			}
			if math.Float32bits(gy0[i]) != math.Float32bits(gy1[i]) {
				t.Errorf("n=%d: GELUBackward(%v, %v) = %v (AVX-512), %v (AVX2)", n, g[i], x[i], gy1[i], gy0[i])
			}
		}
	}
	// Many more inputs, hashed: the whole float32 range's exponents.
	const n = 1 << 20
	x, g := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = math.Float32frombits(r.Uint32())
		if i%2 == 0 {
			x[i] = float32(r.NormFloat64() * 6)
		}
		g[i] = float32(r.NormFloat64())
	}
	var out [2][2][]float32
	for k, on := range []bool{false, true} {
		use512 = on
		out[k][0], out[k][1] = make([]float32, n), make([]float32, n)
		GELU(x, out[k][0])
		GELUBackward(g, x, out[k][1])
	}
	use512 = true
	for j := range 2 {
		for i := range n {
			if math.Float32bits(out[0][j][i]) != math.Float32bits(out[1][j][i]) {
				t.Fatalf("loop %d, x=%v (%#x): AVX-512 %v, AVX2 %v", j, x[i], math.Float32bits(x[i]), out[1][j][i], out[0][j][i])
			}
		}
	}
}

func BenchmarkGELU(b *testing.B) {
	x, y, g := make([]float32, 4096), make([]float32, 4096), make([]float32, 4096)
	for i := range x {
		x[i] = float32(i%97)/10 - 4.8
		g[i] = 1
	}
	for _, on := range []bool{false, true} {
		if on && !use512 {
			continue
		}
		name := map[bool]string{false: "avx2", true: "avx512"}[on]
		b.Run("forward/"+name, func(b *testing.B) {
			saved := use512
			use512 = on
			defer func() { use512 = saved }()
			for b.Loop() {
				GELU(x, y)
			}
		})
		b.Run("backward/"+name, func(b *testing.B) {
			saved := use512
			use512 = on
			defer func() { use512 = saved }()
			for b.Loop() {
				GELUBackward(g, x, y)
			}
		})
	}
}

// LayerNormAffine gives the scalar loop's bits ((x*a + c)*w + b, each
// operation rounded) on odd lengths and edge values.
func TestLayerNormAffine(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(5, 6))
	edge := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.NaN()), 1e-40, math.MaxFloat32, -3e38}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 383, 384, 385} {
		x, w, b, y := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range x {
			x[i], w[i], b[i] = float32(r.NormFloat64()*3), float32(r.NormFloat64()), float32(r.NormFloat64())
			if i < len(edge) && n > 16 {
				x[i], w[i+7], b[i+9] = edge[i], edge[i], edge[i]
			}
		}
		a, c := float32(1.7), float32(-0.3)
		done := LayerNormAffine(x, w, b, y, a, c)
		if done != n&^7 {
			t.Fatalf("n=%d: did %d", n, done)
		}
		for i := range done {
			want := float32(float32(x[i]*a)+c)*w[i] + b[i]
			if math.Float32bits(y[i]) != math.Float32bits(want) && !(want != want && y[i] != y[i]) {
				t.Fatalf("n=%d: y[%d] = %v, want %v", n, i, y[i], want)
			}
		}
	}
}

// bf16 is gemm.NarrowBF16's rounding of one value.
func bf16(v float32) uint16 {
	b := math.Float32bits(v)
	if b&0x7fffffff > 0x7f800000 {
		return 0x7fc0
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// BiasGELUBF16 gives the bits of the unfused steps (add, rounding to
// bfloat16, widening, the AVX2 GELU loop, rounding) on lengths around its
// 16- and 8-lane blocks and on edge values, and writes nothing past its
// prefix.
func TestBiasGELUBF16(t *testing.T) {
	if !use512 {
		t.Skip("no AVX-512 assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(7, 8))
	edge := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		float32(math.Float32frombits(0xffc12345)), 1e-40, -1e-40, 3.3895314e38, -3.3895314e38, 1.00390625, 1.01171875, 14, -14}
	for _, n := range []int{0, 5, 8, 13, 16, 24, 31, 40, 1536, 4099} {
		c, bias := make([]float32, n), make([]float32, n)
		for i := range c {
			c[i], bias[i] = float32(r.NormFloat64()*3), float32(r.NormFloat64())
			if i < len(edge) && n > 16 {
				c[i], bias[i] = edge[i], 0
			}
		}
		h, g := make([]uint16, n+1), make([]uint16, n+1)
		h[n], g[n] = 0xabcd, 0xabcd
		done := BiasGELUBF16(c, bias, h[:n], g[:n])
		if done != n&^7 || h[n] != 0xabcd || g[n] != 0xabcd {
			t.Fatalf("n=%d: did %d, wrote past it: %v", n, done, h[n] != 0xabcd || g[n] != 0xabcd)
		}
		hw, gw := make([]float32, done), make([]float32, done)
		for i := range done {
			hw[i] = math.Float32frombits(uint32(bf16(c[i]+bias[i])) << 16)
		}
		use512 = false
		GELU(hw, gw)
		use512 = true
		for i := range done {
			if h[i] != bf16(c[i]+bias[i]) || g[i] != bf16(gw[i]) {
				t.Fatalf("n=%d, c=%v, bias=%v: h %#x g %#x, want %#x %#x", n, c[i], bias[i], h[i], g[i], bf16(c[i]+bias[i]), bf16(gw[i]))
			}
		}
	}
}

// LayerNormGrad and LayerNormRowSums give the scalar loops' bits (each
// float32 operation rounded; the row sums' four float64 chains in order)
// on odd lengths.
func TestLayerNormBackwardLoops(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 1, 3, 4, 5, 7, 8, 9, 17, 383, 384} {
		g, w, x, y := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range g {
			g[i], w[i], x[i] = float32(r.NormFloat64()), float32(r.NormFloat64()), float32(r.NormFloat64()*2+1)
		}
		gm, m, k, s := float32(0.3), float32(0.9), float32(-0.7), float32(1.3)
		done := LayerNormGrad(g, w, x, y, gm, m, k, s)
		if done != n&^7 {
			t.Fatalf("n=%d: LayerNormGrad did %d", n, done)
		}
		for i := range done {
			want := float32(float32(float32(g[i]*w[i])-gm)-float32(float32(x[i]-m)*k)) * s
			if math.Float32bits(y[i]) != math.Float32bits(want) {
				t.Fatalf("n=%d: LayerNormGrad y[%d] = %v, want %v", n, i, y[i], want)
			}
		}
		var sums [4]float64
		mm := 0.7
		done = LayerNormRowSums(g, w, x, mm, &sums)
		if done != n&^3 {
			t.Fatalf("n=%d: LayerNormRowSums did %d", n, done)
		}
		var want [4]float64
		for j := 0; j+1 < done; j += 2 {
			g0, g1 := float64(g[j])*float64(w[j]), float64(g[j+1])*float64(w[j+1])
			want[0] += g0
			want[1] += g1
			want[2] += g0 * (float64(x[j]) - mm)
			want[3] += g1 * (float64(x[j+1]) - mm)
		}
		for i := range want {
			if math.Float64bits(sums[i]) != math.Float64bits(want[i]) {
				t.Fatalf("n=%d: LayerNormRowSums chain %d = %v, want %v", n, i, sums[i], want[i])
			}
		}
	}
}

// The plane forms are their one-plane forms over each plane: the same
// prefix, the same values for the element-wise passes, and sums within
// float64 rounding of the per-plane sums (the order of additions
// differs), on planes whose sizes are and are not multiples of the
// vectors, strides longer than the planes, and slices that end where the
// last plane does.
func TestNormPlanes(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct{ size, stride, planes int }{
		{16, 16, 1}, {16, 48, 5}, {64, 64 * 3, 8}, {20, 40, 3}, {7, 21, 4}, {256, 1024, 2}, {33, 33, 6},
	} {
		l := (tc.planes-1)*tc.stride + tc.size
		g, x, y, want := make([]float32, l), make([]float32, l), make([]float32, l), make([]float32, l)
		for i := range g {
			g[i] = float32(r.NormFloat64())
			x[i] = float32(1 + r.NormFloat64())
		}
		const m = 0.75
		sg, sd, n := SumDotPlanes(g, x, tc.size, tc.stride, tc.planes, m)
		if n != tc.size&^15 {
			t.Fatalf("%+v: SumDotPlanes did %d", tc, n)
		}
		var wg, wd float64
		for p := 0; p < tc.planes; p++ {
			o := p * tc.stride
			a, d, k := SumDot(g[o:o+n], x[o:o+n], m)
			if k != n {
				t.Fatalf("%+v: SumDot did %d", tc, k)
			}
			wg += a
			wd += d
		}
		if math.Abs(sg-wg) > 1e-12*(1+math.Abs(wg)) || math.Abs(sd-wd) > 1e-12*(1+math.Abs(wd)) {
			t.Errorf("%+v: SumDotPlanes = %v, %v; per plane %v, %v", tc, sg, sd, wg, wd)
		}
		for _, grad := range []bool{false, true} {
			clear(y)
			clear(want)
			var n int
			if grad {
				n = NormGradPlanes(g, x, y, tc.size, tc.stride, tc.planes, 0.1, 0.2, 0.3, 1.5)
			} else {
				n = AffinePlanes(x, y, tc.size, tc.stride, tc.planes, 1.25, -0.5)
			}
			if n != tc.size&^7 {
				t.Fatalf("%+v: did %d", tc, n)
			}
			for p := 0; p < tc.planes; p++ {
				o := p * tc.stride
				if grad {
					NormGrad(g[o:o+n], x[o:o+n], want[o:o+n], 0.1, 0.2, 0.3, 1.5)
				} else {
					Affine(x[o:o+n], want[o:o+n], 1.25, -0.5)
				}
			}
			for i := range y {
				if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%+v grad=%v: element %d = %v, want %v (elements outside the planes' prefixes untouched)", tc, grad, i, y[i], want[i])
				}
			}
		}
	}
}

// The bfloat16 plane forms are the float32 ones on the widened values,
// bit for bit (the same lanes and accumulators).
func TestNormPlanesBF16(t *testing.T) {
	if !Enabled() {
		t.Skip("no AVX2+FMA assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(9, 10))
	for _, tc := range []struct{ size, stride, planes int }{
		{16, 16, 1}, {16, 48, 5}, {64, 64 * 3, 8}, {20, 40, 3}, {7, 21, 4}, {256, 1024, 2},
	} {
		l := (tc.planes-1)*tc.stride + tc.size
		g, xw, y, want := make([]float32, l), make([]float32, l), make([]float32, l), make([]float32, l)
		x := make([]uint16, l)
		for i := range g {
			g[i] = float32(r.NormFloat64())
			x[i] = uint16(math.Float32bits(float32(1+r.NormFloat64())) >> 16)
			xw[i] = math.Float32frombits(uint32(x[i]) << 16)
		}
		const m = 0.75
		for _, withG := range []bool{false, true} {
			var a, d float64
			var n int
			var wa, wd float64
			if withG {
				a, d, n = SumDotPlanesBF16(g, x, tc.size, tc.stride, tc.planes, m)
				wa, wd, _ = SumDotPlanes(g, xw, tc.size, tc.stride, tc.planes, m)
			} else {
				a, d, n = SumDotPlanesBF16(nil, x, tc.size, tc.stride, tc.planes, m)
				wa, wd, _ = SumDotPlanes(xw, xw, tc.size, tc.stride, tc.planes, m)
			}
			if n != tc.size&^15 || a != wa || d != wd {
				t.Errorf("%+v g=%v: SumDotPlanesBF16 = %v, %v (%d done); float32 form %v, %v", tc, withG, a, d, n, wa, wd)
			}
		}
		for _, grad := range []bool{false, true} {
			clear(y)
			clear(want)
			if grad {
				NormGradPlanesBF16(g, x, y, tc.size, tc.stride, tc.planes, 0.1, 0.2, 0.3, 1.5)
				NormGradPlanes(g, xw, want, tc.size, tc.stride, tc.planes, 0.1, 0.2, 0.3, 1.5)
			} else {
				AffinePlanesBF16(x, y, tc.size, tc.stride, tc.planes, 1.25, -0.5)
				AffinePlanes(xw, want, tc.size, tc.stride, tc.planes, 1.25, -0.5)
			}
			for i := range y {
				if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%+v grad=%v: element %d = %v, want %v", tc, grad, i, y[i], want[i])
				}
			}
		}
	}
}
