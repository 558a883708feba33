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

func TestSoftmaxGradients(t *testing.T) {
	var cases []gradCase
	for _, sm := range []struct {
		name string
		f    func(*trace.Tensor, int) *trace.Tensor
	}{{"softmax", op.Softmax}, {"log_softmax", op.LogSoftmax}} {
		f := sm.f
		for _, axis := range []struct {
			tag string
			a   int
		}{{"axis0", 0}, {"axis1", 1}, {"axis-1", -1}} {
			a := axis.a
			cases = append(cases, gradCase{name: sm.name + "_" + axis.tag, shapes: []tensor.Shape{{3, 4, 5}},
				f: un(func(x *trace.Tensor) *trace.Tensor { return f(x, a) })})
		}
		// More than one block of 64 strided columns.
		cases = append(cases, gradCase{name: sm.name + "_col_blocks", shapes: []tensor.Shape{{2, 3, 67}},
			f: un(func(x *trace.Tensor) *trace.Tensor { return f(x, 1) })})
		cases = append(cases, gradCase{name: sm.name + "_scalar", shapes: []tensor.Shape{{}},
			f: un(func(x *trace.Tensor) *trace.Tensor { return f(x, 0) })})
	}
	runGradCases(t, cases)
}

func TestPointwiseLossGradients(t *testing.T) {
	var cases []gradCase
	for _, red := range []string{"mean", "sum", "none"} {
		r := op.Reduction(red)
		cases = append(cases,
			gradCase{name: "mse_" + red, shapes: []tensor.Shape{{3, 4}, {3, 4}}, f: bin(func(a, b *trace.Tensor) *trace.Tensor { return op.MSELoss(a, b, r) })},
			gradCase{name: "l1_" + red, shapes: []tensor.Shape{{3, 4}, {3, 4}}, f: bin(func(a, b *trace.Tensor) *trace.Tensor { return op.L1Loss(a, b, r) })},
		)
	}
	runGradCases(t, cases)
}

func TestSliceGradients(t *testing.T) {
	runGradCases(t, []gradCase{
		{name: "slice_step", shapes: []tensor.Shape{{3, 7, 2}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Slice(x, 1, 1, 7, 2) })},
		{name: "slice_last_step", shapes: []tensor.Shape{{3, 8}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Slice(x, -1, -7, -1, 3) })},
		{name: "slice_axis0", shapes: []tensor.Shape{{5, 3}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Slice(x, 0, 1, 4, 1) })},
		{name: "narrow", shapes: []tensor.Shape{{2, 3, 5}}, f: un(func(x *trace.Tensor) *trace.Tensor { return op.Narrow(x, -1, -4, 2) })},
		{name: "slice_twice", shapes: []tensor.Shape{{6, 6}}, f: un(func(x *trace.Tensor) *trace.Tensor {
			return op.Square(op.Slice(op.Slice(x, 0, 0, 6, 2), 1, 1, 5, 1))
		})},
		{name: "cat_axis0", shapes: []tensor.Shape{{2, 3}, {1, 3}, {3, 3}}, f: func(xs []*trace.Tensor) *trace.Tensor { return op.Cat(0, xs...) }},
		{name: "cat_axis1", shapes: []tensor.Shape{{2, 1, 3}, {2, 2, 3}}, f: func(xs []*trace.Tensor) *trace.Tensor { return op.Cat(1, xs...) }},
		{name: "cat_last_shared", shapes: []tensor.Shape{{2, 2}, {2, 3}}, f: func(xs []*trace.Tensor) *trace.Tensor {
			return op.Cat(-1, xs[0], op.Square(xs[1]), xs[0])
		}},
		{name: "split", shapes: []tensor.Shape{{2, 7}}, f: un(func(x *trace.Tensor) *trace.Tensor {
			p := op.Split(x, 1, 3)
			return op.Cat(1, op.Square(p[2]), p[0], op.Scale(p[1], 3))
		})},
		{name: "split_sizes_unused", shapes: []tensor.Shape{{6, 2}}, f: un(func(x *trace.Tensor) *trace.Tensor {
			p := op.SplitSizes(x, 0, 1, 3, 2)
			return op.Mul(p[0], p[0])
		})},
		{name: "chunk", shapes: []tensor.Shape{{2, 3, 5}}, f: un(func(x *trace.Tensor) *trace.Tensor {
			p := op.Chunk(x, -1, 2)
			return op.Cat(-1, p[1], op.Square(p[0]))
		})},
		{name: "slice_backward_double", shapes: []tensor.Shape{{3, 3}}, f: un(func(x *trace.Tensor) *trace.Tensor {
			return prim.Apply1(&prim.SliceBackward{Axis: 1, Start: 1, End: 7, Step: 2, Shape: tensor.Shape{3, 7}}, x)
		})},
	})
}

