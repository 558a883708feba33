package ref_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/backend/ref"
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
	"github.com/headroom-ml/headroom/zoo"
)

// run compiles g for a cpu device carrying be (its own backend when nil)
// and runs it on feed.
func run(t *testing.T, g *trace.Graph, be backend.Backend, feed map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	t.Helper()
	dev := device.CPU()
	if be != nil {
		dev.Backend = be
	}
	p, err := exec.Compile(g, dev)
	if err != nil {
		t.Fatal(err)
	}
	arena := exec.NewArena(dev)
	defer arena.Release()
	res, err := p.Run(context.Background(), arena, exec.StateMap{}, feed, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// close reports the first element of got farther from want than rtol
// relative to the element, plus rtol/10 relative to the largest |want|
// (sums of many products lose digits against their largest terms).
func closeTo(got, want []float64, rtol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d elements, want %d", len(got), len(want))
	}
	var scale float64
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	for i, w := range want {
		if d := math.Abs(got[i] - w); !(d <= rtol*math.Abs(w)+rtol/10*scale) {
			return fmt.Errorf("element %d: %v, want %v (|diff| %.3g, largest |want| %.3g)", i, got[i], w, d, scale)
		}
	}
	return nil
}

// An op case builds a graph of inputs of dtype dt; int64 inputs hold
// classes in [0, classes).
type opCase struct {
	name    string
	classes int
	build   func(g *trace.Graph, dt tensor.DType)
}

func in(g *trace.Graph, name string, dt tensor.DType, s ...int) *trace.Tensor {
	return g.Input(name, dt, tensor.Shape(s))
}

var opCases = []opCase{
	{name: "binary with broadcasting", build: func(g *trace.Graph, dt tensor.DType) {
		a, b, c := in(g, "a", dt, 3, 4, 5), in(g, "b", dt, 4, 1), in(g, "c", dt, 5)
		g.Output("add", op.Add(a, b))
		g.Output("sub", op.Sub(b, a))
		g.Output("mul", op.Mul(a, c))
		g.Output("div", op.Div(a, op.AddScalar(op.Abs(c), 1)))
		g.Output("max", op.Maximum(a, b))
		g.Output("min", op.Minimum(c, a))
	}},
	{name: "unary", build: func(g *trace.Graph, dt tensor.DType) {
		x := in(g, "x", dt, 7, 9)
		pos := op.AddScalar(op.Abs(x), 0.5)
		for name, y := range map[string]*trace.Tensor{
			"neg": op.Neg(x), "exp": op.Exp(x), "log": op.Log(pos), "sqrt": op.Sqrt(pos), "rsqrt": op.Rsqrt(pos),
			"tanh": op.Tanh(x), "sigmoid": op.Sigmoid(x), "relu": op.ReLU(x), "square": op.Square(x), "sign": op.Sign(x),
			"scale": op.Scale(x, -1.5), "pow": op.Pow(pos, 1.7), "leaky": op.LeakyReLU(x, 0.1), "silu": op.SiLU(x),
			"gelu": op.GELU(x, "none"), "gelu_tanh": op.GELU(x, "tanh"), "recip": op.Reciprocal(pos), "sin": op.Sin(x), "cos": op.Cos(x),
		} {
			g.Output(name, y)
		}
	}},
	{name: "activation backwards", build: func(g *trace.Graph, dt tensor.DType) {
		gy, x := in(g, "gy", dt, 6, 11), in(g, "x", dt, 6, 11)
		for _, k := range []prim.UnaryKind{prim.ReLUKind, prim.TanhKind, prim.SigmoidKind, prim.LeakyReLUKind, prim.SiLUKind, prim.GELUKind, prim.GELUTanhKind} {
			g.Output(fmt.Sprint("kind", k), prim.Apply1(&prim.UnaryBackward{Kind: k, C: 0.2}, gy, op.Tanh(x)))
		}
	}},
	{name: "matmul", build: func(g *trace.Graph, dt tensor.DType) {
		a, b := in(g, "a", dt, 2, 5, 33), in(g, "b", dt, 33, 7)
		at, bt := in(g, "at", dt, 33, 5), in(g, "bt", dt, 3, 1, 7, 33)
		g.Output("nn", op.MatMulT(a, b, false, false))
		g.Output("tn", op.MatMulT(at, b, true, false))
		g.Output("nt", op.MatMulT(a, bt, false, true))
		g.Output("tt", op.MatMulT(at, bt, true, true))
	}},
	{name: "reductions", build: func(g *trace.Graph, dt tensor.DType) {
		x := in(g, "x", dt, 3, 4, 5)
		g.Output("sum", op.Sum(x, false))
		g.Output("sum1", op.Sum(x, true, 1))
		g.Output("mean02", op.Mean(x, false, 0, 2))
		g.Output("amax2", op.Amax(x, false, 2))
	}},
	{name: "conv2d", build: func(g *trace.Graph, dt tensor.DType) {
		x, w, b := in(g, "x", dt, 2, 4, 9, 8), in(g, "w", dt, 6, 2, 3, 2), in(g, "b", dt, 6)
		o := op.ConvOpts{Stride: [2]int{2, 1}, Padding: [2]int{1, 2}, Dilation: [2]int{1, 2}, Groups: 2}
		y := op.Conv2d(x, w, b, o)
		g.Output("y", y)
		gy := in(g, "gy", dt, y.Shape()...)
		o = o.Normalized()
		g.Output("gx", prim.Apply1(&prim.Conv2dBackwardInput{Opts: o, InputShape: x.Shape()}, gy, w))
		g.Output("gw", prim.Apply1(&prim.Conv2dBackwardWeight{Opts: o, WeightShape: w.Shape()}, gy, x))
	}},
	{name: "max pooling", build: func(g *trace.Graph, dt tensor.DType) {
		x := in(g, "x", dt, 2, 3, 9, 10)
		y, idx := op.MaxPool2dWithIndices(x, op.PoolOpts{Kernel: [2]int{3, 2}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}})
		g.Output("y", y)
		g.Output("idx", idx)
		gy := in(g, "gy", dt, y.Shape()...)
		g.Output("gx", prim.Apply1(&prim.MaxPool2dBackward{InputShape: x.Shape()}, gy, idx))
	}},
	{name: "cross-entropy", classes: 5, build: func(g *trace.Graph, dt tensor.DType) {
		x, y := in(g, "x", dt, 6, 5, 3), g.Input("y", tensor.Int64, tensor.Shape{6, 3})
		for _, o := range []op.CrossEntropyOpts{
			op.DefaultCrossEntropyOpts(),
			{IgnoreIndex: op.Class(2), LabelSmoothing: 0.1, Reduction: op.ReductionSum},
			{IgnoreIndex: op.Class(-100), LabelSmoothing: 0.3, Reduction: op.ReductionNone},
		} {
			ce := &prim.CrossEntropyOp{IgnoreIndex: int64(o.IgnoreIndex.Or(op.DefaultIgnoreIndex)), LabelSmoothing: o.LabelSmoothing, Reduction: o.Reduction}
			outs := g.Apply(ce, x, y)
			name := fmt.Sprintf("%s_ls%v", o.Reduction, o.LabelSmoothing)
			g.Output(name, outs[0])
			g.Output(name+"_lse", outs[1])
			gl := op.Scale(op.AddScalar(op.Abs(outs[0]), 1), 0.7) // a loss gradient of the loss's shape
			back := &prim.CrossEntropyBackward{IgnoreIndex: ce.IgnoreIndex, LabelSmoothing: ce.LabelSmoothing, Reduction: ce.Reduction}
			g.Output(name+"_grad", prim.Apply1(back, gl, x, y, outs[1]))
		}
	}},
}

