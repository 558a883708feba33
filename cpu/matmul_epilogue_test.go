package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// A product's fused program run on C's row blocks as the bf16 product
// finishes them (matmulEpilogue) gives, bit for bit, the program run in a
// pass after the product: gpt's linear layers (bias, rounding to
// bfloat16, a residual), the producer's output borrowed by the program or
// an output of its own, on 1 to 3 threads, batched and not.
func TestMatMulEpilogueBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	bf16 := func(s ...int) *tensor.Tensor {
		x := tensor.New(tensor.BFloat16, tensor.Shape(s))
		for i := range x.U16() {
			x.U16()[i] = uint16(math.Float32bits(float32(rng.NormFloat64())) >> 16)
		}
		return x
	}
	f32 := func(s ...int) *tensor.Tensor {
		x := tensor.New(tensor.Float32, tensor.Shape(s))
		for i := range x.F32() {
			x.F32()[i] = float32(rng.NormFloat64())
		}
		return x
	}
	meta := func(x *tensor.Tensor) *trace.Tensor {
		return &trace.Tensor{Meta: trace.Meta{DType: x.DType, Shape: x.Shape}}
	}
	for _, tc := range []struct {
		name     string
		a, b     *tensor.Tensor
		tB       bool
		exposeC  bool
		out      tensor.Shape
		bias, rs *tensor.Tensor
	}{
		{"qkv", bf16(300, 384), bf16(1152, 384), true, false, tensor.Shape{300, 1152}, f32(1152), f32(300, 1152)},
		{"dX", bf16(200, 1536), bf16(1536, 384), false, true, tensor.Shape{200, 384}, f32(384), f32(200, 384)},
		{"batched", bf16(3, 50, 64), bf16(3, 64, 40), false, false, tensor.Shape{3, 50, 40}, f32(40), f32(3, 50, 40)},
	} {
		elems := tc.out.NumElements()
		outs := []prim.FusedOut{{Value: 5, Shape: tc.out}}
		if tc.exposeC {
			outs = append(outs, prim.FusedOut{Value: 0, Shape: tc.out})
		}
		op := &prim.Fused{Producer: &prim.MatMul{TransB: tc.tB, Mixed: true}, NProd: 2, NProdOut: 1, Elems: elems,
			Loads: []prim.FusedLoad{{Input: 0, Inner: 1, Mid: tc.bias.Shape.NumElements()}, {Input: 1, Inner: 1, Mid: elems}},
			Prog: []prim.FusedInstr{
				{Op: &prim.Binary{Kind: prim.AddKind}, Args: []int{0, 1}},
				{Op: &prim.Round{To: tensor.BFloat16}, Args: []int{3}},
				{Op: &prim.Binary{Kind: prim.AddKind}, Args: []int{4, 2}},
			},
			Outs: outs}
		in := []*tensor.Tensor{tc.a, tc.b, tc.bias, tc.rs}
		n := &trace.Node{Op: op}
		for _, x := range in {
			n.Inputs = append(n.Inputs, meta(x))
		}
		run := func(threads int, hook bool) []*tensor.Tensor {
			if !hook {
				key := reflect.TypeFor[*prim.MatMul]()
				saved := fusedEpilogue[key]
				delete(fusedEpilogue, key)
				defer func() { fusedEpilogue[key] = saved }()
			}
			pool := parallel.NewPool(threads)
			defer pool.Close()
			var out []*tensor.Tensor
			for range outs {
				out = append(out, tensor.New(tensor.Float32, tc.out))
			}
			if err := runOn(pool, n, in, out, make([]byte, Workspace(n))); err != nil {
				t.Fatal(err)
			}
			return out
		}
		want := run(1, false)
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/t%d", tc.name, threads), func(t *testing.T) {
				got := run(threads, true)
				for j := range got {
					g, w := got[j].F32(), want[j].F32()
					for i := range w {
						if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
							t.Fatalf("output %d element %d = %v, want %v", j, i, g[i], w[i])
						}
					}
				}
			})
		}
	}
}

// BenchmarkMatMulEpilogueBF16 times gpt's fused linear layers (bf16
// operands, bias, rounding, residual) with the program on C's row blocks
// (hook) and in a pass after the product, by the process's CPU time.
func BenchmarkMatMulEpilogueBF16(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, s := range []struct {
		name    string
		m, n, k int
	}{{"fc", 2048, 1536, 384}, {"fc2", 2048, 384, 1536}, {"qkv", 2048, 1152, 384}} {
		a, w := tensor.New(tensor.BFloat16, tensor.Shape{s.m, s.k}), tensor.New(tensor.BFloat16, tensor.Shape{s.n, s.k})
		for _, x := range []*tensor.Tensor{a, w} {
			for i := range x.U16() {
				x.U16()[i] = uint16(math.Float32bits(float32(rng.NormFloat64())) >> 16)
			}
		}
		bias, res := tensor.New(tensor.Float32, tensor.Shape{s.n}), tensor.New(tensor.Float32, tensor.Shape{s.m, s.n})
		elems := s.m * s.n
		op := &prim.Fused{Producer: &prim.MatMul{TransB: true, Mixed: true}, NProd: 2, NProdOut: 1, Elems: elems,
			Loads: []prim.FusedLoad{{Input: 0, Inner: 1, Mid: s.n}, {Input: 1, Inner: 1, Mid: elems}},
			Prog: []prim.FusedInstr{
				{Op: &prim.Binary{Kind: prim.AddKind}, Args: []int{0, 1}},
				{Op: &prim.Round{To: tensor.BFloat16}, Args: []int{3}},
				{Op: &prim.Binary{Kind: prim.AddKind}, Args: []int{4, 2}},
			},
			Outs: []prim.FusedOut{{Value: 5, Shape: tensor.Shape{s.m, s.n}}}}
		in := []*tensor.Tensor{a, w, bias, res}
		n := &trace.Node{Op: op}
		for _, x := range in {
			n.Inputs = append(n.Inputs, &trace.Tensor{Meta: trace.Meta{DType: x.DType, Shape: x.Shape}})
		}
		out := []*tensor.Tensor{tensor.New(tensor.Float32, tensor.Shape{s.m, s.n})}
		ws := make([]byte, Workspace(n))
		for _, threads := range []int{1, 2} {
			for _, hook := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/t%d/hook=%v", s.name, threads, hook), func(b *testing.B) {
					if !hook {
						key := reflect.TypeFor[*prim.MatMul]()
						saved := fusedEpilogue[key]
						delete(fusedEpilogue, key)
						defer func() { fusedEpilogue[key] = saved }()
					}
					pool := parallel.NewPool(threads)
					defer pool.Close()
					c0 := cpuTime()
					for b.Loop() {
						if err := runOn(pool, n, in, out, ws); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64((cpuTime()-c0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
				})
			}
		}
	}
}
