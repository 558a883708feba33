package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	for k := range binaryNames {
		register(&Binary{Kind: BinaryKind(k)})
	}
	register(&Compare{Kind: MaxKind}, &Compare{Kind: MinKind})
	for k := range unaryNames {
		register(&Unary{Kind: UnaryKind(k)})
	}
	for _, k := range []UnaryKind{TanhKind, SigmoidKind, ReLUKind, LeakyReLUKind, SiLUKind, GELUKind, GELUTanhKind} {
		register(&UnaryBackward{Kind: k})
	}
}

// BinaryKind selects an elementwise binary operation.
type BinaryKind uint8

const (
	AddKind BinaryKind = iota
	SubKind
	MulKind
	DivKind
	MaxKind // elementwise maximum (torch.maximum)
	MinKind
)

var binaryNames = [...]string{"add", "sub", "mul", "div", "maximum", "minimum"}

// Binary is an elementwise operation on two tensors with broadcasting.
type Binary struct{ Kind BinaryKind }

func (o *Binary) Name() string { return binaryNames[o.Kind] }

// Traits: maximum and minimum select (exact); an addition or subtraction
// of two activations is a residual connection.
func (o *Binary) Traits() Traits {
	a, r := AutocastPromote, RecomputeExpensive
	switch o.Kind {
	case MaxKind, MinKind:
		a = AutocastExact
	case AddKind, SubKind:
		r = RecomputeResidual
	}
	return Traits{Autocast: a, Fusion: FuseElementwise, Stats: StatsNone, Recompute: r, Kernel: KernelRequired}
}

func (o *Binary) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

// InPlaceInputs: either operand of the output's shape.
func (o *Binary) InPlaceInputs(in []trace.Meta) []int { return []int{0, 1} }

func (o *Binary) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if err := sameDType(in); err != nil {
		return nil, err
	}
	s, err := tensor.Broadcast(in[0].Shape, in[1].Shape)
	if err != nil {
		return nil, err
	}
	return metas1(in[0].DType, s), nil
}

func (o *Binary) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	gy := gouts[0]
	a, b := n.Inputs[0], n.Inputs[1]
	var ga, gb *trace.Tensor
	switch o.Kind {
	case AddKind:
		ga, gb = gy, gy
	case SubKind:
		ga, gb = gy, Neg(gy)
	case MulKind:
		ga, gb = Mul(gy, b), Mul(gy, a)
	case DivKind:
		// d(a/b)/db = -a/b^2 = -(y/b)
		ga = Div(gy, b)
		gb = Neg(Mul(ga, n.Outputs[0]))
	case MaxKind, MinKind:
		// Ties split the gradient evenly, as PyTorch does. Each input has its
		// own mask because a NaN (which the output propagates) passes the
		// whole gradient to both inputs in PyTorch, so the masks do not
		// always add up to one.
		ga = Mul(gy, Apply1(&Compare{Kind: o.Kind}, a, b))
		gb = Mul(gy, Apply1(&Compare{Kind: o.Kind, Second: true}, a, b))
	}
	return []*trace.Tensor{SumTo(ga, a.Shape()), SumTo(gb, b.Shape())}
}

// Compare produces, for maximum/minimum's backward, the share of the
// gradient that input 0 gets (input 1 with Second): 0 where it strictly
// loses, 0.5 on ties and 1 otherwise, including where either input is NaN,
// as PyTorch's maximum/minimum backward does (broadcast shape, input dtype).
type Compare struct {
	Kind   BinaryKind
	Second bool
}

func (o *Compare) Name() string { return binaryNames[o.Kind] + "_mask" }

func (o *Compare) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *Compare) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *Compare) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *Compare) Infer(in []trace.Meta) ([]trace.Meta, error) {
	return (&Binary{}).Infer(in)
}

// Apply1 applies op to inputs in their graph.
func Apply1(o trace.Op, in ...*trace.Tensor) *trace.Tensor { return in[0].Graph().Apply1(o, in...) }

func binary(k BinaryKind, a, b *trace.Tensor) *trace.Tensor { return Apply1(&Binary{Kind: k}, a, b) }

// Add returns a + b with broadcasting.
func Add(a, b *trace.Tensor) *trace.Tensor { return binary(AddKind, a, b) }

// Mul returns a * b with broadcasting.
func Mul(a, b *trace.Tensor) *trace.Tensor { return binary(MulKind, a, b) }

// Div returns a / b with broadcasting.
func Div(a, b *trace.Tensor) *trace.Tensor { return binary(DivKind, a, b) }

// UnaryKind selects an elementwise unary operation.
type UnaryKind uint8

const (
	NegKind UnaryKind = iota
	ExpKind
	LogKind
	SqrtKind
	RsqrtKind
	TanhKind
	SigmoidKind
	ReLUKind
	AbsKind
	SquareKind
	SignKind
	ScaleKind    // x * C
	AddConstKind // x + C
	PowKind      // x ^ C
	LeakyReLUKind
	SiLUKind
	GELUKind     // exact (erf)
	GELUTanhKind // tanh approximation
	ReciprocalKind
	SinKind
	CosKind
)

var unaryNames = [...]string{"neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs", "square", "sign",
	"mul_scalar", "add_scalar", "pow", "leaky_relu", "silu", "gelu", "gelu_tanh", "reciprocal", "sin", "cos"}

// Unary is an elementwise function of one tensor; C is the scalar attribute
// of the kinds that take one (scale, added constant, exponent, negative slope).
type Unary struct {
	Kind UnaryKind
	C    float64
}

func (o *Unary) Name() string { return unaryNames[o.Kind] }

