package op_test

import (
	"testing"

	"github.com/headroom-ml/headroom/autodiff"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// A mixed matmul takes float32, bfloat16 and float16 operands in any mix
// and returns float32; its operands' gradients have their types. Without
// Mixed the operands must agree.
func TestMixedMatMulTypes(t *testing.T) {
	g := trace.New()
	err := trace.Capture(func() {
		a := g.Input("a", tensor.BFloat16, tensor.Shape{2, 5, 3})
		b := g.Input("b", tensor.Float32, tensor.Shape{4, 3})
		y := prim.Apply1(&prim.MatMul{TransB: true, Mixed: true}, a, b)
		if y.DType() != tensor.Float32 || !y.Shape().Equal(tensor.Shape{2, 5, 4}) {
			t.Fatalf("mixed product: %v %v", y.DType(), y.Shape())
		}
		grads, err := autodiff.Backward(op.Sum(y, false), []*trace.Tensor{a, b})
		if err != nil {
			t.Fatal(err)
		}
		if grads[0].DType() != tensor.BFloat16 || grads[1].DType() != tensor.Float32 {
			t.Fatalf("gradient types %v, %v", grads[0].DType(), grads[1].DType())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range [][]trace.Meta{
		{{DType: tensor.BFloat16, Shape: tensor.Shape{2, 3}}, {DType: tensor.Float32, Shape: tensor.Shape{3, 2}}},
	} {
		if _, err := (&prim.MatMul{}).Infer(in); err == nil {
			t.Errorf("matmul of %v and %v without Mixed: no error", in[0].DType, in[1].DType)
		}
	}
	if _, err := (&prim.MatMul{Mixed: true}).Infer([]trace.Meta{{DType: tensor.Float64, Shape: tensor.Shape{2, 3}}, {DType: tensor.Float32, Shape: tensor.Shape{3, 2}}}); err == nil {
		t.Error("mixed matmul accepted a float64 operand")
	}
}