// The cpu kernels agree with the reference backend's float64 loops, in
// float32 and in float64.
func TestCPUMatchesReference(t *testing.T) {
	for _, c := range opCases {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				g := trace.New()
				if err := trace.Capture(func() { c.build(g, dt) }); err != nil {
					t.Fatal(err)
				}
				r := rand.New(rand.NewSource(1))
				feed := map[string]*tensor.Tensor{}
				for _, n := range g.InputNodes() {
					m := n.Outputs[0].Meta
					v := make([]float64, m.Shape.NumElements())
					for i := range v {
						if m.DType == tensor.Int64 {
							v[i] = float64(r.Intn(c.classes))
						} else {
							v[i] = r.NormFloat64()
						}
					}
					feed[n.Name] = tensor.FromFloat64(m.Shape, v).Convert(m.DType)
				}
				want := run(t, g, ref.New(), feed)
				got := run(t, g, nil, feed)
				rtol := 2e-5
				if dt == tensor.Float64 {
					rtol = 1e-10
				}
				for name, w := range want {
					if err := closeTo(got[name].Float64s(), w.Float64s(), rtol); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			})
		}
	}
}

// step trains one step of a zoo model on a device carrying be and returns
// the loss and every gradient.
func step(t *testing.T, model string, be backend.Backend) (float64, map[string][]float64) {
	t.Helper()
	spec, err := zoo.Lookup(model)
	if err != nil {
		t.Fatal(err)
	}
	dev := device.CPU()
	if be != nil {
		dev.Backend = be
	}
	store := nn.NewStore()
	m := spec.New(store.Root())
	if err := store.Materialize(dev, 3); err != nil {
		t.Fatal(err)
	}
	defer store.Release()
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0})
	tr, err := train.New(dev, store, m, spec.Loss, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	xm, ym := spec.Example(8)
	r := rand.New(rand.NewSource(7))
	x, y := testkit.Batch(r, xm, ym, 10)
	loss, err := tr.Step(context.Background(), x, y)
	if err != nil {
		t.Fatal(err)
	}
	grads := map[string][]float64{}
	for _, p := range store.Trainable() {
		grads[p.Name] = p.Grad.Float64s()
	}
	return loss, grads
}