// Traits: exp, log, pow, rsqrt and reciprocal run in float32 (autocast's
// list), relu, neg and abs are exact; activations and scalar scaling are
// cheap to recompute.
func (o *Unary) Traits() Traits {
	a, r := AutocastPromote, RecomputeExpensive
	switch o.Kind {
	case ExpKind, LogKind, PowKind, RsqrtKind, ReciprocalKind:
		a = AutocastFP32
	case ReLUKind, NegKind, AbsKind:
		a = AutocastExact
	}
	switch o.Kind {
	case ReLUKind, LeakyReLUKind, GELUKind, GELUTanhKind, SiLUKind, TanhKind, SigmoidKind, ScaleKind, AddConstKind:
		r = RecomputeCheap
	}
	return Traits{Autocast: a, Fusion: FuseElementwise, Stats: StatsNone, Recompute: r, Kernel: KernelRequired}
}

func (o *Unary) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

// InPlaceInputs: the input.
func (o *Unary) InPlaceInputs(in []trace.Meta) []int { return []int{0} }

func (o *Unary) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in[0]); err != nil {
		return nil, err
	}
	return metas1(in[0].DType, in[0].Shape), nil
}

func (o *Unary) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	gy, x, y := gouts[0], n.Inputs[0], n.Outputs[0]
	var gx *trace.Tensor
	switch o.Kind {
	case NegKind:
		gx = Neg(gy)
	case ExpKind:
		gx = Mul(gy, y)
	case LogKind:
		gx = Div(gy, x)
	case SqrtKind:
		gx = Div(Scale(gy, 0.5), y)
	case RsqrtKind:
		// d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
		gx = Mul(gy, Scale(Mul(y, Square(y)), -0.5))
	case TanhKind:
		gx = Apply1(&UnaryBackward{Kind: TanhKind}, gy, y)
	case SigmoidKind:
		gx = Apply1(&UnaryBackward{Kind: SigmoidKind}, gy, y)
	case ReLUKind:
		gx = Apply1(&UnaryBackward{Kind: ReLUKind}, gy, y)
	case AbsKind:
		gx = Mul(gy, Sign(x))
	case SquareKind:
		gx = Mul(gy, Scale(x, 2))
	case SignKind:
		gx = Scale(gy, 0)
	case ScaleKind:
		gx = Scale(gy, o.C)
	case AddConstKind:
		gx = gy
	case PowKind:
		gx = Mul(gy, Scale(Pow(x, o.C-1), o.C))
	case LeakyReLUKind:
		// With a slope >= 0 the output is > 0 exactly where the input is
		// (NaN, ±0 and underflow included), so the backward tests the
		// output, as ReLU's does: the pre-activation need not be kept,
		// and usually the output is kept anyway as the next layer's input.
		saved := y
		if o.C < 0 {
			saved = x
		}
		gx = Apply1(&UnaryBackward{Kind: o.Kind, C: o.C}, gy, saved)
	case SiLUKind, GELUKind, GELUTanhKind:
		gx = Apply1(&UnaryBackward{Kind: o.Kind, C: o.C}, gy, x)
	case ReciprocalKind:
		gx = Neg(Mul(gy, Square(y)))
	case SinKind:
		gx = Mul(gy, Cos(x))
	case CosKind:
		gx = Neg(Mul(gy, Sin(x)))
	default:
		panic(fmt.Sprintf("op: no gradient for %s", o.Name()))
	}
	return []*trace.Tensor{gx}
}

// UnaryBackward computes the input gradient of an activation from the output
// gradient and one saved tensor: the output for tanh, sigmoid, relu and
// leaky relu with a slope >= 0 (so the input need not be kept), the input
// for the others.
type UnaryBackward struct {
	Kind UnaryKind
	C    float64
}

func (o *UnaryBackward) Name() string { return unaryNames[o.Kind] + "_backward" }

// Traits: relu's backward selects.
func (o *UnaryBackward) Traits() Traits {
	a := AutocastPromote
	if o.Kind == ReLUKind {
		a = AutocastExact
	}
	return Traits{Autocast: a, Fusion: FuseElementwise, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *UnaryBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

// InPlaceInputs: the incoming gradient, else the saved tensor.
func (o *UnaryBackward) InPlaceInputs(in []trace.Meta) []int { return []int{0, 1} }

func (o *UnaryBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	if !in[0].Shape.Equal(in[1].Shape) {
		return nil, fmt.Errorf("gradient shape %v differs from saved shape %v", in[0].Shape, in[1].Shape)
	}
	return metas1(in[0].DType, in[0].Shape), nil
}

func unary(k UnaryKind, c float64, x *trace.Tensor) *trace.Tensor {
	return Apply1(&Unary{Kind: k, C: c}, x)
}

// Neg returns -x.
func Neg(x *trace.Tensor) *trace.Tensor { return unary(NegKind, 0, x) }

// Square returns x*x.
func Square(x *trace.Tensor) *trace.Tensor { return unary(SquareKind, 0, x) }

// Sign returns -1, 0 or 1.
func Sign(x *trace.Tensor) *trace.Tensor { return unary(SignKind, 0, x) }

// Scale returns x*c.
func Scale(x *trace.Tensor, c float64) *trace.Tensor { return unary(ScaleKind, c, x) }

// Pow returns x^c.
func Pow(x *trace.Tensor, c float64) *trace.Tensor { return unary(PowKind, c, x) }

// Sin returns sin(x).
func Sin(x *trace.Tensor) *trace.Tensor { return unary(SinKind, 0, x) }

// Cos returns cos(x).
func Cos(x *trace.Tensor) *trace.Tensor { return unary(CosKind, 0, x) }
