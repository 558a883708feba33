package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// Embedding is torch.nn.functional.embedding: the rows of weight [V, D]
// selected by indices (int64, any shape), giving [..., D].
func Embedding(indices, weight *trace.Tensor) *trace.Tensor {
	return prim.Apply1(&prim.EmbeddingOp{PaddingIdx: -1}, indices, weight)
}

// EmbeddingWithPadding is Embedding with padding_idx: the row paddingIdx
// (negative counts from the end, as in PyTorch) is looked up as usual but
// gets no gradient.
func EmbeddingWithPadding(indices, weight *trace.Tensor, paddingIdx int) *trace.Tensor {
	if len(weight.Shape()) == 2 {
		v := weight.Dim(0)
		if paddingIdx < -v || paddingIdx >= v {
			weight.Graph().Errorf("embedding", []*trace.Tensor{indices, weight}, "padding_idx must be within num_embeddings (%d), got %d", v, paddingIdx)
		}
		if paddingIdx < 0 {
			paddingIdx += v
		}
	}
	return prim.Apply1(&prim.EmbeddingOp{PaddingIdx: paddingIdx}, indices, weight)
}
