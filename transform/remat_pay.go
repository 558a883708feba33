package transform

import (
	"slices"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// payingOnly drops from marked (indexed by node ID in g) the nodes whose
// recomputation does not lower the bytes held from the forward pass for
// the backward pass (Kept): one at a time, each connected group of marked
// nodes first and then each node, latest first, keeping a removal when
// the bytes held do not grow. Recomputing an activation frees its saved
// output but keeps its inputs alive instead; where the output is stored
// smaller than the input (a LeakyReLU output read back from the saved
// concatenation it feeds, or kept as a 1-bit mask) or where the input is
// no more saved than the output (a ReLU after a residual addition),
// recomputation costs time and saves nothing. c is the storage policy the
// compress pass will apply (nil: none).
func payingOnly(g *trace.Graph, p Policy, marked []bool, c CompressPolicy) {
	k := newKeptModel(g, p, marked, c)
	best := k.bytes(marked)
	try := func(ids []int) {
		for _, id := range ids {
			marked[id] = false
		}
		if b := k.bytes(marked); b <= best {
			best = b
			return
		}
		for _, id := range ids {
			marked[id] = true
		}
	}
	// Groups: marked nodes connected through their inputs.
	group := make([]int, len(marked))
	for i := range group {
		group[i] = -1
	}
	var groups [][]int
	for _, n := range g.Nodes {
		if !marked[n.ID] {
			continue
		}
		gi := -1
		for _, in := range n.Inputs {
			if marked[in.Node.ID] && group[in.Node.ID] >= 0 {
				if gi < 0 {
					gi = group[in.Node.ID]
				} else if o := group[in.Node.ID]; o != gi {
					// Merge o into gi.
					for _, id := range groups[o] {
						group[id] = gi
					}
					groups[gi] = append(groups[gi], groups[o]...)
					groups[o] = nil
				}
			}
		}
		if gi < 0 {
			gi = len(groups)
			groups = append(groups, nil)
		}
		group[n.ID] = gi
		groups[gi] = append(groups[gi], n.ID)
	}
	for i := len(groups) - 1; i >= 0; i-- {
		if len(groups[i]) > 1 {
			try(groups[i])
		}
	}
	for id := len(marked) - 1; id >= 0; id-- {
		if marked[id] {
			try([]int{id})
		}
	}
}

// keptModel counts, for a set of recomputed nodes, the bytes of forward
// values held for the backward pass as the later passes store them: a
// value read back from a saved concatenation (SliceFromCat) costs nothing
// of its own, one read only as a ReLU mask costs what the storage policy
// stores it in, the rest their size. It is the quantity recomputation
// exists to lower (the activations alive where the forward pass ends).
type keptModel struct {
	g      *trace.Graph
	c      CompressPolicy
	region []int
	// outReaders[id] lists, per output of node id, its readers (each
	// once), in graph order.
	outReaders [][][]*trace.Node
	// values are the forward values whose bytes can depend on the set:
	// read by a backward node or by a node the policy marked.
	values []keptValue
	fixed  int64 // bytes of the forward values that cannot
}

type keptValue struct {
	v     *trace.Tensor
	cats  []*trace.Node // concatenations v is a direct input of, or whose inputs hold v's (v a concatenation)
	slice bool          // SliceFromCat may read v from one of cats
}

func newKeptModel(g *trace.Graph, p Policy, marked []bool, c CompressPolicy) *keptModel {
	k := &keptModel{g: g, c: c, region: make([]int, len(g.Nodes)), outReaders: make([][][]*trace.Node, len(g.Nodes))}
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	for _, n := range g.Nodes {
		k.outReaders[n.ID] = make([][]*trace.Node, len(n.Outputs))
		if n.Kind == trace.KindOp && n.Phase == trace.Forward {
			k.region[n.ID] = p.Region(n)
		}
	}
	cats := map[*trace.Tensor][]*trace.Node{}
	for _, n := range g.Nodes {
		for i, in := range n.Inputs {
			if slices.Contains(n.Inputs[:i], in) {
				continue
			}
			rs := &k.outReaders[in.Node.ID][in.Index]
			*rs = append(*rs, n)
			if _, ok := n.Op.(*prim.CatOp); ok && n.Kind == trace.KindOp && n.Phase == trace.Forward {
				cats[in] = append(cats[in], n)
			}
		}
	}
	none := make([]bool, len(marked))
	for _, n := range g.Nodes {
		if n.Phase != trace.Forward || n.Kind != trace.KindOp && n.Kind != trace.KindInput {
			continue
		}
		for _, v := range n.Outputs {
			if outputs[v] {
				continue
			}
			varies := marked[n.ID]
			back := false
			for _, r := range k.outReaders[n.ID][v.Index] {
				varies = varies || marked[r.ID]
				back = back || r.Phase != trace.Forward
			}
			if !varies && !back {
				continue
			}
			kv := keptValue{v: v, slice: sliceCat && n.Kind == trace.KindOp && trace.Root(v) == v}
			held := cats[v]
			if _, ok := n.Op.(*prim.CatOp); ok && len(n.Inputs) > 0 && v.Index == 0 {
				// A concatenation is read back from a wider one holding
				// its inputs as a run (a DenseNet block's).
				for _, c := range cats[n.Inputs[0]] {
					if _, ok := catRun(catLike{n: n, cat: n}, catLike{n: c, cat: c}); ok && c != n {
						held = append(held, c)
					}
				}
			}
			for _, c := range held {
				if cat := c.Outputs[0]; !outputs[cat] && trace.Root(cat) == cat {
					kv.cats = append(kv.cats, c)
					varies = varies || marked[c.ID]
				}
			}
			if !varies && len(kv.cats) == 0 {
				k.fixed += k.value(&kv, none, none)
				continue
			}
			k.values = append(k.values, kv)
		}
	}
	return k
}

// bytes is the bytes held for the backward pass when the nodes marked
// are recomputed as Rematerialize recomputes them.
func (k *keptModel) bytes(marked []bool) int64 {
	g := k.g
	// copied[n]: Rematerialize makes a copy of marked node n (a backward
	// node reads it, or a copy in its region does).
	copied := make([]bool, len(g.Nodes))
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		if !marked[n.ID] {
			continue
		}
	outs:
		for _, rs := range k.outReaders[n.ID] {
			for _, r := range rs {
				if r.Phase != trace.Forward || copied[r.ID] && k.region[r.ID] == k.region[n.ID] {
					copied[n.ID] = true
					break outs
				}
			}
		}
	}
	total := k.fixed
	for i := range k.values {
		total += k.value(&k.values[i], marked, copied)
	}
	return total
}

