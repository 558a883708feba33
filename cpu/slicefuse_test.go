package cpu

import (
	"math"
	"testing"

	"github.com/headroom-ml/headroom/internal/cputime"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// prepared records op on inputs of ins' metas and returns its outputs and
// a run of its kernel on pool into them (benchmarks: no allocation).
func prepared(t testing.TB, pool *parallel.Pool, op trace.Op, ins ...*tensor.Tensor) ([]*tensor.Tensor, func()) {
	t.Helper()
	g := trace.New()
	var args []*trace.Tensor
	for i, x := range ins {
		args = append(args, g.Input(string(rune('a'+i)), x.DType, x.Shape))
	}
	var outs []*trace.Tensor
	if err := trace.Capture(func() { outs = g.Apply(op, args...) }); err != nil {
		t.Fatal(err)
	}
	res := make([]*tensor.Tensor, len(outs))
	for i, o := range outs {
		res[i] = tensor.New(o.DType(), o.Shape())
	}
	return res, func() {
		if err := runOn(pool, outs[0].Node, ins, res, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// runNode records op on inputs of ins' metas and runs its kernel on pool.
func runNode(t testing.TB, pool *parallel.Pool, op trace.Op, ins ...*tensor.Tensor) []*tensor.Tensor {
	t.Helper()
	g := trace.New()
	var args []*trace.Tensor
	for i, x := range ins {
		args = append(args, g.Input(string(rune('a'+i)), x.DType, x.Shape))
	}
	var outs []*trace.Tensor
	if err := trace.Capture(func() { outs = g.Apply(op, args...) }); err != nil {
		t.Fatal(err)
	}
	res := make([]*tensor.Tensor, len(outs))
	for i, o := range outs {
		res[i] = tensor.New(o.DType(), o.Shape())
	}
	if err := runOn(pool, outs[0].Node, ins, res, nil); err != nil {
		t.Fatal(err)
	}
	return res
}

// filled is a float32 tensor of shape s with varied values, NaNs with
// distinct payloads at some places (an add keeps its first operand's).
func filled(s tensor.Shape, seed uint32) *tensor.Tensor {
	v := make([]float32, s.NumElements())
	for i := range v {
		x := uint32(i)*2654435761 + seed*40503
		v[i] = float32(int32(x>>8)%2000)/37 - 27
		if x%97 == 0 {
			v[i] = math.Float32frombits(0x7fc00000 | seed<<4 | uint32(i)&15)
		}
	}
	return tensor.FromFloat32(s, v)
}

func sameBits(t *testing.T, what string, got, want *tensor.Tensor) {
	t.Helper()
	if got.DType != want.DType || !got.Shape.Equal(want.Shape) {
		t.Fatalf("%s: %v%v, want %v%v", what, got.DType, got.Shape, want.DType, want.Shape)
	}
	for i := range want.Data {
		if got.Data[i] != want.Data[i] {
			t.Fatalf("%s: byte %d is %#x, want %#x", what, i, got.Data[i], want.Data[i])
		}
	}
}

// prim.SplitAdd is the split it stands for followed by its adds, in their
// operand order, bit for bit (NaN payloads included), on any pool.
func TestSplitAddKernel(t *testing.T) {
	for _, c := range []struct {
		shape tensor.Shape
		axis  int
		sizes []int
		acc   []prim.AccOrder
		dt    tensor.DType
	}{
		{tensor.Shape{4, 24, 9, 9}, 1, []int{8, 4, 4, 4, 4}, []prim.AccOrder{prim.AccBefore, prim.AccAfter, prim.AccBefore, prim.AccNone, prim.AccNone}, tensor.Float32},
		{tensor.Shape{1, 12, 5, 3}, 1, []int{8, 4}, []prim.AccOrder{prim.AccAfter, prim.AccBefore}, tensor.Float32},
		{tensor.Shape{3, 70001}, 1, []int{1, 70000}, []prim.AccOrder{prim.AccNone, prim.AccBefore}, tensor.Float32},
		{tensor.Shape{6, 5}, 0, []int{2, 4}, []prim.AccOrder{prim.AccBefore, prim.AccAfter}, tensor.Float32},
		{tensor.Shape{2, 6, 5}, 2, []int{3, 2}, []prim.AccOrder{prim.AccAfter, prim.AccNone}, tensor.Float64},
	} {
		x := filled(c.shape, 1)
		if c.dt == tensor.Float64 {
			x = x.Convert(tensor.Float64)
		}
		for _, threads := range []int{1, 2, 3} {
			pool := parallel.NewPool(threads)
			pieces := runNode(t, pool, &prim.SplitOp{Axis: c.axis, Sizes: c.sizes}, x)
			ins := []*tensor.Tensor{x}
			var want []*tensor.Tensor
			for i, p := range pieces {
				if c.acc[i] == prim.AccNone {
					want = append(want, p)
					continue
				}
				a := filled(p.Shape, uint32(i+2))
				if c.dt == tensor.Float64 {
					a = a.Convert(tensor.Float64)
				} else {
					// NaNs on both sides: the sum keeps the first one's payload.
					for j, v := range p.F32() {
						if v != v {
							a.F32()[j] = math.Float32frombits(0x7fc00abc)
						}
					}
				}
				ins = append(ins, a)
				l, r := a, p
				if c.acc[i] == prim.AccAfter {
					l, r = p, a
				}
				want = append(want, runNode(t, pool, &prim.Binary{Kind: prim.AddKind}, l, r)[0])
			}
			got := runNode(t, pool, &prim.SplitAdd{Axis: c.axis, Sizes: c.sizes, Acc: c.acc}, ins...)
			for i := range want {
				sameBits(t, "split+add "+c.shape.String()+" piece "+string(rune('0'+i)), got[i], want[i])
			}
			pool.Close()
		}
	}
}

// prim.CatWiden's outputs are the 16-bit concatenation and its cast to
// float32, bit for bit.
func TestCatWidenKernel(t *testing.T) {
	for _, c := range []struct {
		shapes []tensor.Shape
		axis   int
		dt     tensor.DType
	}{
		{[]tensor.Shape{{4, 8, 9, 9}, {4, 4, 9, 9}, {4, 4, 9, 9}}, 1, tensor.BFloat16},
		{[]tensor.Shape{{2, 3, 5}, {2, 1, 5}}, 1, tensor.Float16},
		{[]tensor.Shape{{3, 70001}, {1, 70001}}, 0, tensor.BFloat16},
		{[]tensor.Shape{{2, 3, 5}, {2, 3, 2}}, 2, tensor.BFloat16},
	} {
		var ins []*tensor.Tensor
		for i, s := range c.shapes {
			ins = append(ins, filled(s, uint32(i+1)).Convert(c.dt))
		}
		for _, threads := range []int{1, 2, 3} {
			pool := parallel.NewPool(threads)
			cat := runNode(t, pool, &prim.CatOp{Axis: c.axis}, ins...)[0]
			wide := runNode(t, pool, &prim.Cast{To: tensor.Float32}, cat)[0]
			got := runNode(t, pool, &prim.CatWiden{Axis: c.axis}, ins...)
			sameBits(t, "cat+to_float32 16-bit", got[0], cat)
			sameBits(t, "cat+to_float32 float32", got[1], wide)
			pool.Close()
		}
	}
}

// denseBlock is one RRDB dense block of rrdbnet's bench (batch 4, 32x32,
// nf 64, gc 32): the concatenations conv2..conv5 read.
var denseBlock = []int{64, 32, 32, 32, 32}

// BenchmarkDenseCat compares a dense block's forward concatenations under
// bf16-mixed: widened pieces concatenated in float32 and narrowed again
// (before), and prim.CatWiden of the bfloat16 pieces (after). One thread;
// the CPU time per block is reported as cpu-ns/op.
func BenchmarkDenseCat(b *testing.B) {
	pool := parallel.NewPool(1)
	defer pool.Close()
	var lows, wides []*tensor.Tensor
	for i, c := range denseBlock {
		w := filled(tensor.Shape{4, c, 32, 32}, uint32(i))
		lows = append(lows, w.Convert(tensor.BFloat16))
		wides = append(wides, w.Convert(tensor.BFloat16).Convert(tensor.Float32))
	}
	var before, after []func()
	for k := 2; k <= len(denseBlock); k++ {
		_, w := prepared(b, pool, &prim.Cast{To: tensor.Float32}, lows[k-1])
		cat, c := prepared(b, pool, &prim.CatOp{Axis: 1}, wides[:k]...)
		_, n := prepared(b, pool, &prim.Cast{To: tensor.BFloat16}, cat[0])
		_, cw := prepared(b, pool, &prim.CatWiden{Axis: 1}, lows[:k]...)
		before = append(before, w, c, n)
		after = append(after, cw)
	}
	b.Run("before", func(b *testing.B) { benchCPU(b, before) })
	b.Run("after", func(b *testing.B) { benchCPU(b, after) })
}

// BenchmarkDenseSplit compares a dense block's backward gradient cuts:
// split_with_sizes and the adds into the inputs' gradients (before), and
// prim.SplitAdd (after).
func BenchmarkDenseSplit(b *testing.B) {
	pool := parallel.NewPool(1)
	defer pool.Close()
	type cut struct {
		g    *tensor.Tensor
		accs []*tensor.Tensor
		op   *prim.SplitAdd
	}
	var cuts []cut
	for k := len(denseBlock); k >= 2; k-- {
		sizes := denseBlock[:k]
		c := 0
		for _, s := range sizes {
			c += s
		}
		ct := cut{g: filled(tensor.Shape{4, c, 32, 32}, uint32(k)), op: &prim.SplitAdd{Axis: 1, Sizes: sizes, Acc: make([]prim.AccOrder, k)}}
		for i, s := range sizes[:k-1] {
			ct.op.Acc[i] = prim.AccBefore
			ct.accs = append(ct.accs, filled(tensor.Shape{4, s, 32, 32}, uint32(i)))
		}
		cuts = append(cuts, ct)
	}
	var before, after []func()
	for _, c := range cuts {
		pieces, sp := prepared(b, pool, &prim.SplitOp{Axis: 1, Sizes: c.op.Sizes}, c.g)
		before = append(before, sp)
		for i, a := range c.accs {
			_, add := prepared(b, pool, &prim.Binary{Kind: prim.AddKind}, a, pieces[i])
			before = append(before, add)
		}
		_, sa := prepared(b, pool, c.op, append([]*tensor.Tensor{c.g}, c.accs...)...)
		after = append(after, sa)
	}
	b.Run("before", func(b *testing.B) { benchCPU(b, before) })
	b.Run("after", func(b *testing.B) { benchCPU(b, after) })
}

func benchCPU(b *testing.B, runs []func()) {
	f := func() {
		for _, r := range runs {
			r()
		}
	}
	f()
	b.ResetTimer()
	t0 := cputime.Process()
	for range b.N {
		f()
	}
	b.ReportMetric(float64(cputime.Process()-t0)/float64(b.N), "cpu-ns/op")
}
