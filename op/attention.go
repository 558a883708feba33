package op

import (
	"math"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// ScaledDotProductAttention is
// torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
// for q [B, H, T, D], k [B, H, S, D], v [B, H, S, Dv] (any leading axes, equal
// for all three), with scale 1/sqrt(D). It returns [B, H, T, Dv].
func ScaledDotProductAttention(q, k, v *trace.Tensor, causal bool) *trace.Tensor {
	if len(q.Shape()) < 2 || q.Dim(-1) < 1 {
		q.Graph().Errorf("scaled_dot_product_attention", []*trace.Tensor{q, k, v}, "expected q [..., T, D] with D > 0")
	}
	d := q.Dim(-1)
	return q.Graph().Apply(&prim.AttentionOp{Causal: causal, Scale: 1 / math.Sqrt(float64(d))}, q, k, v)[0]
}
