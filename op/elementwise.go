package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// Add returns a + b with broadcasting.
func Add(a, b *trace.Tensor) *trace.Tensor { return prim.Add(a, b) }

// Sub returns a - b with broadcasting.
func Sub(a, b *trace.Tensor) *trace.Tensor { return binary(prim.SubKind, a, b) }

// Mul returns a * b with broadcasting.
func Mul(a, b *trace.Tensor) *trace.Tensor { return prim.Mul(a, b) }

// Div returns a / b with broadcasting.
func Div(a, b *trace.Tensor) *trace.Tensor { return prim.Div(a, b) }

// Maximum returns the elementwise maximum (torch.maximum).
func Maximum(a, b *trace.Tensor) *trace.Tensor { return binary(prim.MaxKind, a, b) }

// Minimum returns the elementwise minimum (torch.minimum).
func Minimum(a, b *trace.Tensor) *trace.Tensor { return binary(prim.MinKind, a, b) }

// Neg returns -x.
func Neg(x *trace.Tensor) *trace.Tensor { return prim.Neg(x) }

// Exp returns e^x.
func Exp(x *trace.Tensor) *trace.Tensor { return unary(prim.ExpKind, 0, x) }

// Log returns the natural logarithm.
func Log(x *trace.Tensor) *trace.Tensor { return unary(prim.LogKind, 0, x) }

// Sqrt returns the square root.
func Sqrt(x *trace.Tensor) *trace.Tensor { return unary(prim.SqrtKind, 0, x) }

// Rsqrt returns 1/sqrt(x).
func Rsqrt(x *trace.Tensor) *trace.Tensor { return unary(prim.RsqrtKind, 0, x) }

// Tanh returns the hyperbolic tangent.
func Tanh(x *trace.Tensor) *trace.Tensor { return unary(prim.TanhKind, 0, x) }

// Sigmoid returns 1/(1+e^-x).
func Sigmoid(x *trace.Tensor) *trace.Tensor { return unary(prim.SigmoidKind, 0, x) }

// ReLU returns max(x, 0).
func ReLU(x *trace.Tensor) *trace.Tensor { return unary(prim.ReLUKind, 0, x) }

// LeakyReLU returns x for x > 0, slope*x otherwise (PyTorch default slope 0.01).
func LeakyReLU(x *trace.Tensor, slope float64) *trace.Tensor {
	return unary(prim.LeakyReLUKind, slope, x)
}

// SiLU returns x*sigmoid(x).
func SiLU(x *trace.Tensor) *trace.Tensor { return unary(prim.SiLUKind, 0, x) }

// GELU returns x*Φ(x); with GELUTanh the tanh approximation. The zero
// Approximate is GELUExact.
func GELU(x *trace.Tensor, approximate Approximate) *trace.Tensor {
	switch approximate {
	case "", GELUExact:
		return unary(prim.GELUKind, 0, x)
	case GELUTanh:
		return unary(prim.GELUTanhKind, 0, x)
	}
	x.Graph().Errorf("gelu", []*trace.Tensor{x}, "approximate must be 'none' or 'tanh', got %q", approximate)
	return nil
}

// Abs returns |x|.
func Abs(x *trace.Tensor) *trace.Tensor { return unary(prim.AbsKind, 0, x) }

// Square returns x*x.
func Square(x *trace.Tensor) *trace.Tensor { return prim.Square(x) }

// Sign returns -1, 0 or 1.
func Sign(x *trace.Tensor) *trace.Tensor { return prim.Sign(x) }

// Scale returns x*c.
func Scale(x *trace.Tensor, c float64) *trace.Tensor { return prim.Scale(x, c) }

// AddScalar returns x+c.
func AddScalar(x *trace.Tensor, c float64) *trace.Tensor { return unary(prim.AddConstKind, c, x) }

// Pow returns x^c.
func Pow(x *trace.Tensor, c float64) *trace.Tensor { return prim.Pow(x, c) }

// Reciprocal returns 1/x.
func Reciprocal(x *trace.Tensor) *trace.Tensor { return unary(prim.ReciprocalKind, 0, x) }

// Sin returns sin(x).
func Sin(x *trace.Tensor) *trace.Tensor { return prim.Sin(x) }

// Cos returns cos(x).
func Cos(x *trace.Tensor) *trace.Tensor { return prim.Cos(x) }
