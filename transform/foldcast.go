package transform

import (
	"slices"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// foldCasts returns a copy of g in which a cast to bfloat16 or float16 of
// a float32 value that is (through reshapes) the widening of a value of
// that type reads the 16-bit value itself, reshaped the same way. Under
// autocast such a cast is Compress storing a rounded value (the widening
// is the rounding's second half) or a low op rounding an operand that
// already holds low-precision numbers: a second pass over memory that
// reproduces its input, since widening is exact and narrowing an exact
// 16-bit number gives it back. (A signalling NaN would come back quiet;
// the 16-bit values here come from narrowing, which makes quiet ones.)
// It returns the copy and how many casts it removed.
func foldCasts(g *trace.Graph) (*trace.Graph, int, error) {
	g, err := readNarrowed(g)
	if err != nil {
		return nil, 0, err
	}
	g, moved, err := widenAfterPermute(g)
	if err != nil {
		return nil, 0, err
	}
	g, narrowed, err := narrowBeforePermute(g)
	if err != nil {
		return nil, 0, err
	}
	g, cats, err := widenAfterCat(g)
	if err != nil {
		return nil, 0, err
	}
	moved += cats
	g, splits, err := widenAfterSplit(g)
	if err != nil {
		return nil, 0, err
	}
	moved += splits
	g, folded, err := foldNarrowing(g)
	if err != nil {
		return nil, 0, err
	}
	folded += narrowed
	if folded == 0 && moved > 0 {
		// Nothing reads the 16-bit permutation: keep the graph as it was.
		return g, 0, nil
	}
	return g, folded, nil
}

// readNarrowed returns a copy of g in which a bf16 attention op that
// reads a float32 value some earlier cast narrows to bfloat16 reads the
// narrowed value instead: the same bits (the op narrows float32 operands
// itself), and the float32 value is then read only by its narrowing, for
// widenAfterSplit and foldNarrowing to fold. It is what
// narrowBeforePermute does for attention operands behind a transpose,
// for operands that FoldAttentionLayout left without one (q, k and v
// reshaped from c_attn's split, and dO).
func readNarrowed(g *trace.Graph) (*trace.Graph, error) {
	cons := g.Consumers()
	pos := make(map[*trace.Node]int, len(g.Nodes))
	for i, n := range g.Nodes {
		pos[n] = i
	}
	narrowed := bf16Narrowings(g)
	found := false
	for v, lo := range narrowed {
		for _, r := range cons[v.Node.ID] {
			if pos[r] > pos[lo] && slices.Contains(r.Inputs, v) && readsBF16(r, v) {
				found = true
			}
		}
	}
	if !found {
		return g, nil
	}
	return rebuild(g, func(out *trace.Graph, n *trace.Node, ins []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		for i, in := range n.Inputs {
			if lo := narrowed[in]; lo != nil && pos[n] > pos[lo] && readsBF16(n, in) {
				ins[i] = mapped[lo.Outputs[0]]
			}
		}
		return false
	})
}

// bf16Narrowings maps each float32 value of g that a cast narrows to
// bfloat16 to the first such cast.
func bf16Narrowings(g *trace.Graph) map[*trace.Tensor]*trace.Node {
	narrowed := map[*trace.Tensor]*trace.Node{}
	for _, n := range g.Nodes {
		if c, ok := n.Op.(*prim.Cast); ok && n.Kind == trace.KindOp && c.To == tensor.BFloat16 && isF32(n.Inputs[0]) && narrowed[n.Inputs[0]] == nil {
			narrowed[n.Inputs[0]] = n
		}
	}
	return narrowed
}

// widenAfterPermute returns a copy of g in which a permutation whose input
// is a widening from a 16-bit type, and that widening's only reader,
// permutes the 16-bit value and widens the result instead: the same
// numbers, half the bytes moved, and the 16-bit permuted value is then
// there for foldNarrowing and ReadLow (attention's output, permuted back
// to rows for its projection, is read by the projection's matmul in
// bfloat16). It returns the copy and how many permutations moved.
func widenAfterPermute(g *trace.Graph) (*trace.Graph, int, error) {
	cons := g.Consumers()
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	// widen[p] is the widening cast permutation p reads.
	widen := map[*trace.Node]*trace.Node{}
	skip := map[*trace.Node]bool{}
	for _, n := range g.Nodes {
		c, ok := n.Op.(*prim.Cast)
		if !ok || n.Kind != trace.KindOp || c.To != tensor.Float32 || outputs[n.Outputs[0]] {
			continue
		}
		if d := n.Inputs[0].DType(); d != tensor.BFloat16 && d != tensor.Float16 {
			continue
		}
		rs := cons[n.ID]
		if len(rs) != 1 {
			continue
		}
		p := rs[0]
		if _, ok := p.Op.(*prim.Permute); !ok || p.Kind != trace.KindOp || p.Phase != n.Phase || p.Region != n.Region || p.Recompute != n.Recompute {
			continue
		}
		widen[p], skip[n] = n, true
	}
	if len(widen) == 0 {
		return g, 0, nil
	}
	out, err := rebuild(g, func(out *trace.Graph, n *trace.Node, _ []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		if skip[n] {
			return true
		}
		w := widen[n]
		if w == nil {
			return false
		}
		lo := out.Clone(n, []*trace.Tensor{mapped[w.Inputs[0]]})[0]
		c := *w
		c.Module = n.Module
		mapped[n.Outputs[0]] = out.Clone(&c, []*trace.Tensor{lo})[0]
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	return out, len(widen), nil
}

// catLow is off only in tests that compare against concatenations of
// widened values.
var catLow = true

// catWiden is off only in tests that compare prim.CatWiden with a
// concatenation and a widening.
var catWiden = true

// widenAfterCat returns a copy of g in which a concatenation whose inputs
// are all widenings from one 16-bit type, and whose output that type's
// narrowing reads, concatenates the 16-bit values and widens the result
// instead: the same numbers (a concatenation copies, and widening is
// exact), and the narrowing goes, its readers taking the 16-bit
// concatenation. This is the autocast DenseNet block (ESRGAN's
// RRDB): each LeakyReLU output is rounded (cast to bfloat16 and back), the
// widened copies are concatenated and the concatenation rounded again to
// be saved for the weight gradients; now the block concatenates the
// bfloat16 values, moving half the bytes, and a widening only the
// convolution reads replaces the narrowing. A widening that only such
// concatenations read goes. Every value keeps its bytes but for the
// concatenation's own step, which holds 16-bit inputs where it held
// float32 ones, so no step holds more. It returns the copy and how many
// concatenations changed.
func widenAfterCat(g *trace.Graph) (*trace.Graph, int, error) {
	if !catLow {
		return g, 0, nil
	}
	cons := g.Consumers()
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	// widening returns the 16-bit type t is widened from (Invalid: t is
	// not a widening's output).
	widening := func(t *trace.Tensor) tensor.DType {
		n := t.Node
		c, ok := n.Op.(*prim.Cast)
		if !ok || n.Kind != trace.KindOp || c.To != tensor.Float32 {
			return tensor.Invalid
		}
		if d := n.Inputs[0].DType(); d == tensor.BFloat16 || d == tensor.Float16 {
			return d
		}
		return tensor.Invalid
	}
	// lastRead[t] is the position of t's last reader (graph outputs: past
	// the end).
	lastRead := map[*trace.Tensor]int{}
	pos := map[*trace.Node]int{}
	for i, n := range g.Nodes {
		pos[n] = i
		for _, in := range n.Inputs {
			lastRead[in] = i
		}
	}
	for t := range outputs {
		lastRead[t] = len(g.Nodes)
	}
	cats := map[*trace.Node]tensor.DType{}
	for _, n := range g.Nodes {
		if _, ok := n.Op.(*prim.CatOp); !ok || n.Kind != trace.KindOp || outputs[n.Outputs[0]] || len(n.Inputs) == 0 {
			continue
		}
		lo := widening(n.Inputs[0])
		for _, in := range n.Inputs[1:] {
			if widening(in) != lo {
				lo = tensor.Invalid
			}
		}
		if lo == tensor.Invalid {
			continue
		}
		// A 16-bit input read after the concatenation anyway lives no
		// longer for being read by it.
		for _, in := range n.Inputs {
			if lastRead[in.Node.Inputs[0]] <= pos[n] {
				lo = tensor.Invalid
			}
		}
		// The narrowing comes right after the concatenation: nothing
		// allocates while both 16-bit and float32 copies are live that did
		// not before.
		narrowed := false
		for _, r := range cons[n.ID] {
			if c, ok := r.Op.(*prim.Cast); ok && r.Kind == trace.KindOp && c.To == lo && pos[r] == pos[n]+1 {
				narrowed = true
			}
		}
		if lo != tensor.Invalid && narrowed {
			cats[n] = lo
		}
	}
	if len(cats) == 0 {
		return g, 0, nil
	}
	// narrow marks the changed concatenations' narrowings, which read the
	// 16-bit concatenation instead; wide the concatenations with float32
	// readers too, and both those of them made with their widening in one
	// pass (prim.CatWiden): as the inputs outlive the concatenation, that
	// step holds what the widening's held.
	narrow, wide, both := map[*trace.Node]bool{}, map[*trace.Node]bool{}, map[*trace.Node]bool{}
	for n, lo := range cats {
		for _, r := range cons[n.ID] {
			if c, ok := r.Op.(*prim.Cast); ok && r.Kind == trace.KindOp && c.To == lo {
				narrow[r] = true
			} else {
				wide[n] = true
			}
		}
		// Float32 readers that all read the 16-bit concatenation in place
		// (forward convolutions, convReadsLow) need no widened copy at
		// all: the widening stays separate, and ReadLow drops it.
		inPlace := wide[n] && n.Outputs[0].DType() == tensor.Float32 && lo == tensor.BFloat16
		for _, r := range cons[n.ID] {
			if c, ok := r.Op.(*prim.Cast); ok && r.Kind == trace.KindOp && c.To == lo {
				continue
			}
			if !convReadsLow(r, n.Outputs[0], nil) {
				inPlace = false
			}
		}
		both[n] = wide[n] && catWiden && !inPlace
	}
	// Widenings every reader of which is a changed concatenation go.
	drop := map[*trace.Node]bool{}
	for n := range cats {
		for _, in := range n.Inputs {
			w := in.Node
			if outputs[in] || drop[w] {
				continue
			}
			all := true
			for _, r := range cons[w.ID] {
				if _, ok := cats[r]; !ok {
					all = false
				}
			}
			drop[w] = all
		}
	}
	// lows maps each changed concatenation's output to its 16-bit copy.
	lows := map[*trace.Tensor]*trace.Tensor{}
	out, err := rebuild(g, func(out *trace.Graph, n *trace.Node, _ []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		if drop[n] {
			return true
		}
		if narrow[n] {
			mapped[n.Outputs[0]] = lows[n.Inputs[0]]
			return true
		}
		if _, ok := cats[n]; !ok {
			return false
		}
		ins := make([]*trace.Tensor, len(n.Inputs))
		for i, in := range n.Inputs {
			ins[i] = mapped[in.Node.Inputs[0]]
		}
		if both[n] {
			c := *n
			c.Op = &prim.CatWiden{Axis: n.Op.(*prim.CatOp).Axis}
			vs := out.Clone(&c, ins)
			lows[n.Outputs[0]], mapped[n.Outputs[0]] = vs[0], vs[1]
			return true
		}
		v := out.Clone(n, ins)[0]
		lows[n.Outputs[0]] = v
		if wide[n] {
			c := *n
			c.Op = &prim.Cast{To: tensor.Float32}
			mapped[n.Outputs[0]] = out.Clone(&c, []*trace.Tensor{v})[0]
		}
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	return out, len(cats), nil
}

// widenAfterSplit returns a copy of g in which a split whose input is,
// through reshapes, the widening of a 16-bit value (the widening and the
// reshapes read by nothing else), and each piece of which only narrowings
// back to that type read (through reshapes), splits the 16-bit value and
// widens the pieces instead: the same numbers (a split copies, widening is
// exact), half the bytes moved, and foldNarrowing then folds the pieces'
// narrowings, so the widenings go too. This is gpt's attention under
// bf16-mixed: c_attn's output, rounded to bfloat16, was widened, split
// into q, k and v in float32 and each narrowed again for attention. It
// returns the copy and how many splits changed.
func widenAfterSplit(g *trace.Graph) (*trace.Graph, int, error) {
	cons := g.Consumers()
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	same := func(a, b *trace.Node) bool {
		return a.Phase == b.Phase && a.Region == b.Region && a.Recompute == b.Recompute
	}
	// onlyNarrowed reports whether t's readers, through reshapes, are all
	// narrowings to lo (and there is one).
	var onlyNarrowed func(t *trace.Tensor, lo tensor.DType) bool
	onlyNarrowed = func(t *trace.Tensor, lo tensor.DType) bool {
		rs := cons[t.Node.ID]
		if outputs[t] || len(rs) == 0 {
			return false
		}
		for _, r := range rs {
			if c, ok := r.Op.(*prim.Cast); ok && r.Kind == trace.KindOp && c.To == lo {
				continue
			}
			if isAlias(r) && len(r.Inputs) == 1 && len(r.Outputs) == 1 && onlyNarrowed(r.Outputs[0], lo) {
				continue
			}
			return false
		}
		return true
	}
	type match struct {
		widen *trace.Node
		chain []*trace.Node // reshapes from the widening to the split, in order
	}
	splits := map[*trace.Node]match{}
	skip := map[*trace.Node]bool{}
	for _, s := range g.Nodes {
		if _, ok := s.Op.(*prim.SplitOp); !ok || s.Kind != trace.KindOp || !isF32(s.Inputs[0]) {
			continue
		}
		var chain []*trace.Node
		t, ok := s.Inputs[0], true
		for ok && isAlias(t.Node) && len(t.Node.Inputs) == 1 && len(t.Node.Outputs) == 1 {
			chain = append([]*trace.Node{t.Node}, chain...)
			t = t.Node.Inputs[0]
		}
		w := t.Node
		c, isCast := w.Op.(*prim.Cast)
		if !isCast || w.Kind != trace.KindOp || c.To != tensor.Float32 || !same(w, s) {
			continue
		}
		lo := w.Inputs[0].DType()
		if lo != tensor.BFloat16 && lo != tensor.Float16 {
			continue
		}
		// Nothing else reads the widening or the reshapes.
		next := append(chain[:len(chain):len(chain)], s)
		for i, n := range append([]*trace.Node{w}, chain...) {
			if rs := cons[n.ID]; len(rs) != 1 || rs[0] != next[i] || outputs[n.Outputs[0]] {
				ok = false
			}
		}
		for _, p := range s.Outputs {
			ok = ok && onlyNarrowed(p, lo)
		}
		if !ok {
			continue
		}
		splits[s] = match{w, chain}
		skip[w] = true
		for _, r := range chain {
			skip[r] = true
		}
	}
	if len(splits) == 0 {
		return g, 0, nil
	}
	out, err := rebuild(g, func(out *trace.Graph, n *trace.Node, _ []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		if skip[n] {
			return true
		}
		m, ok := splits[n]
		if !ok {
			return false
		}
		v := mapped[m.widen.Inputs[0]]
		for _, r := range m.chain {
			v = out.Clone(r, []*trace.Tensor{v})[0]
		}
		pieces := out.Clone(n, []*trace.Tensor{v})
		for i, p := range pieces {
			c := *m.widen
			c.Module = n.Module
			mapped[n.Outputs[i]] = out.Clone(&c, []*trace.Tensor{p})[0]
		}
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	return out, len(splits), nil
}

// narrowBeforePermute returns a copy of g in which the narrowings of a
// float32 permutation to a 16-bit type narrow its input and permute the
// 16-bit result instead, where the permutation's other readers are bf16
// attention ops, which then read that 16-bit permutation (they narrow
// their float32 operands to bfloat16 themselves, so they compute the same
// bits): the float32 permutation goes, and the permutation moves half the
// bytes (attention's q, k and v, and its output gradient). It returns the
// copy and how many permutations it changed.
func narrowBeforePermute(g *trace.Graph) (*trace.Graph, int, error) {
	cons := g.Consumers()
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	// narrow[p] is the 16-bit type permutation p's readers take.
	narrow := map[*trace.Node]tensor.DType{}
	skip := map[*trace.Node]bool{}
	for _, p := range g.Nodes {
		if _, ok := p.Op.(*prim.Permute); !ok || p.Kind != trace.KindOp || !isF32(p.Inputs[0]) || outputs[p.Outputs[0]] {
			continue
		}
		lo := tensor.Invalid
		var casts []*trace.Node
		ok := len(cons[p.ID]) > 0
		for _, c := range cons[p.ID] {
			if cc, isCast := c.Op.(*prim.Cast); isCast && (cc.To == tensor.BFloat16 || cc.To == tensor.Float16) && (lo == tensor.Invalid || lo == cc.To) &&
				c.Phase == p.Phase && c.Region == p.Region && c.Recompute == p.Recompute {
				lo = cc.To
				casts = append(casts, c)
				continue
			}
			if !readsBF16(c, p.Outputs[0]) {
				ok = false
			}
		}
		if !ok || len(casts) == 0 || lo != tensor.BFloat16 && len(casts) != len(cons[p.ID]) {
			continue
		}
		narrow[p] = lo
		for _, c := range casts {
			skip[c] = true
		}
	}
	if len(narrow) == 0 {
		return g, 0, nil
	}
	out, err := rebuild(g, func(out *trace.Graph, n *trace.Node, ins []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		if skip[n] {
			return true // its permutation (earlier) mapped its output
		}
		lo, ok := narrow[n]
		if !ok {
			return false
		}
		c := *n
		c.Op = &prim.Cast{To: lo}
		v := out.Clone(&c, ins)[0]
		v = out.Clone(n, []*trace.Tensor{v})[0]
		mapped[n.Outputs[0]] = v
		for _, r := range cons[n.ID] {
			if skip[r] {
				mapped[r.Outputs[0]] = v
			}
		}
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	return out, len(narrow), nil
}

// foldNarrowing is foldCasts after widenAfterPermute and
// narrowBeforePermute.
func foldNarrowing(g *trace.Graph) (*trace.Graph, int, error) {
	folded := 0
	out, err := rebuild(g, func(out *trace.Graph, n *trace.Node, _ []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		c, ok := n.Op.(*prim.Cast)
		if !ok || n.Kind != trace.KindOp || (c.To != tensor.BFloat16 && c.To != tensor.Float16) || !isF32(n.Inputs[0]) {
			return false
		}
		src, chain := widenedSource(n.Inputs[0], c.To)
		if src == nil {
			return false
		}
		v := mapped[src]
		for _, a := range chain {
			r := *a
			r.Phase, r.Region, r.Recompute, r.Module = n.Phase, n.Region, n.Recompute, n.Module
			v = out.Clone(&r, []*trace.Tensor{v})[0]
		}
		mapped[n.Outputs[0]] = v
		folded++
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	if folded == 0 {
		return g, 0, nil
	}
	return out, folded, nil
}

// roundPairs returns a copy of g in which a cast to bfloat16 or float16
// whose only reader is a cast back to float32 is one prim.Round: the same
// numbers (its kernel narrows and widens as the casts do), an instruction
// Fuse can add to the program of the value's producer. It also returns
// the narrowing cast (of g) that each such Round (of the copy) replaces.
func roundPairs(g *trace.Graph) (*trace.Graph, map[*trace.Node]*trace.Node, error) {
	cons := g.Consumers()
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	// pair[u] is the widening cast that is the only reader of narrowing
	// cast u.
	pair := map[*trace.Node]*trace.Node{}
	for _, n := range g.Nodes {
		c, ok := n.Op.(*prim.Cast)
		if !ok || n.Kind != trace.KindOp || (c.To != tensor.BFloat16 && c.To != tensor.Float16) || !isF32(n.Inputs[0]) {
			continue
		}
		rs := cons[n.ID]
		if len(rs) != 1 || outputs[n.Outputs[0]] {
			continue
		}
		w := rs[0]
		if wc, ok := w.Op.(*prim.Cast); !ok || wc.To != tensor.Float32 || w.Phase != n.Phase || w.Region != n.Region || w.Recompute != n.Recompute {
			continue
		}
		pair[n] = w
	}
	if len(pair) == 0 {
		return g, nil, nil
	}
	skip := map[*trace.Node]bool{}
	pairs := map[*trace.Node]*trace.Node{}
	out, err := rebuild(g, func(out *trace.Graph, n *trace.Node, ins []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		if skip[n] {
			return true
		}
		w := pair[n]
		if w == nil {
			return false
		}
		r := *w
		r.Op = &prim.Round{To: n.Op.(*prim.Cast).To}
		o := out.Clone(&r, ins)[0]
		mapped[w.Outputs[0]] = o
		pairs[o.Node] = n
		skip[w] = true
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	return out, pairs, nil
}

// rebuild copies g into a new graph node by node, each node's inputs
// mapped to the copy's: each(out, n, ins, mapped) may clone n its own way
// (or drop it), setting mapped for what it makes, and returns true; else n
// is cloned as it is. The graph's outputs keep their names. It is the
// copy-and-rewire loop of this file's passes.
func rebuild(g *trace.Graph, each func(out *trace.Graph, n *trace.Node, ins []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool) (*trace.Graph, error) {
	out := trace.New()
	mapped := map[*trace.Tensor]*trace.Tensor{}
	err := trace.Capture(func() {
		for _, n := range g.Nodes {
			ins := make([]*trace.Tensor, len(n.Inputs))
			for i, in := range n.Inputs {
				ins[i] = mapped[in]
			}
			if each(out, n, ins, mapped) {
				continue
			}
			for i, o := range out.Clone(n, ins) {
				mapped[n.Outputs[i]] = o
			}
		}
		for i, t := range g.Outputs {
			out.Output(g.OutputNames[i], mapped[t])
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// widenedSource finds, for float32 value t, the 16-bit value of type lo
// it widens and the reshapes in between (innermost first), or nil.
func widenedSource(t *trace.Tensor, lo tensor.DType) (*trace.Tensor, []*trace.Node) {
	var chain []*trace.Node
	for t.Node.Kind == trace.KindOp {
		if isAlias(t.Node) && len(t.Node.Inputs) == 1 && t.Index == 0 {
			chain = append(chain, t.Node)
			t = t.Node.Inputs[0]
			continue
		}
		if c, ok := t.Node.Op.(*prim.Cast); ok && c.To == tensor.Float32 && t.Node.Inputs[0].DType() == lo {
			slices.Reverse(chain)
			return t.Node.Inputs[0], chain
		}
		break
	}
	return nil, nil
}
