package transform_test

import (
	"context"
	"errors"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/autodiff"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/plan"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// fusedNodes counts g's prim.Fused nodes by name.
func fusedNodes(g *trace.Graph) map[string]int {
	m := map[string]int{}
	for _, n := range g.Nodes {
		if _, ok := n.Op.(*prim.Fused); ok && n.Kind == trace.KindOp {
			m[n.Op.Name()]++
		}
	}
	return m
}

func total(m map[string]int) int {
	k := 0
	for _, v := range m {
		k += v
	}
	return k
}

// Fusion changes time and memory, never numbers: on zoo models, also with
// recomputation, mixed precision and compressed saved tensors, the loss and
// every gradient are bit-identical with and without it, the measured peak
// equals the planned one (step checks it) and the planned peak does not
// grow.
func TestFuseIsExact(t *testing.T) {
	for _, c := range []struct {
		model, name string
		batch       int
		s           setup
		slow        bool
	}{
		{"mlp", "fp32", 8, setup{}, false},
		{"cnn", "fp32", 8, setup{}, false},
		{"cnn", "remat", 8, setup{remat: transform.CheapOps}, false},
		{"cnn", "masks", 8, setup{compress: transform.Compression{Masks: true}}, false},
		{"resnet18-64", "fp32", 2, setup{}, false},
		{"resnet18-64", "remat", 2, setup{remat: transform.CheapOps}, false},
		{"resnet18-64", "bf16-mixed+masks", 2, setup{precision: transform.BF16Mixed, compress: transform.Compression{Masks: true}}, false},
		{"gpt-shakespeare-char", "fp32", 1, setup{}, false},
		{"gpt-shakespeare-char", "remat+bf16-mixed", 1, setup{remat: transform.CheapOps, precision: transform.BF16Mixed}, true},
		{"rrdbnet", "fp32", 1, setup{}, true},
		{"rrdbnet", "remat", 1, setup{remat: transform.CheapOps}, true},
	} {
		t.Run(c.model+"/"+c.name, func(t *testing.T) {
			if c.slow && testing.Short() {
				t.Skip("slow")
			}
			spec := mustSpec(t, c.model)
			t.Setenv("HEADROOM_FUSE", "0")
			base := step(t, spec, c.batch, c.s)
			t.Setenv("HEADROOM_FUSE", "1")
			got := step(t, spec, c.batch, c.s)
			sameGrads(t, c.name, got, base)
			if n := total(fusedNodes(base.prog)); n != 0 {
				t.Errorf("%d fused nodes with HEADROOM_FUSE=0", n)
			}
			f := fusedNodes(got.prog)
			if total(f) == 0 {
				t.Error("nothing fused")
			}
			if got.plan.Activations > base.plan.Activations {
				t.Errorf("activations at peak %d fused, %d unfused", got.plan.Activations, base.plan.Activations)
			}
			t.Logf("%d fused nodes (%d kinds), %d -> %d nodes, activations at peak %d -> %d bytes",
				total(f), len(f), len(base.prog.Nodes), len(got.prog.Nodes), base.plan.Activations, got.plan.Activations)
		})
	}
}

// trainGraph traces and compiles a training step of spec on the meta
// device and returns its graph.
func trainGraph(t *testing.T, spec string, batch int, s setup) *trace.Graph {
	t.Helper()
	sp := mustSpec(t, spec)
	store := nn.NewStore()
	m := sp.New(store.Root())
	dev := device.Meta()
	if err := store.Materialize(dev, 0); err != nil {
		t.Fatal(err)
	}
	defer store.Release()
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	tr, err := train.New(dev, store, m, sp.Loss, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	s.apply(tr)
	p, err := tr.TrainProgram(sp.Example(batch))
	if err != nil {
		t.Fatal(err)
	}
	return p.Graph
}

// What fuses in the zoo's training steps: each model's chains, forward
// and backward, by fused node name.
func TestFusePatterns(t *testing.T) {
	for _, c := range []struct {
		model string
		want  map[string]int
	}{
		// Linear + bias + ReLU; the last layer's bias add; the ReLU
		// backward into the input gradient's product.
		{"mlp", map[string]int{"matmul+add+relu": 1, "matmul+add": 1, "matmul+relu_backward": 1}},
		{"cnn", map[string]int{"conv2d+relu": 2, "matmul+add+relu": 1, "matmul+add": 1}},
		// Batch norm + ReLU, batch norm + residual add + ReLU; in the
		// backward pass the input gradient of a convolution + the
		// residual's gradient + ReLU's backward.
		{"resnet18-64", map[string]int{"batch_norm+relu": 9, "batch_norm+add+relu": 8,
			"conv2d_backward_input+relu_backward": 8, "conv2d_backward_input+add+relu_backward": 7}},
		{"resnet152-128", map[string]int{"batch_norm+relu": 101, "batch_norm+add+relu": 50,
			"conv2d_backward_input+relu_backward": 100, "conv2d_backward_input+add+relu_backward": 49}},
		// No biases in this configuration: matmul + GELU (keeping the
		// pre-activation GELU's backward reads), attention scores scaled
		// and masked, layer norm's input gradient + the residual's.
		{"gpt-shakespeare-char", map[string]int{"matmul+gelu": 6, "matmul+mul_scalar+add": 6,
			"matmul+gelu_backward": 6, "layer_norm_backward+add": 12}},
		// Convolution + LeakyReLU, the dense blocks' scaled residuals
		// (0.2*x + input, twice at the end of each RRDB); in the backward
		// pass each concatenation's gradient cut and summed into its
		// inputs' in one node (not a prim.Fused: splitAdds).
		{"rrdbnet", map[string]int{"conv2d+leaky_relu": 279, "conv2d+mul_scalar+add": 46,
			"conv2d+mul_scalar+add+mul_scalar+add": 23, "split_with_sizes+add": 276}},
	} {
		t.Run(c.model, func(t *testing.T) {
			g := trainGraph(t, c.model, 2, setup{})
			got := fusedNodes(g)
			for _, n := range g.Nodes {
				if _, ok := n.Op.(*prim.SplitAdd); ok {
					got[n.Op.Name()]++
				}
			}
			for name, n := range c.want {
				if got[name] != n {
					t.Errorf("%d %s, want %d", got[name], name, n)
				}
			}
			t.Logf("%v", got)
		})
	}
}

// graphCase builds a small graph and names the fused node it must get.
type graphCase struct {
	name string
	want string // a fused node's name
	// build records the graph and returns its outputs by name.
	build func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor
}

func param(g *trace.Graph, name string, dt tensor.DType, shape ...int) *trace.Tensor {
	return g.State(name, "parameter", dt, tensor.Shape(shape))
}

// linear records x W^T + b. x is a state, as if saved for a backward pass:
// an input dying at the product would make keeping two outputs of the
// fused node cost more than it saves, and Fuse would refuse.
func linear(g *trace.Graph, dt tensor.DType) (x, h *trace.Tensor) {
	x = param(g, "x", dt, 6, 10)
	w, b := param(g, "w", dt, 7, 10), param(g, "b", dt, 7)
	return x, op.Add(op.MatMulT(x, w, false, true), b)
}

var graphCases = []graphCase{
	{"linear+bias+relu", "matmul+add+relu", func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor {
		_, h := linear(g, dt)
		return map[string]*trace.Tensor{"y": op.ReLU(h)}
	}},
	{"pre-activation kept", "matmul+add+gelu", func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor {
		_, h := linear(g, dt)
		return map[string]*trace.Tensor{"y": op.GELU(h, ""), "h": h}
	}},
	{"bias over a reshape", "matmul+add+relu", func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor {
		x := g.Input("x", dt, tensor.Shape{6, 10})
		w, b := param(g, "w", dt, 7, 10), param(g, "b", dt, 7)
		y := op.Reshape(op.MatMulT(x, w, false, true), tensor.Shape{2, 3, 7})
		return map[string]*trace.Tensor{"y": op.ReLU(op.Add(y, b))}
	}},
	{"conv+channel bias+leaky_relu", "conv2d+add+leaky_relu", func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor {
		x := g.Input("x", dt, tensor.Shape{2, 3, 6, 6})
		w, b := param(g, "w", dt, 4, 3, 3, 3), param(g, "b", dt, 4, 1, 1)
		y := op.Conv2d(x, w, nil, op.ConvOpts{Padding: [2]int{1, 1}})
		return map[string]*trace.Tensor{"y": op.LeakyReLU(op.Add(y, b), 0.2)}
	}},
	{"batch norm+residual+relu", "batch_norm+add+relu", func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor {
		x := g.Input("x", dt, tensor.Shape{3, 4, 5, 5})
		w, b := param(g, "w", dt, 4), param(g, "b", dt, 4)
		rm := g.State("rm", "buffer", dt, tensor.Shape{4})
		rv := g.State("rv", "buffer", dt, tensor.Shape{4})
		y := op.BatchNorm(x, w, b, rm, rv, true, 0.1, 1e-5)
		return map[string]*trace.Tensor{"y": op.ReLU(op.Add(y, x))}
	}},
	{"a*b+c, scaled, sigmoid", "mul+add+mul_scalar+sigmoid", func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor {
		s := tensor.Shape{5, 9}
		a, b, c := g.Input("a", dt, s), g.Input("b", dt, s), g.Input("c", dt, s)
		return map[string]*trace.Tensor{"y": op.Sigmoid(op.Scale(op.Add(op.Mul(a, b), c), 0.5))}
	}},
	{"scalar, reshape, tanh", "add+mul+tanh", func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor {
		x, z := g.Input("x", dt, tensor.Shape{4, 6}), g.Input("z", dt, tensor.Shape{2, 12})
		k := g.Const(tensor.FromFloat64(tensor.Shape{}, []float64{0.25}).Convert(dt))
		y := op.Reshape(op.Add(x, k), tensor.Shape{2, 12})
		return map[string]*trace.Tensor{"y": op.Tanh(op.Mul(y, z))}
	}},
	// The permuted copies die at the fused node: the planner may give its
	// output the memory of one of them (prim.Fused.InPlaceInputs).
	{"over an input that dies", "mul+add+relu", func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor {
		x, y := g.Input("x", dt, tensor.Shape{9, 5}), g.Input("y", dt, tensor.Shape{9, 5})
		a, b := op.Transpose(x, 0, 1), op.Transpose(y, 0, 1)
		z := op.ReLU(op.Add(op.Mul(a, b), a))
		return map[string]*trace.Tensor{"s": op.Sum(z, false, 1)} // z itself is no graph output
	}},
	{"gelu backward", "matmul+gelu_backward", func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor {
		x, h := linear(g, dt)
		w2 := param(g, "w2", dt, 3, 7)
		loss := op.Sum(op.MatMulT(op.GELU(h, ""), w2, false, true), false)
		grads, err := autodiff.Backward(loss, []*trace.Tensor{x, g.StateNode("w").Outputs[0], g.StateNode("b").Outputs[0]})
		if err != nil {
			panic(err)
		}
		return map[string]*trace.Tensor{"loss": loss, "gx": grads[0], "gw": grads[1], "gb": grads[2]}
	}},
	{"residual relu backward", "conv2d_backward_input+add+relu_backward", func(g *trace.Graph, dt tensor.DType) map[string]*trace.Tensor {
		x := g.Input("x", dt, tensor.Shape{2, 4, 5, 5})
		w1, w2 := param(g, "w1", dt, 4, 4, 3, 3), param(g, "w2", dt, 4, 4, 3, 3)
		pad := op.ConvOpts{Padding: [2]int{1, 1}}
		a := op.ReLU(x)
		y := op.ReLU(op.Add(op.Conv2d(op.ReLU(op.Conv2d(a, w1, nil, pad)), w2, nil, pad), a))
		loss := op.Sum(op.Mul(y, y), false)
		grads, err := autodiff.Backward(loss, []*trace.Tensor{x, g.StateNode("w1").Outputs[0]})
		if err != nil {
			panic(err)
		}
		return map[string]*trace.Tensor{"loss": loss, "gx": grads[0], "gw1": grads[1]}
	}},
}

// build records c into a new graph.
func (c graphCase) graph(t *testing.T, dt tensor.DType) *trace.Graph {
	t.Helper()
	g := trace.New()
	if err := trace.Capture(func() {
		outs := c.build(g, dt)
		for _, name := range sortedKeys(outs) {
			g.Output(name, outs[name])
		}
	}); err != nil {
		t.Fatal(err)
	}
	return g
}

func sortedKeys(m map[string]*trace.Tensor) []string {
	var k []string
	for name := range m {
		k = append(k, name)
	}
	for i := range k {
		for j := i + 1; j < len(k); j++ {
			if k[j] < k[i] {
				k[i], k[j] = k[j], k[i]
			}
		}
	}
	return k
}

// runGraph runs g once on the cpu with reproducible inputs and states and
// checks that the measured peak is the planned one.
func runGraph(t *testing.T, g *trace.Graph) map[string]*tensor.Tensor {
	t.Helper()
	return runGraphWith(t, g, nil)
}

func runGraphWith(t *testing.T, g *trace.Graph, opts *exec.Options) map[string]*tensor.Tensor {
	t.Helper()
	dev := device.CPU()
	p, err := exec.Compile(g, dev)
	if err != nil {
		t.Fatal(err)
	}
	arena := exec.NewArena(dev)
	defer arena.Release()
	r := rand.New(rand.NewSource(3))
	inputs, states := map[string]*tensor.Tensor{}, exec.StateMap{}
	for _, n := range g.Nodes {
		if n.Kind != trace.KindInput && n.Kind != trace.KindState {
			continue
		}
		m := n.Outputs[0].Meta
		v := make([]float64, m.Shape.NumElements())
		for i := range v {
			v[i] = r.NormFloat64()
			if i%7 == 0 {
				v[i] = 0 // ties at relu's kink
			}
		}
		if n.Name == "rv" {
			for i := range v {
				v[i] = 1 + v[i]*v[i]
			}
		}
		x := tensor.FromFloat64(m.Shape, v).Convert(m.DType)
		if n.Kind == trace.KindInput {
			inputs[n.Name] = x
		} else {
			states[n.Name] = x
		}
	}
	out, err := p.Run(context.Background(), arena, states, inputs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := dev.Alloc.MaxMemoryAllocated(); got != p.Plan.PeakBytes {
		t.Errorf("measured peak %d, planned %d", got, p.Plan.PeakBytes)
	}
	for name, s := range states {
		out["state:"+name] = s // running statistics are results too
	}
	return out
}

// Small graphs of every kind of chain give bit-identical results fused and
// unfused, in float32 and float64.
func TestFuseSmallGraphsExact(t *testing.T) {
	for _, c := range graphCases {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				g := c.graph(t, dt)
				fg, st, err := transform.Fuse(g)
				if err != nil {
					t.Fatal(err)
				}
				if got := fusedNodes(fg); got[c.want] == 0 {
					t.Fatalf("no %s node; fused: %v", c.want, got)
				}
				if st.Groups != total(fusedNodes(fg)) || st.Merged == 0 {
					t.Errorf("stats %+v", st)
				}
				want := runGraph(t, g)
				// A diagnosis run (CheckFinite) runs fused nodes op by
				// op: the same numbers.
				for _, opts := range []*exec.Options{nil, {CheckFinite: true}} {
					got := runGraphWith(t, fg, opts)
					for name, w := range want {
						gv, wv := got[name].Float64s(), w.Float64s()
						for i := range wv {
							if gv[i] != wv[i] && (gv[i] == gv[i] || wv[i] == wv[i]) {
								t.Fatalf("%s[%d] = %v fused (options %+v), %v unfused", name, i, gv[i], opts, wv[i])
							}
						}
					}
				}
			})
		}
	}
}

