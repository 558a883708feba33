package train

import (
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// MetaOf is t's dtype and shape, what Plan and the compiled steps are keyed
// by (t's data is not read; it may be absent).
func MetaOf(t *tensor.Tensor) trace.Meta { return trace.Meta{DType: t.DType, Shape: t.Shape} }

// PlanBatch is Plan for a batch of these tensors: the shapes come from
// them, so they are spelled once, where the data is made.
func (t *Trainer) PlanBatch(x, y *tensor.Tensor) (MemoryPlan, error) {
	return t.Plan(MetaOf(x), MetaOf(y))
}
