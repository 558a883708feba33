package schedule_test

import (
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/plan"
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

// deferGraph has a backward node that makes a 256 KiB step output (a weight
// gradient, say) from two 1 KiB values while a 32 KiB forward value is
// still alive, read by a later backward node.
func deferGraph(t *testing.T) (*trace.Graph, *trace.Node) {
	g, dw, _ := deferGraphRounded(t, false)
	return g, dw
}

// deferGraphRounded is deferGraph, with the weight gradient, when round,
// reaching the step output through a prim.Round (as under the bf16 modes),
// returned as the third node.
func deferGraphRounded(t *testing.T, round bool) (*trace.Graph, *trace.Node, *trace.Node) {
	t.Helper()
	g := trace.New()
	var dw, r *trace.Node
	err := trace.Capture(func() {
		x := g.Input("x", tensor.Float32, tensor.Shape{8192})
		u := g.Input("u", tensor.Float32, tensor.Shape{256, 1})
		v := g.Input("v", tensor.Float32, tensor.Shape{1, 256})
		big := op.Exp(x)
		g.SetPhase(trace.Backward)
		u2, v2 := op.Tanh(u), op.Tanh(v)
		w := op.MatMulT(u2, v2, false, false)
		dw = w.Node
		if round {
			w = prim.Apply1(&prim.Round{To: tensor.BFloat16}, w)
			r = w.Node
		}
		g.Output("grad:w", w)
		g.Output("c", op.Sum(op.Tanh(big), false))
	})
	if err != nil {
		t.Fatal(err)
	}
	return g, dw, r
}

// A node whose output only a deferrable node reads (a weight gradient
// that its rounding reads) moves with it, as a chain, where neither would
// gain alone; the nodes before it that free as much as they make (the
// tanh of a 1 KiB input) stay.
func TestDeferMovesChains(t *testing.T) {
	g, dw, r := deferGraphRounded(t, true)
	order := schedule.Order(g)
	later := schedule.Defer(g, order, func(t *trace.Tensor) int64 { return plan.Round(t.Meta.Bytes()) })
	n := len(later)
	if n != len(order) || later[n-2] != dw || later[n-1] != r {
		t.Fatalf("deferred order %v, want %s and %s last", later, dw.Label(), r.Label())
	}
	var rest []*trace.Node
	for _, x := range order {
		if x != dw && x != r {
			rest = append(rest, x)
		}
	}
	for i, x := range later[:n-2] {
		if x != rest[i] {
			t.Fatalf("node %d: %s, want %s in trace order", i, x.Label(), rest[i].Label())
		}
	}
	peaksLower(t, g, order, later)
}

// peaksLower returns the plan of the deferred order later, which must
// peak lower than that of order.
func peaksLower(t *testing.T, g *trace.Graph, order, later []*trace.Node) *plan.Plan {
	t.Helper()
	a, err := plan.Make(g, order, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := plan.Make(g, later, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.PeakBytes >= a.PeakBytes {
		t.Fatalf("peak %d deferred, %d in trace order", b.PeakBytes, a.PeakBytes)
	}
	return b
}

// Defer moves a node that only makes a step output, larger than the
// inputs it last reads, to the end, and the plan of the new order peaks
// lower; exec.Compile keeps it.
func TestDeferMovesLargeOutputsLate(t *testing.T) {
	g, dw := deferGraph(t)
	order := schedule.Order(g)
	later := schedule.Defer(g, order, func(t *trace.Tensor) int64 { return plan.Round(t.Meta.Bytes()) })
	if len(later) != len(order) || later[len(later)-1] != dw {
		t.Fatalf("deferred order %v, want %s last", later, dw.Label())
	}
	b := peaksLower(t, g, order, later)
	p, err := exec.Compile(g, device.Meta())
	if err != nil {
		t.Fatal(err)
	}
	if p.Plan.PeakBytes != b.PeakBytes {
		t.Fatalf("compiled peak %d, deferred order's %d", p.Plan.PeakBytes, b.PeakBytes)
	}
	// A node whose inputs outweigh its output stays.
	if got := schedule.Defer(g, order, func(t *trace.Tensor) int64 {
		if t.Node == dw {
			return 1
		}
		return plan.Round(t.Meta.Bytes())
	}); got != nil {
		t.Fatalf("deferred %v, want no change", got)
	}
}
