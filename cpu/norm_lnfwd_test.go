package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// A layer norm's output is, bit for bit, the scalar loop's ((x*rstd -
// mean*rstd)*w + b, each operation rounded to float32) whatever of it runs
// vectorized, and a fused program narrowing it to bfloat16 (bf16-mixed
// gpt's layer_norm+to_bfloat16) gives the unfused cast's bits: widths
// with and without a vector tail, row counts that do not split evenly
// among threads, 1 to 3 threads.
func TestLayerNormForwardEpilogue(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, sh := range [][2]int{{2048, 384}, {37, 13}, {53, 40}, {7, 5000}, {300, 1}} {
		R, M := sh[0], sh[1]
		mk := func(n int, scale float64) *tensor.Tensor {
			x := tensor.New(tensor.Float32, tensor.Shape{n})
			for i := range x.F32() {
				x.F32()[i] = float32(rng.NormFloat64()*scale + 0.3)
			}
			return x
		}
		x, w, b := mk(R*M, 2), mk(M, 1), mk(M, 1)
		x.Shape = tensor.Shape{R, M}
		ln := &prim.LayerNormOp{Dims: 1, Eps: 1e-5, HasWeight: true, HasBias: true}
		// The scalar reference.
		want := make([]float32, R*M)
		wm, wr := make([]float32, R), make([]float32, R)
		xs := x.F32()
		for r := range R {
			row := xs[r*M : (r+1)*M]
			wm[r] = float32(sum64(row) / float64(M))
			wr[r] = float32(1 / math.Sqrt(sumSqDev64(row, sum64(row)/float64(M))/float64(M)+1e-5))
			rs, shf := wr[r], -wm[r]*wr[r]
			for j, v := range row {
				want[r*M+j] = float32(float32(v*rs)+shf)*w.F32()[j] + b.F32()[j]
			}
		}
		want16 := make([]uint16, R*M)
		blas.NarrowBF16(want16, want)
		in := []*tensor.Tensor{x, w, b}
		node := func(op trace.Op) *trace.Node {
			nd := &trace.Node{Kind: trace.KindOp, Op: op}
			for _, t := range in {
				nd.Inputs = append(nd.Inputs, &trace.Tensor{Meta: trace.Meta{DType: t.DType, Shape: t.Shape}})
			}
			return nd
		}
		flat := tensor.Shape{R * M}
		fused := node(&prim.Fused{Producer: ln, NProd: 3, NProdOut: 3, Elems: R * M,
			Prog: []prim.FusedInstr{{Op: &prim.Cast{To: tensor.BFloat16}, Args: []int{0}}},
			Outs: []prim.FusedOut{{Value: 3, Shape: flat, Narrow: true}, {Value: 1, Shape: tensor.Shape{R, 1}}, {Value: 2, Shape: tensor.Shape{R, 1}}}})
		same := func(t *testing.T, what string, got, want []float32) {
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
				}
			}
		}
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%dx%d/t%d", R, M, threads), func(t *testing.T) {
				pool := parallel.NewPool(threads)
				defer pool.Close()
				y, mean, rstd := tensor.New(tensor.Float32, x.Shape), tensor.New(tensor.Float32, tensor.Shape{R, 1}), tensor.New(tensor.Float32, tensor.Shape{R, 1})
				if err := runOn(pool, node(ln), in, []*tensor.Tensor{y, mean, rstd}, nil); err != nil {
					t.Fatal(err)
				}
				same(t, "y", y.F32(), want)
				same(t, "mean", mean.F32(), wm)
				same(t, "rstd", rstd.F32(), wr)
				y16 := tensor.New(tensor.BFloat16, flat)
				for i := range y16.Data {
					y16.Data[i] = 0xa5
				}
				mean, rstd = tensor.New(tensor.Float32, tensor.Shape{R, 1}), tensor.New(tensor.Float32, tensor.Shape{R, 1})
				if err := runOn(pool, fused, in, []*tensor.Tensor{y16, mean, rstd}, make([]byte, Workspace(fused))); err != nil {
					t.Fatal(err)
				}
				for i, v := range y16.U16() {
					if v != want16[i] {
						t.Fatalf("bf16 y[%d] = %#x, want %#x", i, v, want16[i])
					}
				}
				same(t, "fused mean", mean.F32(), wm)
				same(t, "fused rstd", rstd.F32(), wr)
			})
		}
	}
}

// BenchmarkLayerNormBF16 times bf16-mixed gpt's layer norm with its
// narrowing to bfloat16 ([2048, 384]) by the process's CPU time.
func BenchmarkLayerNormBF16(b *testing.B) {
	rng := rand.New(rand.NewPCG(13, 14))
	const R, M = 2048, 384
	mk := func(s ...int) *tensor.Tensor {
		x := tensor.New(tensor.Float32, tensor.Shape(s))
		for i := range x.F32() {
			x.F32()[i] = float32(rng.NormFloat64())
		}
		return x
	}
	in := []*tensor.Tensor{mk(R, M), mk(M), mk(M)}
	nd := &trace.Node{Kind: trace.KindOp, Op: &prim.Fused{Producer: &prim.LayerNormOp{Dims: 1, Eps: 1e-5, HasWeight: true, HasBias: true},
		NProd: 3, NProdOut: 3, Elems: R * M,
		Prog: []prim.FusedInstr{{Op: &prim.Cast{To: tensor.BFloat16}, Args: []int{0}}},
		Outs: []prim.FusedOut{{Value: 3, Shape: tensor.Shape{R * M}, Narrow: true}, {Value: 1, Shape: tensor.Shape{R, 1}}, {Value: 2, Shape: tensor.Shape{R, 1}}}}}
	for _, t := range in {
		nd.Inputs = append(nd.Inputs, &trace.Tensor{Meta: trace.Meta{DType: t.DType, Shape: t.Shape}})
	}
	out := []*tensor.Tensor{tensor.New(tensor.BFloat16, tensor.Shape{R * M}), mk(R, 1), mk(R, 1)}
	ws := make([]byte, Workspace(nd))
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("t%d", threads), func(b *testing.B) {
			pool := parallel.NewPool(threads)
			defer pool.Close()
			c0 := cpuTime()
			for b.Loop() {
				if err := runOn(pool, nd, in, out, ws); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-c0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
		})
	}
}
