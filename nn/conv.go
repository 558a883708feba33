package nn

import (
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Conv2d is torch.nn.Conv2d with a square kernel.
type Conv2d struct {
	Module
	Weight, Bias *Param
	Opts         op.ConvOpts
}

// NewConv2d registers weight [out, in/groups, k, k] and optionally bias [out].
func NewConv2d(b Builder, in, out, k int, o op.ConvOpts, bias bool) *Conv2d {
	o = o.Normalized()
	c := &Conv2d{Module: NewModule(b), Opts: o}
	fanIn := in / o.Groups * k * k
	c.Weight = b.Param("weight", tensor.Shape{out, in / o.Groups, k, k}, KaimingUniformDefault(fanIn))
	if bias {
		c.Bias = b.Param("bias", tensor.Shape{out}, BiasDefault(fanIn))
	}
	return c
}

// Forward applies the convolution.
func (c *Conv2d) Forward(x *trace.Tensor) *trace.Tensor {
	return c.Scope(x, func() *trace.Tensor {
		g := x.Graph()
		var b *trace.Tensor
		if c.Bias != nil {
			b = c.Bias.T(g)
		}
		return op.Conv2d(x, c.Weight.T(g), b, c.Opts)
	})
}
