package transform_test

import (
	"fmt"
	"testing"

	"github.com/headroom-ml/headroom/trace"
)

// chainPolicy recomputes every recomputable forward node except one
// residual addition in stride (the checkpoints of checkpoint_sequential's
// segments); stride 0 keeps every residual addition.
type chainPolicy struct {
	stride int
	index  map[*trace.Node]int // residual additions, in forward order
}

func isResidual(n *trace.Node) bool {
	if n.Kind != trace.KindOp || n.Phase != trace.Forward {
		return false
	}
	name := n.Op.Name()
	return (name == "add" || name == "sub") && len(n.Inputs) == 2 &&
		n.Inputs[0].Node.Kind == trace.KindOp && n.Inputs[1].Node.Kind == trace.KindOp
}

func (p *chainPolicy) Recompute(n *trace.Node) bool {
	if !isResidual(n) {
		return true
	}
	if _, ok := p.index[n]; !ok {
		p.index = map[*trace.Node]int{}
		for _, m := range n.Outputs[0].Graph().Nodes {
			if isResidual(m) {
				p.index[m] = len(p.index)
			}
		}
	}
	return p.stride > 0 && p.index[n]%p.stride != p.stride-1
}

func (p *chainPolicy) Region(*trace.Node) int { return 0 }

// Recomputing residual chains a segment at a time (only every stride-th
// block output kept) changes memory, never numbers: loss and gradients are
// bit-identical to keeping everything and the measured peak is the planned
// one (step checks it). In a ResNet, where block outputs are most of what
// the backward pass keeps once everything else is recomputed, the segments
// need less memory than keeping every block output. (In the GPT they need
// more: a segment's recomputed attention is all live at once. The planner
// weighs both.)
func TestResidualChainSegmentsAreExact(t *testing.T) {
	for _, tc := range []struct {
		name    string
		strides []int
		smaller bool
	}{
		{"resnet18-64", []int{2, 3}, true},
		{"gpt-shakespeare-char", []int{2}, false},
	} {
		name := tc.name
		spec := mustSpec(t, name)
		base := step(t, spec, 2, setup{})
		keepAll := step(t, spec, 2, setup{remat: &chainPolicy{}})
		sameGrads(t, name+" every block output kept", keepAll, base)
		for _, stride := range tc.strides {
			got := step(t, spec, 2, setup{remat: &chainPolicy{stride: stride}})
			what := fmt.Sprintf("%s stride %d", name, stride)
			sameGrads(t, what, got, base)
			if tc.smaller && got.plan.Activations >= keepAll.plan.Activations {
				t.Errorf("%s: %d bytes of activations, keeping every block output %d", what, got.plan.Activations, keepAll.plan.Activations)
			}
			t.Logf("%s: activations %d (all block outputs kept: %d, nothing recomputed: %d)", what, got.plan.Activations, keepAll.plan.Activations, base.plan.Activations)
		}
	}
}
