package transform

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// splitAdd is off only in tests that compare against separate splits and
// adds.
var splitAdd = true

// splitAdds returns a copy of g in which a split (prim.SplitOp) whose
// pieces are each read only by an add of an earlier value of the piece's
// shape (autodiff summing a concatenation's gradient into its inputs'
// gradients: a DenseNet block's backward) runs as one prim.SplitAdd in the
// split's place: every such piece is added as it is cut, so it is never
// written on its own and read back. The sums are the adds' bits (the same
// loop, the same operand order). In memory, the node holds the split
// tensor, the addends and the sums, where the split held the split tensor,
// the pieces (the sums' sizes) and the addends (live until their adds, which
// come later); from there to each add the sum replaces the piece and the
// addend, so no step holds more. It returns the copy and how many
// prim.SplitAdd nodes it made.
func splitAdds(g *trace.Graph) (*trace.Graph, int, error) {
	if !splitAdd {
		return g, 0, nil
	}
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	readers := map[*trace.Tensor][]*trace.Node{}
	pos := map[*trace.Node]int{}
	for i, n := range g.Nodes {
		pos[n] = i
		for _, in := range n.Inputs {
			rs := readers[in]
			if len(rs) == 0 || rs[len(rs)-1] != n {
				readers[in] = append(rs, n)
			}
		}
	}
	type plan struct {
		op   *prim.SplitAdd
		adds []*trace.Node // per piece, nil where none
		acc  []*trace.Tensor
	}
	plans := map[*trace.Node]*plan{}
	merged := map[*trace.Node]bool{}
	for _, s := range g.Nodes {
		so, ok := s.Op.(*prim.SplitOp)
		if !ok || s.Kind != trace.KindOp || !isF32(s.Inputs[0]) {
			continue
		}
		p := &plan{op: &prim.SplitAdd{Axis: so.Axis, Sizes: so.Sizes, Acc: make([]prim.AccOrder, len(so.Sizes))}, adds: make([]*trace.Node, len(so.Sizes))}
		for i, piece := range s.Outputs {
			rs := readers[piece]
			if outputs[piece] || len(rs) != 1 {
				continue
			}
			a := rs[0]
			b, ok := a.Op.(*prim.Binary)
			if !ok || b.Kind != prim.AddKind || a.Kind != trace.KindOp || len(a.Inputs) != 2 ||
				a.Phase != s.Phase || a.Region != s.Region || a.Recompute != s.Recompute {
				continue
			}
			order, x := prim.AccBefore, a.Inputs[0]
			if x == piece {
				order, x = prim.AccAfter, a.Inputs[1]
			}
			// The addend must exist at the split: made before it, not by it.
			if x == piece || x.Node == s || pos[x.Node] > pos[s] || !isF32(x) ||
				!x.Shape().Equal(piece.Shape()) || !a.Outputs[0].Shape().Equal(piece.Shape()) {
				continue
			}
			p.op.Acc[i], p.adds[i] = order, a
			p.acc = append(p.acc, x)
			merged[a] = true
		}
		if len(p.acc) > 0 {
			plans[s] = p
		}
	}
	if len(plans) == 0 {
		return g, 0, nil
	}
	out, err := rebuild(g, func(out *trace.Graph, n *trace.Node, ins []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		if merged[n] {
			return true // the SplitAdd (earlier) mapped its output
		}
		p := plans[n]
		if p == nil {
			return false
		}
		args := []*trace.Tensor{ins[0]}
		for _, x := range p.acc {
			args = append(args, mapped[x])
		}
		c := *n
		c.Op = p.op
		for i, o := range out.Clone(&c, args) {
			if a := p.adds[i]; a != nil {
				mapped[a.Outputs[0]] = o
			} else {
				mapped[n.Outputs[i]] = o
			}
		}
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	return out, len(plans), nil
}
