package op_test

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/internal/check"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// normConst embeds a fixed float64 tensor (running statistics, indices) in
// the graph of xs, so finite differences do not perturb it.
func normConst(xs []*trace.Tensor, t *tensor.Tensor) *trace.Tensor { return xs[0].Graph().Const(t) }

func normRunningStats(c int) (mean, variance *tensor.Tensor) {
	r := rand.New(rand.NewSource(3))
	mean = check.Random(r, tensor.Shape{c}, -0.5, 0.5)
	variance = check.Random(r, tensor.Shape{c}, 0.5, 2)
	return mean, variance
}

func bnTrain(affine bool) check.Func {
	return func(xs []*trace.Tensor) *trace.Tensor {
		if affine {
			return op.BatchNorm(xs[0], xs[1], xs[2], nil, nil, true, 0.1, 1e-5)
		}
		return op.BatchNorm(xs[0], nil, nil, nil, nil, true, 0.1, 1e-5)
	}
}

func bnEval(c int, affine bool) check.Func {
	rm, rv := normRunningStats(c)
	return func(xs []*trace.Tensor) *trace.Tensor {
		var w, b *trace.Tensor
		if affine {
			w, b = xs[1], xs[2]
		}
		dt := xs[0].DType()
		return op.BatchNorm(xs[0], w, b, normConst(xs, rm.Convert(dt)), normConst(xs, rv.Convert(dt)), false, 0.1, 1e-3)
	}
}

func lnCase(ns tensor.Shape, affine bool) check.Func {
	return func(xs []*trace.Tensor) *trace.Tensor {
		if affine {
			return op.LayerNorm(xs[0], ns, xs[1], xs[2], 1e-5)
		}
		return op.LayerNorm(xs[0], ns, nil, nil, 1e-5)
	}
}

func gnCase(groups int, affine bool) check.Func {
	return func(xs []*trace.Tensor) *trace.Tensor {
		if affine {
			return op.GroupNorm(xs[0], groups, xs[1], xs[2], 1e-5)
		}
		return op.GroupNorm(xs[0], groups, nil, nil, 1e-5)
	}
}

func embCase(idx []int64, shape tensor.Shape, pad *int) check.Func {
	return func(xs []*trace.Tensor) *trace.Tensor {
		i := normConst(xs, tensor.FromInt64(shape, idx))
		if pad == nil {
			return op.Embedding(i, xs[0])
		}
		// The padding row is looked up but gets no gradient by definition,
		// so mask its lookups out of the output: then finite differences
		// agree that its gradient is zero, and the other rows are checked.
		rows := xs[0].Dim(0)
		p := (*pad + rows) % rows
		mask := tensor.New(xs[0].DType(), append(shape.Clone(), 1))
		for k, v := range idx {
			if v != int64(p) {
				if mask.DType == tensor.Float32 {
					mask.F32()[k] = 1
				} else {
					mask.F64()[k] = 1
				}
			}
		}
		return op.Mul(op.EmbeddingWithPadding(i, xs[0], *pad), normConst(xs, mask))
	}
}

