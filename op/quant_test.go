package op_test

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// runGraph traces build (which declares inputs named like feed's keys and
// returns named outputs), runs it on the cpu device and returns the outputs.
func runGraph(t *testing.T, feed map[string]*tensor.Tensor, states exec.StateMap, build func(g *trace.Graph) map[string]*trace.Tensor) map[string]*tensor.Tensor {
	t.Helper()
	g := trace.New()
	if err := trace.Capture(func() {
		for name, o := range build(g) {
			g.Output(name, o)
		}
	}); err != nil {
		t.Fatal(err)
	}
	p, err := exec.Compile(g, device.CPU())
	if err != nil {
		t.Fatal(err)
	}
	arena := exec.NewArena(p.Device)
	defer arena.Release()
	if states == nil {
		states = exec.StateMap{}
	}
	res, err := p.Run(context.Background(), arena, states, feed, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func randomF32(r *rand.Rand, shape tensor.Shape, scale func(i int) float64) *tensor.Tensor {
	x := tensor.New(tensor.Float32, shape)
	for i := range x.F32() {
		x.F32()[i] = float32(r.NormFloat64() * scale(i))
	}
	return x
}

// Per-channel int8 quantization: scale = max|x[c]|/127, every element within
// half a step (max|x[c]|/254) of its original, the channel's extreme value
// exact, an all-zero channel exact, a non-finite channel NaN.
func TestQuantizeInt8(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for _, shape := range []tensor.Shape{{2, 3, 4, 5}, {6, 7}, {2, 3, 8}, {5}, {}} {
		axis := prim.QuantAxis(shape)
		c, inner := prim.QuantChannels(shape, axis)
		// Channels of very different magnitudes, so per-channel scales matter.
		x := randomF32(r, shape, func(i int) float64 { return math.Pow(10, float64((i/inner)%c%4)-2) })
		zeroCh := -1
		if c > 2 {
			zeroCh = 1
			for i := range x.F32() {
				if (i/inner)%c == zeroCh {
					x.F32()[i] = 0
				}
			}
		}
		res := runGraph(t, map[string]*tensor.Tensor{"x": x}, nil, func(g *trace.Graph) map[string]*trace.Tensor {
			xi := g.Input("x", tensor.Float32, shape)
			q, s := prim.QuantizeInt8(xi)
			return map[string]*trace.Tensor{"y": prim.DequantizeInt8(q, s), "scale": s, "q": q}
		})
		y, scale := res["y"].F32(), res["scale"].F32()
		absmax := make([]float64, c)
		for i, v := range x.F32() {
			absmax[(i/inner)%c] = math.Max(absmax[(i/inner)%c], math.Abs(float64(v)))
		}
		for ch := range absmax {
			if want := float32(absmax[ch]) / 127; scale[ch] != want {
				t.Errorf("%v: scale[%d] = %v, want %v", shape, ch, scale[ch], want)
			}
		}
		for i, v := range x.F32() {
			ch := (i / inner) % c
			if err := math.Abs(float64(y[i]) - float64(v)); err > absmax[ch]/254*(1+1e-5) {
				t.Fatalf("%v: element %d: %v -> %v, error %g > max/254 = %g", shape, i, v, y[i], err, absmax[ch]/254)
			}
			if ch == zeroCh && y[i] != 0 {
				t.Fatalf("%v: zero channel dequantized to %v", shape, y[i])
			}
			if q := int8(res["q"].Data[i]); q < -127 {
				t.Fatalf("code %d out of [-127, 127]", q)
			}
			if math.Abs(float64(v)) == absmax[ch] && math.Abs(float64(y[i])-float64(v)) > absmax[ch]*1e-6 {
				t.Fatalf("%v: the channel's extreme %v came back as %v", shape, v, y[i])
			}
		}
	}
	x := tensor.FromFloat32(tensor.Shape{2, 2}, []float32{1, float32(math.Inf(1)), 2, float32(math.NaN())})
	res := runGraph(t, map[string]*tensor.Tensor{"x": x}, nil, func(g *trace.Graph) map[string]*trace.Tensor {
		q, s := prim.QuantizeInt8(g.Input("x", tensor.Float32, tensor.Shape{2, 2}))
		return map[string]*trace.Tensor{"y": prim.DequantizeInt8(q, s)}
	})
	for i, v := range res["y"].F32() {
		if i%2 == 1 && !math.IsNaN(float64(v)) {
			t.Errorf("element %d of a channel holding Inf/NaN is %v, want NaN", i, v)
		}
		if i%2 == 0 && math.Abs(float64(v-x.F32()[i])) > 2.0/254 {
			t.Errorf("element %d: %v, want %v within 2/254", i, v, x.F32()[i])
		}
	}
}

// ReLU's backward from a bit mask is bit-identical to the one from the
// float output, NaN, -0 and subnormals included.
func TestReLUBackwardMaskIsExact(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
		shape := tensor.Shape{3, 37}
		x := randomF32(r, shape, func(int) float64 { return 1 })
		gy := randomF32(r, shape, func(int) float64 { return 1 })
		special := []float32{float32(math.NaN()), float32(math.Copysign(0, -1)), 0, 1e-45, -1e-45, float32(math.Inf(1)), float32(math.Inf(-1))}
		copy(x.F32(), special)
		gy.F32()[5] = float32(math.NaN())
		xs, gys := x.Convert(dt), gy.Convert(dt)
		res := runGraph(t, map[string]*tensor.Tensor{"x": xs, "gy": gys}, nil, func(g *trace.Graph) map[string]*trace.Tensor {
			xi, gi := g.Input("x", dt, shape), g.Input("gy", dt, shape)
			y := op.ReLU(xi)
			ref := prim.Apply1(&prim.UnaryBackward{Kind: prim.ReLUKind}, gi, y)
			got := prim.Apply1(&prim.ReLUBackwardMask{}, gi, prim.ReLUMask(y))
			return map[string]*trace.Tensor{"ref": ref, "got": got, "mask": prim.ReLUMask(y)}
		})
		if len(res["mask"].Data) != (shape.NumElements()+7)/8 {
			t.Fatalf("mask has %d bytes", len(res["mask"].Data))
		}
		ref, got := res["ref"].Data, res["got"].Data
		for i := range ref {
			if ref[i] != got[i] {
				t.Fatalf("%v: byte %d differs: %x vs %x", dt, i, got[i], ref[i])
			}
		}
	}
}

// LeakyReLU's backward from a strict bit mask of its output (NaN clear) is
// bit-identical to the one from the float output, for slopes >= 0, NaN,
// -0, subnormals and infinities included; so is ReLU's mask kept as it was
// (NaN set), which the leaky mask must not be.
func TestLeakyReLUBackwardMaskIsExact(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	for _, slope := range []float64{0.2, 0.01, 0, 1} {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
			shape := tensor.Shape{5, 29} // 145 elements: a partial last mask byte
			x := randomF32(r, shape, func(int) float64 { return 1 })
			gy := randomF32(r, shape, func(int) float64 { return 1 })
			special := []float32{float32(math.NaN()), float32(math.Copysign(0, -1)), 0, 1e-45, -1e-45, float32(math.Inf(1)), float32(math.Inf(-1)), 3e38, -3e38}
			copy(x.F32(), special)
			gy.F32()[5] = float32(math.NaN())
			gy.F32()[11] = float32(math.Inf(-1))
			gy.F32()[12] = 1e-45
			xs, gys := x.Convert(dt), gy.Convert(dt)
			res := runGraph(t, map[string]*tensor.Tensor{"x": xs, "gy": gys}, nil, func(g *trace.Graph) map[string]*trace.Tensor {
				xi, gi := g.Input("x", dt, shape), g.Input("gy", dt, shape)
				y := op.LeakyReLU(xi, slope)
				ref := prim.Apply1(&prim.UnaryBackward{Kind: prim.LeakyReLUKind, C: slope}, gi, y)
				got := prim.Apply1(&prim.ReLUBackwardMask{Leaky: true, Slope: slope}, gi, prim.LeakyReLUMask(y))
				return map[string]*trace.Tensor{"ref": ref, "got": got, "mask": prim.LeakyReLUMask(y), "relumask": prim.ReLUMask(y)}
			})
			if len(res["mask"].Data) != (shape.NumElements()+7)/8 {
				t.Fatalf("mask has %d bytes", len(res["mask"].Data))
			}
			if m, rm := res["mask"].Data[0], res["relumask"].Data[0]; m&1 != 0 || rm&1 == 0 {
				t.Errorf("slope %v, %v: NaN's bit is %d in the leaky mask and %d in ReLU's, want 0 and 1", slope, dt, m&1, rm&1)
			}
			ref, got := res["ref"].Data, res["got"].Data
			for i := range ref {
				if ref[i] != got[i] {
					t.Fatalf("slope %v, %v: byte %d differs: %x vs %x", slope, dt, i, got[i], ref[i])
				}
			}
		}
	}
}

