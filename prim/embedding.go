package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&EmbeddingOp{}, &EmbeddingBackward{}) }

// EmbeddingOp looks up rows of a table (torch.nn.functional.embedding).
// Inputs: indices (int64, any shape) and weight [V, D]. Output: [..., D],
// the weight's dtype. An index outside [0, V) is a run-time error naming the
// index and the table size. PaddingIdx is the row that receives no gradient
// (normalized to [0, V)), or -1 for none.
type EmbeddingOp struct{ PaddingIdx int }

func (o *EmbeddingOp) Name() string { return "embedding" }

func (o *EmbeddingOp) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseProducer, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *EmbeddingOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *EmbeddingOp) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *EmbeddingOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	idx, w := in[0], in[1]
	if idx.DType != tensor.Int64 {
		return nil, fmt.Errorf("expected int64 indices, got %v", idx.DType)
	}
	if len(w.Shape) != 2 {
		return nil, fmt.Errorf("expected a 2-D weight [num_embeddings, embedding_dim], got %v", w.Shape)
	}
	if o.PaddingIdx < -1 || o.PaddingIdx >= w.Shape[0] {
		return nil, fmt.Errorf("padding_idx %d is out of range for %d embeddings", o.PaddingIdx, w.Shape[0])
	}
	out := append(idx.Shape.Clone(), w.Shape[1])
	return metas1(w.DType, out), nil
}

func (o *EmbeddingOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	idx, w := n.Inputs[0], n.Inputs[1]
	gw := Apply1(&EmbeddingBackward{NumWeights: w.Dim(0), PaddingIdx: o.PaddingIdx}, gouts[0], idx)
	return []*trace.Tensor{nil, gw}
}

// EmbeddingBackward scatter-adds the output gradient gy [..., D] (input 0)
// into a zero [NumWeights, D] weight gradient by indices (input 1), skipping
// PaddingIdx (-1: none).
type EmbeddingBackward struct {
	NumWeights int
	PaddingIdx int
}

func (o *EmbeddingBackward) Name() string { return "embedding_backward" }

func (o *EmbeddingBackward) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

func (o *EmbeddingBackward) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *EmbeddingBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *EmbeddingBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 2); err != nil {
		return nil, err
	}
	gy, idx := in[0], in[1]
	if err := wantFloat(gy); err != nil {
		return nil, err
	}
	if idx.DType != tensor.Int64 {
		return nil, fmt.Errorf("expected int64 indices, got %v", idx.DType)
	}
	if len(gy.Shape) != len(idx.Shape)+1 || !gy.Shape[:len(idx.Shape)].Equal(idx.Shape) {
		return nil, fmt.Errorf("gradient %v does not match indices %v", gy.Shape, idx.Shape)
	}
	return metas1(gy.DType, tensor.Shape{o.NumWeights, gy.Shape[len(gy.Shape)-1]}), nil
}