func TestNormGradients(t *testing.T) {
	pad, negPad := 2, -1
	runGradCases(t, []gradCase{
		{name: "batch_norm_train_nchw", shapes: []tensor.Shape{{3, 2, 2, 3}, {2}, {2}}, f: bnTrain(true)},
		{name: "batch_norm_train_nc", shapes: []tensor.Shape{{5, 3}, {3}, {3}}, f: bnTrain(true)},
		{name: "batch_norm_train_ncl_noaffine", shapes: []tensor.Shape{{4, 3, 2}}, f: bnTrain(false)},
		{name: "batch_norm_train_weight_only", shapes: []tensor.Shape{{3, 2, 4}, {2}}, f: func(xs []*trace.Tensor) *trace.Tensor {
			return op.BatchNorm(xs[0], xs[1], nil, nil, nil, true, 0.1, 1e-5)
		}},
		{name: "batch_norm_train_bias_only", shapes: []tensor.Shape{{3, 2, 4}, {2}}, f: func(xs []*trace.Tensor) *trace.Tensor {
			return op.BatchNorm(xs[0], nil, xs[1], nil, nil, true, 0.1, 1e-5)
		}},
		{name: "batch_norm_eval_nchw", shapes: []tensor.Shape{{2, 3, 2, 2}, {3}, {3}}, f: bnEval(3, true)},
		{name: "batch_norm_eval_nc_noaffine", shapes: []tensor.Shape{{4, 3}}, f: bnEval(3, false)},
		{name: "layer_norm_last1", shapes: []tensor.Shape{{3, 5}, {5}, {5}}, f: lnCase(tensor.Shape{5}, true)},
		{name: "layer_norm_last2", shapes: []tensor.Shape{{2, 3, 4}, {3, 4}, {3, 4}}, f: lnCase(tensor.Shape{3, 4}, true)},
		{name: "layer_norm_noaffine", shapes: []tensor.Shape{{2, 3, 4}}, f: lnCase(tensor.Shape{4}, false)},
		{name: "group_norm_g1", shapes: []tensor.Shape{{2, 4, 3}, {4}, {4}}, f: gnCase(1, true)},
		{name: "group_norm_g2", shapes: []tensor.Shape{{2, 4, 2, 2}, {4}, {4}}, f: gnCase(2, true)},
		{name: "group_norm_g4", shapes: []tensor.Shape{{2, 4, 3}, {4}, {4}}, f: gnCase(4, true)},
		{name: "group_norm_g3_noaffine", shapes: []tensor.Shape{{2, 6, 2}}, f: gnCase(3, false)},
		{name: "embedding", shapes: []tensor.Shape{{5, 3}}, f: embCase([]int64{1, 4, 1, 0, 4, 4}, tensor.Shape{2, 3}, nil)},
		{name: "embedding_padding", shapes: []tensor.Shape{{5, 3}}, f: embCase([]int64{2, 4, 1, 2, 0, 2}, tensor.Shape{3, 2}, &pad)},
		{name: "embedding_padding_negative", shapes: []tensor.Shape{{4, 2}}, f: embCase([]int64{3, 3, 0, 1}, tensor.Shape{4}, &negPad)},
		{name: "dropout", shapes: []tensor.Shape{{3, 7}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Dropout(x, 0.4, true, 11) })},
		{name: "dropout_step", shapes: []tensor.Shape{{5, 3}}, f: func(xs []*trace.Tensor) *trace.Tensor {
			step := normConst(xs, tensor.FromInt64(tensor.Shape{}, []int64{12}))
			return op.DropoutStep(xs[0], 0.5, true, 3, step)
		}},
		{name: "dropout_then_layer_norm", shapes: []tensor.Shape{{4, 6}}, f: un(func(x *trace.Tensor) *trace.Tensor {
			return op.LayerNorm(op.Dropout(x, 0.25, true, 5), tensor.Shape{6}, nil, nil, 1e-5)
		})},
	})
}

// TestEmbeddingPaddingRowGetsNoGradient checks padding_idx's row is zero in
// the gradient even though it is looked up, and repeated indices add.
func TestEmbeddingPaddingRowGetsNoGradient(t *testing.T) {
	w := check.Random(rand.New(rand.NewSource(1)), tensor.Shape{4, 2}, -1, 1)
	seed := tensor.New(tensor.Float64, tensor.Shape{5, 2})
	for i := range seed.F64() {
		seed.F64()[i] = 1
	}
	pad := 1
	f := func(xs []*trace.Tensor) *trace.Tensor {
		return op.EmbeddingWithPadding(normConst(xs, tensor.FromInt64(tensor.Shape{5}, []int64{1, 3, 1, 3, 3})), xs[0], pad)
	}
	y, g, err := check.Eval(f, []*tensor.Tensor{w}, seed)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := y.F64()[0], w.F64()[2]; got != want {
		t.Errorf("padding row looked up as %v, want %v (the weight row)", got, want)
	}
	want := []float64{0, 0, 0, 0, 0, 0, 3, 3}
	for i, v := range g[0].F64() {
		if v != want[i] {
			t.Fatalf("weight gradient %v, want %v", g[0].F64(), want)
		}
	}
}

func TestEmbeddingIndexOutOfRange(t *testing.T) {
	w := tensor.New(tensor.Float32, tensor.Shape{5, 3})
	for _, c := range []struct {
		idx  []int64
		want string
	}{
		{[]int64{0, 4, 5, 1}, "index 5 at position [1, 0] is out of range for an embedding table of 5 rows"},
		{[]int64{0, 1, 2, -1}, "index -1 at position [1, 1] is out of range for an embedding table of 5 rows"},
	} {
		idx := tensor.FromInt64(tensor.Shape{2, 2}, c.idx)
		_, _, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor { return op.Embedding(xs[0], xs[1]) }, []*tensor.Tensor{idx, w}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("indices %v: got error %v, want one containing %q", c.idx, err, c.want)
		}
	}
}

