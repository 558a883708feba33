// Package schedule chooses the order in which a graph's nodes run. The order
// decides which activations are alive together, so it decides the peak.
package schedule

import "github.com/headroom-ml/headroom/trace"

// Order returns the nodes needed for g's outputs and side effects, in a
// topological order. Dead nodes are dropped. Within the constraints it runs
// each node as late as its first consumer allows is left to later
// refinements; today it keeps trace order, which is already topological and
// matches the order PyTorch's autograd executes in.
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
	var order []*trace.Node
	for _, n := range g.Nodes {
		if live[n.ID] {
			order = append(order, n)
		}
	}
	return order
}
