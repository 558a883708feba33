package op_test

import (
	"testing"

	"github.com/headroom-ml/headroom/internal/check"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// StopGradient passes values through and no gradient back:
// d/dx sum(x * detach(x)) is x (PyTorch's value), not 2x; and
// d/dx sum(detach(x) + x) is 1.
func TestStopGradient(t *testing.T) {
	x := tensor.FromFloat64(tensor.Shape{2, 3}, []float64{-1.5, 0, 2, 0.25, 3, -4})
	for _, c := range []struct {
		name string
		f    check.Func
		want func(v float64) (out, grad float64)
	}{
		{"x*detach(x)", func(xs []*trace.Tensor) *trace.Tensor { return op.Mul(xs[0], op.StopGradient(xs[0])) },
			func(v float64) (float64, float64) { return v * v, v }},
		{"detach(x)+x", func(xs []*trace.Tensor) *trace.Tensor { return op.Add(op.StopGradient(xs[0]), xs[0]) },
			func(v float64) (float64, float64) { return 2 * v, 1 }},
	} {
		seed := tensor.FromFloat64(x.Shape, []float64{1, 1, 1, 1, 1, 1})
		out, grads, err := check.Eval(c.f, []*tensor.Tensor{x}, seed)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		o, g := out.Float64s(), grads[0].Float64s()
		for i, v := range x.Float64s() {
			wo, wg := c.want(v)
			if o[i] != wo || g[i] != wg {
				t.Errorf("%s at %v: value %v gradient %v, want %v and %v", c.name, v, o[i], g[i], wo, wg)
			}
		}
	}
}
