package plan_test

import (
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/plan"
	"github.com/headroom-ml/headroom/schedule"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// randomGraph builds a random DAG of elementwise ops over vectors of random
// lengths, with reshapes (aliases) mixed in.
func randomGraph(r *rand.Rand, nodes int) *trace.Graph {
	g := trace.New()
	_ = trace.Capture(func() {
		var vals []*trace.Tensor
		for i := 0; i < 3; i++ {
			n := 1 + r.Intn(3000)
			vals = append(vals, g.Input(string(rune('a'+i)), tensor.Float32, tensor.Shape{n}))
		}
		for i := 0; i < nodes; i++ {
			x := vals[r.Intn(len(vals))]
			switch r.Intn(4) {
			case 0:
				vals = append(vals, op.ReLU(x))
			case 1:
				vals = append(vals, op.Reshape(x, tensor.Shape{1, -1}))
			case 2:
				y := vals[r.Intn(len(vals))]
				if y.Shape().NumElements() == x.Shape().NumElements() {
					vals = append(vals, op.Add(op.Reshape(x, tensor.Shape{-1}), op.Reshape(y, tensor.Shape{-1})))
				}
			default:
				vals = append(vals, op.Sum(x, true))
			}
		}
		for i := 0; i < 3; i++ {
			g.Output("out", vals[len(vals)-1-i])
		}
	})
	return g
}

func TestPlanInvariants(t *testing.T) {
	for seed := int64(0); seed < 50; seed++ {
		r := rand.New(rand.NewSource(seed))
		g := randomGraph(r, 60)
		order := schedule.Order(g)
		p, err := plan.Make(g, order, nil)
		if err != nil {
			t.Fatal(err)
		}
		// No two buffers alive at the same step share bytes.
		for i, a := range p.Buffers {
			if a.Offset%plan.Align != 0 || a.Size%plan.Align != 0 || a.Size < a.Bytes {
				t.Fatalf("seed %d: buffer %d misaligned or short: %+v", seed, i, a)
			}
			for _, b := range p.Buffers[i+1:] {
				timeOverlap := a.Start <= b.End && b.Start <= a.End
				spaceOverlap := a.Offset < b.Offset+b.Size && b.Offset < a.Offset+a.Size
				if timeOverlap && spaceOverlap {
					t.Fatalf("seed %d: buffers %d and %d overlap in time and space", seed, a.ID, b.ID)
				}
			}
		}
		// Every value read at a step is alive at that step.
		for s, n := range order {
			for _, in := range n.Inputs {
				b := p.Of[in]
				if b != nil && (s < b.Start || s > b.End) {
					t.Fatalf("seed %d: %v read at step %d outside its lifetime [%d, %d]", seed, in, s, b.Start, b.End)
				}
			}
		}
		// The peak is the maximum of live bytes, and the arena holds it.
		var peak int64
		for s := range order {
			var live int64
			for _, b := range p.Buffers {
				if b.Start <= s && s <= b.End {
					live += b.Size
				}
			}
			peak = max(peak, live)
		}
		if peak != p.PeakBytes || p.ArenaBytes < p.PeakBytes {
			t.Fatalf("seed %d: peak %d, plan says %d, arena %d", seed, peak, p.PeakBytes, p.ArenaBytes)
		}
	}
}

// A chain's activations are reused: the arena of a long chain of same-sized
// ops needs two buffers, not one per op.
func TestChainReusesMemory(t *testing.T) {
	g := trace.New()
	_ = trace.Capture(func() {
		x := g.Input("x", tensor.Float32, tensor.Shape{1024})
		for i := 0; i < 20; i++ {
			x = op.ReLU(x)
		}
		g.Output("y", x)
	})
	p, err := plan.Make(g, schedule.Order(g), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(2 * 4096); p.PeakBytes != want || p.ArenaBytes != want {
		t.Fatalf("peak %d, arena %d; want %d", p.PeakBytes, p.ArenaBytes, want)
	}
}
