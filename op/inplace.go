package op

import "github.com/headroom-ml/headroom/trace"

// The planner (plan.InPlacer) may give these ops' output the memory of an
// input that dies at the op. Their cpu kernels read element i of every
// input before writing element i of the output, in one pass, so an input
// of the output's shape can be overwritten. Broadcast inputs never qualify
// (the planner also checks shapes).

// InPlaceInputs: the input.
func (o *Unary) InPlaceInputs(in []trace.Meta) []int { return []int{0} }

// InPlaceInputs: either operand of the output's shape.
func (o *Binary) InPlaceInputs(in []trace.Meta) []int { return []int{0, 1} }

// InPlaceInputs: the incoming gradient, else the saved tensor.
func (o *UnaryBackward) InPlaceInputs(in []trace.Meta) []int { return []int{0, 1} }
