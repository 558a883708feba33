package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&AttentionOp{}, &AttentionBackward{}) }

// AttentionOp is fused scaled dot-product attention,
//
//	out = softmax(q k^T * Scale + mask) v
//
// over the last two axes of q [..., T, D], k [..., S, D] and v [..., S, Dv]
// (leading axes equal, e.g. [B, H]). With Causal, query i attends to keys
// j <= i (the mask is -inf above the diagonal, aligned top-left as in
// torch.nn.functional.scaled_dot_product_attention(is_causal=True)).
//
// Outputs: out [..., T, Dv] and the logsumexp of every row of scaled scores,
// lse [..., T]. The [T, S] probabilities are never stored: the backward
// recomputes them from q, k and lse, as FlashAttention does, so the saved
// state is O(T) per head instead of O(T*S).
//
// With BF16 (autocast's bf16 modes set it) the products run in bfloat16:
// q, k and v hold bfloat16 numbers, and the probabilities are rounded to
// bfloat16 before their product with v, as a bfloat16 attention kernel
// (FlashAttention) and PyTorch's autocast of the unfused attention (att @ v
// reads att cast to bfloat16) do; scores, softmax and every product's
// accumulation stay float32. Its operands may then be bfloat16 tensors,
// read in place; the outputs are float32.
//
// With BTHD (rank 4 only) q, k, v and out are [B, T, H, D] (positions
// before heads, as a [B, T, H*D] projection reshaped is) instead of
// [B, H, T, D]; lse stays [B, H, T]. A model's transposes to and from the
// heads-first layout are then no copies: transform's attention layout
// pass folds them into the op, which reads and writes heads in place with
// strides.
type AttentionOp struct {
	Causal bool
	Scale  float64
	BF16   bool
	BTHD   bool
}

// HeadsFirst is shape s of a BTHD operand as [B, H, T, D] (s itself
// without BTHD, or when s is not rank 4).
func HeadsFirst(s tensor.Shape, bthd bool) tensor.Shape {
	if !bthd || len(s) != 4 {
		return s
	}
	return tensor.Shape{s[0], s[2], s[1], s[3]}
}

// attnShapes are in's first n shapes, heads first.
func attnShapes(in []trace.Meta, bthd bool) []tensor.Shape {
	out := make([]tensor.Shape, len(in))
	for i, m := range in {
		out[i] = HeadsFirst(m.Shape, bthd)
	}
	return out
}

// checkBTHD rejects a BTHD attention whose operands are not rank 4.
func checkBTHD(in []trace.Meta, bthd bool) error {
	if !bthd {
		return nil
	}
	for _, m := range in {
		if len(m.Shape) != 4 {
			return fmt.Errorf("BTHD attention takes [B, T, H, D] operands, got shape %v", m.Shape)
		}
	}
	return nil
}

func (o *AttentionOp) Name() string { return "scaled_dot_product_attention" }

func (o *AttentionOp) Traits() Traits {
	return Traits{Autocast: AutocastLow, Fusion: FuseProducer, Stats: StatsAfterFirst, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

// Cost: two products with T×S scores, q k^T and P v.
func (o *AttentionOp) Cost(in, out []trace.Meta) Cost {
	sh := attnShapes(in[:3], o.BTHD)
	q, v, s := sh[0], sh[2], sh[1]
	flops := 2 * numel(in[0]) / float64(q[len(q)-1]) * float64(s[len(s)-2]) * float64(q[len(q)-1]+v[len(v)-1])
	return Cost{Flops: flops, Bytes: ioBytes(in, out)}
}

func (o *AttentionOp) InPlaceInputs(in []trace.Meta) []int { return nil }

// AttentionDims checks attention operand shapes q [..., T, D], k [..., S, D],
// v [..., S, Dv] and returns the batch shape (the leading axes) and T, S, D,
// Dv.
func AttentionDims(q, k, v tensor.Shape) (batch tensor.Shape, t, s, d, dv int, err error) {
	r := len(q)
	if r < 2 || len(k) != r || len(v) != r {
		return nil, 0, 0, 0, 0, fmt.Errorf("expected q, k, v of equal rank >= 2 ([..., T, D], [..., S, D], [..., S, Dv]), got ranks %d, %d, %d", len(q), len(k), len(v))
	}
	batch = q[:r-2]
	if !k[:r-2].Equal(batch) || !v[:r-2].Equal(batch) {
		return nil, 0, 0, 0, 0, fmt.Errorf("leading (batch, head) axes differ: q %v, k %v, v %v", q, k, v)
	}
	t, d = q[r-2], q[r-1]
	s, dv = k[r-2], v[r-1]
	if k[r-1] != d {
		return nil, 0, 0, 0, 0, fmt.Errorf("q has head size %d, k has %d", d, k[r-1])
	}
	if v[r-2] != s {
		return nil, 0, 0, 0, 0, fmt.Errorf("k has %d positions, v has %d", s, v[r-2])
	}
	if s < 1 || d < 1 {
		return nil, 0, 0, 0, 0, fmt.Errorf("key length and head size must be positive, got S=%d, D=%d", s, d)
	}
	return batch.Clone(), t, s, d, dv, nil
}

// bf16Operands checks the operands of a BF16 attention op: float32 or
// bfloat16 each (bfloat16 ones read in place, as a mixed MatMul reads
// them; the outputs are float32).
func bf16Operands(in []trace.Meta) error {
	for _, m := range in {
		if m.DType != tensor.Float32 && m.DType != tensor.BFloat16 {
			return fmt.Errorf("bf16 attention operands must be float32 or bfloat16, got %v", m.DType)
		}
	}
	return nil
}

func (o *AttentionOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 3); err != nil {
		return nil, err
	}
	dt := in[0].DType
	if o.BF16 {
		if err := bf16Operands(in); err != nil {
			return nil, err
		}
		dt = tensor.Float32
	} else {
		if err := sameDType(in); err != nil {
			return nil, err
		}
		if err := wantFloat(in[0]); err != nil {
			return nil, err
		}
	}
	if err := checkBTHD(in, o.BTHD); err != nil {
		return nil, err
	}
	sh := attnShapes(in, o.BTHD)
	batch, t, _, _, dv, err := AttentionDims(sh[0], sh[1], sh[2])
	if err != nil {
		return nil, err
	}
	y := append(batch.Clone(), t, dv)
	if o.BTHD {
		y = tensor.Shape{batch[0], t, batch[1], dv}
	}
	return []trace.Meta{
		{DType: dt, Shape: y},
		{DType: dt, Shape: append(batch.Clone(), t)},
	}, nil
}

func (o *AttentionOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil, nil, nil}
	}
	in := n.Inputs
	return gouts[0].Graph().Apply(&AttentionBackward{Causal: o.Causal, Scale: o.Scale, BF16: o.BF16, BTHD: o.BTHD},
		gouts[0], in[0], in[1], in[2], n.Outputs[0], n.Outputs[1])
}

