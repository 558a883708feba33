package plan_test

import (
	"testing"

	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/plan"
	"github.com/headroom-ml/headroom/schedule"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// An elementwise op writes over an input that dies at it, and only then;
// never over an input or an output of the graph.
func TestInPlace(t *testing.T) {
	vec := tensor.Shape{4, 256} // 4 KiB of float32s
	type built struct {
		g    *trace.Graph
		same [][2]*trace.Tensor // must share a buffer
		diff [][2]*trace.Tensor // must not
	}
	cases := []struct {
		name  string
		build func(g *trace.Graph) built
	}{
		{"chain", func(g *trace.Graph) built {
			a := op.Exp(g.Input("x", tensor.Float32, vec))
			b := op.Neg(a)
			c := op.ReLU(b)
			g.Output("s", op.Sum(c, false))
			return built{same: [][2]*trace.Tensor{{a, b}, {a, c}}}
		}},
		{"input read later", func(g *trace.Graph) built {
			a := op.Exp(g.Input("x", tensor.Float32, vec))
			b := op.Neg(a)
			c := op.Add(a, b) // both die here: c takes a's bytes
			g.Output("s", op.Sum(c, false))
			return built{same: [][2]*trace.Tensor{{a, c}}, diff: [][2]*trace.Tensor{{a, b}}}
		}},
		{"broadcast operand", func(g *trace.Graph) built {
			x := g.Input("x", tensor.Float32, vec)
			a := op.Exp(x)
			s := op.Sum(a, true, 1) // [4, 1], dies at c
			c := op.Mul(s, x)       // x is an input: not overwritten
			g.Output("c", c)
			return built{diff: [][2]*trace.Tensor{{s, c}, {a, c}}}
		}},
		{"graph input", func(g *trace.Graph) built {
			x := g.Input("x", tensor.Float32, vec)
			a := op.Neg(x)
			g.Output("s", op.Sum(a, false))
			return built{diff: [][2]*trace.Tensor{{x, a}}}
		}},
		{"graph output", func(g *trace.Graph) built {
			a := op.Exp(g.Input("x", tensor.Float32, vec))
			g.Output("a", a)
			b := op.Neg(a)
			g.Output("b", b)
			return built{diff: [][2]*trace.Tensor{{a, b}}}
		}},
		{"output over a dying value", func(g *trace.Graph) built {
			a := op.Exp(g.Input("x", tensor.Float32, vec))
			b := op.Neg(a) // a dies here: the output b takes its bytes
			g.Output("b", b)
			c := op.ReLU(b) // but b, an output, is not overwritten in turn
			g.Output("s", op.Sum(c, false))
			return built{same: [][2]*trace.Tensor{{a, b}}, diff: [][2]*trace.Tensor{{b, c}}}
		}},
		{"other dtype", func(g *trace.Graph) built {
			a := op.Exp(g.Input("x", tensor.Float32, vec))
			b := op.To(a, tensor.Float64)
			c := op.Neg(b)
			g.Output("s", op.Sum(c, false))
			return built{same: [][2]*trace.Tensor{{b, c}}, diff: [][2]*trace.Tensor{{a, b}}}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := trace.New()
			var b built
			if err := trace.Capture(func() { b = c.build(g) }); err != nil {
				t.Fatal(err)
			}
			p, err := plan.Make(g, schedule.Order(g), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, pair := range b.same {
				if p.Of[pair[0]] != p.Of[pair[1]] {
					t.Errorf("%s and %s do not share a buffer", pair[0].Node.Label(), pair[1].Node.Label())
				}
			}
			for _, pair := range b.diff {
				if p.Of[pair[0]] != nil && p.Of[pair[0]] == p.Of[pair[1]] {
					t.Errorf("%s and %s share a buffer", pair[0].Node.Label(), pair[1].Node.Label())
				}
			}
			// Each buffer is live over one interval and the IDs index
			// Buffers.
			for i, buf := range p.Buffers {
				if buf.ID != i || buf.End < buf.Start {
					t.Errorf("buffer %d: %+v", i, buf)
				}
			}
		})
	}
}

// In a chain the step after the first holds one buffer, not two.
func TestInPlaceLowersPeak(t *testing.T) {
	g := trace.New()
	var b *trace.Tensor
	if err := trace.Capture(func() {
		a := op.Exp(g.Input("x", tensor.Float32, tensor.Shape{1024}))
		b = op.Neg(a)
		g.Output("s", op.Sum(op.ReLU(b), false))
	}); err != nil {
		t.Fatal(err)
	}
	p, err := plan.Make(g, schedule.Order(g), nil)
	if err != nil {
		t.Fatal(err)
	}
	if live := p.LiveAt[p.Step[b.Node]]; live != 4096 {
		t.Errorf("live bytes at neg: %d, want 4096 (exp's output overwritten)", live)
	}
}
