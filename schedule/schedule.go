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

// Defer returns order with the backward nodes that only produce step
// outputs (nothing in the step reads them: the gradients of
// train.Config.ArenaApplies) moved to the end, in their order, where
// that shortens lives: a node moves when its outputs take more bytes than
// the inputs it is the last reader of, which it then keeps alive to the
// end instead. A ResNet's last-stage weight gradients are megabytes made
// from kilobytes: made where autograd makes them, they are held through
// the peak of the backward pass (where nearly every saved activation is
// still alive); made at the end, they come when the activations are gone.
// size is the bytes a value takes (the arena's rounding). It returns nil
// when no node moves.
func Defer(g *trace.Graph, order []*trace.Node, size func(t *trace.Tensor) int64) []*trace.Node {
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[trace.Root(t)] = true
	}
	last := map[*trace.Tensor]int{}
	read := map[*trace.Tensor]bool{}
	for i, n := range order {
		for _, in := range n.Inputs {
			r := trace.Root(in)
			last[r] = i
			read[r] = true
		}
	}
	var moved, kept []*trace.Node
	for i, n := range order {
		if n.Kind != trace.KindOp || n.Phase != trace.Backward || len(n.Outputs) == 0 {
			kept = append(kept, n)
			continue
		}
		_, effect := n.Op.(trace.Effecter)
		_, alias := n.Op.(trace.Aliaser)
		sink := !effect && !alias
		var out, in int64
		for _, o := range n.Outputs {
			if read[o] || !outputs[o] || trace.Root(o) != o {
				sink = false
				break
			}
			out += size(o)
		}
		if sink {
			seen := map[*trace.Tensor]bool{}
			for _, x := range n.Inputs {
				r := trace.Root(x)
				if seen[r] || r.Node.Kind == trace.KindState || r.Node.Kind == trace.KindConst || outputs[r] || last[r] != i {
					continue
				}
				seen[r] = true
				in += size(r)
			}
		}
		if sink && out > in {
			moved = append(moved, n)
		} else {
			kept = append(kept, n)
		}
	}
	if len(moved) == 0 {
		return nil
	}
	return append(kept, moved...)
}