// AttentionBackward is the fused backward of AttentionOp. Inputs: the output
// gradient, q, k, v, the saved output and logsumexp. Outputs: dq, dk, dv.
// With P recomputed as exp(q k^T * Scale - lse):
//
//	dv = P^T dO,  dS = P * (dO v^T - rowsum(dO * O)),  dq = Scale dS k,  dk = Scale dS^T q.
//
// With BF16, dO, q, k and v hold bfloat16 numbers, and P and dS are rounded
// to bfloat16 before their products (dv, dq, dk), as in AttentionOp; the
// first five inputs may be bfloat16 tensors (the gradients are float32).
// With BTHD, the output gradient, q, k, v, the saved output and the
// gradients are [B, T, H, D], as AttentionOp's BTHD. With Packed too (and
// S = T), the gradients are one output [B, T, H*(2D+Dv)] whose rows hold
// a position's dq, dk and dv side by side: the concatenation of the three
// that the backward of a q, k, v split (a GPT's c_attn) reads, written in
// place.
type AttentionBackward struct {
	Causal bool
	Scale  float64
	BF16   bool
	BTHD   bool
	Packed bool
}

func (o *AttentionBackward) Name() string { return "scaled_dot_product_attention_backward" }

func (o *AttentionBackward) Traits() Traits {
	return Traits{Autocast: AutocastLow, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

// Cost: five products with T×S scores (q k^T again, then dv, dP, dq and
// dk), charged at half weight, as the cost model always has.
func (o *AttentionBackward) Cost(in, out []trace.Meta) Cost {
	sh := attnShapes(in[1:4], o.BTHD)
	q, v, s := sh[0], sh[2], sh[1]
	flops := 5 * numel(in[1]) / float64(q[len(q)-1]) * float64(s[len(s)-2]) * float64(q[len(q)-1]+v[len(v)-1]) / 2
	return Cost{Flops: flops, Bytes: ioBytes(in, out)}
}

func (o *AttentionBackward) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *AttentionBackward) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 6); err != nil {
		return nil, err
	}
	if o.BF16 {
		if err := bf16Operands(in[:5]); err != nil {
			return nil, err
		}
		if in[5].DType != tensor.Float32 {
			return nil, fmt.Errorf("bf16 attention's logsumexp must be float32, got %v", in[5].DType)
		}
	} else if err := sameDType(in); err != nil {
		return nil, err
	}
	fwd, err := (&AttentionOp{BF16: o.BF16, BTHD: o.BTHD}).Infer(in[1:4])
	if err != nil {
		return nil, err
	}
	if !in[0].Shape.Equal(fwd[0].Shape) || !in[4].Shape.Equal(fwd[0].Shape) {
		return nil, fmt.Errorf("output gradient %v and saved output %v must both be %v", in[0].Shape, in[4].Shape, fwd[0].Shape)
	}
	if !in[5].Shape.Equal(fwd[1].Shape) {
		return nil, fmt.Errorf("saved logsumexp %v, want %v", in[5].Shape, fwd[1].Shape)
	}
	if o.Packed {
		q, k, v := in[1].Shape, in[2].Shape, in[3].Shape
		if !o.BTHD || k[1] != q[1] {
			return nil, fmt.Errorf("packed attention gradients need BTHD operands with as many keys as queries, got q %v, k %v", q, k)
		}
		return []trace.Meta{{DType: fwd[0].DType, Shape: tensor.Shape{q[0], q[1], q[2] * (2*q[3] + v[3])}}}, nil
	}
	outs := []trace.Meta{in[1], in[2], in[3]}
	for i := range outs {
		outs[i].DType = fwd[0].DType
	}
	return outs, nil
}
