package transform_test

import (
	"testing"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/transform"
)

// Folding a GPT's head transposes into its attention ops (BTHD) changes
// memory and copies, never numbers: loss and every gradient are
// bit-identical to the unfolded graph's, in float32 and the mixed modes,
// with and without recomputation; no transpose is left, every attention
// op reads [B, T, H, D], and the planned peak (equal to the measured one,
// step checks) does not grow. The backward ops write the concatenation of
// dq, dk and dv that c_attn's backward reads (Packed).
func TestAttentionLayoutIsExact(t *testing.T) {
	spec := mustSpec(t, "gpt-bytes")
	for _, c := range []struct {
		p     transform.Precision
		remat transform.Policy
		long  bool
	}{
		{transform.FP32, nil, false},
		{transform.BF16Mixed, nil, false},
		{transform.BF16Mixed, transform.CheapOps, true},
		{transform.FP16Mixed, nil, true},
		{transform.BF16True, nil, true},
	} {
		if c.long && testing.Short() {
			continue
		}
		s := setup{precision: c.p, remat: c.remat}
		what := c.p.String()
		if c.remat != nil {
			what += " recompute"
		}
		old := transform.SetAttnLayout(false)
		base := step(t, spec, 2, s)
		transform.SetAttnLayout(true)
		got := step(t, spec, 2, s)
		transform.SetAttnLayout(old)
		sameGrads(t, what, got, base)
		permutes := func(o outcome) (n int) {
			for _, n2 := range o.prog.Nodes {
				if _, ok := n2.Op.(*prim.Permute); ok {
					n++
				}
			}
			return n
		}
		cats := func(o outcome) (n int) {
			for _, n2 := range o.prog.Nodes {
				if _, ok := n2.Op.(*prim.CatOp); ok {
					n++
				}
			}
			return n
		}
		attn, folded, bwd, packed := 0, 0, 0, 0
		for _, n := range got.prog.Nodes {
			switch o := n.Op.(type) {
			case *prim.AttentionOp:
				attn++
				if o.BTHD {
					folded++
				}
			case *prim.AttentionBackward:
				attn++
				bwd++
				if o.BTHD {
					folded++
				}
				if o.Packed {
					packed++
				}
			}
		}
		if attn == 0 || folded != attn || permutes(got) != 0 || permutes(base) == 0 {
			t.Errorf("%s: %d of %d attention ops read [B, T, H, D]; %d transposes left (%d unfolded)", what, folded, attn, permutes(got), permutes(base))
		}
		// The q, k, v gradients' concatenation for c_attn's backward is
		// the backward ops' packed output.
		if packed != bwd || cats(got) != cats(base)-bwd {
			t.Errorf("%s: %d of %d attention backward ops packed; %d concatenations left of %d", what, packed, bwd, cats(got), cats(base))
		}
		if got.plan.Total() > base.plan.Total() {
			t.Errorf("%s: planned peak %d folded, %d unfolded", what, got.plan.Total(), base.plan.Total())
		}
		t.Logf("%s: planned peak %d -> %d bytes", what, base.plan.Total(), got.plan.Total())
	}
}

// The fold's edges: a value something else reads in the heads-first
// layout (here a graph output) gets a transpose of its own; attention
// whose operands are not all transposes is left alone.
func TestFoldAttentionLayoutEdges(t *testing.T) {
	count := func(g *trace.Graph) (perms, bthd int) {
		for _, n := range g.Nodes {
			switch o := n.Op.(type) {
			case *prim.Permute:
				perms++
			case *prim.AttentionOp:
				if o.BTHD {
					bthd++
				}
			}
		}
		return perms, bthd
	}
	build := func(allSwapped bool) *trace.Graph {
		g := trace.New()
		if err := trace.Capture(func() {
			x := g.Input("x", tensor.Float32, tensor.Shape{2, 5, 3, 4})
			q := prim.PermuteAxes(x, 0, 2, 1, 3)
			if !allSwapped {
				q = g.Input("q", tensor.Float32, tensor.Shape{2, 3, 5, 4})
			}
			y := g.Apply(&prim.AttentionOp{Causal: true, Scale: 0.5}, q, prim.PermuteAxes(x, 0, 2, 1, 3), prim.PermuteAxes(x, 0, 2, 1, 3))[0]
			g.Output("rows", prim.PermuteAxes(y, 0, 2, 1, 3))
			g.Output("heads", y)
		}); err != nil {
			t.Fatal(err)
		}
		return g
	}
	out, n, err := transform.FoldAttentionLayout(build(true))
	if err != nil {
		t.Fatal(err)
	}
	// Three operand transposes and the one back go; the heads-first
	// output comes from one new transpose.
	if perms, bthd := count(out); n != 1 || bthd != 1 || perms != 1 {
		t.Errorf("folded %d ops: %d BTHD attention ops, %d transposes; want 1, 1, 1", n, bthd, perms)
	}
	if !out.Outputs[1].Shape().Equal(tensor.Shape{2, 3, 5, 4}) || !out.Outputs[0].Shape().Equal(tensor.Shape{2, 5, 3, 4}) {
		t.Errorf("outputs %v, %v", out.Outputs[0].Shape(), out.Outputs[1].Shape())
	}
	g := build(false)
	out, n, err = transform.FoldAttentionLayout(g)
	if err != nil {
		t.Fatal(err)
	}
	if perms, bthd := count(out); n != 0 || bthd != 0 || out != g {
		t.Errorf("q not a transpose: folded %d ops (%d BTHD, %d transposes)", n, bthd, perms)
	}
}
