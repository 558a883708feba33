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
// A node whose outputs only such nodes read moves with them, as one chain
// judged by its bytes: under the bf16 modes a weight gradient reaches the
// step's output through its rounding (a prim.Round, the gradient's only
// reader), and alone neither node would gain by moving. size is the bytes
// a value takes (the arena's rounding). It returns nil when no node moves.
func Defer(g *trace.Graph, order []*trace.Node, size func(t *trace.Tensor) int64) []*trace.Node {
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[trace.Root(t)] = true
	}
	last := map[*trace.Tensor]int{}
	readers := map[*trace.Tensor][]int{}
	at := map[*trace.Node]int{}
	for i, n := range order {
		at[n] = i
		for _, in := range n.Inputs {
			r := trace.Root(in)
			last[r] = i
			readers[r] = append(readers[r], i)
		}
	}
	// freed is the inputs of order[i] whose last reader it is (state and
	// constants, never freed, and step outputs excepted); inside says
	// which of them to leave out.
	freed := func(i int, inside func(p int) bool) int64 {
		var b int64
		seen := map[*trace.Tensor]bool{}
		for _, x := range order[i].Inputs {
			r := trace.Root(x)
			if seen[r] || r.Node.Kind == trace.KindState || r.Node.Kind == trace.KindConst || outputs[r] || last[r] != i {
				continue
			}
			seen[r] = true
			if p, ok := at[r.Node]; !ok || !inside(p) {
				b += size(r)
			}
		}
		return b
	}
	none := func(int) bool { return false }
	// Chains are found from the end: a node joins the chain of the nodes
	// that read its outputs, which must all be movable, and only where it
	// makes more bytes than it frees, as a node that moves alone must.
	// chain[i] < 0: order[i] stays where it is.
	chain := make([]int, len(order))
	find := func(i int) int {
		for chain[i] != i {
			chain[i] = chain[chain[i]]
			i = chain[i]
		}
		return i
	}
	for i := len(order) - 1; i >= 0; i-- {
		chain[i] = -1
		n := order[i]
		_, effect := n.Op.(trace.Effecter)
		_, alias := n.Op.(trace.Aliaser)
		if n.Kind != trace.KindOp || n.Phase != trace.Backward || len(n.Outputs) == 0 || effect || alias {
			continue
		}
		ok := true
		var join []int
		var made int64
		for _, o := range n.Outputs {
			rs := readers[o]
			if trace.Root(o) != o || outputs[o] == (len(rs) > 0) {
				ok = false // read and an output, or neither
				break
			}
			for _, j := range rs {
				ok = ok && chain[j] >= 0
				join = append(join, j)
			}
			made += size(o)
		}
		if !ok || len(join) > 0 && made <= freed(i, none) {
			continue
		}
		chain[i] = i
		for _, j := range join {
			chain[find(j)] = i
		}
	}
	// A chain moves when the step outputs it makes outweigh the inputs
	// from outside it whose last reader is in it.
	gain := map[int]int64{}
	for i, n := range order {
		if chain[i] < 0 {
			continue
		}
		c := find(i)
		for _, o := range n.Outputs {
			if outputs[o] {
				gain[c] += size(o)
			}
		}
		gain[c] -= freed(i, func(p int) bool { return chain[p] >= 0 && find(p) == c })
	}
	var moved, kept []*trace.Node
	for i, n := range order {
		if chain[i] >= 0 && gain[find(i)] > 0 {
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
