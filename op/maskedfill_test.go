package op_test

import (
	"math"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/internal/check"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func TestMaskedFillGradients(t *testing.T) {
	causal := func(xs []*trace.Tensor) *trace.Tensor {
		// Scores [2, 3, 3] with the future masked: the attention pattern.
		return op.Softmax(op.MaskedFill(xs[0], op.TriuMask(xs[0].Graph(), 3, 3, 1), math.Inf(-1)), -1)
	}
	full := func(xs []*trace.Tensor) *trace.Tensor {
		m := tensor.New(tensor.Bool, tensor.Shape{2, 3})
		m.Data[1], m.Data[4] = 1, 1
		return op.MaskedFill(xs[0], xs[0].Graph().Const(m), 2.5)
	}
	tril := func(xs []*trace.Tensor) *trace.Tensor { return op.Tril(xs[0], 0) }
	runGradCases(t, []gradCase{
		{name: "causal", shapes: []tensor.Shape{{2, 3, 3}}, f: causal},
		{name: "same_shape", shapes: []tensor.Shape{{2, 3}}, f: full},
		{name: "tril", shapes: []tensor.Shape{{2, 4, 3}}, f: tril},
	})
}

func TestMaskedFillValues(t *testing.T) {
	x := tensor.FromFloat64(tensor.Shape{2, 2, 3}, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	for _, c := range []struct {
		name string
		f    check.Func
		want []float64
	}{
		// torch.tril(x, 0), torch.tril(x, -1) and masked_fill with triu(1).
		{"tril", func(xs []*trace.Tensor) *trace.Tensor { return op.Tril(xs[0], 0) }, []float64{1, 0, 0, 4, 5, 0, 7, 0, 0, 10, 11, 0}},
		{"tril-1", func(xs []*trace.Tensor) *trace.Tensor { return op.Tril(xs[0], -1) }, []float64{0, 0, 0, 4, 0, 0, 0, 0, 0, 10, 0, 0}},
		{"masked_fill", func(xs []*trace.Tensor) *trace.Tensor {
			return op.MaskedFill(xs[0], op.TriuMask(xs[0].Graph(), 2, 3, 1), -9)
		}, []float64{1, -9, -9, 4, 5, -9, 7, -9, -9, 10, 11, -9}},
		{"arange", func(xs []*trace.Tensor) *trace.Tensor {
			return op.Add(xs[0], op.Arange(xs[0].Graph(), tensor.Float64, 3))
		}, []float64{1, 3, 5, 4, 6, 8, 7, 9, 11, 10, 12, 14}},
	} {
		y, _, err := check.Eval(c.f, []*tensor.Tensor{x}, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for i, v := range y.F64() {
			if v != c.want[i] {
				t.Fatalf("%s: got %v, want %v", c.name, y.F64(), c.want)
			}
		}
	}
}

func TestMaskedFillShapeErrors(t *testing.T) {
	for _, c := range []struct {
		name, want string
		f          func(g *trace.Graph)
	}{
		{"mask not a suffix", "suffix", func(g *trace.Graph) {
			op.MaskedFill(g.Input("x", tensor.Float32, tensor.Shape{2, 3}), g.Input("m", tensor.Bool, tensor.Shape{2}), 0)
		}},
		{"float mask", "bool mask", func(g *trace.Graph) {
			op.MaskedFill(g.Input("x", tensor.Float32, tensor.Shape{2, 3}), g.Input("m", tensor.Float32, tensor.Shape{2, 3}), 0)
		}},
		{"tril of a vector", "at least 2", func(g *trace.Graph) { op.Tril(g.Input("x", tensor.Float32, tensor.Shape{3}), 0) }},
	} {
		g := trace.New()
		err := trace.Capture(func() { c.f(g) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one saying %q", c.name, err, c.want)
		}
	}
}
