package train

import (
	"context"
	"fmt"
	"strconv"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// MultiModel is a model of several inputs (token ids and an attention
// mask, an image and a caption). A trainer given a Model that is also a
// MultiModel calls ForwardInputs with every input of the step, the first
// one being what Forward would get; wrap a model that has only
// ForwardInputs with Multi. Train it with StepInputs, or StepAccumulate
// with Batch.Inputs.
type MultiModel interface {
	ForwardInputs(xs []*trace.Tensor) *trace.Tensor
}

// Multi makes a MultiModel a Model: Forward(x) is ForwardInputs([x]).
func Multi(m MultiModel) Model { return multi{m} }

type multi struct{ MultiModel }

func (m multi) Forward(x *trace.Tensor) *trace.Tensor {
	return m.ForwardInputs([]*trace.Tensor{x})
}

// InputName is the name of input i of a traced step: "x" for the first
// (what a Model's Forward gets), "x1", "x2", ... for a MultiModel's others.
func InputName(i int) string {
	if i == 0 {
		return "x"
	}
	return "x" + strconv.Itoa(i)
}

// forward records the model on input x and, for a MultiModel, the extra
// inputs.
func (t *Trainer) forward(g *trace.Graph, x *trace.Tensor, extra []trace.Meta) *trace.Tensor {
	mm, ok := t.Model.(MultiModel)
	if !ok {
		if len(extra) > 0 {
			g.Errorf("model", []*trace.Tensor{x}, "%T takes one input, given %d (implement train.MultiModel)", t.Model, 1+len(extra))
		}
		return t.Model.Forward(x)
	}
	xs := []*trace.Tensor{x}
	for i, m := range extra {
		xs = append(xs, g.Input(InputName(i+1), m.DType, m.Shape))
	}
	return mm.ForwardInputs(xs)
}

func metasOf(ts []*tensor.Tensor) []trace.Meta {
	if len(ts) == 0 {
		return nil
	}
	ms := make([]trace.Meta, len(ts))
	for i, t := range ts {
		ms[i] = MetaOf(t)
	}
	return ms
}

// StepInputs is Step for a MultiModel: xs are its inputs, each with the
// same number of samples, split together into Config.Accumulation
// micro-batches.
func (t *Trainer) StepInputs(ctx context.Context, xs []*tensor.Tensor, y *tensor.Tensor) (float64, error) {
	if len(xs) == 0 {
		return 0, fmt.Errorf("train: no inputs")
	}
	b := Batch{X: xs[0], Y: y, Inputs: xs[1:]}
	if k := t.cfg.Accumulation; k > 1 && len(b.X.Shape) > 0 && b.X.Shape[0] > 1 {
		micro, err := Split(b, min(k, b.X.Shape[0]))
		if err != nil {
			return 0, err
		}
		return t.StepAccumulate(ctx, micro)
	}
	if len(b.Inputs) == 0 {
		b.Inputs = nil
	}
	return t.StepAccumulate(ctx, []Batch{b})
}

// PlanInputs is Plan for a MultiModel's inputs xs (metadata: dtype and
// shape) and targets y.
func (t *Trainer) PlanInputs(xs []trace.Meta, y trace.Meta) (MemoryPlan, error) {
	if len(xs) == 0 {
		return MemoryPlan{}, fmt.Errorf("train: no inputs")
	}
	m, _, err := t.planConfig(t.cfg, xs[0], y, xs[1:]...)
	return m, err
}