func TestAttentionGradients(t *testing.T) {
	var cases []gradCase
	for _, causal := range []bool{false, true} {
		c := causal
		tag := "full"
		if c {
			tag = "causal"
		}
		f := func(xs []*trace.Tensor) *trace.Tensor { return op.ScaledDotProductAttention(xs[0], xs[1], xs[2], c) }
		cases = append(cases,
			gradCase{name: tag, shapes: []tensor.Shape{{2, 2, 4, 3}, {2, 2, 4, 3}, {2, 2, 4, 3}}, f: f},
			gradCase{name: tag + "_t1", shapes: []tensor.Shape{{1, 2, 1, 3}, {1, 2, 1, 3}, {1, 2, 1, 3}}, f: f},
			gradCase{name: tag + "_cross", shapes: []tensor.Shape{{1, 2, 3, 4}, {1, 2, 5, 4}, {1, 2, 5, 2}}, f: f},
			gradCase{name: tag + "_3d", shapes: []tensor.Shape{{2, 3, 2}, {2, 3, 2}, {2, 3, 2}}, f: f},
			// More rows than one row block of 64.
			gradCase{name: tag + "_blocks", shapes: []tensor.Shape{{1, 1, 66, 2}, {1, 1, 66, 2}, {1, 1, 66, 2}}, f: f},
		)
	}
	runGradCases(t, cases)
}

// ceInputs returns float64 logits of shape and int64 targets of the matching
// shape with values in [0, C), every third one set to ignore when ignore is
// not nil.
func ceInputs(r *rand.Rand, shape tensor.Shape, ignore *int64) []*tensor.Tensor {
	x := check.Random(r, shape, -2, 2)
	classes := shape[0]
	ts := tensor.Shape{}
	if len(shape) > 1 {
		classes = shape[1]
		ts = append(tensor.Shape{shape[0]}, shape[2:]...)
	}
	t := tensor.New(tensor.Int64, ts)
	for i := range t.I64() {
		t.I64()[i] = int64(r.Intn(classes))
		if ignore != nil && i%3 == 1 {
			t.I64()[i] = *ignore
		}
	}
	return []*tensor.Tensor{x, t}
}

func TestCrossEntropyGradients(t *testing.T) {
	ign := int64(-100)
	cls := int64(2)
	for _, c := range []struct {
		name   string
		shape  tensor.Shape
		ignore *int64
		opts   op.CrossEntropyOpts
	}{
		{"mean", tensor.Shape{5, 4}, nil, op.DefaultCrossEntropyOpts()},
		{"ignore_mean", tensor.Shape{6, 4}, &ign, op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), Reduction: "mean"}},
		{"ignore_sum", tensor.Shape{6, 4}, &ign, op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), Reduction: "sum"}},
		{"ignore_none", tensor.Shape{6, 4}, &ign, op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), Reduction: "none"}},
		{"ls_mean", tensor.Shape{5, 4}, nil, op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), LabelSmoothing: 0.1}},
		{"ls_ignore_mean", tensor.Shape{6, 4}, &ign, op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), LabelSmoothing: 0.1, Reduction: "mean"}},
		{"ls_ignore_sum", tensor.Shape{6, 4}, &ign, op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), LabelSmoothing: 0.1, Reduction: "sum"}},
		{"ls_ignore_none", tensor.Shape{6, 4}, &ign, op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), LabelSmoothing: 0.1, Reduction: "none"}},
		{"ignore_class", tensor.Shape{6, 3}, &cls, op.CrossEntropyOpts{IgnoreIndex: op.Class(2), LabelSmoothing: 0.3}},
		{"spatial_mean", tensor.Shape{2, 3, 2, 2}, &ign, op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), LabelSmoothing: 0.1}},
		{"spatial_none", tensor.Shape{2, 3, 2, 2}, &ign, op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), Reduction: "none"}},
		{"one_d", tensor.Shape{4}, nil, op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), LabelSmoothing: 0.2, Reduction: "sum"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := ceInputs(rand.New(rand.NewSource(7)), c.shape, c.ignore)
			opts := c.opts
			f := func(xs []*trace.Tensor) *trace.Tensor { return op.CrossEntropy(xs[0], xs[1], opts) }
			if _, err := check.Gradients(f, in, 1e-6, 1e-7, 1e-5); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCrossEntropyValues checks the loss against a direct evaluation of
