package train

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
)

// OutputName is the graph output holding the model's output in a step
// compiled with Config.Outputs.
const OutputName = "out"

// Outputs returns the model's outputs for the samples of the last Step or
// StepAccumulate, in order (the micro-batches' outputs joined along the
// first axis), as computed in the forward pass of that step: before its
// update, in training mode. It needs Config.Outputs; otherwise, and on a
// device without data, it returns nil. The tensor is the caller's (host
// memory, not a view of the device).
func (t *Trainer) Outputs() *tensor.Tensor {
	switch len(t.outs) {
	case 0:
		return nil
	case 1:
		return t.outs[0]
	}
	out, err := joinRows(t.outs)
	if err != nil {
		panic(err) // the micro-batches of one step differ only in their first axis
	}
	return out
}

// joinRows concatenates tensors along their first axis.
func joinRows(ts []*tensor.Tensor) (*tensor.Tensor, error) {
	first := ts[0]
	if len(first.Shape) == 0 {
		return nil, fmt.Errorf("train: cannot join scalar outputs")
	}
	shape := first.Shape.Clone()
	shape[0] = 0
	for _, t := range ts {
		if t.DType != first.DType || len(t.Shape) != len(shape) || !t.Shape[1:].Equal(shape[1:]) {
			return nil, fmt.Errorf("train: outputs %v %v and %v %v do not join", first.DType, first.Shape, t.DType, t.Shape)
		}
		shape[0] += t.Shape[0]
	}
	out := tensor.New(first.DType, shape)
	off := 0
	for _, t := range ts {
		off += copy(out.Data[off:], t.Data)
	}
	return out, nil
}