// fusedWith returns the fused nodes of Fuse(g) whose program includes an
// op named name (or whose producer is).
func fusedWith(t *testing.T, g *trace.Graph, name string) []*prim.Fused {
	t.Helper()
	fg, _, err := transform.Fuse(g)
	if err != nil {
		t.Fatal(err)
	}
	var out []*prim.Fused
	for _, n := range fg.Nodes {
		if f, ok := n.Op.(*prim.Fused); ok {
			for _, part := range strings.Split(f.Name(), "+") {
				if part == name {
					out = append(out, f)
					break
				}
			}
		}
	}
	return out
}

// An elementwise-only fused node may write its output over an input that
// dies there, as the planner lets the ops it replaces do (plan.InPlacer),
// so fusing never costs the planner's in-place reuse.
func TestFusedInPlace(t *testing.T) {
	var _ plan.InPlacer = (*prim.Fused)(nil)
	c := graphCases[0]
	for _, gc := range graphCases {
		if gc.name == "over an input that dies" {
			c = gc
		}
	}
	fg, _, err := transform.Fuse(c.graph(t, tensor.Float32))
	if err != nil {
		t.Fatal(err)
	}
	p, err := exec.Compile(fg, device.Meta())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range p.Plan.Order {
		if _, ok := n.Op.(*prim.Fused); !ok {
			continue
		}
		for _, in := range n.Inputs {
			if p.Plan.Of[in] == p.Plan.Of[n.Outputs[0]] {
				return
			}
		}
		t.Fatalf("%s: output has a buffer of its own", n.Op.Name())
	}
	t.Fatal("no fused node")
}

