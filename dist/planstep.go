package dist

import (
	"context"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// planStep plans one step of tr on inputs x, y (as tr.Plan), the device
// memory a rank maps at its peak (the arena reserved next to the
// persistent state, as the first step reserves it) and the bytes the
// step's graph sends per pass in its collectives.
func planStep(_ context.Context, dev *device.Device, tr *train.Trainer, x, y trace.Meta) (train.MemoryPlan, int64, int64, error) {
	mp, c, err := tr.PlanConfig(tr.Config(), x, y)
	if err != nil {
		return train.MemoryPlan{}, 0, 0, err
	}
	arena, err := dev.Alloc.Reserve(mp.ArenaBytes, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		return train.MemoryPlan{}, 0, 0, err
	}
	reserved := dev.Alloc.Stats().ReservedBytes.Peak
	dev.Alloc.Release(arena)
	return mp, reserved, graphMoved(c.Program.Plan.Order), nil
}

// graphMoved is what a rank sends in the collectives among nodes, as
// ring algorithms move them (prim's Cost): an all-reduce of B bytes over
// N ranks 2(N-1)/N·B, an all-gather (of its output) or reduce-scatter
// (of its input) (N-1)/N·B.
func graphMoved(nodes []*trace.Node) int64 {
	var total int64
	for _, n := range nodes {
		if n.Kind != trace.KindOp {
			continue
		}
		var k, ranks int64
		var b int64
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
