// Package autodiff appends the backward pass to a traced graph: reverse
// mode, one rule per op (the op's Grad method), gradients built from ordinary
// ops so that planning and execution treat them like the forward pass.
package autodiff

import (
	"fmt"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// Rule is implemented by every differentiable op: given the node and the
// gradients of its outputs (nil for outputs nothing depends on), it returns
// the gradients of its inputs (nil where an input gets none).
type Rule interface {
	Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor
}

// Backward returns d(loss)/d(w) for each w in wrt (nil where w does not
// affect the loss). loss must be a scalar unless seed is given.
func Backward(loss *trace.Tensor, wrt []*trace.Tensor) (grads []*trace.Tensor, err error) {
	g := loss.Graph()
	if loss.Shape().NumElements() != 1 {
		return nil, fmt.Errorf("autodiff: loss must have one element, got shape %v", loss.Shape())
	}
	err = trace.Capture(func() {
		old := g.SetPhase(trace.Backward)
		defer g.SetPhase(old)
		grads = backward(g, loss, prim.FullLike(loss, 1), wrt)
	})
	return grads, err
}

// BackwardFrom propagates an explicit output gradient seed (shape of out).
func BackwardFrom(out, seed *trace.Tensor, wrt []*trace.Tensor) (grads []*trace.Tensor, err error) {
	g := out.Graph()
	err = trace.Capture(func() {
		old := g.SetPhase(trace.Backward)
		defer g.SetPhase(old)
		grads = backward(g, out, seed, wrt)
	})
	return grads, err
}

type key struct{ node, index int }

func backward(g *trace.Graph, out, seed *trace.Tensor, wrt []*trace.Tensor) []*trace.Tensor {
	// Only nodes on a path from a wrt tensor to out need gradients.
	needs := make([]bool, len(g.Nodes))
	for _, w := range wrt {
		needs[w.Node.ID] = true
	}
	limit := out.Node.ID
	for _, n := range g.Nodes[:limit+1] {
		for _, in := range n.Inputs {
			if needs[in.Node.ID] && in.DType().IsFloat() {
				needs[n.ID] = true
			}
		}
	}
	acc := map[key]*trace.Tensor{{out.Node.ID, out.Index}: seed}
	for id := limit; id >= 0; id-- {
		n := g.Nodes[id]
		if n.Kind != trace.KindOp || !needs[id] {
			continue
		}
		gouts := make([]*trace.Tensor, len(n.Outputs))
		any := false
		for i := range n.Outputs {
			k := key{id, i}
			if t, ok := acc[k]; ok {
				gouts[i] = t
				any = true
				// Drop consumed gradients from the map, as candle does.
				delete(acc, k)
			}
		}
		if !any {
			continue
		}
		rule, ok := n.Op.(Rule)
		if !ok {
			g.Errorf(n.Op.Name(), n.Inputs, "op has no gradient rule")
		}
		var gins []*trace.Tensor
		g.AtModule(n.Module, func() { gins = rule.Grad(n, gouts) })
		for i, in := range n.Inputs {
			if i >= len(gins) || gins[i] == nil || !needs[in.Node.ID] || !in.DType().IsFloat() {
				continue
			}
			gi := gins[i]
			if !gi.Shape().Equal(in.Shape()) {
				g.Errorf(n.Op.Name()+" backward", []*trace.Tensor{gi, in}, "gradient for input %d has shape %v, want %v", i, gi.Shape(), in.Shape())
			}
			k := key{in.Node.ID, in.Index}
			if prev, ok := acc[k]; ok {
				acc[k] = prim.Add(prev, gi)
			} else {
				acc[k] = gi
			}
		}
	}
	grads := make([]*trace.Tensor, len(wrt))
	for i, w := range wrt {
		grads[i] = acc[key{w.Node.ID, w.Index}]
	}
	return grads
}
