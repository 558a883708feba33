package prim

import (
	"testing"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// A backend's account of its arithmetic (Arithmetic) replaces the op's
// declared flops where it reports any, also for the producer of a fused
// node, and leaves bytes and every other op alone.
func TestCostOn(t *testing.T) {
	f32 := func(s ...int) trace.Meta { return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape(s)} }
	conv := &Conv2dOp{Opts: ConvOpts{Padding: [2]int{1, 1}}.Normalized()}
	in := []trace.Meta{f32(2, 8, 10, 10), f32(16, 8, 3, 3)}
	out, err := conv.Infer(in)
	if err != nil {
		t.Fatal(err)
	}
	declared := conv.Cost(in, out)
	// 2 flops per multiply-add: 2*16*10*10 outputs of 8*3*3 products each.
	if want := 2.0 * (2 * 16 * 10 * 10) * (8 * 3 * 3); declared.Flops != want {
		t.Fatalf("declared conv flops %g, want %g", declared.Flops, want)
	}
	const fast = 1000.0
	convOnly := func(o trace.Op, in, out []trace.Meta) (float64, bool) {
		if _, ok := o.(*Conv2dOp); ok {
			return fast, true
		}
		return 0, false
	}
	fused := &Fused{Producer: conv, NProd: 2, NProdOut: 1, Elems: 2 * 16 * 10 * 10,
		Prog: []FusedInstr{{Op: &Unary{Kind: ReLUKind}, Args: []int{0}}},
		Outs: []FusedOut{{Value: 1, Shape: out[0].Shape}}}
	fout, err := fused.Infer(in)
	if err != nil {
		t.Fatal(err)
	}
	relu := &Unary{Kind: ReLUKind}
	for _, c := range []struct {
		name    string
		a       Arithmetic
		o       trace.Op
		in, out []trace.Meta
		flops   float64
	}{
		{"no backend account", nil, conv, in, out, declared.Flops},
		{"the backend's arithmetic", convOnly, conv, in, out, fast},
		{"the backend declines", func(trace.Op, []trace.Meta, []trace.Meta) (float64, bool) { return 0, false }, conv, in, out, declared.Flops},
		{"another op", convOnly, relu, out, out, relu.Cost(out, out).Flops},
		{"fused, no backend account", nil, fused, in, fout, declared.Flops + 2*float64(fused.Elems)},
		{"fused: the producer's arithmetic", convOnly, fused, in, fout, fast + 2*float64(fused.Elems)},
	} {
		got := CostOn(c.a, c.o, c.in, c.out)
		want := Of(c.o).Cost(c.in, c.out)
		if got.Flops != c.flops || got.Bytes != want.Bytes || got.HostBytes != want.HostBytes || got.Convert != want.Convert {
			t.Errorf("%s: %+v, want flops %g and the declared rest %+v", c.name, got, c.flops, want)
		}
	}
}
