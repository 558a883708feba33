package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// A program holding 16-bit values (casts between float32 and bfloat16 or
// float16 as instructions, 16-bit inputs widened as they load, 16-bit
// outputs stored narrowed, the producer's output in the workspace when
// every output is narrow) gives, bit for bit, the unfused ops run one
// after the other on tensors of their own: gpt's c_fc under bf16-mixed
// (product, bias, rounding kept for the backward, gelu, rounding for the
// next product) and gelu's backward reading the saved bfloat16 value, at
// odd sizes, on 1 to 3 threads.
func TestFusedCastsMatchUnfused(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(dt tensor.DType, s ...int) *tensor.Tensor {
		x := tensor.New(tensor.Float32, tensor.Shape(s))
		for i := range x.F32() {
			x.F32()[i] = float32(rng.NormFloat64() * 3)
		}
		return x.Convert(dt)
	}
	bf, f32, f16 := tensor.BFloat16, tensor.Float32, tensor.Float16
	add := &prim.Binary{Kind: prim.AddKind}
	mul := &prim.Binary{Kind: prim.MulKind}
	gelu := &prim.Unary{Kind: prim.GELUKind}
	geluBack := &prim.UnaryBackward{Kind: prim.GELUKind}
	cast := func(d tensor.DType) *prim.Cast { return &prim.Cast{To: d} }
	mm := &prim.MatMul{TransB: true, Mixed: true}
	const m, n, k = 37, 53, 29
	for _, tc := range []struct {
		name string
		prod trace.Op
		nIn  int // producer inputs
		in   []*tensor.Tensor
		op   *prim.Fused
	}{
		{"fc narrow outputs", mm, 2, []*tensor.Tensor{fill(bf, m, k), fill(bf, n, k), fill(f32, n)},
			&prim.Fused{Loads: []prim.FusedLoad{{Input: 0, Inner: 1, Mid: n}},
				Prog: []prim.FusedInstr{{Op: add, Args: []int{0, 1}}, {Op: cast(bf), Args: []int{2}}, {Op: cast(f32), Args: []int{3}},
					{Op: gelu, Args: []int{4}}, {Op: cast(bf), Args: []int{5}}},
				Outs: []prim.FusedOut{{Value: 3, Narrow: true}, {Value: 6, Narrow: true}}}},
		{"fc with a float32 output", mm, 2, []*tensor.Tensor{fill(bf, m, k), fill(bf, n, k), fill(f32, n)},
			&prim.Fused{Loads: []prim.FusedLoad{{Input: 0, Inner: 1, Mid: n}},
				Prog: []prim.FusedInstr{{Op: add, Args: []int{0, 1}}, {Op: cast(bf), Args: []int{2}}, {Op: cast(f32), Args: []int{3}},
					{Op: gelu, Args: []int{4}}, {Op: cast(bf), Args: []int{5}}},
				Outs: []prim.FusedOut{{Value: 5}, {Value: 3, Narrow: true}, {Value: 6, Narrow: true}}}},
		{"gelu backward", mm, 2, []*tensor.Tensor{fill(bf, m, k), fill(bf, n, k), fill(bf, m, n)},
			&prim.Fused{Loads: []prim.FusedLoad{{Input: 0, Inner: 1, Mid: m * n}},
				Prog: []prim.FusedInstr{{Op: cast(f32), Args: []int{1}}, {Op: geluBack, Args: []int{0, 2}}, {Op: cast(bf), Args: []int{3}}},
				Outs: []prim.FusedOut{{Value: 3}, {Value: 4, Narrow: true}}}},
		{"no producer, narrow only", nil, 0, []*tensor.Tensor{fill(bf, 1001)},
			&prim.Fused{Loads: []prim.FusedLoad{{Input: 0, Inner: 1, Mid: 1001}},
				Prog: []prim.FusedInstr{{Op: cast(f32), Args: []int{0}}, {Op: gelu, Args: []int{1}}, {Op: cast(bf), Args: []int{2}}},
				Outs: []prim.FusedOut{{Value: 3, Narrow: true}}}},
		{"float16, broadcast", nil, 0, []*tensor.Tensor{fill(f16, 5, 7, 3), fill(f16, 7, 1)},
			&prim.Fused{Loads: []prim.FusedLoad{{Input: 0, Inner: 1, Mid: 105}, {Input: 1, Inner: 3, Mid: 7}},
				Prog: []prim.FusedInstr{{Op: cast(f32), Args: []int{0}}, {Op: cast(f32), Args: []int{1}}, {Op: mul, Args: []int{2, 3}},
					{Op: cast(f16), Args: []int{4}}},
				Outs: []prim.FusedOut{{Value: 4}, {Value: 5, Narrow: true}}}},
	} {
		o := tc.op
		elems := 0
		var vals []*tensor.Tensor // the unfused values, by number
		pool := parallel.NewPool(1)
		runNode := func(op trace.Op, in []*tensor.Tensor) *tensor.Tensor {
			nd := &trace.Node{Kind: trace.KindOp, Op: op}
			var metas []trace.Meta
			for _, x := range in {
				nd.Inputs = append(nd.Inputs, &trace.Tensor{Meta: trace.Meta{DType: x.DType, Shape: x.Shape}})
				metas = append(metas, trace.Meta{DType: x.DType, Shape: x.Shape})
			}
			om, err := op.Infer(metas)
			if err != nil {
				t.Fatalf("%s: %s: %v", tc.name, op.Name(), err)
			}
			y := tensor.New(om[0].DType, om[0].Shape)
			if err := runOn(pool, nd, in, []*tensor.Tensor{y}, make([]byte, Workspace(nd))); err != nil {
				t.Fatal(err)
			}
			return y
		}
		if tc.prod != nil {
			o.Producer, o.NProd, o.NProdOut = tc.prod, tc.nIn, 1
			vals = append(vals, runNode(tc.prod, tc.in[:tc.nIn]))
			elems = vals[0].Shape.NumElements()
		}
		extra := tc.in[tc.nIn:]
		for _, l := range o.Loads {
			elems = max(elems, l.Mid*l.Inner)
		}
		o.Elems = elems
		flat := tensor.Shape{elems}
		for _, l := range o.Loads {
			x := extra[l.Input]
			v := tensor.New(x.DType, flat)
			w := x.DType.Size()
			for i := range elems {
				j := (i / l.Inner) % l.Mid
				copy(v.Data[i*w:(i+1)*w], x.Data[j*w:(j+1)*w])
			}
			vals = append(vals, v)
		}
		for _, ins := range o.Prog {
			var args []*tensor.Tensor
			for _, a := range ins.Args {
				x := vals[a]
				args = append(args, &tensor.Tensor{DType: x.DType, Shape: flat, Data: x.Data})
			}
			vals = append(vals, runNode(ins.Op, args))
		}
		for j := range o.Outs {
			o.Outs[j].Shape = flat
		}
		pool.Close()
		nd := &trace.Node{Kind: trace.KindOp, Op: o}
		var metas []trace.Meta
		for _, x := range tc.in {
			nd.Inputs = append(nd.Inputs, &trace.Tensor{Meta: trace.Meta{DType: x.DType, Shape: x.Shape}})
			metas = append(metas, trace.Meta{DType: x.DType, Shape: x.Shape})
		}
		om, err := o.Infer(metas)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if o.Producer != nil && o.Scratch() != (o.MainOut() < 0) {
			t.Fatalf("%s: Scratch %v with MainOut %d", tc.name, o.Scratch(), o.MainOut())
		}
		check := func(t *testing.T, out []*tensor.Tensor) {
			for j, f := range o.Outs {
				want := vals[f.Value]
				if out[j].DType != want.DType || string(out[j].Data) != string(want.Data) {
					g, w := out[j].Float64s(), want.Float64s()
					for i := range w {
						if math.Float64bits(g[i]) != math.Float64bits(w[i]) {
							t.Fatalf("output %d (%v) element %d = %v, want %v (%v)", j, out[j].DType, i, g[i], w[i], want.DType)
						}
					}
					t.Fatalf("output %d is %v, want %v", j, out[j].DType, want.DType)
				}
			}
		}
		newOuts := func() []*tensor.Tensor {
			var out []*tensor.Tensor
			for _, m := range om {
				y := tensor.New(m.DType, m.Shape)
				for i := range y.Data {
					y.Data[i] = 0xa5 // no output may be left unwritten
				}
				out = append(out, y)
			}
			return out
		}
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/t%d", tc.name, threads), func(t *testing.T) {
				p := parallel.NewPool(threads)
				defer p.Close()
				out := newOuts()
				if err := runOn(p, nd, tc.in, out, make([]byte, Workspace(nd))); err != nil {
					t.Fatal(err)
				}
				check(t, out)
				// The diagnosis path computes the same.
				out = newOuts()
				culprit, _, _, _, err := runFusedChecked(p, nd, tc.in, out, make([]byte, Workspace(nd)), func(*tensor.Tensor) (int, float64, bool) { return 0, 0, false })
				if err != nil || culprit != nil {
					t.Fatalf("checked run: %v, culprit %v", err, culprit)
				}
				check(t, out)
			})
		}
	}
}

