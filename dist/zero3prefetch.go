package dist

import (
	"fmt"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// ZeRO-3 gather prefetch (FSDP's forward_prefetch and BACKWARD_PRE): with
// depth d > 0, the all-gathers of the next d layers' parameters are issued
// just before a layer's own, so their transfers can overlap the layer's
// compute; in the backward pass likewise in the backward pass's (reverse)
// layer order. A "layer" is a module whose parameters are gathered: the
// gathers of one module's run of readers (a linear's weight and bias) form
// one unit, all issued together once prefetching.
//
// The step is a traced graph, so prefetching is only where the gather
// nodes sit in the order the schedule keeps (trace order): the pass moves
// each prefetched gather (and the shard it reads) earlier; nothing else
// moves. The gathered buffers then live from the earlier point to their
// last reader, and the arena plan, made from that order, holds them: the
// extra layers' parameters are in every rank's plan, exactly as measured.
// Values are unchanged (only the order of gathers of unchanged shards).

// Reorder implements train.Reorderer: with a prefetch depth it moves the
// parameter gathers of step g earlier as described above; without one it
// returns g as it is.
func (z *Zero3) Reorder(g *trace.Graph) (*trace.Graph, error) {
	if z.prefetch <= 0 {
		return g, nil
	}
	return prefetchGathers(g, z.prefetch)
}

// isParamGather reports whether n is a ZeRO-3 gather of a parameter's
// shard (forward, or its recomputed copy for the backward pass).
func isParamGather(n *trace.Node) bool {
	if n.Kind != trace.KindOp {
		return false
	}
	o, ok := n.Op.(*prim.AllGather)
	return ok && o.Shape != nil && len(n.Inputs) == 1 && n.Inputs[0].Node.Kind == trace.KindState
}

// gatherUnits groups g's parameter gathers into layers in node order:
// class 0 the forward pass's, class 1 the copies recomputed for the
// backward pass. A unit is a run of gathers of one module with no other
// module's gather between them.
func gatherUnits(g *trace.Graph) (units [2][][]*trace.Node, first map[*trace.Node][2]int) {
	first = map[*trace.Node][2]int{}
	var module [2]string
	for _, n := range g.Nodes {
		if !isParamGather(n) {
			continue
		}
		c := 0
		if n.Recompute {
			c = 1
		}
		if k := len(units[c]); k == 0 || n.Module != module[c] {
			units[c] = append(units[c], nil)
			first[n] = [2]int{c, k}
			module[c] = n.Module
		}
		units[c][len(units[c])-1] = append(units[c][len(units[c])-1], n)
	}
	return units, first
}

// prefetchGathers returns g with the gathers of units k..k+depth of each
// class issued where unit k's first gather was (those not issued yet).
func prefetchGathers(g *trace.Graph, depth int) (*trace.Graph, error) {
	units, first := gatherUnits(g)
	out := trace.New()
	mapped := map[*trace.Tensor]*trace.Tensor{}
	done := map[*trace.Node]bool{}
	// emit clones n after whatever it reads (a moved gather's shard).
	var emit func(n *trace.Node)
	emit = func(n *trace.Node) {
		if done[n] {
			return
		}
		done[n] = true
		ins := make([]*trace.Tensor, len(n.Inputs))
		for i, in := range n.Inputs {
			emit(in.Node)
			if ins[i] = mapped[in]; ins[i] == nil {
				panic(&trace.ShapeError{Module: n.Module, Op: "prefetch", Err: fmt.Errorf("input %d of %s has no mapping", i, n.Label())})
			}
		}
		for i, o := range out.Clone(n, ins) {
			mapped[n.Outputs[i]] = o
		}
	}
	err := trace.Capture(func() {
		for _, n := range g.Nodes {
			if u, ok := first[n]; ok {
				for k := u[1]; k <= u[1]+depth && k < len(units[u[0]]); k++ {
					for _, m := range units[u[0]][k] {
						emit(m)
					}
				}
			}
			emit(n)
		}
		for i, t := range g.Outputs {
			out.Output(g.OutputNames[i], mapped[t])
		}
	})
	return out, err
}
