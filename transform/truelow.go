package transform

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// splitLow is on but in tests that compare bf16-true with and without it.
var splitLow = true

// readLowFor is ReadLow for a step in precision p: under bf16-true
// followed by readLowShared.
func readLowFor(g *trace.Graph, p Precision, runsLow func(o trace.Op, in, out []trace.Meta) bool) (*trace.Graph, int, error) {
	if p != BF16Mixed && p != BF16True {
		runsLow = nil // native bf16 products only for bfloat16 values
	}
	g, n, err := readLowWith(g, runsLow)
	if err != nil || p != BF16True || !splitLow || foldOnly {
		return g, n, err
	}
	g, m, err := readLowShared(g)
	return g, n + m, err
}

// readLowShared returns a copy of g (after readLow16) in which a matrix
// product whose float32 operands are widenings of bfloat16 values
// (through reshapes) reads those bfloat16 values in place even where
// other ops read the widenings too, so that readLow16 kept them:
// bf16-true's gradients, rounded once for every op that reads them, reach
// a linear layer's bias gradient (a column sum) as well as its two
// products. Both operands then hold bfloat16, and the product runs on the
// native bf16 kernel where the CPU has one, summing in float32 as
// bf16-true's (PyTorch's bf16 kernels') products do; the widening stays
// for its other readers. A product with some operand that is not a
// bfloat16 widening is left as it is: the 16-bit copy would gain it
// nothing (a mixed product with a float32 operand widens the other).
// An operand of a forward product that is no widening but that an earlier
// node narrows (Compress storing it for the backward pass: a forward ReLU's
// output) is read narrowed: exact, as every float32 value of a bf16-true
// forward pass that a product reads holds bfloat16 numbers (Autocast rounds
// them all), which is why this runs under bf16-true only.
// Convolution weight gradients are left too: their native kernel did not
// beat the widened one on RRDBNet's shapes, and its workspace raised the
// planned peak (rrdbnet batch 2: 242 to 258 MiB of activations). It
// returns the copy and how many operands now read bfloat16.
func readLowShared(g *trace.Graph) (*trace.Graph, int, error) {
	// narrowed[t] is a narrowing of float32 t to bfloat16 (Compress storing
	// it) and pos each node's position: a product after it may read it.
	narrowed := bf16Narrowings(g)
	pos := map[*trace.Node]int{}
	for i, n := range g.Nodes {
		pos[n] = i
	}
	moved := 0
	out, err := rebuild(g, func(out *trace.Graph, n *trace.Node, ins []*trace.Tensor, mapped map[*trace.Tensor]*trace.Tensor) bool {
		if n.Kind != trace.KindOp || len(n.Outputs) != 1 || !isF32(n.Outputs[0]) || len(n.Inputs) != 2 {
			return false
		}
		o, ok := n.Op.(*prim.MatMul)
		if !ok {
			return false
		}
		srcs := make([]*trace.Tensor, 2)
		chains := make([][]*trace.Node, 2)
		for i := range 2 {
			if ins[i].DType() == tensor.BFloat16 {
				continue
			}
			if srcs[i], chains[i] = widenedSource(n.Inputs[i], tensor.BFloat16); srcs[i] != nil {
				continue
			}
			// Under bf16-true every float32 operand of a forward product
			// holds bfloat16 numbers (a backward one may read an int8
			// activation's dequantization), so its narrowing is exact.
			if c := narrowed[n.Inputs[i]]; c != nil && pos[c] < pos[n] && n.Phase == trace.Forward && c.Phase == n.Phase && c.Recompute == n.Recompute {
				srcs[i] = c.Outputs[0]
				continue
			}
			return false
		}
		if srcs[0] == nil && srcs[1] == nil {
			return false
		}
		ops := append([]*trace.Tensor(nil), ins...)
		for i, src := range srcs {
			if src == nil {
				continue
			}
			v := mapped[src]
			for _, a := range chains[i] {
				r := *a
				r.Phase, r.Region, r.Recompute, r.Module = n.Phase, n.Region, n.Recompute, n.Module
				v = out.Clone(&r, []*trace.Tensor{v})[0]
			}
			ops[i] = v
			moved++
		}
		c := *n
		c.Op = &prim.MatMul{TransA: o.TransA, TransB: o.TransB, Mixed: true}
		for i, o := range out.Clone(&c, ops) {
			mapped[n.Outputs[i]] = o
		}
		return true
	})
	if err != nil || moved == 0 {
		return g, 0, err
	}
	out, err = dropUnread(out)
	return out, moved, err
}

// dropUnread returns a copy of g without the casts and reshapes that
// nothing reads (those whose readers readLowShared moved away).
func dropUnread(g *trace.Graph) (*trace.Graph, error) {
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	readers := map[*trace.Node]int{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			readers[in.Node]++
		}
	}
	dead := map[*trace.Node]bool{}
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		if n.Kind != trace.KindOp || readers[n] > 0 || len(n.Outputs) != 1 || outputs[n.Outputs[0]] {
			continue
		}
		if _, cast := n.Op.(*prim.Cast); !cast && !isAlias(n) {
			continue
		}
		dead[n] = true
		for _, in := range n.Inputs {
			readers[in.Node]--
		}
	}
	if len(dead) == 0 {
		return g, nil
	}
	return rebuild(g, func(_ *trace.Graph, n *trace.Node, _ []*trace.Tensor, _ map[*trace.Tensor]*trace.Tensor) bool {
		return dead[n]
	})
}
