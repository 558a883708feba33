package op_test

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/internal/check"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Reference values come from scripts/reference/ops_core.py (PyTorch 1.13);
// testdata/core.safetensors is committed so this test needs no Python. The
// case table is the file's "cases" metadata.
const coreRefPath = "testdata/core.safetensors"

// Tolerances, |got-want| <= atol + rtol*|want|. The cpu kernels evaluate
// transcendental functions in float64 and accumulate sums in float64, while
// PyTorch uses float32 SIMD approximations and float32 accumulation, so
// float32 results agree to a few ulps; float64 results to a few float64 ulps
// (the atol only matters for sums that cancel to near zero). Casts must
// agree to the bit.
const (
	coreRtol32, coreAtol32 = 1e-5, 1e-6
	coreRtol64, coreAtol64 = 1e-12, 1e-14
)

// coreRefCase is one entry of the case table.
type coreRefCase struct {
	Name    string
	Op      string
	DType   string
	Inputs  [][]int
	Fills   []string
	C       float64
	Axes    []int // nil: all axes
	KeepDim bool  `json:"keepdim"`
	Shape   []int
	Perm    []int
	Dims    []int
	TransA  bool `json:"trans_a"`
	TransB  bool `json:"trans_b"`
	To      string
}

var coreBinary = map[string]func(a, b *trace.Tensor) *trace.Tensor{
	"add": op.Add, "sub": op.Sub, "mul": op.Mul, "div": op.Div, "maximum": op.Maximum, "minimum": op.Minimum,
}

// fn builds the function of the case. For casts, half returns the half
// precision tensor itself instead of the round trip.
func (c coreRefCase) fn(t *testing.T, half bool) check.Func {
	t.Helper()
	if f, ok := coreBinary[c.Op]; ok {
		return bin(f)
	}
	unaryFns := map[string]func(x *trace.Tensor) *trace.Tensor{
		"neg": op.Neg, "exp": op.Exp, "log": op.Log, "sqrt": op.Sqrt, "rsqrt": op.Rsqrt,
		"tanh": op.Tanh, "sigmoid": op.Sigmoid, "relu": op.ReLU, "silu": op.SiLU,
		"abs": op.Abs, "square": op.Square, "reciprocal": op.Reciprocal, "sin": op.Sin, "cos": op.Cos,
		"gelu":       func(x *trace.Tensor) *trace.Tensor { return op.GELU(x, "none") },
		"gelu_tanh":  func(x *trace.Tensor) *trace.Tensor { return op.GELU(x, "tanh") },
		"leaky_relu": func(x *trace.Tensor) *trace.Tensor { return op.LeakyReLU(x, c.C) },
		"pow":        func(x *trace.Tensor) *trace.Tensor { return op.Pow(x, c.C) },
		"scale":      func(x *trace.Tensor) *trace.Tensor { return op.Scale(x, c.C) },
		"add_scalar": func(x *trace.Tensor) *trace.Tensor { return op.AddScalar(x, c.C) },
		"sum":        func(x *trace.Tensor) *trace.Tensor { return op.Sum(x, c.KeepDim, c.Axes...) },
		"mean":       func(x *trace.Tensor) *trace.Tensor { return op.Mean(x, c.KeepDim, c.Axes...) },
		"amax":       func(x *trace.Tensor) *trace.Tensor { return op.Amax(x, c.KeepDim, c.Axes...) },
		"reshape":    func(x *trace.Tensor) *trace.Tensor { return op.Reshape(x, tensor.Shape(c.Shape)) },
		"flatten":    func(x *trace.Tensor) *trace.Tensor { return op.Flatten(x, c.Dims[0], c.Dims[1]) },
		"permute":    func(x *trace.Tensor) *trace.Tensor { return op.PermuteAxes(x, c.Perm...) },
		"transpose":  func(x *trace.Tensor) *trace.Tensor { return op.Transpose(x, c.Dims[0], c.Dims[1]) },
		"expand":     func(x *trace.Tensor) *trace.Tensor { return op.BroadcastTo(x, tensor.Shape(c.Shape)) },
	}
	if f, ok := unaryFns[c.Op]; ok {
		return un(f)
	}
	switch c.Op {
	case "matmul":
		return bin(func(a, b *trace.Tensor) *trace.Tensor { return op.MatMulT(a, b, c.TransA, c.TransB) })
	case "linear":
		return func(xs []*trace.Tensor) *trace.Tensor {
			var b *trace.Tensor
			if len(xs) > 2 {
				b = xs[2]
			}
			return op.Linear(xs[0], xs[1], b)
		}
	case "cast":
		to := map[string]tensor.DType{"bfloat16": tensor.BFloat16, "float16": tensor.Float16}[c.To]
		if to == tensor.Invalid {
			t.Fatalf("unknown cast target %q", c.To)
		}
		return un(func(x *trace.Tensor) *trace.Tensor {
			h := op.To(x, to)
			if half {
				return h
			}
			return op.To(h, x.DType())
		})
	}
	t.Fatalf("unknown op %q", c.Op)
	return nil
}

