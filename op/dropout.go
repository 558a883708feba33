package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Dropout is torch.nn.functional.dropout with a reproducible mask: in
// training mode each element is zeroed with probability p and the others
// are scaled by 1/(1-p); the mask depends only on seed and the element's
// flat index. With p = 0 or not training it returns x itself; with p = 1 the
// result is zeros (x*0). It cannot reproduce PyTorch's random numbers.
func Dropout(x *trace.Tensor, p float64, training bool, seed uint64) *trace.Tensor {
	if !(p >= 0 && p <= 1) {
		x.Graph().Errorf("dropout", []*trace.Tensor{x}, "dropout probability has to be between 0 and 1, but got %v", p)
	}
	if !training || p == 0 {
		return x
	}
	return x.Graph().Apply(&prim.DropoutOp{P: p, Seed: seed}, x)[0]
}

// DropoutStep is Dropout whose mask also depends on the value of step (an
// int64 tensor of one element, e.g. a per-step input or a counter state):
// a compiled step reused across training steps then draws a fresh mask each
// time, while recomputation within a step reproduces it.
func DropoutStep(x *trace.Tensor, p float64, training bool, seed uint64, step *trace.Tensor) *trace.Tensor {
	if !(p >= 0 && p <= 1) {
		x.Graph().Errorf("dropout", []*trace.Tensor{x, step}, "dropout probability has to be between 0 and 1, but got %v", p)
	}
	if !training || p == 0 {
		return x
	}
	return x.Graph().Apply(&prim.DropoutOp{P: p, Seed: seed}, x, step)[0]
}

// StepInput names the per-step int64 input ([1]) that makes dropout masks
// differ from step to step; the trainer feeds the step number.
const StepInput = "rng_step"

// StepTensor returns graph g's per-step input.
func StepTensor(g *trace.Graph) *trace.Tensor {
	return g.Input(StepInput, tensor.Int64, tensor.Shape{1})
}
