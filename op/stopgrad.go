package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// StopGradient returns x as a value the backward pass does not
// differentiate through (torch's x.detach()).
func StopGradient(x *trace.Tensor) *trace.Tensor { return prim.Apply1(&prim.StopGradientOp{}, x) }
