package op_test

import (
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/autodiff"
	"github.com/headroom-ml/headroom/internal/check"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

type gradCase struct {
	name   string
	shapes []tensor.Shape
	lo, hi float64 // input range (keeps log, sqrt, div away from poles)
	f      check.Func
}

func runGradCases(t *testing.T, cases []gradCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewSource(42))
			var in []*tensor.Tensor
			lo, hi := c.lo, c.hi
			if lo == 0 && hi == 0 {
				lo, hi = -2, 2
			}
			for _, s := range c.shapes {
				in = append(in, check.Random(r, s, lo, hi))
			}
			if _, err := check.Gradients(c.f, in, 1e-6, 1e-7, 1e-5); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func un(f func(x *trace.Tensor) *trace.Tensor) check.Func {
	return func(xs []*trace.Tensor) *trace.Tensor { return f(xs[0]) }
}

func bin(f func(a, b *trace.Tensor) *trace.Tensor) check.Func {
	return func(xs []*trace.Tensor) *trace.Tensor { return f(xs[0], xs[1]) }
}

func TestCoreGradients(t *testing.T) {
	s := tensor.Shape{2, 3}
	runGradCases(t, []gradCase{
		{name: "add_broadcast", shapes: []tensor.Shape{{2, 3}, {3}}, f: bin(op.Add)},
		{name: "sub_broadcast", shapes: []tensor.Shape{{2, 1}, {1, 3}}, f: bin(op.Sub)},
		{name: "mul", shapes: []tensor.Shape{s, s}, f: bin(op.Mul)},
		{name: "div", shapes: []tensor.Shape{{2, 3}, {2, 1}}, lo: 0.5, hi: 2, f: bin(op.Div)},
		{name: "maximum", shapes: []tensor.Shape{s, s}, f: bin(op.Maximum)},
		{name: "minimum", shapes: []tensor.Shape{s, {3}}, f: bin(op.Minimum)},
		{name: "exp", shapes: []tensor.Shape{s}, f: un(op.Exp)},
		{name: "log", shapes: []tensor.Shape{s}, lo: 0.5, hi: 3, f: un(op.Log)},
		{name: "sqrt", shapes: []tensor.Shape{s}, lo: 0.5, hi: 3, f: un(op.Sqrt)},
		{name: "rsqrt", shapes: []tensor.Shape{s}, lo: 0.5, hi: 3, f: un(op.Rsqrt)},
		{name: "tanh", shapes: []tensor.Shape{s}, f: un(op.Tanh)},
		{name: "sigmoid", shapes: []tensor.Shape{s}, f: un(op.Sigmoid)},
		{name: "relu", shapes: []tensor.Shape{s}, f: un(op.ReLU)},
		{name: "leaky_relu", shapes: []tensor.Shape{s}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.LeakyReLU(x, 0.1) })},
		// A negative slope flips the output's sign: the backward must read
		// the input then, not the output.
		{name: "leaky_relu_negative_slope", shapes: []tensor.Shape{s}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.LeakyReLU(x, -0.5) })},
		{name: "silu", shapes: []tensor.Shape{s}, f: un(op.SiLU)},
		{name: "gelu", shapes: []tensor.Shape{s}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.GELU(x, "none") })},
		{name: "gelu_tanh", shapes: []tensor.Shape{s}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.GELU(x, "tanh") })},
		{name: "abs", shapes: []tensor.Shape{s}, lo: 0.1, hi: 2, f: un(op.Abs)},
		{name: "square", shapes: []tensor.Shape{s}, f: un(op.Square)},
		{name: "pow", shapes: []tensor.Shape{s}, lo: 0.5, hi: 2, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Pow(x, 2.5) })},
		{name: "reciprocal", shapes: []tensor.Shape{s}, lo: 0.5, hi: 2, f: un(op.Reciprocal)},
		{name: "sin_cos", shapes: []tensor.Shape{s}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Mul(op.Sin(x), op.Cos(x)) })},
		{name: "sum_axis", shapes: []tensor.Shape{{2, 3, 4}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Sum(x, false, 1) })},
		{name: "mean_keepdim", shapes: []tensor.Shape{{2, 3, 4}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Mean(x, true, 0, 2) })},
		{name: "amax", shapes: []tensor.Shape{{3, 5}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Amax(x, false, -1) })},
		{name: "reshape", shapes: []tensor.Shape{{2, 6}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Square(op.Reshape(x, tensor.Shape{3, -1})) })},
		{name: "permute", shapes: []tensor.Shape{{2, 3, 4}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Square(op.PermuteAxes(x, 2, 0, 1)) })},
		{name: "expand", shapes: []tensor.Shape{{3, 1}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Square(op.BroadcastTo(x, tensor.Shape{2, 3, 4})) })},
		{name: "matmul", shapes: []tensor.Shape{{3, 4}, {4, 5}}, f: bin(op.Mm)},
		{name: "matmul_batched_broadcast", shapes: []tensor.Shape{{2, 3, 4}, {4, 5}}, f: bin(op.Mm)},
		{name: "matmul_tt", shapes: []tensor.Shape{{4, 3}, {5, 4}}, f: bin(func(a, b *trace.Tensor) *trace.Tensor { return op.MatMulT(a, b, true, true) })},
		{name: "linear", shapes: []tensor.Shape{{2, 3, 4}, {5, 4}, {5}}, f: func(xs []*trace.Tensor) *trace.Tensor { return op.Linear(xs[0], xs[1], xs[2]) }},
	})
}

func TestShapeErrorNamesModuleOpShapes(t *testing.T) {
	g := trace.New()
	err := trace.Capture(func() {
		a := g.Input("a", tensor.Float32, tensor.Shape{2, 3})
		b := g.Input("b", tensor.Float32, tensor.Shape{4, 5})
		g.WithModule("encoder", func() {
			g.WithModule("fc1", func() { op.Mm(a, b) })
		})
	})
	if err == nil {
		t.Fatal("expected a shape error")
	}
	want := "module encoder.fc1: matmul(float32[2, 3], float32[4, 5]): inner dimensions differ: 3 vs 4"
	if err.Error() != want {
		t.Fatalf("got %q\nwant %q", err, want)
	}
}

// LeakyReLU's backward reads its output when the slope is >= 0 (so the
// pre-activation is not kept for the backward pass) and its input otherwise.
func TestLeakyReLUBackwardReadsOutput(t *testing.T) {
	for _, tc := range []struct {
		slope      float64
		wantOutput bool
	}{{0.2, true}, {0, true}, {-0.5, false}} {
		g := trace.New()
		var x, y *trace.Tensor
		var grads []*trace.Tensor
		err := trace.Capture(func() {
			x = g.Input("x", tensor.Float32, tensor.Shape{4})
			y = op.LeakyReLU(x, tc.slope)
			var err error
			grads, err = autodiff.Backward(op.Sum(y, false), []*trace.Tensor{x})
			if err != nil {
				panic(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		bw := grads[0].Node
		if _, ok := bw.Op.(*prim.UnaryBackward); !ok {
			t.Fatalf("slope %v: gradient made by %s, want leaky_relu_backward", tc.slope, bw.Op.Name())
		}
		want := x
		if tc.wantOutput {
			want = y
		}
		if bw.Inputs[1] != want {
			t.Errorf("slope %v: backward reads %s, want %s", tc.slope, bw.Inputs[1].Node.Label(), want.Node.Label())
		}
	}
}
