package pipeline

import (
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// collectiveSent is what a run of prog sends in the collectives of its
// graph (a tensor-parallel stage's all-reduces), as ring algorithms move
// them: an all-reduce of B bytes over N ranks 2(N-1)/N·B, an all-gather
// (of its output) or reduce-scatter (of its input) (N-1)/N·B; as
// package dist counts a step's collectives.
func collectiveSent(prog *exec.Program) int64 {
	var total int64
	for _, n := range prog.Plan.Order {
		if n.Kind != trace.KindOp {
			continue
		}
		var k, ranks, b int64
		switch o := n.Op.(type) {
		case *prim.AllReduce:
			k, ranks, b = 2, int64(o.Ranks), n.Inputs[0].Meta.Bytes()
		case *prim.AllGather:
			k, ranks, b = 1, int64(o.Ranks), n.Outputs[0].Meta.Bytes()
		case *prim.ReduceScatter:
			k, ranks, b = 1, int64(o.Ranks), n.Inputs[0].Meta.Bytes()
		default:
			continue
		}
		if ranks > 1 {
			total += k * (ranks - 1) * b / ranks
		}
	}
	return total
}
