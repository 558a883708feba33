package transform

import (
	"slices"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// attnLayout is off only in tests that compare the folded graph with the
// transposes it removes.
var attnLayout = true

// headSwap is the permutation a multi-head attention's transposes make,
// [B, T, H, D] <-> [B, H, T, D] (its own inverse).
var headSwap = []int{0, 2, 1, 3}

func isHeadSwap(n *trace.Node) bool {
	p, ok := n.Op.(*prim.Permute)
	return ok && n.Kind == trace.KindOp && slices.Equal(p.Perm, headSwap)
}

// attnLayoutOperands is how many of attention node n's first inputs are
// in its heads layout (q, k, v; the backward's dO, q, k, v and saved
// output), and its outputs in it (out; dq, dk, dv).
func attnLayoutOperands(n *trace.Node) (ins, outs int) {
	switch n.Op.(type) {
	case *prim.AttentionOp:
		return 3, 1
	case *prim.AttentionBackward:
		return 5, 3
	}
	return 0, 0
}

// FoldAttentionLayout returns a copy of g in which attention ops whose q,
// k and v are [B, T, H, D] values transposed to [B, H, T, D] (a GPT's
// heads: the projection reshaped, then transpose(1, 2)) read the
// [B, T, H, D] values themselves (prim.AttentionOp.BTHD), with their
// backward ops: the output, its gradient and dq, dk, dv are then
// [B, T, H, D] too, so the transposes of the output back to rows, of its
// gradient to heads and of dq, dk, dv back to rows go as well. Every
// transpose was a copy through memory; the kernels read and write the
// heads in place with strides, computing the same bits. A value some
// other node reads in the old layout gets a transpose of its own. It
// returns the copy and how many attention ops (forward and backward) it
// changed. A backward op whose gradients only c_attn's concatenation
// reads then writes that concatenation (packAttentionGrads). It runs on the traced step before the other passes, so that a
// forward op and its backward (which reads the forward's operands and
// outputs) change together.
func FoldAttentionLayout(g *trace.Graph) (*trace.Graph, int, error) {
	cons := g.Consumers()
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	swapped := func(t *trace.Tensor) bool { return isHeadSwap(t.Node) && len(t.Shape()) == 4 }
	fold := map[*trace.Node]bool{}
	for _, n := range g.Nodes {
		a, ok := n.Op.(*prim.AttentionOp)
		if !ok || n.Kind != trace.KindOp || a.BTHD || !swapped(n.Inputs[0]) || !swapped(n.Inputs[1]) || !swapped(n.Inputs[2]) {
			continue
		}
		// Its backward ops must read this op's operands and outputs, to
		// change with it.
		var bwd []*trace.Node
		ok = true
		for _, o := range n.Outputs {
			for _, c := range cons[n.ID] {
				b, isB := c.Op.(*prim.AttentionBackward)
				if !isB || !slices.Contains(c.Inputs, o) || slices.Contains(bwd, c) {
					continue
				}
				if b.BTHD || !slices.Equal(c.Inputs[1:4], n.Inputs) || c.Inputs[4] != n.Outputs[0] || c.Inputs[5] != n.Outputs[1] {
					ok = false
				}
				bwd = append(bwd, c)
			}
		}
		if !ok {
			continue
		}
		fold[n] = true
		for _, b := range bwd {
			fold[b] = true
		}
	}
	if len(fold) == 0 {
		return g, 0, nil
	}
	// readsLayout reports whether c reads t only as a layout operand of a
	// folded attention node.
	readsLayout := func(c *trace.Node, t *trace.Tensor) bool {
		if !fold[c] {
			return false
		}
		k, _ := attnLayoutOperands(c)
		for i, in := range c.Inputs {
			if in == t && i >= k {
				return false
			}
		}
		return true
	}
	// drop: transposes into a folded node that nothing else reads.
	drop := map[*trace.Node]bool{}
	for _, n := range g.Nodes {
		if !isHeadSwap(n) || outputs[n.Outputs[0]] || len(cons[n.ID]) == 0 || fold[n.Inputs[0].Node] {
			continue
		}
		all := true
		for _, c := range cons[n.ID] {
			all = all && readsLayout(c, n.Outputs[0])
		}
		if all {
			drop[n] = true
		}
	}
	// bthd[t] is value t of g (a folded node's layout output) as the
	// copy's [B, T, H, D] value.
	bthd := map[*trace.Tensor]*trace.Tensor{}
	swap := func(out *trace.Graph, like *trace.Node, x *trace.Tensor) *trace.Tensor {
		p := *like
		p.Op = &prim.Permute{Perm: slices.Clone(headSwap)}
		return out.Clone(&p, []*trace.Tensor{x})[0]
	}
	out, err := rebuild(g, func(out *trace.Graph, n *trace.Node, ins []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		if drop[n] {
			return true
		}
		if isHeadSwap(n) {
			if v, ok := bthd[n.Inputs[0]]; ok {
				// A transpose back of a folded output: the output itself.
				mapped[n.Outputs[0]] = v
				return true
			}
			return false
		}
		if !fold[n] {
			return false
		}
		k, nout := attnLayoutOperands(n)
		for i := range k {
			t := n.Inputs[i]
			switch {
			case bthd[t] != nil:
				ins[i] = bthd[t]
			case swapped(t):
				x := t.Node.Inputs[0]
				ins[i] = mapped[x]
				if ins[i] == nil {
					// x is a folded output only transposes read.
					ins[i] = swap(out, n, bthd[x])
				}
			default:
				ins[i] = swap(out, n, ins[i])
			}
		}
		c := *n
		switch o := n.Op.(type) {
		case *prim.AttentionOp:
			op := *o
			op.BTHD = true
			c.Op = &op
		case *prim.AttentionBackward:
			op := *o
			op.BTHD = true
			c.Op = &op
		}
		res := out.Clone(&c, ins)
		for i, o := range n.Outputs {
			if i >= nout {
				mapped[o] = res[i]
				continue
			}
			bthd[o] = res[i]
			// Readers other than transposes back and folded nodes read
			// the old layout.
			other := outputs[o]
			for _, r := range cons[n.ID] {
				if slices.Contains(r.Inputs, o) && !isHeadSwap(r) && !readsLayout(r, o) {
					other = true
				}
			}
			if other {
				mapped[o] = swap(out, n, res[i])
			}
		}
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	out, _, err = packAttentionGrads(out)
	if err != nil {
		return nil, 0, err
	}
	return out, len(fold), nil
}

// packAttentionGrads returns a copy of g in which a BTHD attention
// backward whose dq, dk and dv are read only by reshapes to rows
// [B, T, H*D] that only one concatenation along the last axis reads, in
// the order dq, dk, dv, writes that concatenation itself
// (prim.AttentionBackward.Packed): the gradient c_attn's backward reads,
// without the three separate gradients and the copy that joined them. It
// returns the copy and how many backward ops it changed.
func packAttentionGrads(g *trace.Graph) (*trace.Graph, int, error) {
	cons := g.Consumers()
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	// cat[b] is the concatenation backward op b writes; skip, the
	// reshapes and concatenations that go.
	cat := map[*trace.Node]*trace.Node{}
	skip := map[*trace.Node]bool{}
	for _, n := range g.Nodes {
		b, ok := n.Op.(*prim.AttentionBackward)
		if !ok || n.Kind != trace.KindOp || !b.BTHD || b.Packed || len(n.Outputs) != 3 || n.Inputs[1].Shape()[1] != n.Inputs[2].Shape()[1] {
			continue
		}
		var c *trace.Node
		var rs []*trace.Node
		for i, o := range n.Outputs {
			rd := cons[n.ID]
			var r *trace.Node
			for _, x := range rd {
				if slices.Contains(x.Inputs, o) {
					if r != nil {
						r = nil
						break
					}
					r = x
				}
			}
			if r == nil || outputs[o] {
				break
			}
			if _, isR := r.Op.(*prim.ReshapeOp); !isR || r.Kind != trace.KindOp || outputs[r.Outputs[0]] || len(cons[r.ID]) != 1 ||
				!r.Outputs[0].Shape().Equal(tensor.Shape{o.Shape()[0], o.Shape()[1], o.Shape()[2] * o.Shape()[3]}) {
				break
			}
			cc := cons[r.ID][0]
			co, isCat := cc.Op.(*prim.CatOp)
			if !isCat || cc.Kind != trace.KindOp || co.Axis != 2 && co.Axis != -1 || len(cc.Inputs) != 3 || cc.Inputs[i] != r.Outputs[0] ||
				(c != nil && cc != c) || cc.Phase != n.Phase || cc.Region != n.Region || cc.Recompute != n.Recompute {
				break
			}
			c = cc
			rs = append(rs, r)
		}
		if len(rs) != 3 {
			continue
		}
		cat[n] = c
		skip[c] = true
		for _, r := range rs {
			skip[r] = true
		}
	}
	if len(cat) == 0 {
		return g, 0, nil
	}
	out, err := rebuild(g, func(out *trace.Graph, n *trace.Node, ins []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		if skip[n] {
			return true // mapped by its backward op (earlier)
		}
		c := cat[n]
		if c == nil {
			return false
		}
		p := *n
		op := *n.Op.(*prim.AttentionBackward)
		op.Packed = true
		p.Op = &op
		mapped[c.Outputs[0]] = out.Clone(&p, ins)[0]
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	return out, len(cat), nil
}
