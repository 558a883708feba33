package transform

import (
	"fmt"

	"github.com/headroom-ml/headroom/prim"
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
// Only concatenations the backward pass reads as they are (not compressed,
// recomputed or offloaded: Compress and Rematerialize give those readers
// another value) serve, so no value is kept longer in full precision than
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
	for _, n := range g.Nodes {
		c, ok := n.Op.(*prim.CatOp)
		if !ok || n.Kind != trace.KindOp || !savedProducer(n) {
			continue
		}
		cat := n.Outputs[0]
		last, saved := lastBack[cat]
		if !saved || outputs[cat] || trace.Root(cat) != cat {
			continue
		}
		off := 0
		for _, y := range n.Inputs {
			w := y.Shape()[c.Axis]
			s := source{cat: cat, slice: prim.SliceOp{Axis: c.Axis, Start: off, End: off + w, Step: 1}, last: last}
			off += w
			if _, read := lastBack[y]; !read || outputs[y] || trace.Root(y) != y || y.Node.Kind != trace.KindOp {
				continue
			}
			if old, ok := src[y]; !ok || s.last.ID > old.last.ID {
				src[y] = s
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
				at(out, y.Node.Module, trace.Backward, func() {
					op := s.slice
					sliced[y] = prim.Apply1(&op, mapped[s.cat])
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

// sliceCat turns SliceFromCat on (tests compare with it off).
var sliceCat = true

// roundBytes rounds n up to the arena's 512-byte granularity (plan.Round).
func roundBytes(n int64) int64 { return (max(n, 1) + 511) / 512 * 512 }
