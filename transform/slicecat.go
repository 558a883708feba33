package transform

import (
	"fmt"
	"slices"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// SliceCatStats says what SliceFromCat did.
type SliceCatStats struct {
	Values int   // saved values the backward pass now slices from a concatenation
	Bytes  int64 // their bytes (rounded as the arena rounds them)
}

// SliceFromCat returns a copy of g in which the backward pass reads a saved
// value that is also an input of a saved concatenation from that
// concatenation: a prim.SliceOp of the concatenation, recorded just
// before the value's first backward reader. The value itself then dies at
// its last forward reader. This is what DenseNet-style blocks (ESRGAN's
// RRDB) need: each LeakyReLU output is kept for its backward and again,
// inside every wider concatenation, for the next convolutions' weight
// gradients; now only the concatenations are kept. A slice copies the
// bytes the concatenation copied, so every value is bit for bit the same.
//
// Where Compress stores a concatenation as a 16-bit copy or as int8 codes
// (per channel, the concatenation's axis), the narrower ones' stored
// copies are read back from the widest's the same way: a cast, and a
// per-channel quantization, commute with slicing, bit for bit (the copies
// no longer read are then dead, and Fuse drops them). Otherwise only
// concatenations the backward pass reads as they are (not recomputed or
// offloaded: Rematerialize and Compress give those readers another value)
// serve, so no value is kept longer in full precision than
// it would be anyway; of several, the one read last in the backward pass,
// whose life the slice extends least. Run it after Compress.
func SliceFromCat(g *trace.Graph) (*trace.Graph, SliceCatStats, error) {
	var st SliceCatStats
	if !sliceCat {
		return g, st, nil
	}
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	// lastBack[v] is v's last backward reader.
	lastBack := map[*trace.Tensor]*trace.Node{}
	for _, n := range g.Nodes {
		if !backwardReader(n) {
			continue
		}
		for _, in := range n.Inputs {
			if savedProducer(in.Node) {
				lastBack[in] = n
			}
		}
	}
	type source struct {
		cat        *trace.Tensor
		slice      prim.SliceOp
		last       *trace.Node // lastBack of cat
		start, end int
	}
	src := map[*trace.Tensor]source{}
	// The saved concatenations the backward pass reads as they are, and
	// the 16-bit copies Compress stores of concatenations (a cast commutes
	// with concatenation and slicing: a slice of the copy is bit for bit
	// the copy of the slice). lowOf[v][d] is the saved cast of v to d.
	lowOf := map[*trace.Tensor]map[tensor.DType]*trace.Tensor{}
	// Likewise the int8 codes and scales Compress stores: per channel, so
	// where the channels are the concatenation's axis the codes of a run
	// of channels are a slice of the whole's codes, and its scales a
	// slice of the whole's scales, bit for bit. quantOf[v] is v's saved
	// prim.Quantize.
	quantOf := map[*trace.Tensor]*trace.Node{}
	var cats []catLike
	for _, n := range g.Nodes {
		if n.Kind != trace.KindOp || !savedProducer(n) {
			continue
		}
		c := catLike{n: n, cat: n}
		switch op := n.Op.(type) {
		case *prim.Cast:
			v := n.Inputs[0]
			if lowOf[v] == nil {
				lowOf[v] = map[tensor.DType]*trace.Tensor{}
			}
			lowOf[v][op.To] = n.Outputs[0]
			c = catLike{n: n, cat: v.Node, cast: true, to: op.To}
		case *prim.Quantize:
			v := n.Inputs[0]
			quantOf[v] = n
			c = catLike{n: n, cat: v.Node, quant: true}
			if op.Axis < 0 || !isCatNode(v.Node) || catAxis(v.Node) != op.Axis {
				continue
			}
		}
		if !isCatNode(c.cat) || c.n != c.cat && n.Inputs[0] != c.cat.Outputs[0] {
			continue
		}
		if savedAll(c.saved(), lastBack, outputs) {
			cats = append(cats, c)
		}
	}
	// A concatenation whose inputs are a run of another's (a DenseNet
	// block's: cat(x, x1) inside cat(x, x1, x2) inside ...) is itself read
	// back from the widest that holds it, so that a block keeps one
	// concatenation rather than all of them (ESRGAN's RDB: 192 channels
	// kept instead of 96+128+160+192).
	for _, a := range cats {
		var best *catLike
		bestStart := 0
		for i, b := range cats {
			if b.n == a.n {
				continue
			}
			start, ok := catRun(a, b)
			if !ok || catHeld(b, cats) {
				continue
			}
			if best == nil || lastBack[b.n.Outputs[0]].ID > lastBack[best.n.Outputs[0]].ID {
				best, bestStart = &cats[i], start
			}
		}
		if best == nil {
			continue
		}
		axis := catAxis(a.cat)
		w := a.cat.Outputs[0].Shape()[axis]
		for k, y := range a.saved() {
			v := best.n.Outputs[k]
			src[y] = source{cat: v, slice: a.sliceOf(k, axis, bestStart, w), last: lastBack[v]}
		}
	}
	for _, c := range cats {
		axis := catAxis(c.cat)
		off := 0
		for _, x := range c.cat.Inputs {
			w := x.Shape()[axis]
			start := off
			off += w
			var ys []*trace.Tensor
			switch {
			case c.cast:
				if y := lowOf[x][c.to]; y != nil {
					ys = []*trace.Tensor{y}
				}
			case c.quant:
				if q := quantOf[x]; q != nil && q.Op.(*prim.Quantize).Axis == axis {
					ys = q.Outputs
				}
			default:
				ys = []*trace.Tensor{x}
			}
			if len(ys) == 0 || !savedAll(ys, lastBack, outputs) || ys[0].Node.Kind != trace.KindOp {
				continue
			}
			for k, y := range ys {
				if _, isCat := src[y]; isCat && catLikeNode(y.Node) {
					continue
				}
				v := c.n.Outputs[k]
				s := source{cat: v, slice: c.sliceOf(k, axis, start, w), last: lastBack[v]}
				if old, ok := src[y]; !ok || s.last.ID > old.last.ID {
					src[y] = s
				}
			}
		}
	}
	if len(src) == 0 {
		return g, st, nil
	}
	// Each slice is recorded before its value's first backward reader, or
	// before the backward node making that reader's first input (the
	// incoming gradient), so that no new allocation separates the two and
	// Fuse can still join them (a gradient sum + LeakyReLU backward); but
	// never after the concatenation's last backward reader, before which
	// it goes instead: the concatenation then lives no longer than it did,
	// and the slice no longer than the value did, so no step holds more
	// bytes than without the pass.
	anchor := map[*trace.Node][]*trace.Tensor{}
	seen := map[*trace.Tensor]bool{}
	for _, n := range g.Nodes {
		if !backwardReader(n) {
			continue
		}
		for _, in := range n.Inputs {
			s, ok := src[in]
			if !ok || seen[in] {
				continue
			}
			seen[in] = true
			a := n
			if p := n.Inputs[0].Node; p.Kind == trace.KindOp && backwardReader(p) && p.ID > s.cat.Node.ID {
				a = p
			}
			if s.last.ID < a.ID {
				a = s.last
			}
			anchor[a] = append(anchor[a], in)
		}
	}
	out := trace.New()
	mapped := map[*trace.Tensor]*trace.Tensor{}
	sliced := map[*trace.Tensor]*trace.Tensor{} // y -> its slice, in out
	err := trace.Capture(func() {
		for _, n := range g.Nodes {
			for _, y := range anchor[n] {
				s := src[y]
				from := mapped[s.cat]
				if cs, ok := src[s.cat]; ok {
					// s.cat is itself read back from a wider
					// concatenation: from its slice where that is made
					// already, else from the wider one directly.
					if c := sliced[s.cat]; c != nil {
						from = c
					} else {
						from = mapped[cs.cat]
						s.slice.Start += cs.slice.Start
						s.slice.End += cs.slice.Start
					}
				}
				at(out, y.Node.Module, trace.Backward, func() {
					op := s.slice
					sliced[y] = prim.Apply1(&op, from)
				})
				st.Values++
				st.Bytes += roundBytes(y.Meta.Bytes())
			}
			ins := make([]*trace.Tensor, len(n.Inputs))
			for i, in := range n.Inputs {
				ins[i] = mapped[in]
				if ins[i] == nil {
					panic(&trace.ShapeError{Module: n.Module, Op: "slicecat", Err: fmt.Errorf("input %d (%v) of %s (node %d) has no mapping", i, in, n.Label(), n.ID)})
				}
				if _, ok := src[in]; ok && backwardReader(n) {
					ins[i] = sliced[in]
				}
			}
			outs := out.Clone(n, ins)
			for i, o := range n.Outputs {
				mapped[o] = outs[i]
			}
		}
		for i, t := range g.Outputs {
			out.Output(g.OutputNames[i], mapped[t])
		}
	})
	return out, st, err
}

// catLike is a saved concatenation, or a saved cast or int8 quantization
// of one.
type catLike struct {
	n     *trace.Node // the saved node
	cat   *trace.Node // the concatenation: n, or the cast's or quantization's input's node
	cast  bool        // n casts cat's output to to
	to    tensor.DType
	quant bool // n quantizes cat's output to int8, channels on the concatenation's axis
}

// saved is what the backward pass reads of c: its value, or the codes and
// scales of its quantization.
func (c catLike) saved() []*trace.Tensor {
	if c.quant {
		return c.n.Outputs
	}
	return c.n.Outputs[:1]
}

// sliceOf is the slice of c's saved output k holding the w channels from
// start on axis (the scales, one per channel, on their only axis).
func (c catLike) sliceOf(k, axis, start, w int) prim.SliceOp {
	if k == 1 && c.quant {
		axis = 0
	}
	return prim.SliceOp{Axis: axis, Start: start, End: start + w, Step: 1}
}

// savedAll reports whether every one of vs is a saved value the backward
// pass reads as it is (not a step output, not a view).
func savedAll(vs []*trace.Tensor, lastBack map[*trace.Tensor]*trace.Node, outputs map[*trace.Tensor]bool) bool {
	for _, v := range vs {
		if _, saved := lastBack[v]; !saved || outputs[v] || trace.Root(v) != v {
			return false
		}
	}
	return true
}

// catLikeNode reports whether n is a concatenation or a cast or
// quantization of one.
func catLikeNode(n *trace.Node) bool {
	if isCatNode(n) {
		return true
	}
	switch n.Op.(type) {
	case *prim.Cast, *prim.Quantize:
		return isCatNode(n.Inputs[0].Node)
	}
	return false
}

// catRun reports whether a's concatenated values are a run of b's (their
// inputs, on the same axis, cast or quantized alike), and where a's values
// start in b.
func catRun(a, b catLike) (start int, ok bool) {
	axis := catAxis(b.cat)
	ia, ib := a.cat.Inputs, b.cat.Inputs
	if catAxis(a.cat) != axis || len(ia) > len(ib) || a.cast != b.cast || a.to != b.to || a.quant != b.quant {
		return 0, false
	}
	for i := 0; i+len(ia) <= len(ib); i++ {
		if ib[i] == ia[0] && slices.Equal(ib[i:i+len(ia)], ia) {
			return start, true
		}
		start += ib[i].Shape()[axis]
	}
	return 0, false
}

// catHeld reports whether b's values are themselves a run of another of
// cats (so that a concatenation is read back only from the widest).
func catHeld(b catLike, cats []catLike) bool {
	for _, c := range cats {
		if c.n != b.n && len(c.cat.Inputs) > len(b.cat.Inputs) {
			if _, ok := catRun(b, c); ok {
				return true
			}
		}
	}
	return false
}

// isCatNode reports whether n is a concatenation (prim.CatOp, or
// prim.CatWiden, whose output 0 is the concatenation).
func isCatNode(n *trace.Node) bool {
	if n.Kind != trace.KindOp {
		return false
	}
	switch n.Op.(type) {
	case *prim.CatOp, *prim.CatWiden:
		return true
	}
	return false
}

// catAxis is concatenation n's axis.
func catAxis(n *trace.Node) int {
	if w, ok := n.Op.(*prim.CatWiden); ok {
		return w.Axis
	}
	return n.Op.(*prim.CatOp).Axis
}

// sliceCat turns SliceFromCat on (tests compare with it off).
var sliceCat = true

// roundBytes rounds n up to the arena's 512-byte granularity (plan.Round).
func roundBytes(n int64) int64 { return (max(n, 1) + 511) / 512 * 512 }
