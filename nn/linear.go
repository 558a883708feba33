package nn

import (
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Linear is torch.nn.Linear: y = x W^T + b.
type Linear struct {
	Module
	Weight, Bias *Param
	In, Out      int
}

// NewLinear registers weight [out, in] and, with bias, bias [out].
func NewLinear(b Builder, in, out int, bias bool) *Linear {
	l := &Linear{Module: NewModule(b), In: in, Out: out}
	l.Weight = b.Param("weight", tensor.Shape{out, in}, KaimingUniformDefault(in))
	if bias {
		l.Bias = b.Param("bias", tensor.Shape{out}, BiasDefault(in))
	}
	return l
}

// Forward applies the layer.
func (l *Linear) Forward(x *trace.Tensor) *trace.Tensor {
	return l.Scope(x, func() *trace.Tensor {
		g := x.Graph()
		var bias *trace.Tensor
		if l.Bias != nil {
			bias = l.Bias.T(g)
		}
		return op.Linear(x, l.Weight.T(g), bias)
	})
}
