package transform_test

import (
	"context"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/autodiff"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

func TestParsePrecision(t *testing.T) {
	for i, name := range []string{"fp32", "bf16-mixed", "fp16-mixed", "bf16-true"} {
		p, err := transform.ParsePrecision(name)
		if err != nil || p != transform.Precision(i) || p.String() != name {
			t.Errorf("ParsePrecision(%q) = %v, %v", name, p, err)
		}
	}
	for name, want := range map[string]transform.Precision{
		"32-true": transform.FP32, "32": transform.FP32, "16-mixed": transform.FP16Mixed,
		"16": transform.FP16Mixed, "bf16": transform.BF16Mixed,
	} {
		if p, err := transform.ParsePrecision(name); err != nil || p != want {
			t.Errorf("ParsePrecision(%q) (Lightning's name) = %v, %v; want %v", name, p, err, want)
		}
	}
	for _, name := range []string{"16-true", "64", "bf16-mixed ", "FP32"} {
		if p, err := transform.ParsePrecision(name); err == nil {
			t.Errorf("ParsePrecision(%q) = %v, want an error", name, p)
		}
	}
	_, err := transform.ParsePrecision("fp8")
	if err == nil || !strings.Contains(err.Error(), `"fp8"`) || !strings.Contains(err.Error(), "fp32, bf16-mixed, fp16-mixed, bf16-true") {
		t.Errorf("ParsePrecision(fp8): %v", err)
	}
	if !transform.FP16Mixed.NeedsScaler() || transform.BF16Mixed.NeedsScaler() {
		t.Error("only fp16-mixed needs a scaler")
	}
}

// fp32 is the identity: the same graph, the same numbers.
func TestFP32IsIdentity(t *testing.T) {
	spec := mustSpec(t, "cnn")
	base := step(t, spec, 8, setup{})
	g, low, _, err := transform.Autocast(base.prog, transform.FP32)
	if err != nil || g != base.prog || low.Len() != 0 {
		t.Fatalf("Autocast(fp32) = %p (input %p), %d low values, %v", g, base.prog, low.Len(), err)
	}
	if g, err := transform.ApplyPrecision(base.prog, transform.FP32, nil); err != nil || g != base.prog {
		t.Fatalf("ApplyPrecision(fp32, nil) changed the graph: %v", err)
	}
	sameGrads(t, "fp32", step(t, spec, 8, setup{precision: transform.FP32}), base)
}

func bf16(v float32) float32 { return tensor.BFloat16ToFloat32(tensor.Float32ToBFloat16(v)) }
func fp16(v float32) float32 { return tensor.Float16ToFloat32(tensor.Float32ToFloat16(v)) }

// A linear layer under bf16-mixed and fp16-mixed computes exactly what a
// low-precision addmm with float32 accumulation computes: operands (input,
// weight, bias) rounded, the sum rounded once; its weight gradient is the
// rounded product of rounded operands. The operands are chosen so that the
// float32 sums are exact whatever their order: multiples of 1/16 with at
// most 8 significant bits, plus 2^-13, which rounding removes.
func TestLinearEmulation(t *testing.T) {
	const n, in, out = 4, 8, 3
	r := rand.New(rand.NewSource(9))
	val := func() float32 {
		k := 16 + r.Intn(240)
		if r.Intn(2) == 0 {
			k = -k
		}
		return float32(k)/16 + 1.0/8192
	}
	x := tensor.New(tensor.Float32, tensor.Shape{n, in})
	w := tensor.New(tensor.Float32, tensor.Shape{out, in})
	b := tensor.New(tensor.Float32, tensor.Shape{out})
	s := tensor.New(tensor.Float32, tensor.Shape{n, out})
	for _, tt := range []*tensor.Tensor{x, w, b} {
		for i := range tt.F32() {
			tt.F32()[i] = val()
		}
	}
	for i := range s.F32() {
		s.F32()[i] = float32(r.Intn(9)-4) / 16 // exact in every format
	}
	for _, c := range []struct {
		p     transform.Precision
		round func(float32) float32
	}{{transform.BF16Mixed, bf16}, {transform.FP16Mixed, fp16}} {
		g := trace.New()
		err := trace.Capture(func() {
			xi, si := g.Input("x", tensor.Float32, x.Shape), g.Input("s", tensor.Float32, s.Shape)
			wi := g.State("w", "parameter", tensor.Float32, w.Shape)
			bi := g.State("b", "parameter", tensor.Float32, b.Shape)
			y := op.Linear(xi, wi, bi)
			g.Output("y", y)
			loss := op.Sum(op.Mul(y, si), false)
			grads, err := autodiff.Backward(loss, []*trace.Tensor{wi, bi})
			if err != nil {
				panic(err)
			}
			old := g.SetPhase(trace.Backward)
			prim.AccumulateInto(g.State("grad:w", "gradient", tensor.Float32, w.Shape), grads[0], false)
			prim.AccumulateInto(g.State("grad:b", "gradient", tensor.Float32, b.Shape), grads[1], false)
			g.SetPhase(old)
		})
		if err != nil {
			t.Fatal(err)
		}
		g, err = transform.ApplyPrecision(g, c.p, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := exec.Compile(g, device.CPU())
		if err != nil {
			t.Fatal(err)
		}
		gw, gb := tensor.New(tensor.Float32, w.Shape), tensor.New(tensor.Float32, b.Shape)
		arena := exec.NewArena(p.Device)
		res, err := p.Run(context.Background(), arena, exec.StateMap{"w": w, "b": b, "grad:w": gw, "grad:b": gb},
			map[string]*tensor.Tensor{"x": x, "s": s}, nil)
		arena.Release()
		if err != nil {
			t.Fatal(err)
		}
		X, W, B, S := x.F32(), w.F32(), b.F32(), s.F32()
		for i := 0; i < n; i++ {
			for j := 0; j < out; j++ {
				acc := c.round(B[j])
				for k := 0; k < in; k++ {
					acc += c.round(X[i*in+k]) * c.round(W[j*in+k])
				}
				if got, want := res["y"].F32()[i*out+j], c.round(acc); got != want {
					t.Fatalf("%v: y[%d,%d] = %v, want %v", c.p, i, j, got, want)
				}
			}
		}
		for j := 0; j < out; j++ {
			var sb float32
			for i := 0; i < n; i++ {
				sb += S[i*out+j]
			}
			if gb.F32()[j] != sb {
				t.Fatalf("%v: bias gradient %v, want %v", c.p, gb.F32()[j], sb)
			}
			for k := 0; k < in; k++ {
				var acc float32
				for i := 0; i < n; i++ {
					acc += S[i*out+j] * c.round(X[i*in+k])
				}
				if got, want := gw.F32()[j*in+k], c.round(acc); got != want {
					t.Fatalf("%v: weight gradient [%d,%d] = %v, want %v", c.p, j, k, got, want)
				}
			}
		}
	}
}

// isLow reports whether v is a number of the low type (for fp16 after
// scaling by scale, a power of two).
func isLow(p transform.Precision, v float32, scale float32) bool {
	if p == transform.FP16Mixed {
		return fp16(v*scale) == v*scale
	}
	return bf16(v) == v
}

// A training step in each mode: the loss stays close to fp32's, parameter
// gradients are low-precision numbers (upcast, as with fp32 master
// weights), activation memory does not grow, and measured equals planned
// (checked by step). Gradients differ from fp32's by more than rounding
// alone explains: rounding moves pre-activations across ReLU's kink and
// changes max-pool winners, as in any low-precision run; the bound is loose.
func TestMixedPrecisionStep(t *testing.T) {
	for _, model := range []string{"cnn", "mlp"} {
		spec := mustSpec(t, model)
		base := step(t, spec, 16, setup{})
		for _, p := range []transform.Precision{transform.BF16Mixed, transform.FP16Mixed, transform.BF16True} {
			got := step(t, spec, 16, setup{precision: p})
			total, worst, name := relErr(got, base)
			dl := math.Abs(got.loss-base.loss) / base.loss
			t.Logf("%s %v: loss %.6f (fp32 %.6f), gradient relative error %.2g overall, %.2g at worst (%s); activation peak %d -> %d",
				model, p, got.loss, base.loss, total, worst, name, base.plan.Activations, got.plan.Activations)
			if dl > 4e-3 || total > 0.25 {
				t.Errorf("%s %v: loss off by %.2g relative, gradients by %.2g", model, p, dl, total)
			}
			if got.plan.Activations > base.plan.Activations*21/20 {
				t.Errorf("%s %v: activation peak %d, fp32 %d", model, p, got.plan.Activations, base.plan.Activations)
			}
			scale := float32(1)
			if p == transform.FP16Mixed {
				scale = 65536 // the scaler's initial scale, divided out again
			}
			for _, name := range got.names {
				for i, v := range got.grads[name] {
					if !isLow(p, v, scale) {
						t.Fatalf("%s %v: %s gradient [%d] = %v is not a %v number", model, p, name, i, v, p.LowDType())
					}
				}
			}
			if p == transform.BF16True && bf16(float32(got.loss)) != float32(got.loss) {
				t.Errorf("bf16-true loss %v is not a bfloat16 number", got.loss)
			}
		}
	}
}

// SetPrecision installs PyTorch's GradScaler for fp16-mixed, and only there.
func TestFP16MixedGetsAScaler(t *testing.T) {
	store := nn.NewStore()
	spec := mustSpec(t, "mlp")
	m := spec.New(store.Root())
	if err := store.Materialize(device.Meta(), 0); err != nil {
		t.Fatal(err)
	}
	tr, err := train.New(store.Device(), store, m, spec.Loss, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.SetConfig(train.Config{Precision: transform.BF16Mixed})
	if tr.Scaler != nil {
		t.Fatal("bf16-mixed installed a scaler")
	}
	tr.SetConfig(train.Config{Precision: transform.FP16Mixed})
	if tr.Scaler == nil || tr.Scaler.Scale != 65536 || tr.Scaler.GrowthInterval != 2000 {
		t.Fatalf("fp16-mixed scaler: %+v", tr.Scaler)
	}
	mine := train.NewGradScaler()
	mine.Scale = 1024
	tr.Scaler = mine
	tr.SetConfig(train.Config{Precision: transform.FP16Mixed})
	if tr.Scaler != mine {
		t.Fatal("SetPrecision replaced the caller's scaler")
	}
}

// bf16-true keeps parameters as bfloat16 numbers: each step starts by
// rounding them, so with a zero learning rate they are the rounded
// initial values after a step.
func TestBF16TrueRoundsParameters(t *testing.T) {
	store := nn.NewStore()
	spec := mustSpec(t, "mlp")
	m := spec.New(store.Root())
	dev := device.CPU()
	if err := store.Materialize(dev, 3); err != nil {
		t.Fatal(err)
	}
	defer store.Release()
	before := map[string][]float32{}
	for _, p := range store.Trainable() {
		before[p.Name] = append([]float32(nil), p.Value.F32()...)
	}
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0})
	tr, err := train.New(dev, store, m, spec.Loss, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.SetConfig(train.Config{Precision: transform.BF16True})
	x, y := testkit.SpecBatch(spec, 4, 1)
	if _, err := tr.Step(context.Background(), x, y); err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, p := range store.Trainable() {
		for i, v := range p.Value.F32() {
			if v != bf16(before[p.Name][i]) {
				t.Fatalf("%s[%d] = %v, want bf16(%v) = %v", p.Name, i, v, before[p.Name][i], bf16(before[p.Name][i]))
			}
			if v != before[p.Name][i] {
				changed++
			}
		}
	}
	if changed == 0 {
		t.Fatal("no parameter was rounded")
	}
}

// Rematerialization runs before Autocast, so recomputed nodes are rounded
// as the forward's were: recomputation under mixed precision is exact.
func TestAutocastAfterRematIsExact(t *testing.T) {
	for _, c := range []struct {
		model string
		remat transform.Policy
	}{
		{"cnn", transform.Selective{Ops: map[string]bool{"matmul": true, "max_pool2d": true}}},
		// Named, not CheapOps: recomputing the MLP's ReLUs frees nothing
		// (the next layer's backward keeps their outputs), so CheapOps
		// leaves them saved.
		{"mlp", transform.Selective{Ops: map[string]bool{"relu": true}}},
	} {
		spec := mustSpec(t, c.model)
		for _, p := range []transform.Precision{transform.BF16Mixed, transform.BF16True} {
			base := step(t, spec, 8, setup{precision: p})
			got := step(t, spec, 8, setup{precision: p, remat: c.remat})
			sameGrads(t, c.model+" "+p.String()+" with recomputation", got, base)
			recomputed := 0
			for _, n := range got.prog.Nodes {
				if n.Recompute {
					recomputed++
				}
			}
			if recomputed == 0 {
				t.Errorf("%s %v: nothing recomputed", c.model, p)
			}
		}
	}
}
