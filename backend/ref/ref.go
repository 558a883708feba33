// Package ref is a reference backend: every kernel is a plain loop over
// float64 values, written for clarity and nothing else (no blocking, no
// threads, no assembly), so that it can serve as an oracle for the cpu
// backend's kernels. Inputs are read as float64 whatever their dtype;
// results are stored in the output's dtype.
//
// It covers what a multilayer perceptron and a small convolutional network
// need to train (elementwise ops, matrix products, reductions, conv2d and
// its gradients, max pooling, cross-entropy, gradient accumulation and the
// fused nodes transform.Fuse makes of them); any other op is refused when a
// program is compiled, with a *backend.UnsupportedError naming it.
//
// Use it by putting it on a device: d := device.CPU(); d.Backend = ref.New().
package ref

import (
	"fmt"
	"math"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Backend is the reference backend.
type Backend struct{}

// New returns the reference backend.
func New() Backend { return Backend{} }

// Name implements backend.Backend.
func (Backend) Name() string { return "ref" }

// Workspace implements backend.Backend: the loops need no scratch.
func (Backend) Workspace(*trace.Node) int64 { return 0 }

// Kernel implements backend.Backend.
func (b Backend) Kernel(o trace.Op) (backend.Kernel, error) {
	switch o := o.(type) {
	case *prim.Binary, *prim.Compare, *prim.Unary, *prim.UnaryBackward, *prim.Cast, *prim.Accumulate:
		return elementwise, nil
	case *prim.MatMul:
		return matmul, nil
	case *prim.Reduce:
		return reduce, nil
	case *prim.Conv2dOp:
		return conv2d, nil
	case *prim.Conv2dBackwardInput:
		return conv2dBackwardInput, nil
	case *prim.Conv2dBackwardWeight:
		return conv2dBackwardWeight, nil
	case *prim.MaxPool2dOp:
		return maxPool2d, nil
	case *prim.MaxPool2dBackward:
		return maxPool2dBackward, nil
	case *prim.CrossEntropyOp:
		return crossEntropy, nil
	case *prim.CrossEntropyBackward:
		return crossEntropyBackward, nil
	case *prim.Fused:
		// Refused whole when a part is: the error names the part.
		if o.Producer != nil {
			if _, err := b.Kernel(o.Producer); err != nil {
				return nil, err
			}
		}
		for _, in := range o.Prog {
			if _, err := b.Kernel(in.Op); err != nil {
				return nil, err
			}
		}
		return b.fused, nil
	}
	return nil, backend.Unsupported("ref", o, "")
}

// values reads t as float64.
func values(t *tensor.Tensor) []float64 { return t.Float64s() }

// store writes v into t, converted to t's dtype.
func store(t *tensor.Tensor, v []float64) {
	copy(t.Data, tensor.FromFloat64(t.Shape, v).Convert(t.DType).Data)
}

// bcast maps each flat index of shape out to the flat index of in, which
// broadcasts to out (numpy rules: trailing axes aligned, size 1 repeats).
func bcast(in, out tensor.Shape) []int {
	idx := make([]int, out.NumElements())
	off := len(out) - len(in)
	for i := range idx {
		q, src, stride := i, 0, 1
		for d := len(out) - 1; d >= 0; d-- {
			c := q % out[d]
			q /= out[d]
			if j := d - off; j >= 0 {
				if in[j] != 1 {
					src += c * stride
				}
				stride *= in[j]
			}
		}
		idx[i] = src
	}
	return idx
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

const sqrt2OverPi = 0.7978845608028654 // sqrt(2/pi)

// unary is y = f(x) for every kind of prim.Unary.
func unary(k prim.UnaryKind, c, x float64) float64 {
	switch k {
	case prim.NegKind:
		return -x
	case prim.ExpKind:
		return math.Exp(x)
	case prim.LogKind:
		return math.Log(x)
	case prim.SqrtKind:
		return math.Sqrt(x)
	case prim.RsqrtKind:
		return 1 / math.Sqrt(x)
	case prim.TanhKind:
		return math.Tanh(x)
	case prim.SigmoidKind:
		return sigmoid(x)
	case prim.ReLUKind:
		if x > 0 || x != x {
			return x
		}
		return 0
	case prim.AbsKind:
		return math.Abs(x)
	case prim.SquareKind:
		return x * x
	case prim.SignKind:
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		case x != x:
			return x
		}
		return 0
	case prim.ScaleKind:
		return x * c
	case prim.AddConstKind:
		return x + c
	case prim.PowKind:
		return math.Pow(x, c)
	case prim.LeakyReLUKind:
		if x > 0 {
			return x
		}
		return x * c
	case prim.SiLUKind:
		return x * sigmoid(x)
	case prim.GELUKind:
		return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
	case prim.GELUTanhKind:
		return 0.5 * x * (1 + math.Tanh(sqrt2OverPi*(x+0.044715*x*x*x)))
	case prim.ReciprocalKind:
		return 1 / x
	case prim.SinKind:
		return math.Sin(x)
	case prim.CosKind:
		return math.Cos(x)
	}
	panic(fmt.Sprintf("ref: unary kind %d", k)) // every kind is listed above
}

// unaryBackward is the input gradient from output gradient g and the saved
// value s (the output for relu, tanh, sigmoid and leaky relu with a slope
// >= 0, the input otherwise; see prim.UnaryBackward).
func unaryBackward(k prim.UnaryKind, c, g, s float64) float64 {
	switch k {
	case prim.ReLUKind:
		if s > 0 || s != s {
			return g
		}
		return 0
	case prim.TanhKind:
		return g * (1 - s*s)
	case prim.SigmoidKind:
		return g * s * (1 - s)
	case prim.LeakyReLUKind:
		if s > 0 {
			return g
		}
		return g * c
	case prim.SiLUKind:
		sg := sigmoid(s)
		return g * sg * (1 + s*(1-sg))
	case prim.GELUKind:
		return g * (0.5*(1+math.Erf(s/math.Sqrt2)) + s*math.Exp(-0.5*s*s)/math.Sqrt(2*math.Pi))
	case prim.GELUTanhKind:
		t := math.Tanh(sqrt2OverPi * (s + 0.044715*s*s*s))
		return g * (0.5*(1+t) + 0.5*s*(1-t*t)*sqrt2OverPi*(1+3*0.044715*s*s))
	}
	return math.NaN() // no such backward: prim.UnaryBackward's Grad never makes one
}

func binary(k prim.BinaryKind, a, b float64) float64 {
	switch k {
	case prim.AddKind:
		return a + b
	case prim.SubKind:
		return a - b
	case prim.MulKind:
		return a * b
	case prim.DivKind:
		return a / b
	case prim.MaxKind:
		if a != a || a > b {
			return a
		}
		return b
	case prim.MinKind:
		if a != a || a < b {
			return a
		}
		return b
	}
	panic(fmt.Sprintf("ref: binary kind %d", k))
}

// compare is prim.Compare's share of the gradient of maximum/minimum for the
// input p against q.
func compare(c *prim.Compare, a, b float64) float64 {
	p, q := a, b
	if c.Second {
		p, q = q, p
	}
	switch {
	case p == q:
		return 0.5
	case c.Kind == prim.MaxKind && p < q, c.Kind == prim.MinKind && p > q:
		return 0
	}
	return 1
}

// apply is one elementwise op on flat, equally long operands (no
// broadcasting): the form the program of a fused node takes.
func apply(o trace.Op, args [][]float64) []float64 {
	y := make([]float64, len(args[0]))
	for i := range y {
		switch o := o.(type) {
		case *prim.Binary:
			y[i] = binary(o.Kind, args[0][i], args[1][i])
		case *prim.Unary:
			y[i] = unary(o.Kind, o.C, args[0][i])
		case *prim.UnaryBackward:
			y[i] = unaryBackward(o.Kind, o.C, args[0][i], args[1][i])
		}
	}
	return y
}

// elementwise runs the ops that map elements to elements.
func elementwise(n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	switch o := n.Op.(type) {
	case *prim.Binary, *prim.Compare:
		a, b := values(in[0]), values(in[1])
		ia, ib := bcast(in[0].Shape, out[0].Shape), bcast(in[1].Shape, out[0].Shape)
		y := make([]float64, len(ia))
		for i := range y {
			if c, ok := o.(*prim.Compare); ok {
				y[i] = compare(c, a[ia[i]], b[ib[i]])
			} else {
				y[i] = binary(o.(*prim.Binary).Kind, a[ia[i]], b[ib[i]])
			}
		}
		store(out[0], y)
	case *prim.Unary, *prim.UnaryBackward:
		args := make([][]float64, len(in))
		for i, t := range in {
			args[i] = values(t)
		}
		store(out[0], apply(o, args))
	case *prim.Cast:
		store(out[0], values(in[0]))
	case *prim.Accumulate:
		v := values(in[1])
		if o.Add {
			for i, d := range values(in[0]) {
				v[i] += d
			}
		}
		store(in[0], v)
	}
	return nil
}

// matmul is out = op(A) op(B) over the broadcast batch axes.
func matmul(n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.MatMul)
	as, bs := in[0].Shape, in[1].Shape
	batch, m, k, nn, err := o.Dims(as, bs)
	if err != nil {
		return err
	}
	a, b := values(in[0]), values(in[1])
	ia := bcast(as[:len(as)-2], batch)
	ib := bcast(bs[:len(bs)-2], batch)
	y := make([]float64, out[0].Shape.NumElements())
	for p := range ia {
		ab, bb := a[ia[p]*m*k:], b[ib[p]*k*nn:]
		for i := 0; i < m; i++ {
			for j := 0; j < nn; j++ {
				var s float64
				for q := 0; q < k; q++ {
					av := ab[i*k+q] // A is [m, k]
					if o.TransA {
						av = ab[q*m+i] // stored [k, m]
					}
					bv := bb[q*nn+j] // B is [k, n]
					if o.TransB {
						bv = bb[j*k+q] // stored [n, k]
					}
					s += av * bv
				}
				y[p*m*nn+i*nn+j] = s
			}
		}
	}
	store(out[0], y)
	return nil
}