// coreErr is the largest disagreement of one comparison: the absolute
// difference and its ratio to the allowed atol + rtol*|want|.
type coreErr struct{ abs, ratio float64 }

func (e *coreErr) max(o coreErr) {
	e.abs = math.Max(e.abs, o.abs)
	e.ratio = math.Max(e.ratio, o.ratio)
}

// coreClose compares got with want and reports the worst element if any is
// out of tolerance; NaNs must match NaNs.
func coreClose(got, want *tensor.Tensor, rtol, atol float64) (coreErr, error) {
	if !got.Shape.Equal(want.Shape) || got.DType != want.DType {
		return coreErr{}, fmt.Errorf("got %v%v, want %v%v", got.DType, got.Shape, want.DType, want.Shape)
	}
	g, w := got.Float64s(), want.Float64s()
	var e coreErr
	bad := -1
	for i := range g {
		if math.IsNaN(g[i]) || math.IsNaN(w[i]) {
			if math.IsNaN(g[i]) != math.IsNaN(w[i]) && bad < 0 {
				bad = i
			}
			continue
		}
		d := math.Abs(g[i] - w[i])
		if math.IsInf(w[i], 0) && g[i] == w[i] {
			d = 0
		}
		r := d / (atol + rtol*math.Abs(w[i]))
		if r > e.ratio {
			e.ratio = r
			if r > 1 {
				bad = i
			}
		}
		e.abs = math.Max(e.abs, d)
	}
	if bad >= 0 {
		return e, fmt.Errorf("element %d: got %.9g, want %.9g (|diff| %.3g, rtol %g, atol %g)", bad, g[bad], w[bad], math.Abs(g[bad]-w[bad]), rtol, atol)
	}
	return e, nil
}

// coreBits requires bit-identical data. PyTorch's vectorized float32 ->
// bfloat16 kernel writes NaN as 0xffff while headroom writes the canonical
// 0x7fc0 (see tensor.Float32ToBFloat16), so NaNs only have to be NaNs.
func coreBits(got, want *tensor.Tensor) error {
	if !got.Shape.Equal(want.Shape) || got.DType != want.DType {
		return fmt.Errorf("got %v%v, want %v%v", got.DType, got.Shape, want.DType, want.Shape)
	}
	g, w := got.Float64s(), want.Float64s()
	size := got.DType.Size()
	for i := range g {
		if math.IsNaN(g[i]) && math.IsNaN(w[i]) {
			continue
		}
		gb, wb := got.Data[i*size:(i+1)*size], want.Data[i*size:(i+1)*size]
		if string(gb) != string(wb) {
			return fmt.Errorf("element %d: got %v (% x), want %v (% x)", i, g[i], gb, w[i], wb)
		}
	}
	return nil
}