// Fuse keeps what others read and refuses what it must not merge.
func TestFuseRefuses(t *testing.T) {
	dt := tensor.Float32
	build := func(f func(g *trace.Graph)) *trace.Graph {
		g := trace.New()
		if err := trace.Capture(func() { f(g) }); err != nil {
			t.Fatal(err)
		}
		return g
	}
	t.Run("intermediate read elsewhere is an output", func(t *testing.T) {
		g := build(func(g *trace.Graph) {
			_, h := linear(g, dt)
			g.Output("y", op.ReLU(h))
			g.Output("s", op.Sum(h, false)) // a reduction reads the pre-activation
		})
		fs := fusedWith(t, g, "relu")
		if len(fs) != 1 || len(fs[0].Outs) != 2 {
			t.Fatalf("want one fused node with outputs h and relu(h), got %v", fs)
		}
	})
	t.Run("saved for backward is an output", func(t *testing.T) {
		g := build(func(g *trace.Graph) {
			x, h := linear(g, dt)
			y := op.ReLU(h)
			loss := op.Sum(op.Mul(y, y), false)
			grads, err := autodiff.Backward(loss, []*trace.Tensor{x})
			if err != nil {
				panic(err)
			}
			g.Output("gx", grads[0])
		})
		fs := fusedWith(t, g, "relu")
		if len(fs) != 1 {
			t.Fatalf("want one fused node with relu, got %d", len(fs))
		}
		// relu's output is read by its backward (and the mul): it is an
		// output; the bias add's is not.
		if o := fs[0].Outs; len(o) != 1 || o[0].Value != fs[0].FirstInstr()+1 {
			t.Fatalf("outputs %+v, want only relu's", o)
		}
	})
	t.Run("reader before the anchor", func(t *testing.T) {
		g := build(func(g *trace.Graph) {
			x, y := g.Input("x", dt, tensor.Shape{4, 4}), g.Input("y", dt, tensor.Shape{4, 4})
			a := op.Add(x, y)
			g.Output("s", op.Sum(a, false)) // reads a before z exists
			z := op.Mm(x, y)
			g.Output("c", op.Mul(a, z))
		})
		// The add would have to wait for z, after the sum that reads it.
		if fs := fusedWith(t, g, "add"); len(fs) != 0 {
			t.Fatalf("add fused: %s", fs[0].Name())
		}
		if fs := fusedWith(t, g, "mul"); len(fs) != 1 || fs[0].Name() != "matmul+mul" {
			t.Fatalf("want matmul+mul, got %v", fs)
		}
	})
	t.Run("inputs and outputs all live at once", func(t *testing.T) {
		g := build(func(g *trace.Graph) {
			x := g.Input("x", dt, tensor.Shape{6, 10}) // dies at the product
			w, b := param(g, "w", dt, 7, 10), param(g, "b", dt, 7)
			h := op.Add(op.MatMulT(x, w, false, true), b)
			g.Output("y", op.GELU(h, ""))
			g.Output("h", h)
		})
		// Fused, x, h and gelu(h) would be live together; unfused never
		// more than two of them.
		if fs := fusedWith(t, g, "gelu"); len(fs) != 0 {
			t.Fatalf("fused: %s", fs[0].Name())
		}
	})
	t.Run("input would live longer", func(t *testing.T) {
		g := build(func(g *trace.Graph) {
			x, y := g.Input("x", dt, tensor.Shape{64, 64}), g.Input("y", dt, tensor.Shape{64, 64})
			a := op.Exp(x) // x's last reader
			big := op.Mm(y, y)
			g.Output("c", op.Mul(a, big))
		})
		// Delaying exp after the matmul keeps x alive over it, and
		// exp's output replaces nothing: only matmul+mul may fuse.
		if fs := fusedWith(t, g, "exp"); len(fs) != 0 {
			t.Fatalf("exp fused: %s", fs[0].Name())
		}
	})
	t.Run("forward and backward stay apart", func(t *testing.T) {
		g := build(func(g *trace.Graph) {
			x := g.Input("x", dt, tensor.Shape{4, 4})
			y := op.ReLU(x)
			g.SetPhase(trace.Backward)
			g.Output("z", op.Scale(y, 2))
		})
		if fs := fusedWith(t, g, "relu"); len(fs) != 0 {
			t.Fatalf("fused across phases: %s", fs[0].Name())
		}
	})
	t.Run("unsupported broadcast", func(t *testing.T) {
		g := build(func(g *trace.Graph) {
			x := g.Input("x", dt, tensor.Shape{2, 3, 4})
			b := g.Input("b", dt, tensor.Shape{2, 1, 4}) // kept axes 0 and 2, not consecutive
			g.Output("y", op.ReLU(op.Add(x, b)))
		})
		if fs := fusedWith(t, g, "add"); len(fs) != 0 {
			t.Fatalf("fused: %s", fs[0].Name())
		}
	})
}