// PyTorch's formula in float64.
func TestCrossEntropyValues(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	ign := int64(-100)
	in := ceInputs(r, tensor.Shape{6, 5}, &ign)
	x, tg := in[0].F64(), in[1].I64()
	const ls = 0.1
	var nll, smooth []float64
	cnt := 0
	for i, ti := range tg {
		row := x[i*5 : i*5+5]
		var s float64
		for _, v := range row {
			s += math.Exp(v)
		}
		lse := math.Log(s)
		if ti == ign {
			nll, smooth = append(nll, 0), append(smooth, 0)
			continue
		}
		cnt++
		var sm float64
		for _, v := range row {
			sm += lse - v
		}
		nll, smooth = append(nll, lse-row[ti]), append(smooth, sm)
	}
	var sn, ss float64
	for i := range nll {
		sn += nll[i]
		ss += smooth[i]
	}
	for _, c := range []struct {
		red  string
		want []float64
	}{
		{"sum", []float64{(1-ls)*sn + ls/5*ss}},
		{"mean", []float64{(1-ls)*sn/float64(cnt) + ls/5*ss/float64(cnt)}},
	} {
		y, _, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor {
			return op.CrossEntropy(xs[0], xs[1], op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), LabelSmoothing: ls, Reduction: op.Reduction(c.red)})
		}, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := y.F64()[0]; math.Abs(got-c.want[0]) > 1e-12 {
			t.Errorf("%s: got %.15g, want %.15g", c.red, got, c.want[0])
		}
	}
}

func TestCrossEntropyAllIgnoredMeanIsNaN(t *testing.T) {
	x := check.Random(rand.New(rand.NewSource(1)), tensor.Shape{3, 4}, -1, 1)
	tg := tensor.FromInt64(tensor.Shape{3}, []int64{-100, -100, -100})
	seed := tensor.FromFloat64(tensor.Shape{}, []float64{1})
	y, g, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor {
		return op.CrossEntropy(xs[0], xs[1], op.DefaultCrossEntropyOpts())
	}, []*tensor.Tensor{x, tg}, seed)
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(y.F64()[0]) {
		t.Errorf("loss %v, want NaN as PyTorch", y.F64()[0])
	}
	for i, v := range g[0].F64() {
		if v != 0 {
			t.Fatalf("gradient[%d] = %v, want 0", i, v)
		}
	}
}

func TestCrossEntropyTargetOutOfRange(t *testing.T) {
	x := check.Random(rand.New(rand.NewSource(1)), tensor.Shape{3, 4}, -1, 1)
	for _, bad := range []int64{4, -1, -100} {
		tg := tensor.FromInt64(tensor.Shape{3}, []int64{0, bad, 2})
		_, _, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor {
			return op.CrossEntropy(xs[0], xs[1], op.CrossEntropyOpts{IgnoreIndex: op.Class(3), Reduction: "sum"})
		}, []*tensor.Tensor{x, tg}, nil)
		if err == nil {
			t.Fatalf("target %d: expected an error", bad)
		}
		msg := err.Error()
		for _, want := range []string{"cross_entropy", "target " + itoa(bad), "4 classes"} {
			if !strings.Contains(msg, want) {
				t.Errorf("target %d: error %q does not mention %q", bad, msg, want)
			}
		}
	}
}

func itoa(v int64) string {
	if v < 0 {
		return "-" + itoa(-v)
	}
	if v < 10 {
		return string(rune('0' + v))
	}
	return itoa(v/10) + string(rune('0'+v%10))
}

func TestLossShapeErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func(g *trace.Graph)
		want string
	}{
		{"ce_target_shape", func(g *trace.Graph) {
			op.CrossEntropy(g.Input("x", tensor.Float32, tensor.Shape{4, 3}), g.Input("t", tensor.Int64, tensor.Shape{3}), op.DefaultCrossEntropyOpts())
		}, "target shape [3] does not match logits [4, 3]"},
		{"ce_target_dtype", func(g *trace.Graph) {
			op.CrossEntropy(g.Input("x", tensor.Float32, tensor.Shape{4, 3}), g.Input("t", tensor.Float32, tensor.Shape{4}), op.DefaultCrossEntropyOpts())
		}, "expected int64 class indices"},
		{"ce_reduction", func(g *trace.Graph) {
			op.CrossEntropy(g.Input("x", tensor.Float32, tensor.Shape{4, 3}), g.Input("t", tensor.Int64, tensor.Shape{4}), op.CrossEntropyOpts{Reduction: "avg"})
		}, "not a valid value for reduction"},
		{"ce_smoothing", func(g *trace.Graph) {
			op.CrossEntropy(g.Input("x", tensor.Float32, tensor.Shape{4, 3}), g.Input("t", tensor.Int64, tensor.Shape{4}), op.CrossEntropyOpts{LabelSmoothing: 1.5})
		}, "label_smoothing must be between 0.0 and 1.0"},
		{"mse_shape", func(g *trace.Graph) {
			op.MSELoss(g.Input("x", tensor.Float32, tensor.Shape{4, 3}), g.Input("t", tensor.Float32, tensor.Shape{3}), "mean")
		}, "input shape [4, 3] and target shape [3] differ"},
		{"slice_step", func(g *trace.Graph) { op.Slice(g.Input("x", tensor.Float32, tensor.Shape{4}), 0, 0, 4, 0) }, "slice step must be positive"},
		{"narrow_range", func(g *trace.Graph) { op.Narrow(g.Input("x", tensor.Float32, tensor.Shape{4}), 0, 2, 3) }, "exceeds dimension size (4)"},
		{"cat_sizes", func(g *trace.Graph) {
			op.Cat(0, g.Input("a", tensor.Float32, tensor.Shape{2, 3}), g.Input("b", tensor.Float32, tensor.Shape{2, 4}))
		}, "sizes of tensors must match except in dimension 0"},
		{"split_sizes", func(g *trace.Graph) { op.SplitSizes(g.Input("x", tensor.Float32, tensor.Shape{5}), 0, 2, 2) }, "sum to 4"},
		{"attn_head_size", func(g *trace.Graph) {
			op.ScaledDotProductAttention(g.Input("q", tensor.Float32, tensor.Shape{1, 2, 3, 4}), g.Input("k", tensor.Float32, tensor.Shape{1, 2, 3, 5}),
				g.Input("v", tensor.Float32, tensor.Shape{1, 2, 3, 4}), true)
		}, "q has head size 4, k has 5"},
		{"softmax_axis", func(g *trace.Graph) { op.Softmax(g.Input("x", tensor.Float32, tensor.Shape{4, 3}), 2) }, "dimension out of range"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := trace.New()
			err := trace.Capture(func() { c.f(g) })
			if err == nil || !errors.Is(err, trace.ErrShape) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a shape error containing %q", err, c.want)
			}
		})
	}
}

// TestSliceInt64 checks that the slicing kernels move any dtype.
func TestSliceInt64(t *testing.T) {
	x := tensor.FromInt64(tensor.Shape{2, 5}, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	y, _, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor {
		p := op.Chunk(op.Slice(xs[0], 1, 0, 5, 2), 1, 2) // [[0 2] [5 7]], [[4] [9]]
		return op.Cat(1, p[1], p[0])
	}, []*tensor.Tensor{x}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{4, 0, 2, 9, 5, 7}
	if !y.Shape.Equal(tensor.Shape{2, 3}) {
		t.Fatalf("shape %v, want [2, 3]", y.Shape)
	}
	for i, v := range y.I64() {
		if v != want[i] {
			t.Fatalf("got %v, want %v", y.I64(), want)
		}
	}
}

// composedAttention is attention written with separate ops, the way
// PyTorch 1.13 users wrote it.
func composedAttention(q, k, v *trace.Tensor, causal bool) *trace.Tensor {
	s := op.Scale(op.MatMulT(q, k, false, true), 1/math.Sqrt(float64(q.Dim(-1))))
	if causal {
		tq, tk := q.Dim(-2), k.Dim(-2)
		m := make([]float64, tq*tk)
		for i := 0; i < tq; i++ {
			for j := i + 1; j < tk; j++ {
				m[i*tk+j] = math.Inf(-1)
			}
		}
		s = op.Add(s, q.Graph().Const(tensor.FromFloat64(tensor.Shape{tq, tk}, m)))
	}
	return op.Mm(op.Softmax(s, -1), v)
}

// TestAttentionMatchesComposition runs shapes large enough for several row
// blocks and work slots in parallel.
func TestAttentionMatchesComposition(t *testing.T) {
	defer parallel.SetThreads(parallel.SetThreads(4))
	r := rand.New(rand.NewSource(5))
	for _, c := range []struct {
		name    string
		q, k, v tensor.Shape
	}{
		{"self", tensor.Shape{2, 3, 130, 16}, tensor.Shape{2, 3, 130, 16}, tensor.Shape{2, 3, 130, 16}},
		{"cross", tensor.Shape{3, 40, 8}, tensor.Shape{3, 100, 8}, tensor.Shape{3, 100, 12}},
		{"many_heads", tensor.Shape{4, 9, 7, 4}, tensor.Shape{4, 9, 7, 4}, tensor.Shape{4, 9, 7, 4}},
	} {
		for _, causal := range []bool{false, true} {
			in := []*tensor.Tensor{check.Random(r, c.q, -2, 2), check.Random(r, c.k, -2, 2), check.Random(r, c.v, -2, 2)}
			seed := check.Random(r, append(c.q[:len(c.q)-1].Clone(), c.v[len(c.v)-1]), -1, 1)
			y1, g1, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor {
				return op.ScaledDotProductAttention(xs[0], xs[1], xs[2], causal)
			}, in, seed)
			if err != nil {
				t.Fatal(err)
			}
			y2, g2, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor { return composedAttention(xs[0], xs[1], xs[2], causal) }, in, seed)
			if err != nil {
				t.Fatal(err)
			}
			all1 := append([]*tensor.Tensor{y1}, g1...)
			all2 := append([]*tensor.Tensor{y2}, g2...)
			for i := range all1 {
				a, b := all1[i].F64(), all2[i].F64()
				for j := range a {
					if math.Abs(a[j]-b[j]) > 1e-12+1e-10*math.Abs(b[j]) {
						t.Fatalf("%s causal=%v: tensor %d element %d: fused %.15g, composed %.15g", c.name, causal, i, j, a[j], b[j])
					}
				}
			}
		}
	}
}