func TestNormShapeErrors(t *testing.T) {
	f32 := tensor.Float32
	for _, c := range []struct {
		name string
		f    func(g *trace.Graph)
		want string
	}{
		{"bn_one_value_per_channel", func(g *trace.Graph) {
			op.BatchNorm(g.Input("x", f32, tensor.Shape{1, 3}), nil, nil, nil, nil, true, 0.1, 1e-5)
		}, "expected more than 1 value per channel when training"},
		{"bn_eval_without_stats", func(g *trace.Graph) {
			op.BatchNorm(g.Input("x", f32, tensor.Shape{2, 3}), nil, nil, nil, nil, false, 0.1, 1e-5)
		}, "must be given in evaluation mode"},
		{"bn_train_stats_not_state", func(g *trace.Graph) {
			s := g.Input("s", f32, tensor.Shape{3})
			op.BatchNorm(g.Input("x", f32, tensor.Shape{2, 3}), nil, nil, s, s, true, 0.1, 1e-5)
		}, "must be state tensors"},
		{"bn_weight_shape", func(g *trace.Graph) {
			op.BatchNorm(g.Input("x", f32, tensor.Shape{2, 3, 4}), g.Input("w", f32, tensor.Shape{4}), nil, nil, nil, true, 0.1, 1e-5)
		}, "weight has shape [4], expected [3]"},
		{"bn_1d", func(g *trace.Graph) {
			op.BatchNorm(g.Input("x", f32, tensor.Shape{6}), nil, nil, nil, nil, true, 0.1, 1e-5)
		}, "at least 2 dimensions"},
		{"ln_shape", func(g *trace.Graph) {
			op.LayerNorm(g.Input("x", f32, tensor.Shape{2, 3, 5}), tensor.Shape{3, 4}, nil, nil, 1e-5)
		}, "given normalized_shape=[3, 4], expected input with shape [*, 3, 4], but got input of size [2, 3, 5]"},
		{"ln_weight", func(g *trace.Graph) {
			op.LayerNorm(g.Input("x", f32, tensor.Shape{2, 4}), tensor.Shape{4}, g.Input("w", f32, tensor.Shape{2}), nil, 1e-5)
		}, "weight has shape [2], expected [4]"},
		{"gn_groups", func(g *trace.Graph) {
			op.GroupNorm(g.Input("x", f32, tensor.Shape{2, 6, 3}), 4, nil, nil, 1e-5)
		}, "number of channels (6) to be divisible by num_groups (4)"},
		{"dropout_p", func(g *trace.Graph) { op.Dropout(g.Input("x", f32, tensor.Shape{3}), 1.5, true, 0) },
			"dropout probability has to be between 0 and 1, but got 1.5"},
		{"embedding_float_indices", func(g *trace.Graph) {
			op.Embedding(g.Input("i", f32, tensor.Shape{3}), g.Input("w", f32, tensor.Shape{4, 2}))
		}, "expected int64 indices"},
		{"embedding_padding", func(g *trace.Graph) {
			op.EmbeddingWithPadding(g.Input("i", tensor.Int64, tensor.Shape{3}), g.Input("w", f32, tensor.Shape{4, 2}), 4)
		}, "padding_idx must be within num_embeddings (4), got 4"},
		{"increment_float", func(g *trace.Graph) {
			op.IncrementCounter(g.State("n", "buffer", f32, tensor.Shape{}))
		}, "expected an int64 counter"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := trace.New()
			err := trace.Capture(func() { c.f(g) })
			if !errors.Is(err, trace.ErrShape) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a shape error containing %q", err, c.want)
			}
		})
	}
}

// dropoutRun returns y and dy/dx·seed for Dropout(x, p, true, seed) on x.
func dropoutRun(t *testing.T, x *tensor.Tensor, p float64, seed uint64, gseed *tensor.Tensor) (y, gx *tensor.Tensor) {
	t.Helper()
	out, g, err := check.Eval(un(func(x *trace.Tensor) *trace.Tensor { return op.Dropout(x, p, true, seed) }), []*tensor.Tensor{x}, gseed)
	if err != nil {
		t.Fatal(err)
	}
	if g != nil {
		gx = g[0]
	}
	return out, gx
}

