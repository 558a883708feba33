package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// A mixed matmul (16-bit operands read in place) gives bitwise the float32
// matmul of the operands cast to float32, with broadcast batch axes and
// transposes; bf16 by bf16 on the native kernel agrees within rounding.
func TestMixedMatMulMatchesCast(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		as, bs         tensor.Shape
		transA, transB bool
	}{
		{tensor.Shape{5, 7}, tensor.Shape{7, 4}, false, false},
		{tensor.Shape{2, 1, 5, 7}, tensor.Shape{3, 7, 19}, false, false},
		{tensor.Shape{3, 7, 5}, tensor.Shape{3, 19, 7}, true, true},
		{tensor.Shape{40, 33}, tensor.Shape{17, 33}, false, true},
		{tensor.Shape{4, 33, 40}, tensor.Shape{33, 17}, true, false},
	} {
		for _, dt := range [][2]tensor.DType{{tensor.BFloat16, tensor.BFloat16}, {tensor.Float16, tensor.Float32}, {tensor.Float32, tensor.BFloat16}, {tensor.BFloat16, tensor.Float16}} {
			name := fmt.Sprintf("%v%v/%v%v/%v,%v", tc.as, dt[0], tc.bs, dt[1], tc.transA, tc.transB)
			mk := func(s tensor.Shape, d tensor.DType) (low, f32 *tensor.Tensor) {
				f32 = tensor.New(tensor.Float32, s)
				low = tensor.New(d, s)
				for i := range f32.F32() {
					v := float32(r.NormFloat64())
					switch d {
					case tensor.BFloat16:
						low.U16()[i] = tensor.Float32ToBFloat16(v)
						v = tensor.BFloat16ToFloat32(low.U16()[i])
					case tensor.Float16:
						low.U16()[i] = tensor.Float32ToFloat16(v)
						v = tensor.Float16ToFloat32(low.U16()[i])
					default:
						low.F32()[i] = v
					}
					f32.F32()[i] = v
				}
				return low, f32
			}
			a, af := mk(tc.as, dt[0])
			b, bf := mk(tc.bs, dt[1])
			o := &prim.MatMul{TransA: tc.transA, TransB: tc.transB}
			metas, err := o.Infer([]trace.Meta{{DType: tensor.Float32, Shape: tc.as}, {DType: tensor.Float32, Shape: tc.bs}})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want := tensor.New(tensor.Float32, metas[0].Shape)
			if err := Run(&trace.Node{Op: o}, []*tensor.Tensor{af, bf}, []*tensor.Tensor{want}, nil); err != nil {
				t.Fatal(err)
			}
			mixed := &prim.MatMul{TransA: tc.transA, TransB: tc.transB, Mixed: true}
			if _, err := mixed.Infer([]trace.Meta{{DType: dt[0], Shape: tc.as}, {DType: dt[1], Shape: tc.bs}}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got := tensor.New(tensor.Float32, metas[0].Shape)
			if err := Run(&trace.Node{Op: mixed}, []*tensor.Tensor{a, b}, []*tensor.Tensor{got}, nil); err != nil {
				t.Fatal(err)
			}
			if dt[0] == tensor.BFloat16 && dt[1] == tensor.BFloat16 && Caps().NativeBF16 {
				// The native bf16 kernel rounds its own way (twice per pair
				// of k, denormals flushed): within float32 accumulation's
				// error of the widened product, 2k·2^-24·Σ|a||b|.
				abs := func(x *tensor.Tensor) *tensor.Tensor {
					y := tensor.New(tensor.Float32, x.Shape)
					for i, v := range x.F32() {
						y.F32()[i] = float32(math.Abs(float64(v)))
					}
					return y
				}
				scale := tensor.New(tensor.Float32, metas[0].Shape)
				if err := Run(&trace.Node{Op: o}, []*tensor.Tensor{abs(af), abs(bf)}, []*tensor.Tensor{scale}, nil); err != nil {
					t.Fatal(err)
				}
				k := tc.as[len(tc.as)-1]
				if tc.transA {
					k = tc.as[len(tc.as)-2]
				}
				for i, v := range want.F32() {
					if d := math.Abs(float64(got.F32()[i] - v)); d > float64(2*k)*0x1p-24*float64(scale.F32()[i]) {
						t.Fatalf("%s: element %d: %v, widened %v (scale %v)", name, i, got.F32()[i], v, scale.F32()[i])
					}
				}
				continue
			}
			for i, v := range want.F32() {
				if math.Float32bits(got.F32()[i]) != math.Float32bits(v) {
					t.Fatalf("%s: element %d: %v, want %v", name, i, got.F32()[i], v)
				}
			}
		}
	}
}
