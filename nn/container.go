package nn

import (
	"strconv"

	"github.com/headroom-ml/headroom/trace"
)

// Layer is a module with a forward function of one tensor (train.Model's
// method), what Sequential chains.
type Layer interface {
	Forward(x *trace.Tensor) *trace.Tensor
}

// LayerFunc is a parameterless layer written as a function (op.ReLU,
// op.Flatten wrapped in a closure, ...).
type LayerFunc func(x *trace.Tensor) *trace.Tensor

// Forward applies f.
func (f LayerFunc) Forward(x *trace.Tensor) *trace.Tensor { return f(x) }

// Ctor builds a layer under the builder it is given (its module path).
type Ctor func(b Builder) Layer

// Func is the Ctor of a parameterless layer. It still takes an index in
// a Sequential, as torch.nn.ReLU() does, so that the layers after it are
// named as in PyTorch.
func Func(f func(x *trace.Tensor) *trace.Tensor) Ctor {
	return func(Builder) Layer { return LayerFunc(f) }
}

// Sequential is torch.nn.Sequential: layers applied in order, layer i
// registered under the path "i" below the container's, so its parameters
// are named as PyTorch's state_dict names them ("0.weight",
// "features.3.bias").
type Sequential struct {
	Module
	Layers []Layer
}

// NewSequential builds the layers in order, layer i with the builder
// b.Sub("i"):
//
//	nn.NewSequential(b,
//		func(b nn.Builder) nn.Layer { return nn.NewLinear(b, 784, 256, true) },
//		nn.Func(op.ReLU),
//		func(b nn.Builder) nn.Layer { return nn.NewLinear(b, 256, 10, true) })
//
// registers 0.weight, 0.bias, 2.weight and 2.bias.
func NewSequential(b Builder, layers ...Ctor) *Sequential {
	s := &Sequential{Module: NewModule(b), Layers: make([]Layer, len(layers))}
	for i, c := range layers {
		s.Layers[i] = c(b.Sub(strconv.Itoa(i)))
	}
	return s
}

// Forward applies the layers in order; ops of parameterless layers are
// attributed to their index's module path too.
func (s *Sequential) Forward(x *trace.Tensor) *trace.Tensor {
	for i, l := range s.Layers {
		path := strconv.Itoa(i)
		if s.Path != "" {
			path = s.Path + "." + path
		}
		in := x
		in.Graph().AtModule(path, func() { x = l.Forward(in) })
	}
	return x
}

// ModuleList is torch.nn.ModuleList: modules of one type indexed as in
// PyTorch, module i registered under the path "i" below the list's
// ("layers.1.bias"). It is a plain slice: index it, range over it.
type ModuleList[T any] []T

// NewModuleList builds n modules, module i with build(b.Sub("i"), i).
func NewModuleList[T any](b Builder, n int, build func(b Builder, i int) T) ModuleList[T] {
	l := make(ModuleList[T], n)
	for i := range l {
		l[i] = build(b.Sub(strconv.Itoa(i)), i)
	}
	return l
}
