// Package zoo holds reference architectures whose parameter names, shapes
// and counts are identical to their PyTorch counterparts, so weights move
// between the two through safetensors files.
package zoo

import (
	"strconv"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/trace"
)

// MLP is nn.Sequential(Linear, ReLU, Linear, ReLU, ..., Linear): parameter
// names "0.weight", "0.bias", "2.weight", ... as in PyTorch.
type MLP struct {
	Layers []*nn.Linear
}

// NewMLP builds an MLP with the given layer widths (input first, output last).
func NewMLP(b nn.Builder, widths ...int) *MLP {
	m := &MLP{}
	for i := 0; i+1 < len(widths); i++ {
		m.Layers = append(m.Layers, nn.NewLinear(b.Sub(strconv.Itoa(2*i)), widths[i], widths[i+1], true))
	}
	return m
}

// Forward flattens all but the batch axis and applies the layers.
func (m *MLP) Forward(x *trace.Tensor) *trace.Tensor {
	if len(x.Shape()) > 2 {
		x = op.Flatten(x, 1, -1)
	}
	for i, l := range m.Layers {
		x = l.Forward(x)
		if i+1 < len(m.Layers) {
			x = op.ReLU(x)
		}
	}
	return x
}
