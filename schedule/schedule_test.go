package schedule_test

import (
	"testing"

	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/schedule"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func TestOrderDropsDeadNodesAndRunsEffectsEarly(t *testing.T) {
	g := trace.New()
	var dead, a, b *trace.Tensor
	var acc *trace.Node
	err := trace.Capture(func() {
		x := g.Input("x", tensor.Float32, tensor.Shape{4})
		a = op.ReLU(x)
		dead = op.Exp(x)
		b = op.Tanh(a)
		g.Output("b", b)
		// The accumulation of a is recorded last but may run right after a.
		s := g.State("grad:a", "gradient", tensor.Float32, tensor.Shape{4})
		op.AccumulateInto(s, a, false)
		acc = g.Nodes[len(g.Nodes)-1]
	})
	if err != nil {
		t.Fatal(err)
	}
	order := schedule.Order(g)
	pos := map[*trace.Node]int{}
	for i, n := range order {
		pos[n] = i
	}
	if _, ok := pos[dead.Node]; ok {
		t.Errorf("dead node %s was scheduled", dead.Node.Label())
	}
	if pos[acc] != pos[a.Node]+1 {
		t.Errorf("accumulate at %d, want right after its input at %d", pos[acc], pos[a.Node])
	}
	if pos[b.Node] < pos[a.Node] {
		t.Errorf("not topological")
	}
}

// An effect that reads only state (a counter increment) must run even when
// the graph's first node is dead.
func TestStateOnlyEffectIsScheduled(t *testing.T) {
	g := trace.New()
	_ = trace.Capture(func() {
		g.Input("unused", tensor.Float32, tensor.Shape{1})
		x := g.Input("x", tensor.Float32, tensor.Shape{2})
		g.Output("y", op.ReLU(x))
		op.IncrementCounter(g.State("n", "buffer", tensor.Int64, tensor.Shape{}))
	})
	found := false
	for _, n := range schedule.Order(g) {
		if n.Kind == trace.KindOp && n.Op.Name() == (&op.Increment{}).Name() {
			found = true
		}
	}
	if !found {
		t.Fatal("counter increment was dropped")
	}
}
