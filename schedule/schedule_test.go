package schedule_test

import (
	"testing"

	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
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
		prim.AccumulateInto(s, a, false)
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
		if n.Kind == trace.KindOp && n.Op.Name() == (&prim.Increment{}).Name() {
			found = true
		}
	}
	if !found {
		t.Fatal("counter increment was dropped")
	}
}

// An update (trace.Updater) of a parameter runs after every other reader of
// the parameter, even one recorded after the gradient it consumes or
// reading it through a reshape, and right after the last of them; effects
// that are not updates still run as soon as their inputs exist.
func TestUpdateRunsAfterEveryReaderOfItsState(t *testing.T) {
	g := trace.New()
	var grad, late, viaAlias, lossT *trace.Tensor
	var update, acc *trace.Node
	err := trace.Capture(func() {
		x := g.Input("x", tensor.Float32, tensor.Shape{2, 2})
		w := g.State("w", "parameter", tensor.Float32, tensor.Shape{2, 2})
		y := op.Mm(x, w)
		lossT = op.Sum(y, false)
		g.Output("loss", lossT)
		grad = op.Mul(x, x) // stands for w's gradient, final early
		late = op.Mm(y, w)  // a read of w recorded after the gradient
		viaAlias = op.Exp(op.Reshape(w, tensor.Shape{4}))
		g.Output("late", late)
		g.Output("alias", viaAlias)
		s := g.State("grad:x", "gradient", tensor.Float32, tensor.Shape{2, 2})
		prim.AccumulateInto(s, grad, false)
		acc = g.Nodes[len(g.Nodes)-1]
		prim.StepInBackward(w, grad, lossT, "w")
		update = g.Nodes[len(g.Nodes)-1]
	})
	if err != nil {
		t.Fatal(err)
	}
	order := schedule.Order(g)
	pos := map[*trace.Node]int{}
	for i, n := range order {
		pos[n] = i
	}
	if pos[acc] != pos[grad.Node]+1 {
		t.Errorf("accumulate at %d, want right after its input at %d", pos[acc], pos[grad.Node])
	}
	for _, r := range []*trace.Tensor{late, viaAlias, grad, lossT} {
		if pos[update] < pos[r.Node] {
			t.Errorf("update at %d runs before %s at %d", pos[update], r.Node.Label(), pos[r.Node])
		}
	}
	if pos[update] != pos[viaAlias.Node]+1 {
		t.Errorf("update at %d, want right after the last reader at %d", pos[update], pos[viaAlias.Node])
	}
}