func TestFuseOff(t *testing.T) {
	g := graphCases[0].graph(t, tensor.Float32)
	t.Setenv("HEADROOM_FUSE", "0")
	fg, st, err := transform.Fuse(g)
	if err != nil || fg != g || st.Groups != 0 {
		t.Fatalf("HEADROOM_FUSE=0: %p (input %p), %+v, %v", fg, g, st, err)
	}
}

// A diagnosis run names the op and module that made a NaN, even inside a
// fused node where that value is never materialized.
func TestFuseDiagnosisNamesTheOp(t *testing.T) {
	g := trace.New()
	if err := trace.Capture(func() {
		var h *trace.Tensor
		g.WithModule("fc", func() { _, h = linear(g, tensor.Float32) })
		g.WithModule("act", func() { h = op.Log(h) }) // NaN where h < 0
		g.Output("y", op.ReLU(h))
	}); err != nil {
		t.Fatal(err)
	}
	fg, _, err := transform.Fuse(g)
	if err != nil {
		t.Fatal(err)
	}
	if got := fusedNodes(fg); got["matmul+add+log+relu"] != 1 {
		t.Fatalf("fused: %v", got)
	}
	dev := device.CPU()
	p, err := exec.Compile(fg, dev)
	if err != nil {
		t.Fatal(err)
	}
	arena := exec.NewArena(dev)
	defer arena.Release()
	r := rand.New(rand.NewSource(1))
	states := exec.StateMap{}
	for _, n := range fg.StateNodes() {
		v := make([]float32, n.Outputs[0].Shape().NumElements())
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		states[n.Name] = tensor.FromFloat32(n.Outputs[0].Shape(), v)
	}
	_, err = p.Run(context.Background(), arena, states, nil, &exec.Options{CheckFinite: true})
	var nf *exec.NonFiniteError
	if !errors.As(err, &nf) || nf.Node.Op.Name() != "log" || nf.Node.Module != "act" || !nf.Node.Outputs[0].Shape().Equal(tensor.Shape{6, 7}) {
		t.Fatalf("want a NaN named in act/log, got %v", err)
	}
}