// BenchmarkFusedGeluCasts times bf16-mixed gpt's c_fc ([2048, 384] ×
// [1536, 384]ᵀ) with bias, roundings and gelu in the product's epilogue
// (fused) against the product with its bias followed by the casts and gelu
// as kernels of their own (unfused), by the process's CPU time.
func BenchmarkFusedGeluCasts(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	const m, n, k = 2048, 1536, 384
	mk := func(dt tensor.DType, s ...int) *tensor.Tensor {
		x := tensor.New(tensor.Float32, tensor.Shape(s))
		for i := range x.F32() {
			x.F32()[i] = float32(rng.NormFloat64())
		}
		return x.Convert(dt)
	}
	a, w, bias := mk(tensor.BFloat16, m, k), mk(tensor.BFloat16, n, k), mk(tensor.Float32, n)
	node := func(op trace.Op, in ...*tensor.Tensor) *trace.Node {
		nd := &trace.Node{Kind: trace.KindOp, Op: op}
		for _, x := range in {
			nd.Inputs = append(nd.Inputs, &trace.Tensor{Meta: trace.Meta{DType: x.DType, Shape: x.Shape}})
		}
		return nd
	}
	mm := &prim.MatMul{TransB: true, Mixed: true}
	flat := tensor.Shape{m * n}
	add := prim.FusedInstr{Op: &prim.Binary{Kind: prim.AddKind}, Args: []int{0, 1}}
	fused := node(&prim.Fused{Producer: mm, NProd: 2, NProdOut: 1, Elems: m * n,
		Loads: []prim.FusedLoad{{Input: 0, Inner: 1, Mid: n}},
		Prog: []prim.FusedInstr{add, {Op: &prim.Cast{To: tensor.BFloat16}, Args: []int{2}}, {Op: &prim.Cast{To: tensor.Float32}, Args: []int{3}},
			{Op: &prim.Unary{Kind: prim.GELUKind}, Args: []int{4}}, {Op: &prim.Cast{To: tensor.BFloat16}, Args: []int{5}}},
		Outs: []prim.FusedOut{{Value: 3, Shape: flat, Narrow: true}, {Value: 6, Shape: flat, Narrow: true}}}, a, w, bias)
	linear := node(&prim.Fused{Producer: mm, NProd: 2, NProdOut: 1, Elems: m * n,
		Loads: []prim.FusedLoad{{Input: 0, Inner: 1, Mid: n}},
		Prog:  []prim.FusedInstr{add}, Outs: []prim.FusedOut{{Value: 2, Shape: flat}}}, a, w, bias)
	c := tensor.New(tensor.Float32, flat)
	h, hw, g, g16 := tensor.New(tensor.BFloat16, flat), tensor.New(tensor.Float32, flat), tensor.New(tensor.Float32, flat), tensor.New(tensor.BFloat16, flat)
	steps := []fusedStep{
		{linear, []*tensor.Tensor{a, w, bias}, []*tensor.Tensor{c}},
		{node(&prim.Cast{To: tensor.BFloat16}, c), []*tensor.Tensor{c}, []*tensor.Tensor{h}},
		{node(&prim.Cast{To: tensor.Float32}, h), []*tensor.Tensor{h}, []*tensor.Tensor{hw}},
		{node(&prim.Unary{Kind: prim.GELUKind}, hw), []*tensor.Tensor{hw}, []*tensor.Tensor{g}},
		{node(&prim.Cast{To: tensor.BFloat16}, g), []*tensor.Tensor{g}, []*tensor.Tensor{g16}},
	}
	benchFusedSteps(b, fused, []*tensor.Tensor{a, w, bias}, []*tensor.Tensor{tensor.New(tensor.BFloat16, flat), tensor.New(tensor.BFloat16, flat)}, steps)
}