func bf16(v float32) float32 { return tensor.BFloat16ToFloat32(tensor.Float32ToBFloat16(v)) }
func fp16(v float32) float32 { return tensor.Float16ToFloat32(tensor.Float32ToFloat16(v)) }

// Round equals a cast to the 16-bit type and back; RoundState rounds a
// state in place; AccumulateRounded adds the rounded value.
func TestRoundOps(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	shape := tensor.Shape{4, 33}
	x := randomF32(r, shape, func(i int) float64 { return math.Pow(10, float64(i%9-4)) })
	for _, c := range []struct {
		to    tensor.DType
		round func(float32) float32
	}{{tensor.BFloat16, bf16}, {tensor.Float16, fp16}} {
		w := x.Clone()
		acc := randomF32(r, shape, func(int) float64 { return 1 })
		acc0 := acc.Clone()
		res := runGraph(t, map[string]*tensor.Tensor{"x": x}, exec.StateMap{"w": w, "acc": acc}, func(g *trace.Graph) map[string]*trace.Tensor {
			xi := g.Input("x", tensor.Float32, shape)
			prim.RoundStateInPlace(g.State("w", "parameter", tensor.Float32, shape), c.to)
			g.Apply(&prim.AccumulateRounded{To: c.to, Add: true}, g.State("acc", "gradient", tensor.Float32, shape), xi)
			return map[string]*trace.Tensor{
				"round": prim.Apply1(&prim.Round{To: c.to}, xi),
				"cast":  op.To(op.To(xi, c.to), tensor.Float32),
			}
		})
		for i, v := range x.F32() {
			want := c.round(v)
			if got := res["round"].F32()[i]; got != want || res["cast"].F32()[i] != want {
				t.Fatalf("%v: round(%v) = %v, cast pair %v, want %v", c.to, v, got, res["cast"].F32()[i], want)
			}
			if w.F32()[i] != want {
				t.Fatalf("%v: state rounded to %v, want %v", c.to, w.F32()[i], want)
			}
			if got := acc.F32()[i]; got != acc0.F32()[i]+want {
				t.Fatalf("%v: accumulated %v, want %v", c.to, got, acc0.F32()[i]+want)
			}
		}
	}
}
