package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&OptimizerStep{}) }

// OptimizerStep applies the optimizer's update to one parameter inside the
// step, as soon as its gradient is final: PyTorch's optimizer step in the
// backward pass (register_post_accumulate_grad_hook). Input 0 is the
// parameter (a float32 state, updated in place), input 1 its gradient (an
// arena value, dead after this node), input 2 the step's loss (a scalar).
//
// The optimizer and its state live outside the graph: the executor hands
// the parameter and gradient to the function bound in exec.Options.Update.
// Every update reads the loss, so all of them run after it is known; when
// it is NaN or infinite the run stops at the first update with an error,
// before any parameter has changed. It is a trace.Updater: the schedule
// runs it after every other reader of the parameter.
type OptimizerStep struct {
	Param string // the parameter's name (the optimizer keys its state by it)
}

func (o *OptimizerStep) Name() string { return "optimizer_step_" }

// Traits: the executor runs the optimizer's code.
func (o *OptimizerStep) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeNever, Kernel: KernelNone}
}

// Cost: what the gradient write it replaces (Accumulate) costs: the
// update's own work is the optimizer's, the same whether it runs in the
// backward pass or after the step, so moving it is never slower.
func (o *OptimizerStep) Cost(in, out []trace.Meta) Cost {
	return Cost{Bytes: float64(in[0].Bytes() + in[1].Bytes())}
}

func (o *OptimizerStep) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *OptimizerStep) Effect() {}

func (o *OptimizerStep) Update() {}

func (o *OptimizerStep) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 3); err != nil {
		return nil, err
	}
	if in[0].DType != tensor.Float32 || in[1].DType != tensor.Float32 || !in[0].Shape.Equal(in[1].Shape) {
		return nil, fmt.Errorf("parameter %v and gradient %v differ or are not float32", in[0], in[1])
	}
	if !in[2].DType.IsFloat() || in[2].Shape.NumElements() != 1 {
		return nil, fmt.Errorf("the loss must be a floating-point scalar, got %v", in[2])
	}
	return nil, nil
}

// StepInBackward records the optimizer's update of parameter param (a state
// tensor named name) from its final gradient grad, guarded by the step's
// loss.
func StepInBackward(param, grad, loss *trace.Tensor, name string) {
	g := param.Graph()
	if param.Node.Kind != trace.KindState {
		g.Errorf("optimizer_step_", []*trace.Tensor{param, grad}, "the parameter must be a state tensor")
	}
	g.Apply(&OptimizerStep{Param: name}, param, grad, loss)
}