// reduce sums, averages or takes the maximum over the reduced axes.
func reduce(n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.Reduce)
	s := in[0].Shape
	red := make([]bool, len(s))
	for _, a := range o.Axes {
		red[a] = true
	}
	if len(o.Axes) == 0 {
		for i := range red {
			red[i] = true
		}
	}
	// The output indexed as the input with reduced axes of size 1 (the same
	// flat order whether or not they are kept).
	kept := s.Clone()
	count := 1
	for d := range kept {
		if red[d] {
			count *= kept[d]
			kept[d] = 1
		}
	}
	x := values(in[0])
	y := make([]float64, kept.NumElements())
	if o.Kind == prim.AmaxKind {
		for i := range y {
			y[i] = math.Inf(-1)
		}
	}
	for i, v := range x {
		q, dst, stride := i, 0, 1
		for d := len(s) - 1; d >= 0; d-- {
			c := q % s[d]
			q /= s[d]
			if !red[d] {
				dst += c * stride
			}
			stride *= kept[d]
		}
		switch o.Kind {
		case prim.AmaxKind:
			if v > y[dst] || v != v {
				y[dst] = v
			}
		default:
			y[dst] += v
		}
	}
	if o.Kind == prim.MeanKind {
		for i := range y {
			y[i] /= float64(count)
		}
	}
	store(out[0], y)
	return nil
}