// BenchmarkFusedGeluBackwardCasts times bf16-mixed gpt's c_proj input
// gradient ([2048, 384] × [384, 1536]) with gelu's backward reading the
// saved bfloat16 pre-activation in the product's epilogue (fused) against
// the product, the widening of the saved value and gelu's backward as
// kernels of their own (unfused), by the process's CPU time.
func BenchmarkFusedGeluBackwardCasts(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	const m, n, k = 2048, 1536, 384
	mk := func(dt tensor.DType, s ...int) *tensor.Tensor {
		x := tensor.New(tensor.Float32, tensor.Shape(s))
		for i := range x.F32() {
			x.F32()[i] = float32(rng.NormFloat64())
		}
		return x.Convert(dt)
	}
	dy, w, h := mk(tensor.BFloat16, m, k), mk(tensor.BFloat16, k, n), mk(tensor.BFloat16, m, n)
	node := func(op trace.Op, in ...*tensor.Tensor) *trace.Node {
		nd := &trace.Node{Kind: trace.KindOp, Op: op}
		for _, x := range in {
			nd.Inputs = append(nd.Inputs, &trace.Tensor{Meta: trace.Meta{DType: x.DType, Shape: x.Shape}})
		}
		return nd
	}
	mm := &prim.MatMul{Mixed: true}
	flat := tensor.Shape{m * n}
	fused := node(&prim.Fused{Producer: mm, NProd: 2, NProdOut: 1, Elems: m * n,
		Loads: []prim.FusedLoad{{Input: 0, Inner: 1, Mid: m * n}},
		Prog: []prim.FusedInstr{{Op: &prim.Cast{To: tensor.Float32}, Args: []int{1}},
			{Op: &prim.UnaryBackward{Kind: prim.GELUKind}, Args: []int{0, 2}}},
		Outs: []prim.FusedOut{{Value: 3, Shape: flat}}}, dy, w, h)
	c, hw, dx := tensor.New(tensor.Float32, tensor.Shape{m, n}), tensor.New(tensor.Float32, tensor.Shape{m, n}), tensor.New(tensor.Float32, tensor.Shape{m, n})
	steps := []fusedStep{
		{node(mm, dy, w), []*tensor.Tensor{dy, w}, []*tensor.Tensor{c}},
		{node(&prim.Cast{To: tensor.Float32}, h), []*tensor.Tensor{h}, []*tensor.Tensor{hw}},
		{node(&prim.UnaryBackward{Kind: prim.GELUKind}, c, hw), []*tensor.Tensor{c, hw}, []*tensor.Tensor{dx}},
	}
	benchFusedSteps(b, fused, []*tensor.Tensor{dy, w, h}, []*tensor.Tensor{tensor.New(tensor.Float32, flat)}, steps)
}

// fusedStep is one unfused kernel of a fused node's program.
type fusedStep struct {
	n       *trace.Node
	in, out []*tensor.Tensor
}

// benchFusedSteps times fused node on fin into fout against the same work
// as the unfused kernels steps, on 1 and 2 threads, by the process's CPU
// time.
func benchFusedSteps(b *testing.B, fused *trace.Node, fin, fout []*tensor.Tensor, steps []fusedStep) {
	fws := make([]byte, Workspace(fused))
	for _, threads := range []int{1, 2} {
		for _, fuse := range []bool{false, true} {
			b.Run(fmt.Sprintf("t%d/fused=%v", threads, fuse), func(b *testing.B) {
				pool := parallel.NewPool(threads)
				defer pool.Close()
				c0 := cpuTime()
				for b.Loop() {
					if fuse {
						if err := runOn(pool, fused, fin, fout, fws); err != nil {
							b.Fatal(err)
						}
						continue
					}
					for _, s := range steps {
						if err := runOn(pool, s.n, s.in, s.out, make([]byte, Workspace(s.n))); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64((cpuTime()-c0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
			})
		}
	}
}