// TestLossKernelsThreadInvariant checks that results are bit-identical for
// any thread count (reductions add fixed blocks in a fixed order).
func TestLossKernelsThreadInvariant(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	ign := int64(-100)
	ce := ceInputs(r, tensor.Shape{300, 37}, &ign)
	ceSpatial := ceInputs(r, tensor.Shape{4, 5, 30, 30}, &ign)
	x := check.Random(r, tensor.Shape{8, 70, 90}, -3, 3)
	y := check.Random(r, tensor.Shape{8, 70, 90}, -3, 3)
	qkv := []*tensor.Tensor{check.Random(r, tensor.Shape{2, 20, 70, 8}, -1, 1), check.Random(r, tensor.Shape{2, 20, 70, 8}, -1, 1), check.Random(r, tensor.Shape{2, 20, 70, 8}, -1, 1)}
	cases := []struct {
		name string
		f    check.Func
		in   []*tensor.Tensor
	}{
		{"softmax_last", un(func(x *trace.Tensor) *trace.Tensor { return op.Softmax(x, -1) }), []*tensor.Tensor{x}},
		{"log_softmax_mid", un(func(x *trace.Tensor) *trace.Tensor { return op.LogSoftmax(x, 1) }), []*tensor.Tensor{x}},
		{"ce_mean", func(xs []*trace.Tensor) *trace.Tensor {
			return op.CrossEntropy(xs[0], xs[1], op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), LabelSmoothing: 0.1})
		}, ce},
		{"ce_spatial_sum", func(xs []*trace.Tensor) *trace.Tensor {
			return op.CrossEntropy(xs[0], xs[1], op.CrossEntropyOpts{IgnoreIndex: op.Class(-100), Reduction: "sum"})
		}, ceSpatial},
		{"mse", bin(func(a, b *trace.Tensor) *trace.Tensor { return op.MSELoss(a, b, "mean") }), []*tensor.Tensor{x, y}},
		{"l1", bin(func(a, b *trace.Tensor) *trace.Tensor { return op.L1Loss(a, b, "sum") }), []*tensor.Tensor{x, y}},
		{"slice_cat", un(func(x *trace.Tensor) *trace.Tensor {
			p := op.Chunk(op.Slice(x, 2, 1, 90, 2), 1, 3)
			return op.Cat(1, p[2], p[0])
		}), []*tensor.Tensor{x}},
		{"attention", func(xs []*trace.Tensor) *trace.Tensor { return op.ScaledDotProductAttention(xs[0], xs[1], xs[2], true) }, qkv},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ref []*tensor.Tensor
			for _, threads := range []int{1, 3, 8} {
				old := parallel.SetThreads(threads)
				out, _, err := check.Eval(c.f, c.in, nil)
				if err != nil {
					parallel.SetThreads(old)
					t.Fatal(err)
				}
				seed := check.Random(rand.New(rand.NewSource(1)), out.Shape, -1, 1)
				out, grads, err := check.Eval(c.f, c.in, seed)
				parallel.SetThreads(old)
				if err != nil {
					t.Fatal(err)
				}
				got := append([]*tensor.Tensor{out}, grads...)
				if ref == nil {
					ref = got
					continue
				}
				for i := range got {
					if got[i] == nil {
						continue
					}
					if string(got[i].Data) != string(ref[i].Data) {
						t.Fatalf("threads=%d: result %d differs from threads=1", threads, i)
					}
				}
			}
		})
	}
}
