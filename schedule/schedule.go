// Package schedule chooses the order in which a graph's nodes run. The order
// decides which activations are alive together, so it decides the peak.
package schedule

import "github.com/headroom-ml/headroom/trace"

// Order returns the nodes needed for g's outputs and side effects, in a
// topological order. Dead nodes are dropped. Otherwise it keeps trace order,
// which is already topological and matches the order PyTorch's autograd
// executes in.
func Order(g *trace.Graph) []*trace.Node {
	live := make([]bool, len(g.Nodes))
	var mark func(n *trace.Node)
	mark = func(n *trace.Node) {
		if live[n.ID] {
			return
		}
		live[n.ID] = true
		for _, in := range n.Inputs {
			mark(in.Node)
		}
	}
	for _, t := range g.Outputs {
		mark(t.Node)
	}
	for _, n := range g.Nodes {
		if _, ok := n.Op.(trace.Effecter); ok && n.Kind == trace.KindOp {
			mark(n)
		}
	}
	// Side effects (gradient accumulation, running statistics) run as soon
	// as their inputs exist: nothing reads their result, and running them
	// early lets the values they consume die early.
	after := make([][]*trace.Node, len(g.Nodes))
	var first []*trace.Node // effects that read only state: run first
	isEffect := make([]bool, len(g.Nodes))
	for _, n := range g.Nodes {
		if _, ok := n.Op.(trace.Effecter); ok && n.Kind == trace.KindOp && live[n.ID] {
			ready := -1
			for _, in := range n.Inputs {
				// State tensors exist before the step; only computed
				// inputs decide when the effect can run.
				if in.Node.Kind != trace.KindState {
					ready = max(ready, in.Node.ID)
				}
			}
			if ready < 0 {
				first = append(first, n)
			} else {
				after[ready] = append(after[ready], n)
			}
			isEffect[n.ID] = true
		}
	}
	var order []*trace.Node
	order = append(order, first...)
	for _, n := range g.Nodes {
		if live[n.ID] && !isEffect[n.ID] {
			order = append(order, n)
			order = append(order, after[n.ID]...)
		}
	}
	return order
}