// A training step of an MLP and of a small CNN (as train compiles it:
// fused epilogues included) gives the same loss and gradients on the cpu
// backend as on the reference backend.
func TestTrainStepMatchesReference(t *testing.T) {
	for _, model := range []string{"mlp", "cnn"} {
		t.Run(model, func(t *testing.T) {
			wantLoss, want := step(t, model, ref.New())
			gotLoss, got := step(t, model, nil)
			if err := closeTo([]float64{gotLoss}, []float64{wantLoss}, 1e-5); err != nil {
				t.Errorf("loss: %v", err)
			}
			if len(want) == 0 {
				t.Fatal("no gradients")
			}
			for name, w := range want {
				if err := closeTo(got[name], w, 1e-4); err != nil {
					t.Errorf("gradient of %s: %v", name, err)
				}
			}
			t.Logf("loss %.7g (cpu) vs %.7g (ref); %d gradients compared", gotLoss, wantLoss, len(want))
		})
	}
}

// An op the reference backend lacks is refused when the program is
// compiled, with a typed error naming it; nothing panics.
func TestUnsupportedOpIsTypedError(t *testing.T) {
	g := trace.New()
	if err := trace.Capture(func() {
		g.Output("y", op.Softmax(in(g, "x", tensor.Float32, 2, 3), 1))
	}); err != nil {
		t.Fatal(err)
	}
	dev := device.CPU()
	dev.Backend = ref.New()
	_, err := exec.Compile(g, dev)
	var ue *backend.UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, backend.ErrUnsupported) || ue.Op != "softmax" || ue.Backend != "ref" {
		t.Fatalf("got %v, want a *backend.UnsupportedError for softmax", err)
	}
	t.Log(err)
}
