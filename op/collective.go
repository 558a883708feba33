package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// The collectives of a group of ranks inside the graph (tensor and
// ZeRO-3 parallelism): each rank traces the same graph and a run binds
// its communicator (exec.Options.Comm).

// AllReduce sums x over the ranks of a group of size ranks; its gradient
// passes through unchanged (Megatron's g: the computation after it is
// replicated, so each rank's gradient already is the whole).
func AllReduce(x *trace.Tensor, ranks int) *trace.Tensor {
	return prim.Apply1(&prim.AllReduce{Ranks: ranks}, x)
}

// CopyToRanks is x, entering a computation split across ranks: its
// gradient is the sum of the ranks' (Megatron's f).
func CopyToRanks(x *trace.Tensor, ranks int) *trace.Tensor {
	return prim.Apply1(&prim.CopyToRanks{Ranks: ranks}, x)
}

// AllGather concatenates the ranks' x along dimension 0, in rank order;
// its gradient is the reduce-scatter of the result's.
func AllGather(x *trace.Tensor, ranks int) *trace.Tensor {
	return prim.Apply1(&prim.AllGather{Ranks: ranks}, x)
}

// ReduceScatter sums x ([ranks*m, ...]) over the ranks and returns this
// rank's block of m rows; its gradient is the all-gather of the result's.
func ReduceScatter(x *trace.Tensor, ranks int) *trace.Tensor {
	return prim.Apply1(&prim.ReduceScatter{Ranks: ranks}, x)
}