func TestDropoutStatistics(t *testing.T) {
	const n = 200003 // not a multiple of 8: exercises the mask's last byte
	r := rand.New(rand.NewSource(9))
	x := tensor.New(tensor.Float32, tensor.Shape{n})
	for i := range x.F32() {
		x.F32()[i] = float32(r.Float64()*4 - 2)
		if x.F32()[i] == 0 {
			x.F32()[i] = 1
		}
	}
	gseed := tensor.New(tensor.Float32, tensor.Shape{n})
	for i := range gseed.F32() {
		gseed.F32()[i] = float32(r.Float64() + 0.5)
	}
	for _, p := range []float64{0.1, 0.5, 0.9} {
		scale := float32(1 / (1 - p))
		y, gx := dropoutRun(t, x, p, 1234, gseed)
		st := prim.NewDropoutStream(1234)
		kept := 0
		for i, v := range y.F32() {
			keep := v != 0
			if keep {
				kept++
				if v != x.F32()[i]*scale {
					t.Fatalf("p=%v: y[%d] = %v, want x*%v = %v exactly", p, i, v, scale, x.F32()[i]*scale)
				}
			}
			if keep != st.Keep(uint64(i), p) {
				t.Fatalf("p=%v: element %d kept=%v, DropoutStream says %v", p, i, keep, !keep)
			}
			// Backward uses the same mask and scale.
			want := float32(0)
			if keep {
				want = gseed.F32()[i] * scale
			}
			if gx.F32()[i] != want {
				t.Fatalf("p=%v: gx[%d] = %v, want %v", p, i, gx.F32()[i], want)
			}
		}
		frac := float64(kept) / n
		sigma := math.Sqrt(p * (1 - p) / n)
		if math.Abs(frac-(1-p)) > 5*sigma {
			t.Errorf("p=%v: kept fraction %.5f, want %.5f ± %.5f", p, frac, 1-p, 5*sigma)
		}
		// Halves and neighbours: no structure by position.
		for _, half := range [][2]int{{0, n / 2}, {n / 2, n}} {
			k := 0
			for _, v := range y.F32()[half[0]:half[1]] {
				if v != 0 {
					k++
				}
			}
			m := half[1] - half[0]
			if f := float64(k) / float64(m); math.Abs(f-(1-p)) > 5*math.Sqrt(p*(1-p)/float64(m)) {
				t.Errorf("p=%v: kept fraction %.5f in elements %v", p, f, half)
			}
		}
		both := 0
		for i := 1; i < n; i++ {
			if y.F32()[i] != 0 && y.F32()[i-1] != 0 {
				both++
			}
		}
		if f, want := float64(both)/float64(n-1), (1-p)*(1-p); math.Abs(f-want) > 0.01 {
			t.Errorf("p=%v: neighbours both kept %.4f of the time, want %.4f", p, f, want)
		}
	}
}

