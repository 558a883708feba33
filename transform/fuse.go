package transform

import (
	"fmt"
	"sort"

	"github.com/headroom-ml/headroom/internal/env"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// FuseStats describes what Fuse did.
type FuseStats struct {
	Groups   int            // fused nodes made
	Merged   int            // elementwise nodes merged into them
	Patterns map[string]int // fused nodes by name ("matmul+add+relu")
	// Elided is the bytes of values that are no longer materialized (each
	// counted once per step, whatever its lifetime was).
	Elided int64
}

// maxFusedInstrs bounds a program: longer chains gain nothing more and
// each instruction takes a tile of scratch.
const maxFusedInstrs = 16

// maxFuseWindow bounds how far apart (in nodes) a chain's first and last
// member and its anchor may be, which bounds the checks' cost too.
const maxFuseWindow = 256

// fuseProducer reports whether o may be the producer of a prim.Fused: its
// fusion role (prim.FuseProducer) says so, for the ops whose output 0
// elementwise chains commonly read (products, convolutions,
// normalizations and their backward ops).
func fuseProducer(o trace.Op) bool { return prim.TraitsOf(o).Fusion == prim.FuseProducer }

// Fuse returns a copy of g in which chains of elementwise ops (add, mul,
// relu, gelu, leaky_relu, their backward ops, ...) run as one prim.Fused
// node each, together with the op that produces their first operand
// (matmul + bias + activation, convolution + activation, batch norm +
// residual add + relu, convolution input gradient + gradient sum + relu
// backward, ...). Values only the chain reads are never materialized;
// values read elsewhere (a pre-activation gelu's backward needs, a relu
// output the next layer and relu's backward read, saved tensors, graph
// outputs) become outputs of the fused node. Results are bit for bit those
// of g: each instruction is the unfused kernel's loop.
//
// The fused node runs in its root's place, or right after the last node
// producing one of its inputs, so members run earlier or later than in g.
// A chain is fused only where that keeps the plan's peak: every reader of
// a value it computes still comes after it (effects and reshapes are
// moved after it), a member run later does not keep its inputs alive
// longer, at each node in between that allocates the chain holds no more
// than it did in g, and the fused node's own step, where its inputs and
// outputs are all live, holds no more than the busiest step of the nodes
// it replaces. Members share the root's phase, recomputation flag and
// checkpoint region: nothing crosses a region or the forward and backward
// boundary. Run it last, after Rematerialize and ApplyPrecision.
//
// HEADROOM_FUSE=0 in the environment turns it off (for comparisons); a
// value that is not a switch (internal/env.Bool) is an error.
func Fuse(g *trace.Graph) (*trace.Graph, FuseStats, error) {
	st := FuseStats{Patterns: map[string]int{}}
	if on, err := env.Bool(env.Fuse, true); err != nil || !on {
		return g, st, err
	}
	g, splits, err := splitAdds(g)
	if err != nil {
		return nil, st, err
	}
	if splits > 0 {
		st.Patterns[(&prim.SplitAdd{}).Name()] += splits
	}
	orig := g
	g, pairs, err := roundPairs(g)
	if err != nil {
		return nil, st, err
	}
	f := newFuser(g)
	f.pairs = pairs
	f.findGroups()
	if len(f.groups) == 0 {
		return orig, st, nil
	}
	out, err := f.rebuild(&st)
	if err != nil {
		return nil, st, err
	}
	return out, st, nil
}

type fuser struct {
	g    *trace.Graph
	live []bool
	// readers of each value (live nodes, each once).
	readers map[*trace.Tensor][]*trace.Node
	// lastUse of each value that owns bytes, through aliases; graph
	// outputs are used at len(g.Nodes).
	lastUse map[*trace.Tensor]int
	// noisy[i] counts live nodes before ID i that allocate arena bytes.
	noisy []int
	// frees[i]: live node ID i is the last reader of a value that owns
	// bytes (not state), which is freed after it.
	frees  []bool
	output map[*trace.Tensor]bool
	groups []*fuseGroup
	of     map[*trace.Node]*fuseGroup // members (and producer roots)
	// pairs maps the prim.Round nodes that stand for a cast to a 16-bit
	// type and back (roundPairs) to that narrowing cast: those left out
	// of every group are emitted as the two casts again, which hold less
	// (the 16-bit value rather than the float32 input) at the second.
	pairs map[*trace.Node]*trace.Node
}

type fuseGroup struct {
	root    *trace.Node
	prod    bool          // root is the producer (else the first member)
	members []*trace.Node // elementwise members in ID order
	member  map[*trace.Node]bool
	// value marks the tensors the program computes: members' outputs, the
	// producer's output 0 and reshapes of those (alias).
	value map[*trace.Tensor]bool
	alias map[*trace.Tensor]*trace.Tensor // reshape output -> its input
	at    int                             // emitted after node at (root.ID: in the root's place)
	// exposed values (read outside the program) and alias nodes kept.
	exposed map[*trace.Tensor]bool
	keep    map[*trace.Node]bool
	// the fused node: its op, its inputs and the values its outputs are.
	op        *prim.Fused
	ins, outs []*trace.Tensor
}

func newFuser(g *trace.Graph) *fuser {
	f := &fuser{g: g, live: make([]bool, len(g.Nodes)), readers: map[*trace.Tensor][]*trace.Node{},
		lastUse: map[*trace.Tensor]int{}, noisy: make([]int, len(g.Nodes)+1), output: map[*trace.Tensor]bool{},
		of: map[*trace.Node]*fuseGroup{}}
	var mark func(n *trace.Node)
	mark = func(n *trace.Node) {
		if f.live[n.ID] {
			return
		}
		f.live[n.ID] = true
		for _, in := range n.Inputs {
			mark(in.Node)
		}
	}
	for _, t := range g.Outputs {
		mark(t.Node)
		f.output[t] = true
		f.lastUse[trace.Root(t)] = len(g.Nodes)
	}
	for _, n := range g.Nodes {
		if isEffect(n) {
			mark(n)
		}
	}
	for _, n := range g.Nodes {
		noisy := 0
		if f.live[n.ID] && n.Kind == trace.KindOp && len(n.Outputs) > 0 && !isAlias(n) {
			noisy = 1
		}
		f.noisy[n.ID+1] = f.noisy[n.ID] + noisy
		if !f.live[n.ID] {
			continue
		}
		for _, in := range n.Inputs {
			if r := f.readers[in]; len(r) == 0 || r[len(r)-1] != n {
				f.readers[in] = append(r, n)
			}
			f.lastUse[trace.Root(in)] = max(f.lastUse[trace.Root(in)], n.ID)
		}
	}
	f.frees = make([]bool, len(g.Nodes))
	for t, i := range f.lastUse {
		if i < len(g.Nodes) && t.Node.Kind != trace.KindState {
			f.frees[i] = true
		}
	}
	return f
}

// freesBetween reports whether a live node strictly between IDs a < b,
// other than nodes of gr, frees a value.
func (f *fuser) freesBetween(gr *fuseGroup, a, b int) bool {
	for i := a + 1; i < b; i++ {
		n := f.g.Nodes[i]
		if f.live[i] && f.frees[i] && !gr.member[n] && !(gr.prod && n == gr.root) {
			return true
		}
	}
	return false
}

func isAlias(n *trace.Node) bool {
	_, ok := n.Op.(trace.Aliaser)
	return n.Kind == trace.KindOp && ok
}

// noisyBetween reports whether a live node strictly between IDs a and b,
// other than nodes of gr, allocates arena bytes.
func (f *fuser) noisyBetween(gr *fuseGroup, a, b int) bool {
	if a > b {
		a, b = b, a
	}
	n := f.noisy[b] - f.noisy[a+1]
	for _, m := range gr.members {
		if a < m.ID && m.ID < b {
			n-- // members allocate in g, not in the fused graph
		}
	}
	if r := gr.root; gr.prod && a < r.ID && r.ID < b {
		n--
	}
	return n > 0
}

// pos is where node n runs in the fused graph, in g's node IDs: its
// group's anchor, or its own ID.
func (f *fuser) pos(n *trace.Node) int {
	if gr, ok := f.of[n]; ok {
		return gr.at
	}
	return n.ID
}

// convLowInputs reports whether n is a convolution with a 16-bit input
// (the mixed convolutions of ReadLow).
func convLowInputs(n *trace.Node) bool {
	switch n.Op.(type) {
	case *prim.Conv2dOp, *prim.Conv2dBackwardInput, *prim.Conv2dBackwardWeight:
		for _, in := range n.Inputs {
			if low16(in.DType()) {
				return true
			}
		}
	}
	return false
}

func low16(d tensor.DType) bool { return d == tensor.BFloat16 || d == tensor.Float16 }

// floatOut reports whether t is a value a program can compute on.
func floatOut(t *trace.Tensor) bool {
	return t.DType() == tensor.Float32 || t.DType() == tensor.Float64
}

func (f *fuser) findGroups() {
	for _, n := range f.g.Nodes {
		if !f.live[n.ID] || n.Kind != trace.KindOp || f.of[n] != nil || len(n.Outputs) == 0 || !floatOut(n.Outputs[0]) {
			continue
		}
		prod := fuseProducer(n.Op)
		if !prod && !prim.FusedElementwise(n.Op) {
			continue
		}
		gr := f.grow(n, prod)
		if gr == nil {
			continue
		}
		f.groups = append(f.groups, gr)
		f.of[n] = gr
		for _, m := range gr.members {
			f.of[m] = gr
		}
	}
}

// grow builds the largest valid group rooted at r by adding elementwise
// readers of its values in ID order; nil when nothing joins.
func (f *fuser) grow(r *trace.Node, prod bool) *fuseGroup {
	gr := &fuseGroup{root: r, prod: prod, member: map[*trace.Node]bool{}, value: map[*trace.Tensor]bool{},
		alias: map[*trace.Tensor]*trace.Tensor{}}
	if !prod {
		if !f.joinable(gr, r) {
			return nil
		}
		gr.members = []*trace.Node{r}
		gr.member[r] = true
	}
	tried := map[*trace.Node]bool{}
	var cand []*trace.Node
	var addValue func(t *trace.Tensor)
	addValue = func(t *trace.Tensor) {
		gr.value[t] = true
		for _, c := range f.readers[t] {
			if isAlias(c) && f.of[c] == nil {
				gr.alias[c.Outputs[0]] = t
				addValue(c.Outputs[0])
				continue
			}
			if !tried[c] && !gr.member[c] {
				tried[c] = true
				cand = append(cand, c)
			}
		}
	}
	addValue(r.Outputs[0])
	if ok, _ := f.check(gr); !ok && !prod {
		return nil
	}
	for len(gr.members) < maxFusedInstrs {
		sort.Slice(cand, func(i, j int) bool { return cand[i].ID < cand[j].ID })
		if len(cand) == 0 {
			break
		}
		c := cand[0]
		cand = cand[1:]
		if !f.joinable(gr, c) {
			continue
		}
		// The widenings of 16-bit values that only c reads join first:
		// the program then reads the 16-bit value (a bfloat16 saved
		// activation that gelu's backward reads widened).
		join := append(f.widenedFor(gr, c), c)
		if len(gr.members)+len(join) > maxFusedInstrs {
			continue
		}
		for _, m := range join {
			gr.members = append(gr.members, m)
			gr.member[m] = true
		}
		for _, m := range join[:len(join)-1] {
			gr.value[m.Outputs[0]] = true
		}
		if ok, _ := f.check(gr); !ok {
			gr.members = gr.members[:len(gr.members)-len(join)]
			for _, m := range join {
				delete(gr.member, m)
				delete(gr.value, m.Outputs[0])
			}
			continue
		}
		for _, m := range join {
			addValue(m.Outputs[0])
		}
	}
	sort.Slice(gr.members, func(i, j int) bool { return gr.members[i].ID < gr.members[j].ID })
	if len(gr.members) == 0 || !prod && len(gr.members) < 2 {
		return nil
	}
	_, at := f.check(gr)
	gr.at = at
	f.expose(gr)
	gr.op, gr.ins, gr.outs = gr.fusedOp()
	return gr
}

// widening reports whether n casts a 16-bit value to float32.
func widening(n *trace.Node) bool {
	c, ok := n.Op.(*prim.Cast)
	return ok && n.Kind == trace.KindOp && c.To == tensor.Float32 && prim.FusedCast(n.Inputs[0].DType(), c.To)
}

// widenedFor lists the widenings (of values the program does not compute)
// whose outputs c reads and nothing else does, that may join gr: in a
// product's epilogue, where reading the 16-bit value while the product's
// rows are in cache paid (gelu's backward); a program of its own read
// rrdbnet's bfloat16 activations no faster than the widening kernel and
// the program after it did.
func (f *fuser) widenedFor(gr *fuseGroup, c *trace.Node) []*trace.Node {
	if !gr.prod {
		return nil
	}
	var ws []*trace.Node
	for _, in := range c.Inputs {
		w := in.Node
		if gr.value[in] || !widening(w) || gr.member[w] || f.output[in] || !f.joinable(gr, w) {
			continue
		}
		if rs := f.readers[in]; len(rs) != 1 || rs[0] != c {
			continue
		}
		ws = append(ws, w)
	}
	return ws
}

// joinable reports whether elementwise node c may be a member of gr, as
// far as c itself goes: its kind, phase, region, element count and type,
// and how it reads its inputs. Values are of the root's type but for
// casts between float32 and a 16-bit type in float32 programs.
func (f *fuser) joinable(gr *fuseGroup, c *trace.Node) bool {
	r := gr.root
	if !f.live[c.ID] || c.Kind != trace.KindOp || f.of[c] != nil || !prim.FusedInstruction(c.Op) || len(c.Outputs) != 1 {
		return false
	}
	if c.Phase != r.Phase || c.Recompute != r.Recompute || c.Region != r.Region {
		return false
	}
	base := r.Outputs[0]
	out := c.Outputs[0]
	inType, outType := base.DType(), base.DType()
	if cast, ok := c.Op.(*prim.Cast); ok {
		if base.DType() != tensor.Float32 || !prim.FusedCast(c.Inputs[0].DType(), cast.To) {
			return false
		}
		// A narrowing stays out of the epilogue of a convolution that
		// reads 16-bit inputs: its kernel may widen them into its
		// workspace (where none reads them in place), which the byte
		// counts here do not see, and the fused step would hold that
		// copy, the producer's float32 output in workspace and the 16-bit
		// output at once (rrdbnet-tiny's peak +5%). A mixed matmul
		// widens as it packs, into no such copy.
		if gr.prod && low16(cast.To) && convLowInputs(r) {
			return false
		}
		inType, outType = c.Inputs[0].DType(), cast.To
	} else if !floatOut(out) {
		return false
	}
	if out.DType() != outType || out.Shape().NumElements() != base.Shape().NumElements() {
		return false
	}
	for _, in := range c.Inputs {
		if in.DType() != inType {
			return false
		}
		if gr.value[in] {
			if in.Shape().NumElements() != base.Shape().NumElements() {
				return false
			}
			continue
		}
		if _, _, ok := loadPattern(in.Shape(), out.Shape()); !ok {
			return false
		}
	}
	return true
}

// external lists the inputs of member m that the program does not compute.
func (gr *fuseGroup) external(m *trace.Node) []*trace.Tensor {
	var ext []*trace.Tensor
	for _, in := range m.Inputs {
		if !gr.value[in] || !gr.member[m] {
			ext = append(ext, in)
		}
	}
	return ext
}

// outsideReaders calls fn for each reader of value t (through aliases the
// group computes) that is not a member; alias nodes are followed, not
// reported. It reports whether t is a graph output (directly or through an
// alias).
func (f *fuser) outsideReaders(gr *fuseGroup, t *trace.Tensor, fn func(u *trace.Node)) bool {
	isOut := f.output[t]
	for _, u := range f.readers[t] {
		if gr.member[u] {
			continue
		}
		if isAlias(u) && gr.alias[u.Outputs[0]] == t {
			isOut = f.outsideReaders(gr, u.Outputs[0], fn) || isOut
			continue
		}
		fn(u)
	}
	return isOut
}

// check reports whether gr may be emitted as one node, and where: after
// the last node producing one of its inputs, or in its root's place.
func (f *fuser) check(gr *fuseGroup) (bool, int) {
	r := gr.root
	at := r.ID
	nodes := gr.members
	if gr.prod {
		nodes = append([]*trace.Node{r}, nodes...)
	}
	for _, m := range nodes {
		for _, in := range gr.external(m) {
			if in.Node.Kind != trace.KindState {
				at = max(at, f.pos(in.Node))
			}
		}
	}
	// Values the program computes keep their readers after it, except
	// effects and reshapes, which the rebuild moves after it. lastOut is
	// the last reader of a value outside the program (-1: none).
	lastOut := map[*trace.Tensor]int{}
	var vals []*trace.Tensor
	for _, m := range nodes {
		ok := true
		t := m.Outputs[0]
		vals = append(vals, t)
		lastOut[t] = -1
		if f.outsideReaders(gr, t, func(u *trace.Node) {
			lastOut[t] = max(lastOut[t], u.ID)
			if !isEffect(u) && !isAlias(u) && f.pos(u) <= at {
				ok = false
			}
		}) {
			lastOut[t] = len(f.g.Nodes)
		}
		if gr.prod && m == r {
			for _, t := range m.Outputs[1:] {
				f.outsideReaders(gr, t, func(u *trace.Node) {
					if !isEffect(u) && !isAlias(u) && f.pos(u) <= at {
						ok = false
					}
				})
			}
		}
		if !ok {
			return false, at
		}
	}
	// Members run at the anchor: delayed ones must not keep their inputs
	// alive longer,
	lo, hi := at, at
	for _, m := range nodes {
		lo, hi = min(lo, m.ID), max(hi, m.ID)
		// (the anchor itself runs before the fused node)
		if m.ID < at && f.noisyBetween(gr, m.ID, at+1) {
			for _, in := range gr.external(m) {
				if in.Node.Kind != trace.KindState && f.lastUse[trace.Root(in)] < at {
					return false, at
				}
			}
		}
	}
	if hi-lo > maxFuseWindow {
		return false, at
	}
	// and at every node that allocates in between, the program's values
	// live there (its outputs, made at the anchor, until their last
	// reader) must be no more than g had live there (values of the chain
	// made before and read after).
	for s := lo + 1; s < hi; s++ {
		if !f.noisyBetween(gr, s-1, s+1) {
			continue
		}
		var was, now int64
		for _, v := range vals {
			if v.Node.ID < s && f.lastUse[v] >= s {
				was += v.Meta.Bytes()
			}
			if at < s && lastOut[v] >= s {
				now += v.Meta.Bytes()
			}
		}
		if now > was {
			return false, at
		}
	}
	// The fused node's own step holds all its inputs and outputs at once:
	// no more than the busiest step of the nodes it replaces held of them.
	if f.stepBytes(gr, nodes, vals, lastOut, at) {
		return false, at
	}
	return true, at
}

// stepBytes reports whether the fused node's step (at anchor at) would
// hold more bytes of the group's inputs and values than any step of nodes
// held in g. With 16-bit values or the producer's output in workspace,
// only the steps where g holds at least what it holds at the anchor
// besides the group's values count: a step before the anchor that no
// allocating node separates from it, a step after it that no node freeing
// a value does (a weight gradient's product, the last reader of its
// input, runs between gpt's input gradient product and gelu's backward;
// a parameter's cast between layer norm and the cast of its output frees
// nothing).
func (f *fuser) stepBytes(gr *fuseGroup, nodes []*trace.Node, vals []*trace.Tensor, lastOut map[*trace.Tensor]int, at int) bool {
	strict := false
	for _, m := range gr.members {
		if _, ok := m.Op.(*prim.Cast); ok {
			strict = true
		}
	}
	seen := map[*trace.Tensor]bool{}
	var ext []*trace.Tensor
	var fused int64
	for _, m := range nodes {
		for _, in := range gr.external(m) {
			if r := trace.Root(in); r.Node.Kind != trace.KindState && !seen[r] {
				seen[r] = true
				ext = append(ext, r)
				fused += r.Meta.Bytes()
			}
		}
	}
	for _, v := range vals {
		if lastOut[v] >= 0 {
			fused += v.Meta.Bytes()
		}
	}
	if gr.prod {
		for _, t := range gr.root.Outputs[1:] {
			fused += t.Meta.Bytes()
		}
		// Without an output to borrow, the producer's output 0 takes
		// workspace (prim.Fused.Scratch).
		scratch := true
		for _, v := range vals {
			if lastOut[v] >= 0 && !low16(v.DType()) {
				scratch = false
			}
		}
		if scratch {
			fused += gr.root.Outputs[0].Meta.Bytes()
			strict = true
		}
	}
	all := append(ext, vals...)
	if gr.prod {
		// (the producer's other outputs, while they live)
		all = append(all, gr.root.Outputs[1:]...)
	}
	var busiest int64
	for _, m := range nodes {
		if strict && (m.ID < at && f.noisyBetween(gr, m.ID, at) || m.ID > at && f.freesBetween(gr, at, m.ID)) {
			continue
		}
		var b int64
		for _, t := range all {
			if t.Node.ID <= m.ID && m.ID <= f.lastUse[t] || t.Node == m {
				b += t.Meta.Bytes()
			}
		}
		busiest = max(busiest, b)
	}
	return fused > busiest
}

// expose records which values the fused node outputs and which reshapes
// of them are kept.
func (f *fuser) expose(gr *fuseGroup) {
	gr.exposed, gr.keep = map[*trace.Tensor]bool{}, map[*trace.Node]bool{}
	// outside reports whether value t is read outside the group, directly
	// or through the group's aliases of it; the aliases read outside are
	// kept.
	var outside func(t *trace.Tensor) bool
	outside = func(t *trace.Tensor) bool {
		need := f.output[t]
		for _, u := range f.readers[t] {
			if gr.member[u] {
				continue
			}
			if isAlias(u) && gr.alias[u.Outputs[0]] == t {
				if outside(u.Outputs[0]) {
					gr.keep[u] = true
					need = true
				}
				continue
			}
			need = true
		}
		return need
	}
	vals := []*trace.Tensor{gr.root.Outputs[0]}
	for _, m := range gr.members {
		vals = append(vals, m.Outputs[0])
	}
	for _, t := range vals {
		if outside(t) {
			gr.exposed[t] = true
		}
	}
}

// loadPattern says how an input of shape in, broadcast to shape out, is
// read as a flat vector of out's length (prim.FusedLoad): the axes it does
// not broadcast over must be consecutive (ignoring axes of size 1).
func loadPattern(in, out tensor.Shape) (inner, mid int, ok bool) {
	if len(in) > len(out) {
		return 0, 0, false
	}
	off := len(out) - len(in)
	first, last := -1, -1
	for j := range out {
		d := 1
		if j >= off {
			d = in[j-off]
		}
		switch {
		case out[j] == 1:
			if d != 1 {
				return 0, 0, false
			}
		case d == out[j]:
			if first >= 0 && last != j-1 && !allOnes(out[last+1:j]) {
				return 0, 0, false
			}
			if first < 0 {
				first = j
			}
			last = j
		case d != 1:
			return 0, 0, false
		}
	}
	if first < 0 {
		return out.NumElements(), 1, true
	}
	return out[last+1:].NumElements(), out[first : last+1].NumElements(), true
}

func allOnes(s tensor.Shape) bool {
	for _, d := range s {
		if d != 1 {
			return false
		}
	}
	return true
}

// fusedOp builds the op of group gr, the inputs it reads and the values
// (of g) its outputs replace.
func (gr *fuseGroup) fusedOp() (*prim.Fused, []*trace.Tensor, []*trace.Tensor) {
	r := gr.root
	fo := &prim.Fused{Elems: r.Outputs[0].Shape().NumElements()}
	var inputs []*trace.Tensor
	if gr.prod {
		fo.Producer, fo.NProd, fo.NProdOut = r.Op, len(r.Inputs), len(r.Outputs)
		inputs = append(inputs, r.Inputs...)
	}
	// Loads first: they are numbered before the instructions' results.
	type loadKey struct {
		t          *trace.Tensor
		inner, mid int
	}
	extra := map[*trace.Tensor]int{}
	loads := map[loadKey]int{}
	load := func(m *trace.Node, in *trace.Tensor) int {
		inner, mid, _ := loadPattern(in.Shape(), m.Outputs[0].Shape())
		e, ok := extra[in]
		if !ok {
			e = len(extra)
			extra[in] = e
			inputs = append(inputs, in)
		}
		k := loadKey{in, inner, mid}
		l, ok := loads[k]
		if !ok {
			l = len(fo.Loads)
			loads[k] = l
			fo.Loads = append(fo.Loads, prim.FusedLoad{Input: e, Inner: inner, Mid: mid})
		}
		return fo.NProdOut + l
	}
	for _, m := range gr.members {
		for _, in := range m.Inputs {
			if !gr.value[in] {
				load(m, in)
			}
		}
	}
	num := map[*trace.Tensor]int{}
	if gr.prod {
		num[r.Outputs[0]] = 0
	}
	for i, m := range gr.members {
		num[m.Outputs[0]] = fo.FirstInstr() + i
	}
	for _, m := range gr.members {
		ins := prim.FusedInstr{Op: m.Op, Module: m.Module, Shape: m.Outputs[0].Shape().Clone()}
		for _, in := range m.Inputs {
			if gr.value[in] {
				ins.Args = append(ins.Args, num[gr.underlying(in)])
			} else {
				ins.Args = append(ins.Args, load(m, in))
			}
		}
		fo.Prog = append(fo.Prog, ins)
	}
	var outs []*trace.Tensor
	if gr.prod {
		for i, t := range r.Outputs {
			if i > 0 || gr.exposed[t] {
				fo.Outs = append(fo.Outs, prim.FusedOut{Value: i, Shape: t.Shape().Clone()})
				outs = append(outs, t)
			}
		}
	}
	for _, m := range gr.members {
		if t := m.Outputs[0]; gr.exposed[t] {
			fo.Outs = append(fo.Outs, prim.FusedOut{Value: num[t], Shape: t.Shape().Clone(), Narrow: low16(t.DType())})
			outs = append(outs, t)
		}
	}
	return fo, inputs, outs
}

// underlying follows aliases to the value a member or the producer output.
func (gr *fuseGroup) underlying(t *trace.Tensor) *trace.Tensor {
	for {
		a, ok := gr.alias[t]
		if !ok {
			return t
		}
		t = a
	}
}

// rebuild copies g with each group replaced by its fused node.
func (f *fuser) rebuild(st *FuseStats) (*trace.Graph, error) {
	out := trace.New()
	mapped := map[*trace.Tensor]*trace.Tensor{}
	after := map[int][]*fuseGroup{}
	skip := map[*trace.Node]bool{}
	for _, gr := range f.groups {
		if gr.at != gr.root.ID {
			after[gr.at] = append(after[gr.at], gr)
		}
		for t := range gr.alias {
			if !gr.keep[t.Node] {
				skip[t.Node] = true
			}
		}
	}
	ready := func(ins []*trace.Tensor) bool {
		for _, t := range ins {
			if mapped[t] == nil {
				return false
			}
		}
		return true
	}
	clone := func(n *trace.Node) {
		ins := make([]*trace.Tensor, len(n.Inputs))
		for i, t := range n.Inputs {
			ins[i] = mapped[t]
		}
		if u := f.pairs[n]; u != nil {
			lo := out.Clone(u, ins)
			w := *n
			w.Op = &prim.Cast{To: tensor.Float32}
			mapped[n.Outputs[0]] = out.Clone(&w, lo)[0]
			return
		}
		for i, o := range out.Clone(n, ins) {
			mapped[n.Outputs[i]] = o
		}
	}
	emit := func(gr *fuseGroup) {
		fo, ins, outs := gr.op, gr.ins, gr.outs
		r := gr.root
		syn := &trace.Node{Kind: trace.KindOp, Op: fo, Module: r.Module, Phase: r.Phase, Region: r.Region, Recompute: r.Recompute}
		mins := make([]*trace.Tensor, len(ins))
		for i, t := range ins {
			mins[i] = mapped[t]
		}
		for i, o := range out.Clone(syn, mins) {
			mapped[outs[i]] = o
		}
		st.Groups++
		st.Merged += len(gr.members)
		st.Patterns[fo.Name()]++
		vals := []*trace.Tensor{r.Outputs[0]}
		for _, m := range gr.members {
			vals = append(vals, m.Outputs[0])
		}
		for _, t := range vals {
			if !gr.exposed[t] {
				st.Elided += t.Meta.Bytes()
			}
		}
	}
	// Nodes and groups whose inputs are not ready yet (effects and
	// reshapes that read a group's output, groups after groups).
	type item struct {
		n  *trace.Node
		gr *fuseGroup
	}
	var pending []item
	inputsOf := func(it item) []*trace.Tensor {
		if it.n != nil {
			return it.n.Inputs
		}
		return it.gr.ins
	}
	run := func(it item) {
		if it.n != nil {
			clone(it.n)
		} else {
			emit(it.gr)
		}
	}
	try := func(it item) {
		if !ready(inputsOf(it)) {
			pending = append(pending, it)
			return
		}
		run(it)
		for progress := true; progress; {
			progress = false
			for i := 0; i < len(pending); i++ {
				if p := pending[i]; ready(inputsOf(p)) {
					pending = append(pending[:i], pending[i+1:]...)
					run(p)
					progress = true
					break
				}
			}
		}
	}
	err := trace.Capture(func() {
		for _, n := range f.g.Nodes {
			switch gr := f.of[n]; {
			case gr != nil:
				if n == gr.root && gr.at == n.ID {
					try(item{gr: gr})
				}
			case skip[n] || n.Kind == trace.KindOp && !f.live[n.ID]:
				// Dead code (the schedule drops it anyway) may read
				// values the program no longer materializes.
			default:
				try(item{n: n})
			}
			for _, gr := range after[n.ID] {
				try(item{gr: gr})
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if len(pending) > 0 {
		// The analysis orders groups so that this cannot happen.
		return nil, fmt.Errorf("transform: fuse: %d nodes were never ready", len(pending))
	}
	for i, t := range f.g.Outputs {
		out.Output(f.g.OutputNames[i], mapped[t])
	}
	return out, nil
}