// BenchmarkFuse times the kernels of chains as the zoo's models run them,
// fused and not (kern-ns/op: kernel time only, without the executor's
// copies of graph outputs).
func BenchmarkFuse(b *testing.B) {
	bn := func(add bool) func(g *trace.Graph) {
		return func(g *trace.Graph) {
			dt := tensor.Float32
			s := tensor.Shape{32, 64, 32, 32}
			x := g.State("x", "parameter", dt, s)
			w, bias := param(g, "w", dt, 64), param(g, "b", dt, 64)
			rm := g.State("rm", "buffer", dt, tensor.Shape{64})
			rv := g.State("rv", "buffer", dt, tensor.Shape{64})
			y := op.BatchNorm(x, w, bias, rm, rv, true, 0.1, 1e-5)
			if add {
				y = op.Add(y, g.State("res", "parameter", dt, s))
			}
			g.Output("y", op.ReLU(y))
		}
	}
	for _, c := range []struct {
		name  string
		build func(g *trace.Graph)
	}{
		{"batch_norm+relu", bn(false)},
		{"batch_norm+add+relu", bn(true)},
		{"matmul+add+gelu", func(g *trace.Graph) {
			dt := tensor.Float32
			x := g.State("x", "parameter", dt, tensor.Shape{2048, 384})
			w, bias := param(g, "w", dt, 1536, 384), param(g, "b", dt, 1536)
			h := op.Add(op.MatMulT(x, w, false, true), bias)
			g.Output("y", op.GELU(h, ""))
			g.Output("h", h)
		}},
		{"add+relu_backward", func(g *trace.Graph) {
			dt := tensor.Float32
			s := tensor.Shape{32, 64, 32, 32}
			x, y, z := g.State("x", "p", dt, s), g.State("y", "p", dt, s), g.State("z", "p", dt, s)
			g.Output("gx", prim.Apply1(&prim.UnaryBackward{Kind: prim.ReLUKind}, op.Add(x, y), z))
		}},
	} {
		for _, fuse := range []bool{false, true} {
			name := c.name + "/unfused"
			if fuse {
				name = c.name + "/fused"
			}
			b.Run(name, func(b *testing.B) {
				g := trace.New()
				if err := trace.Capture(func() { c.build(g) }); err != nil {
					b.Fatal(err)
				}
				if fuse {
					g, _, _ = transform.Fuse(g)
				}
				dev := device.CPU()
				p, err := exec.Compile(g, dev)
				if err != nil {
					b.Fatal(err)
				}
				arena := exec.NewArena(dev)
				defer arena.Release()
				states := exec.StateMap{}
				r := rand.New(rand.NewSource(1))
				for _, n := range g.StateNodes() {
					v := make([]float32, n.Outputs[0].Shape().NumElements())
					for i := range v {
						v[i] = 1 + float32(r.NormFloat64())
					}
					states[n.Name] = tensor.FromFloat32(n.Outputs[0].Shape(), v)
				}
				var kern time.Duration
				opts := &exec.Options{Observe: func(_ int, _ *trace.Node, d time.Duration) { kern += d }}
				b.ResetTimer()
				for range b.N {
					if _, err := p.Run(context.Background(), arena, states, nil, opts); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(kern.Nanoseconds())/float64(b.N), "kern-ns/op")
			})
		}
	}
}
