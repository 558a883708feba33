package prim

import (
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func TestFusedInfer(t *testing.T) {
	f32 := func(s ...int) trace.Meta { return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape(s)} }
	// relu(x W^T + b), reshaped to [2, 3, 4]: values 0 (product), 1 (the
	// bias, read as a row), 2 (sum), 3 (relu).
	linear := func() *Fused {
		return &Fused{Producer: &MatMul{TransB: true}, NProd: 2, NProdOut: 1, Elems: 24,
			Loads: []FusedLoad{{Input: 0, Inner: 1, Mid: 4}},
			Prog: []FusedInstr{{Op: &Binary{Kind: AddKind}, Args: []int{0, 1}},
				{Op: &Unary{Kind: ReLUKind}, Args: []int{2}}},
			Outs: []FusedOut{{Value: 3, Shape: tensor.Shape{2, 3, 4}}}}
	}
	in := []trace.Meta{f32(6, 5), f32(4, 5), f32(4)}
	out, err := linear().Infer(in)
	if err != nil || len(out) != 1 || !out[0].Shape.Equal(tensor.Shape{2, 3, 4}) || out[0].DType != tensor.Float32 {
		t.Fatalf("Infer = %v, %v", out, err)
	}
	if name := linear().Name(); name != "matmul+add+relu" {
		t.Errorf("name %q", name)
	}
	for _, c := range []struct {
		name  string
		edit  func(f *Fused)
		in    []trace.Meta
		error string
	}{
		{"bias of the wrong length", func(f *Fused) {}, []trace.Meta{f32(6, 5), f32(4, 5), f32(3)}, "cannot be read"},
		{"producer shape error", func(f *Fused) {}, []trace.Meta{f32(6, 5), f32(4, 6), f32(4)}, "matmul"},
		{"wrong element count", func(f *Fused) { f.Elems = 25 }, in, "elements"},
		{"reads a missing value", func(f *Fused) { f.Prog[1].Args = []int{7} }, in, "reads value 7"},
		{"not elementwise", func(f *Fused) { f.Prog[1].Op = &MatMul{} }, in, "not elementwise"},
		{"outputs a load", func(f *Fused) { f.Outs[0].Value = 1 }, in, "output 0 is value 1"},
		{"output shape", func(f *Fused) { f.Outs[0].Shape = tensor.Shape{5, 5} }, in, "shape"},
		{"no program output", func(f *Fused) {
			f.Outs = nil
		}, in, "no output of the program's length"},
		{"mixed dtypes", func(f *Fused) {}, []trace.Meta{f32(6, 5), f32(4, 5), {DType: tensor.Float64, Shape: tensor.Shape{4}}}, "dtype"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := linear()
			c.edit(f)
			if _, err := f.Infer(c.in); err == nil || !strings.Contains(err.Error(), c.error) {
				t.Errorf("Infer error %v, want one containing %q", err, c.error)
			}
		})
	}
}
