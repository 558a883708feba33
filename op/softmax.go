package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

func softmaxApply(x *trace.Tensor, axis int, log bool) *trace.Tensor {
	name := "softmax"
	if log {
		name = "log_softmax"
	}
	a, err := x.Shape().Axis(axis)
	if err != nil {
		x.Graph().Errorf(name, []*trace.Tensor{x}, "%v", err)
	}
	return prim.Apply1(&prim.SoftmaxOp{Axis: a, Log: log}, x)
}

// Softmax is torch.softmax(x, dim=axis); axis may be negative.
func Softmax(x *trace.Tensor, axis int) *trace.Tensor { return softmaxApply(x, axis, false) }

// LogSoftmax is torch.log_softmax(x, dim=axis); axis may be negative.
func LogSoftmax(x *trace.Tensor, axis int) *trace.Tensor { return softmaxApply(x, axis, true) }