func TestCorePyTorchReference(t *testing.T) {
	f, err := safetensors.ReadFile(coreRefPath)
	if err != nil {
		t.Fatal(err)
	}
	var cases []coreRefCase
	if err := json.Unmarshal([]byte(f.Metadata["cases"]), &cases); err != nil {
		t.Fatalf("cases metadata: %v", err)
	}
	if len(cases) < 100 {
		t.Fatalf("only %d cases in the reference file", len(cases))
	}
	get := func(t *testing.T, name string) *tensor.Tensor {
		t.Helper()
		x, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.Op] = true
		t.Run(c.Name, func(t *testing.T) {
			want := map[string]tensor.DType{"float32": tensor.Float32, "float64": tensor.Float64}[c.DType]
			rtol, atol := coreRtol32, coreAtol32
			if want == tensor.Float64 {
				rtol, atol = coreRtol64, coreAtol64
			}
			var in []*tensor.Tensor
			for i, s := range c.Inputs {
				x := get(t, fmt.Sprintf("%s/x%d", c.Name, i))
				if x.DType != want || !x.Shape.Equal(tensor.Shape(s)) {
					t.Fatalf("input %d is %v%v, case table says %s%v", i, x.DType, x.Shape, c.DType, s)
				}
				in = append(in, x)
			}
			seed := get(t, c.Name+"/seed")
			coreCheckTies(t, c, in, seed, get(t, c.Name+"/g0"))
			y, grads, err := check.Eval(c.fn(t, false), in, seed)
			if err != nil {
				t.Fatal(err)
			}
			if c.Op == "cast" {
				if err := coreBits(y, get(t, c.Name+"/y")); err != nil {
					t.Errorf("forward: %v", err)
				}
				if err := coreBits(grads[0], get(t, c.Name+"/g0")); err != nil {
					t.Errorf("gradient: %v", err)
				}
				h, _, err := check.Eval(c.fn(t, true), in, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := coreBits(h, get(t, c.Name+"/yh")); err != nil {
					t.Errorf("%s values: %v", c.To, err)
				}
				return
			}
			fe, err := coreClose(y, get(t, c.Name+"/y"), rtol, atol)
			if err != nil {
				t.Errorf("forward: %v", err)
			}
			var ge coreErr
			for i := range in {
				e, err := coreClose(grads[i], get(t, fmt.Sprintf("%s/g%d", c.Name, i)), rtol, atol)
				if err != nil {
					t.Errorf("gradient of input %d: %v", i, err)
				}
				ge.max(e)
			}
			t.Logf("max |diff| forward %.3g, backward %.3g; of tolerance: forward %.3f, backward %.3f", fe.abs, ge.abs, fe.ratio, ge.ratio)
		})
	}
	for _, o := range []string{"add", "sub", "mul", "div", "maximum", "minimum", "neg", "exp", "log", "sqrt",
		"rsqrt", "tanh", "sigmoid", "relu", "leaky_relu", "silu", "gelu", "gelu_tanh", "abs", "square", "pow",
		"reciprocal", "sin", "cos", "scale", "add_scalar", "sum", "mean", "amax", "reshape", "flatten", "permute",
		"transpose", "expand", "matmul", "linear", "cast"} {
		if !seen[o] {
			t.Errorf("no reference case for %s", o)
		}
	}
}

// coreCheckTies makes sure the tie cases really contain ties, so that the
// even split of the gradient is exercised, and the NaN cases NaNs.
func coreCheckTies(t *testing.T, c coreRefCase, in []*tensor.Tensor, seed, g0 *tensor.Tensor) {
	t.Helper()
	for i, f := range c.Fills {
		if f != "nan" {
			continue
		}
		nans := 0
		for _, v := range in[i].Float64s() {
			if math.IsNaN(v) {
				nans++
			}
		}
		if nans == 0 {
			t.Fatalf("NaN case without NaNs in input %d", i)
		}
	}
	if len(c.Fills) == 0 || c.Fills[0] != "ints" {
		return
	}
	ties := 0
	switch c.Op {
	case "maximum", "minimum":
		out, err := tensor.Broadcast(in[0].Shape, in[1].Shape)
		if err != nil {
			t.Fatal(err)
		}
		a, b := coreBroadcast(in[0], out), coreBroadcast(in[1], out)
		for i := range a {
			if a[i] == b[i] {
				ties++
			}
		}
	case "amax":
		// With one maximum per group PyTorch's gradient has as many
		// nonzeros as the seed has elements; ties make more.
		ties = -seed.Shape.NumElements()
		for _, v := range g0.Float64s() {
			if v != 0 {
				ties++
			}
		}
	default:
		return
	}
	if ties <= 0 {
		t.Fatalf("tie case without ties")
	}
}

// coreBroadcast returns x's values broadcast to shape (row-major).
func coreBroadcast(x *tensor.Tensor, shape tensor.Shape) []float64 {
	v := x.Float64s()
	out := make([]float64, shape.NumElements())
	st := make([]int, len(shape))
	acc := 1
	for i := len(x.Shape) - 1; i >= 0; i-- {
		if x.Shape[i] != 1 {
			st[len(shape)-len(x.Shape)+i] = acc
		}
		acc *= x.Shape[i]
	}
	idx := make([]int, len(shape))
	for k := range out {
		o := 0
		for d := range idx {
			o += idx[d] * st[d]
		}
		out[k] = v[o]
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out
}
