// Package transform rewrites a traced training step between autodiff and
// scheduling: rematerialization (activation checkpointing) today; precision
// casts, saved-tensor compression and micro-batching belong here too.
package transform

import (
	"fmt"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// Policy says whether a forward node's outputs are recomputed for the
// backward pass instead of being kept alive from the forward pass.
type Policy interface {
	Recompute(n *trace.Node) bool
	// Region groups recomputation: a recomputed node reads recomputed
	// inputs only from its own region; values from other regions are the
	// saved originals (checkpoint boundaries).
	Region(n *trace.Node) int
}

// Recomputable reports whether n may be run a second time: a forward op
// with outputs and no side effect. Dropout is deterministic (its mask is a
// function of seed, step and position), so it qualifies; batch norm's
// running-statistics update is a separate effect node and is never copied.
func Recomputable(n *trace.Node) bool {
	if n.Kind != trace.KindOp || n.Phase != trace.Forward || len(n.Outputs) == 0 {
		return false
	}
	_, effect := n.Op.(trace.Effecter)
	return !effect
}

// Stats describes what Rematerialize did.
type Stats struct {
	Marked     int // forward nodes the policy selected
	Recomputed int // copies made for the backward pass
}

// Rematerialize returns a copy of g in which backward readers of values
// produced by nodes the policy selects read a recomputed copy instead. Each
// copy is made just before its first backward reader, so the forward value
// dies at its last forward reader and the copy lives only through the
// backward part that needs it.
//
// Under Cheap, nodes whose recomputation would not lower the bytes held
// for the backward pass are left saved (see RematerializeFor).
func Rematerialize(g *trace.Graph, p Policy) (*trace.Graph, Stats, error) {
	return RematerializeFor(g, p, nil)
}

// RematerializeFor is Rematerialize for a step whose saved activations the
// compress pass then stores as c says (nil: as produced): under Cheap it
// recomputes only the nodes whose recomputation lowers the bytes held for
// the backward pass, counted as c and SliceFromCat store them, so that
// recomputing a cheap op never keeps its larger input alive in place of a
// smaller saved form of its output (a LeakyReLU output read back from a
// saved concatenation, a ReLU kept as a 1-bit mask).
func RematerializeFor(g *trace.Graph, p Policy, c CompressPolicy) (*trace.Graph, Stats, error) {
	var st Stats
	out := trace.New()
	mapped := map[*trace.Tensor]*trace.Tensor{}
	redo := map[*trace.Tensor]*trace.Tensor{}
	marked := make([]bool, len(g.Nodes))
	for _, n := range g.Nodes {
		if Recomputable(n) && p.Recompute(n) {
			marked[n.ID] = true
		}
	}
	if _, cheap := p.(Cheap); cheap {
		payingOnly(g, p, marked, c)
	}
	for _, m := range marked {
		if m {
			st.Marked++
		}
	}
	// recompute returns the recomputed copy of forward value t, recording
	// the copies of whatever it depends on within t's region first.
	var recompute func(t *trace.Tensor) *trace.Tensor
	recompute = func(t *trace.Tensor) *trace.Tensor {
		if c, ok := redo[t]; ok {
			return c
		}
		n := t.Node
		ins := make([]*trace.Tensor, len(n.Inputs))
		for i, in := range n.Inputs {
			if marked[in.Node.ID] && p.Region(in.Node) == p.Region(n) {
				ins[i] = recompute(in)
			} else {
				ins[i] = mapped[in]
			}
		}
		outs := out.Clone(n, ins)
		outs[0].Node.Recompute = true
		st.Recomputed++
		for i, o := range n.Outputs {
			redo[o] = outs[i]
		}
		return redo[t]
	}
	err := trace.Capture(func() {
		for _, n := range g.Nodes {
			ins := make([]*trace.Tensor, len(n.Inputs))
			for i, in := range n.Inputs {
				if n.Phase != trace.Forward && marked[in.Node.ID] {
					ins[i] = recompute(in)
				} else {
					ins[i] = mapped[in]
				}
				if ins[i] == nil {
					panic(&trace.ShapeError{Module: n.Module, Op: "rematerialize", Err: fmt.Errorf("input %d of %s has no mapping", i, n.Label())})
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

// Regions recomputes every node recorded inside a checkpoint region
// (trace.Graph.Checkpoint), like torch.utils.checkpoint.
type Regions struct{}

func (Regions) Recompute(n *trace.Node) bool { return n.Region != 0 }
func (Regions) Region(n *trace.Node) int     { return n.Region }

// Selective recomputes ops by name (e.g. norms and activations) and saves
// everything else (e.g. matmul and convolution outputs), like PyTorch's
// selective activation checkpointing.
type Selective struct {
	Ops map[string]bool
}

func (s Selective) Recompute(n *trace.Node) bool { return s.Ops[n.Op.Name()] }
func (s Selective) Region(*trace.Node) int       { return 0 }

// Cheap recomputes the forward ops that declare themselves cheap to
// recompute (prim.RecomputeCheap: elementwise activations, normalizations,
// dropout, scalar scaling), which cost little relative to the memory their
// outputs hold, and saves everything else. Residual additions
// (prim.RecomputeResidual) are kept: recomputing them would chain every
// block's output to the one before, so the backward pass would recompute
// the whole chain at once and hold all of it. Of the ops it selects,
// Rematerialize recomputes only those whose recomputation lowers the bytes
// held for the backward pass (RematerializeFor).
type Cheap struct{}

func (Cheap) Recompute(n *trace.Node) bool {
	return n.Kind == trace.KindOp && prim.TraitsOf(n.Op).Recompute == prim.RecomputeCheap
}
func (Cheap) Region(*trace.Node) int { return 0 }

// CheapOps is the default selective policy (Cheap).
var CheapOps = Cheap{}

// Residual reports whether n is a residual connection: an op of class
// prim.RecomputeResidual (addition, subtraction) of two computed values.
// Recomputing it would chain block outputs together (see Cheap).
func Residual(n *trace.Node) bool {
	return n.Kind == trace.KindOp && prim.TraitsOf(n.Op).Recompute == prim.RecomputeResidual && len(n.Inputs) == 2 &&
		n.Inputs[0].Node.Kind == trace.KindOp && n.Inputs[1].Node.Kind == trace.KindOp
}

// Nodes recomputes an explicit set of forward nodes (by ID in the original
// graph); the budget planner chooses the set.
type Nodes map[int]bool

func (s Nodes) Recompute(n *trace.Node) bool { return s[n.ID] }
func (s Nodes) Region(*trace.Node) int       { return 0 }
