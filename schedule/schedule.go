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
	// lastRead[s] is the latest slot (a node ID, or -1: before every node)
	// after which each reader of state node s has run. An update
	// (trace.Updater) of s waits for it: until then the old value is still
	// being read.
	lastRead := map[*trace.Node]int{}
	readState := func(n *trace.Node, slot int) {
		for _, in := range n.Inputs {
			if r := trace.Root(in); r.Node.Kind == trace.KindState {
				if v, ok := lastRead[r.Node]; !ok || slot > v {
					lastRead[r.Node] = slot
				}
			}
		}
	}
	var effects, updates []*trace.Node
	for _, n := range g.Nodes {
		if !live[n.ID] || n.Kind != trace.KindOp {
			continue
		}
		if _, ok := n.Op.(trace.Effecter); !ok {
			readState(n, n.ID)
		} else if _, ok := n.Op.(trace.Updater); ok {
			updates = append(updates, n)
		} else {
			effects = append(effects, n)
		}
	}
	place := func(n *trace.Node, ready int) {
		if ready < 0 {
			first = append(first, n)
		} else {
			after[ready] = append(after[ready], n)
		}
		isEffect[n.ID] = true
	}
	// Updates are placed last, so that in a shared slot they follow the
	// other effects (which may read the state they overwrite).
	for _, n := range effects {
		ready := computedReady(n)
		readState(n, ready)
		place(n, ready)
	}
	for _, n := range updates {
		ready := computedReady(n)
		if v, ok := lastRead[trace.Root(n.Inputs[0]).Node]; ok {
			ready = max(ready, v)
		}
		place(n, ready)
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

// computedReady is the ID of the last node producing one of effect n's
// computed inputs, or -1 when it reads only state: state tensors exist
// before the step, so only computed inputs decide when it can run.
func computedReady(n *trace.Node) int {
	ready := -1
	for _, in := range n.Inputs {
		if in.Node.Kind != trace.KindState {
			ready = max(ready, in.Node.ID)
		}
	}
	return ready
}
