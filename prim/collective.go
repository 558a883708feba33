package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	register(&AllReduce{Ranks: 2}, &CopyToRanks{Ranks: 2}, &AllGather{Ranks: 2}, &AllGather{Ranks: 2, Shape: tensor.Shape{3}},
		&ReduceScatter{Ranks: 2}, &ReduceScatter{Ranks: 2, Flat: true})
}

// Collective is implemented by the ops that communicate with the other
// ranks of a group of Ranks() (XLA's collectives inside the graph). Their
// nodes hold no communicator: the executor hands the run's (exec.Options.
// Comm) to the backend's collective kernel, as it hands offloads their
// host store, so a compiled program holds nothing of a group and the meta
// device plans them without one. Every rank runs the same graph, so the
// ranks meet the collectives in the same order.
type Collective interface {
	Primitive
	GroupSize() int
}

// The gradient conventions are Megatron-LM's and ZeRO's: a value that
// every rank holds alike after an all-reduce (AllReduce, "g") feeds a
// replicated computation whose loss every rank computes alike, so its
// gradient arrives alike on every rank and passes through unchanged;
// CopyToRanks ("f") marks where such a replicated value enters a
// computation split across ranks, so its gradient is the sum of the
// ranks' (all-reduce). An all-gather's gradient is the reduce-scatter of
// the gathered value's gradient and vice versa: the ranks' losses add up.

// AllReduce sums its input over the ranks (Megatron's g,
// reduce_from_tensor_model_parallel_region): forward all-reduce, backward
// identity.
type AllReduce struct{ Ranks int }

func (o *AllReduce) Name() string   { return "all_reduce" }
func (o *AllReduce) GroupSize() int { return o.Ranks }

// Traits: collectives sum in float32 (the communicator's type), are never
// fused, and are expensive to recompute (a second round trip).
func (o *AllReduce) Traits() Traits {
	return Traits{Autocast: AutocastFP32, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

// Cost: a ring all-reduce moves 2(N-1)/N of the buffer in and out.
func (o *AllReduce) Cost(in, out []trace.Meta) Cost {
	return Cost{Flops: numel(in[0]), Bytes: ioBytes(in, out) + moved(2, o.Ranks, in[0])}
}

// InPlaceInputs: the sum is computed in the output's buffer, which may be
// the input's.
func (o *AllReduce) InPlaceInputs(in []trace.Meta) []int { return []int{0} }

func (o *AllReduce) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := checkCollective(in, o.Ranks); err != nil {
		return nil, err
	}
	return []trace.Meta{in[0]}, nil
}

// Grad: identity (the loss downstream is replicated).
func (o *AllReduce) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{gouts[0]}
}

// CopyToRanks is Megatron's f (copy_to_tensor_model_parallel_region):
// forward identity (a view), backward all-reduce of the gradient.
type CopyToRanks struct{ Ranks int }

func (o *CopyToRanks) Name() string { return "copy_to_ranks" }

// Traits: an alias, run by no kernel.
func (o *CopyToRanks) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelNone}
}

func (o *CopyToRanks) Cost(in, out []trace.Meta) Cost      { return Cost{} }
func (o *CopyToRanks) InPlaceInputs(in []trace.Meta) []int { return nil }
func (o *CopyToRanks) AliasOf() int                        { return 0 }

func (o *CopyToRanks) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := checkCollective(in, o.Ranks); err != nil {
		return nil, err
	}
	return []trace.Meta{in[0]}, nil
}

// Grad: the ranks' gradients summed.
func (o *CopyToRanks) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil}
	}
	return []*trace.Tensor{Apply1(&AllReduce{Ranks: o.Ranks}, gouts[0])}
}

// AllGather concatenates the ranks' inputs along dimension 0, in rank
// order: [m, ...] on each rank gives [Ranks*m, ...].
//
// With Shape set it gathers a flat shard instead (ZeRO-3): the input is a
// 1-D shard of c = ceil(numel(Shape)/Ranks) values, rank r's holding
// values [r*c, (r+1)*c) of the flattened tensor (the last ones padded),
// and the output is the tensor of Shape, the padding dropped.
type AllGather struct {
	Ranks int
	Shape tensor.Shape
}

func (o *AllGather) Name() string   { return "all_gather" }
func (o *AllGather) GroupSize() int { return o.Ranks }

// Traits: a gathered value is large and cheap to gather again relative
// to the memory it holds (ZeRO-3 gathers parameters again for the
// backward pass), so it is recomputed by the selective policy.
func (o *AllGather) Traits() Traits {
	return Traits{Autocast: AutocastFP32, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeCheap, Kernel: KernelRequired}
}