func TestDropoutSeeds(t *testing.T) {
	const n = 4096
	x := tensor.New(tensor.Float64, tensor.Shape{4, n / 4})
	for i := range x.F64() {
		x.F64()[i] = 1
	}
	a, _ := dropoutRun(t, x, 0.5, 7, nil)
	b, _ := dropoutRun(t, x, 0.5, 7, nil)
	c, _ := dropoutRun(t, x, 0.5, 8, nil)
	same := 0
	for i := range a.F64() {
		if a.F64()[i] != b.F64()[i] {
			t.Fatalf("same seed, element %d differs: %v vs %v", i, a.F64()[i], b.F64()[i])
		}
		if a.F64()[i] == c.F64()[i] {
			same++
		}
	}
	// Independent masks agree on about half the elements at p = 0.5.
	if f := float64(same) / n; f < 0.45 || f > 0.55 {
		t.Errorf("seeds 7 and 8 agree on %.3f of elements, want about 0.5", f)
	}
	// A step value changes the mask; the same step reproduces it.
	stepRun := func(step int64) *tensor.Tensor {
		f := func(xs []*trace.Tensor) *trace.Tensor { return op.DropoutStep(xs[0], 0.5, true, 7, xs[1]) }
		y, _, err := check.Eval(f, []*tensor.Tensor{x, tensor.FromInt64(tensor.Shape{}, []int64{step})}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return y
	}
	s3, s3b, s4 := stepRun(3), stepRun(3), stepRun(4)
	same = 0
	for i := range s3.F64() {
		if s3.F64()[i] != s3b.F64()[i] {
			t.Fatalf("same step, element %d differs", i)
		}
		if s3.F64()[i] == s4.F64()[i] {
			same++
		}
	}
	if f := float64(same) / n; f < 0.45 || f > 0.55 {
		t.Errorf("steps 3 and 4 agree on %.3f of elements, want about 0.5", f)
	}
	// Two dropouts with one seed in one graph (a recomputation) agree.
	f := un(func(x *trace.Tensor) *trace.Tensor {
		return op.Sub(op.Dropout(x, 0.3, true, 99), op.Dropout(x, 0.3, true, 99))
	})
	d, _, err := check.Eval(f, []*tensor.Tensor{x}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range d.F64() {
		if v != 0 {
			t.Fatalf("recomputed dropout differs at %d", i)
		}
	}
}

func TestDropoutIdentityAndAll(t *testing.T) {
	g := trace.New()
	x := g.Input("x", tensor.Float32, tensor.Shape{3, 5})
	if op.Dropout(x, 0, true, 1) != x || op.Dropout(x, 0.5, false, 1) != x {
		t.Error("p=0 or eval mode must return x itself")
	}
	outs := g.Apply(&prim.DropoutOp{P: 0.5, Seed: 1}, x)
	if m := outs[1].Meta; m.DType != tensor.Uint8 || !m.Shape.Equal(tensor.Shape{2}) {
		t.Errorf("mask is %v, want uint8[2] (one bit per element)", m)
	}
	xs := check.Random(rand.New(rand.NewSource(2)), tensor.Shape{37}, -1, 1)
	gs := check.Random(rand.New(rand.NewSource(3)), tensor.Shape{37}, -1, 1)
	y, gx := dropoutRun(t, xs, 1, 5, gs)
	for i := range y.F64() {
		if y.F64()[i] != 0 || gx.F64()[i] != 0 {
			t.Fatalf("p=1: y[%d]=%v gx[%d]=%v, want zeros", i, y.F64()[i], i, gx.F64()[i])
		}
	}
}

// TestNormKernelsThreadInvariant runs shapes large enough to be split across
// threads and checks the results do not depend on the thread count (each
// element's arithmetic is the same however the loops are split).
func TestNormKernelsThreadInvariant(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	idx := make([]int64, 3000)
	for i := range idx {
		idx[i] = int64(r.Intn(50))
	}
	pad := 3
	cases := []struct {
		name   string
		shapes []tensor.Shape
		f      check.Func
	}{
		{"batch_norm_nchw", []tensor.Shape{{8, 32, 16, 16}, {32}, {32}}, bnTrain(true)},
		{"batch_norm_nc", []tensor.Shape{{256, 512}, {512}, {512}}, bnTrain(true)},
		{"batch_norm_eval", []tensor.Shape{{4, 64, 16, 16}, {64}, {64}}, bnEval(64, true)},
		{"layer_norm", []tensor.Shape{{512, 256}, {256}, {256}}, lnCase(tensor.Shape{256}, true)},
		{"group_norm", []tensor.Shape{{8, 32, 16, 16}, {32}, {32}}, gnCase(8, true)},
		{"embedding", []tensor.Shape{{50, 256}}, embCase(idx, tensor.Shape{30, 100}, &pad)},
		{"dropout", []tensor.Shape{{300, 301}}, un(func(x *trace.Tensor) *trace.Tensor { return op.Dropout(x, 0.2, true, 3) })},
	}
	defer parallel.SetThreads(parallel.SetThreads(1))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var in []*tensor.Tensor
			for _, s := range c.shapes {
				in = append(in, check.Random(r, s, -2, 2).Convert(tensor.Float32))
			}
			out, _, err := check.Eval(c.f, in, nil)
			if err != nil {
				t.Fatal(err)
			}
			seed := check.Random(r, out.Shape, -1, 1).Convert(tensor.Float32)
			var ref []*tensor.Tensor
			for _, threads := range []int{1, 4} {
				parallel.SetThreads(threads)
				y, gs, err := check.Eval(c.f, in, seed)
				if err != nil {
					t.Fatal(err)
				}
				got := append([]*tensor.Tensor{y}, gs...)
				if ref == nil {
					ref = got
					continue
				}
				for k := range got {
					if string(got[k].Data) != string(ref[k].Data) {
						t.Errorf("output %d differs between 1 and %d threads", k, threads)
					}
				}
			}
		})
	}
}