// backReaders lists the backward readers of v: original backward nodes
// when v's producer is not recomputed, and copies that read the forward v
// (a copy in another region, or of a node reading an unrecomputed value).
func (k *keptModel) backReaders(v *trace.Tensor, marked, copied []bool) (rs []*trace.Node, masks int) {
	p := v.Node
	for _, r := range k.outReaders[p.ID][v.Index] {
		switch {
		case r.Phase != trace.Forward:
			if marked[p.ID] {
				continue
			}
			rs = append(rs, r)
			for j, in := range r.Inputs {
				if in == v && maskRead(r, j) {
					masks++
					break
				}
			}
		case copied[r.ID] && (!marked[p.ID] || k.region[p.ID] != k.region[r.ID]):
			rs = append(rs, r)
		}
	}
	return rs, masks
}

// value is the bytes kv's value holds for the backward pass.
func (k *keptModel) value(kv *keptValue, marked, copied []bool) int64 {
	rs, masks := k.backReaders(kv.v, marked, copied)
	if len(rs) == 0 {
		return 0
	}
	if kv.slice {
		for _, c := range kv.cats {
			if cat := c.Outputs[0]; !marked[c.ID] {
				if crs, _ := k.backReaders(cat, marked, copied); len(crs) > 0 {
					return 0 // read back from the saved concatenation
				}
			}
		}
	}
	return k.stored(kv.v, rs, masks)
}

// stored is the bytes Compress stores v in, read by rs (masks of them as
// ReLU masks only).
func (k *keptModel) stored(v *trace.Tensor, rs []*trace.Node, masks int) int64 {
	full := v.Meta.Bytes()
	if k.c == nil {
		return full
	}
	s := &Saved{Value: v, Readers: rs, MaskReaders: masks, Statistic: statistic(v)}
	d := decide(k.c, s)
	switch {
	case d.Format == Keep:
		return full
	case d.Format == Bits:
		b := Bits.StoredBytes(v.Shape())
		if !s.MaskOnly() {
			b += full
		}
		return b
	}
	b := d.Format.StoredBytes(v.Shape())
	if d.Bits {
		b += Bits.StoredBytes(v.Shape())
	}
	return b
}