// Cost: (N-1)/N of the output arrives from the other ranks.
func (o *AllGather) Cost(in, out []trace.Meta) Cost {
	return Cost{Bytes: ioBytes(in, out) + moved(1, o.Ranks, out[0])}
}

func (o *AllGather) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *AllGather) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := checkCollective(in, o.Ranks); err != nil {
		return nil, err
	}
	if o.Shape != nil {
		c := ShardLen(o.Shape.NumElements(), o.Ranks)
		if len(in[0].Shape) != 1 || in[0].Shape[0] != c {
			return nil, fmt.Errorf("a shard of %v over %d ranks is [%d], got %v", o.Shape, o.Ranks, c, in[0].Shape)
		}
		return metas1(in[0].DType, o.Shape.Clone()), nil
	}
	if len(in[0].Shape) == 0 {
		return nil, fmt.Errorf("all-gather along dimension 0 of a scalar")
	}
	s := in[0].Shape.Clone()
	s[0] *= o.Ranks
	return metas1(in[0].DType, s), nil
}

// Grad: the reduce-scatter of the gathered value's gradient.
func (o *AllGather) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil}
	}
	return []*trace.Tensor{Apply1(&ReduceScatter{Ranks: o.Ranks, Flat: o.Shape != nil}, gouts[0])}
}

// ReduceScatter sums its input over the ranks and leaves rank r block r
// of dimension 0: [Ranks*m, ...] gives [m, ...].
//
// With Flat it scatters any tensor as flat shards (ZeRO-3's gradient
// shards): the flattened input, zero-padded to Ranks*c values (c =
// ceil(numel/Ranks)), gives rank r values [r*c, (r+1)*c) of the sum.
type ReduceScatter struct {
	Ranks int
	Flat  bool
}

func (o *ReduceScatter) Name() string   { return "reduce_scatter" }
func (o *ReduceScatter) GroupSize() int { return o.Ranks }

func (o *ReduceScatter) Traits() Traits {
	return Traits{Autocast: AutocastFP32, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

// Cost: (N-1)/N of the input leaves for the other ranks.
func (o *ReduceScatter) Cost(in, out []trace.Meta) Cost {
	return Cost{Flops: numel(in[0]), Bytes: ioBytes(in, out) + moved(1, o.Ranks, in[0])}
}

func (o *ReduceScatter) InPlaceInputs(in []trace.Meta) []int { return nil }

func (o *ReduceScatter) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := checkCollective(in, o.Ranks); err != nil {
		return nil, err
	}
	if o.Flat {
		return metas1(in[0].DType, tensor.Shape{ShardLen(in[0].Shape.NumElements(), o.Ranks)}), nil
	}
	if len(in[0].Shape) == 0 || in[0].Shape[0]%o.Ranks != 0 {
		return nil, fmt.Errorf("reduce-scatter along dimension 0 of %v over %d ranks: the dimension must divide", in[0].Shape, o.Ranks)
	}
	s := in[0].Shape.Clone()
	s[0] /= o.Ranks
	return metas1(in[0].DType, s), nil
}

// Grad: the all-gather of the shard's gradient.
func (o *ReduceScatter) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	if gouts[0] == nil {
		return []*trace.Tensor{nil}
	}
	g := &AllGather{Ranks: o.Ranks}
	if o.Flat {
		g.Shape = n.Inputs[0].Shape().Clone()
	}
	return []*trace.Tensor{Apply1(g, gouts[0])}
}

// ShardLen is the length of each rank's flat shard of n values over
// ranks: ceil(n/ranks), at least 1 (ZeRO's padding; the last shards may be
// all padding).
func ShardLen(n, ranks int) int {
	if ranks < 1 {
		return n
	}
	return max((n+ranks-1)/ranks, 1)
}

func checkCollective(in []trace.Meta, ranks int) error {
	if err := wantInputs(in, 1); err != nil {
		return err
	}
	if ranks < 1 {
		return fmt.Errorf("a group of %d ranks", ranks)
	}
	if dt := in[0].DType; dt != tensor.Float32 && dt != tensor.Float64 {
		return fmt.Errorf("collectives move float32 or float64 values, got %v", dt)
	}
	return nil
}

// moved is the bytes a ring collective sends per rank: k(N-1)/N of m.
func moved(k float64, ranks int, m trace.Meta) float64 {
	if ranks < 2 {
		return 0
	}
	return k * float64(ranks-1) / float64(ranks) * float64(m.Bytes())
}
