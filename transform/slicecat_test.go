package transform_test

import (
	"fmt"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/plan"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// tinyRRDB is ESRGAN's generator with one RRDB (3 dense blocks of 5
// convolutions whose inputs are concatenations of everything before).
func tinyRRDB() zoo.Spec {
	return zoo.Spec{Name: "rrdbnet-tiny", Loss: zoo.L1Loss,
		New: func(b nn.Builder) train.Model {
			return zoo.NewRRDBNet(b, zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 8, NB: 1, GC: 4})
		},
		Example: func(n int) (trace.Meta, trace.Meta) {
			return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 3, 8, 8}}, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 3, 32, 32}}
		}}
}

// arenaPlan is the arena layout of one step of spec on the meta device.
func arenaPlan(t *testing.T, spec zoo.Spec, batch int) *plan.Plan {
	t.Helper()
	store := nn.NewStore()
	m := spec.New(store.Root())
	dev := device.Meta()
	if err := store.Materialize(dev, 0); err != nil {
		t.Fatal(err)
	}
	defer store.Release()
	opt, _ := optim.NewAdam(optim.AdamDefaults())
	tr, err := train.New(dev, store, m, spec.Loss, opt)
	if err != nil {
		t.Fatal(err)
	}
	x, y := spec.Example(batch)
	_, c, err := tr.PlanConfig(tr.Config(), x, y)
	if err != nil {
		t.Fatal(err)
	}
	return c.Program.Plan
}

// Reading saved concatenation inputs back from the concatenation changes
// memory, never numbers: loss and every gradient are bit-identical to the
// step without the pass, and the measured peak equals the planned one
// (step checks it).
func TestSliceFromCatIsExact(t *testing.T) {
	spec := tinyRRDB()
	for _, prec := range []transform.Precision{transform.FP32, transform.BF16Mixed} {
		func() {
			defer transform.SetSliceCat(transform.SetSliceCat(false))
			base := step(t, spec, 2, setup{precision: prec})
			transform.SetSliceCat(true)
			got := step(t, spec, 2, setup{precision: prec})
			sameGrads(t, fmt.Sprintf("slicecat %v", prec), got, base)
			// Per dense block, x (the block's input) and x1..x4 (LeakyReLU
			// outputs) are read back from the narrowest concatenation
			// holding them, and the three narrower concatenations
			// (cat(x, x1) ... cat(x, x1, x2, x3)) from the widest; conv_first's
			// output is the RRDB's input, x of its first dense block. Under
			// bf16-mixed the same, from the bfloat16 concatenations (the
			// pass runs after ReadLow).
			if n := countOps(got.prog, "slice"); n != 24 {
				t.Errorf("%v: %d slices, want 24 (5 values and 3 concatenations per dense block)", prec, n)
			}
			if n := countOps(base.prog, "slice"); n != 0 {
				t.Errorf("%v: %d slices without the pass", prec, n)
			}
			if got.plan.Activations >= base.plan.Activations {
				t.Errorf("%v: activation peak %d, without the pass %d", prec, got.plan.Activations, base.plan.Activations)
			}
			t.Logf("%v: activation peak %d -> %d bytes", prec, base.plan.Activations, got.plan.Activations)
		}()
	}
	// With masks the LeakyReLU outputs are bits and only the block inputs
	// are sliced; still exact.
	defer transform.SetSliceCat(transform.SetSliceCat(false))
	base := step(t, spec, 2, setup{})
	transform.SetSliceCat(true)
	masked := step(t, spec, 2, setup{compress: transform.Compression{Masks: true}})
	sameGrads(t, "slicecat+masks", masked, base)

	// Stored compressed: a bfloat16 copy commutes with slicing, and so do
	// int8 codes and their scales, which are per channel (the
	// concatenation's axis). Each narrower concatenation's stored copy is
	// read back from the widest's, and no longer made: loss and gradients
	// bit for bit as with the pass off.
	for _, f := range []transform.Format{transform.BF16, transform.Int8} {
		c := setup{compress: transform.Compression{To: f, Masks: true}}
		transform.SetSliceCat(false)
		base := step(t, spec, 2, c)
		transform.SetSliceCat(true)
		got := step(t, spec, 2, c)
		sameGrads(t, fmt.Sprintf("slicecat+%v", f), got, base)
		// 3 narrower concatenations a block; int8's codes and scales
		// each a slice; the block inputs (stored as the concatenations
		// are) too.
		want := 3 * 3
		if f == transform.Int8 {
			want *= 2
		}
		stored := 0
		for _, n := range got.prog.Nodes {
			switch n.Op.(type) {
			case *prim.Quantize, *prim.Cast:
				if n.Phase == trace.Forward && n.Inputs[0].Node.Kind == trace.KindOp {
					if _, cat := n.Inputs[0].Node.Op.(*prim.CatOp); cat {
						stored++
					}
				}
			}
		}
		if n := countOps(got.prog, "slice"); n < want {
			t.Errorf("%v: %d slices, want at least %d (the narrower concatenations' stored copies)", f, n, want)
		}
		if stored != 3 {
			t.Errorf("%v: %d concatenations stored, want 3 (the widest of each dense block)", f, stored)
		}
		if got.plan.Activations >= base.plan.Activations {
			t.Errorf("%v: activation peak %d, without the pass %d", f, got.plan.Activations, base.plan.Activations)
		}
		t.Logf("stored %v: activation peak %d -> %d bytes", f, base.plan.Activations, got.plan.Activations)
	}
}

// When the backward pass begins, no input of a saved concatenation is kept
// on its own, nor any concatenation but the widest of each dense block:
// what a dense block keeps is cat(x, x1, x2, x3, x4), and nothing more.
// Without the pass every LeakyReLU output and block input is kept again
// beside all four concatenations.
func TestSliceFromCatKeepsOnlyConcatenations(t *testing.T) {
	for _, on := range []bool{true, false} {
		func() {
			defer transform.SetSliceCat(transform.SetSliceCat(on))
			p := arenaPlan(t, tinyRRDB(), 2)
			start := -1
			for i, n := range p.Order {
				if n.Phase != trace.Forward && !n.Recompute {
					start = i
					break
				}
			}
			if start < 0 {
				t.Fatal("no backward pass")
			}
			catIn := map[*trace.Tensor]bool{}
			for _, n := range p.Order {
				if _, ok := n.Op.(*prim.CatOp); ok && n.Phase == trace.Forward {
					for _, in := range n.Inputs {
						catIn[trace.Root(in)] = true
					}
				}
			}
			kept, cats := 0, 0
			for _, b := range p.Buffers {
				if b.Value == nil || b.Start >= start || b.End < start {
					continue
				}
				if catIn[b.Value] {
					kept++
				}
				if _, ok := b.Node.Op.(*prim.CatOp); ok {
					cats++
				}
			}
			switch {
			case on && (kept != 0 || cats != 3):
				t.Errorf("%d concatenation inputs and %d concatenations live into the backward pass, want 0 and 3 (one a dense block)", kept, cats)
			case !on && (kept < 15 || cats != 12):
				t.Errorf("without the pass %d concatenation inputs and %d concatenations live into the backward pass, want at least 15 and 12 (the test no longer sees what the pass removes)", kept, cats)
			}
		}()
	}
}

// Under bf16-mixed a DenseNet block concatenates its bfloat16 values and
// widens the concatenation (widenAfterCat), in one pass (prim.CatWiden),
// rather than concatenating widened copies and rounding the result again;
// with the forward convolutions reading their inputs in place
// (convReadsLow) nothing widens the concatenation at all: loss and
// gradients bit for bit as before, no float32 concatenation left, and no
// more memory.
func TestMixedCatsLowValues(t *testing.T) {
	spec := tinyRRDB()
	defer transform.SetConvReadsInputLow(transform.SetConvReadsInputLow(false))
	// The concatenations' storage alone: at this size the convolutions
	// would run natively where the CPU has bf16 products, with an explicit
	// im2col workspace larger than what the concatenations save.
	defer transform.SetConvPointwiseLow(transform.SetConvPointwiseLow("off"))
	for _, s := range []setup{{precision: transform.BF16Mixed}, {precision: transform.BF16Mixed, remat: transform.CheapOps}} {
		transform.SetConvReadsInputLow(false)
		oldLow, oldWiden := transform.SetCatLow(false), transform.SetCatWiden(false)
		base := step(t, spec, 2, s)
		transform.SetCatLow(true)
		apart := step(t, spec, 2, s)
		transform.SetCatWiden(true)
		got := step(t, spec, 2, s)
		transform.SetConvReadsInputLow(true)
		inPlace := step(t, spec, 2, s)
		transform.SetCatLow(oldLow)
		transform.SetCatWiden(oldWiden)
		sameGrads(t, "bf16-mixed rrdbnet-tiny, 16-bit concatenations", apart, base)
		sameGrads(t, "bf16-mixed rrdbnet-tiny, 16-bit concatenations widened in one pass", got, base)
		sameGrads(t, "bf16-mixed rrdbnet-tiny, 16-bit concatenations read in place", inPlace, base)
		for _, o := range []outcome{apart, got, inPlace} {
			if o.plan.Total() > base.plan.Total() {
				t.Errorf("planned %d bytes, %d with float32 concatenations", o.plan.Total(), base.plan.Total())
			}
		}
		count := func(o outcome) (low, wide, both int) {
			for _, n := range o.prog.Nodes {
				if n.Kind != trace.KindOp || n.Phase != trace.Forward {
					continue
				}
				switch n.Op.(type) {
				case *prim.CatOp:
					if n.Outputs[0].DType() == tensor.BFloat16 {
						low++
					} else {
						wide++
					}
				case *prim.CatWiden:
					both++
				}
			}
			return
		}
		// 3 dense blocks of 4 concatenations.
		if low, wide, both := count(apart); low != 12 || wide != 0 || both != 0 {
			t.Errorf("remat %v: %d bfloat16 and %d float32 concatenations and %d cat+to_float32, want 12, 0 and 0", s.remat != nil, low, wide, both)
		}
		if low, wide, both := count(got); low != 0 || wide != 0 || both != 12 {
			t.Errorf("remat %v: %d bfloat16 and %d float32 concatenations and %d cat+to_float32, want 0, 0 and 12", s.remat != nil, low, wide, both)
		}
		if low, wide, both := count(inPlace); low != 12 || wide != 0 || both != 0 {
			t.Errorf("remat %v, read in place: %d bfloat16 and %d float32 concatenations and %d cat+to_float32, want 12, 0 and 0", s.remat != nil, low, wide, both)
		}
		t.Logf("remat %v: planned %d bytes, %d read in place, %d apart, was %d", s.remat != nil, got.plan.Total(), inPlace.plan.Total(), apart.plan.Total(), base.plan.Total())
	}
}

// A DenseNet block's backward cuts each concatenation's gradient and adds
// the pieces to the inputs' gradients in one node (Fuse's splitAdds):
// loss and gradients bit for bit those of the separate split and adds, in
// fp32 and bf16-mixed, and no more memory.
func TestSplitAddsMerge(t *testing.T) {
	spec := tinyRRDB()
	for _, s := range []setup{{}, {precision: transform.BF16Mixed}, {remat: transform.CheapOps}} {
		old := transform.SetSplitAdd(false)
		base := step(t, spec, 2, s)
		transform.SetSplitAdd(true)
		got := step(t, spec, 2, s)
		transform.SetSplitAdd(old)
		what := fmt.Sprintf("rrdbnet-tiny %v remat %v, split+add", s.precision, s.remat != nil)
		sameGrads(t, what, got, base)
		if got.plan.Total() > base.plan.Total() {
			t.Errorf("%s: planned %d bytes, %d with separate adds", what, got.plan.Total(), base.plan.Total())
		}
		merged, splits := 0, 0
		for _, n := range got.prog.Nodes {
			switch n.Op.(type) {
			case *prim.SplitAdd:
				merged++
			case *prim.SplitOp:
				splits++
			}
		}
		// 3 dense blocks of 4 concatenations, each cut once.
		if merged != 12 || splits != 0 {
			t.Errorf("%s: %d split+add nodes and %d splits, want 12 and 0", what, merged, splits)
		}
		t.Logf("%s: planned %d bytes, was %d", what, got.plan.Total(), base.plan.Total())
	}
}

// splitAdds keeps each add's operand order (the sum of two NaNs is the
// first one's) and the addends' order, and leaves a piece read elsewhere
// as it is.
func TestSplitAddsOrder(t *testing.T) {
	g := trace.New()
	f32 := func(name string, c int) *trace.Tensor {
		return g.Input(name, tensor.Float32, tensor.Shape{2, c, 3})
	}
	var a, b *trace.Tensor
	err := trace.Capture(func() {
		x := f32("x", 7)
		a, b = f32("a", 2), f32("b", 4)
		p := g.Apply(&prim.SplitOp{Axis: 1, Sizes: []int{2, 4, 1}}, x)
		g.Output("sa", prim.Add(a, p[0]))
		g.Output("sb", prim.Add(p[1], b))
		g.Output("c", prim.Apply1(&prim.Unary{Kind: prim.ReLUKind}, p[2]))
	})
	if err != nil {
		t.Fatal(err)
	}
	fg, _, err := transform.Fuse(g)
	if err != nil {
		t.Fatal(err)
	}
	var sa *trace.Node
	for _, n := range fg.Nodes {
		if _, ok := n.Op.(*prim.SplitAdd); ok {
			sa = n
		}
	}
	if sa == nil {
		t.Fatal("no split+add node")
	}
	o := sa.Op.(*prim.SplitAdd)
	want := []prim.AccOrder{prim.AccBefore, prim.AccAfter, prim.AccNone}
	for i, w := range want {
		if o.Acc[i] != w {
			t.Fatalf("accumulation orders %v, want %v", o.Acc, want)
		}
	}
	if len(sa.Inputs) != 3 || sa.Inputs[1].Node.Name != a.Node.Name || sa.Inputs[2].Node.Name != b.Node.Name {
		t.Fatalf("inputs %v, want x, a, b", sa.Inputs)
	}
}

// innerCat is a block whose narrower concatenation is an inner run of the
// wider one's inputs (cat(b, c) inside cat(a, b, c)), with inputs of
// different widths, so that reading it back needs its offset.
type innerCat struct {
	a, b, c, n1, n2 *nn.Conv2d
}

func (m *innerCat) Forward(x *trace.Tensor) *trace.Tensor {
	a, b, c := op.LeakyReLU(m.a.Forward(x), 0.2), op.LeakyReLU(m.b.Forward(x), 0.2), op.LeakyReLU(m.c.Forward(x), 0.2)
	return op.Add(m.n1.Forward(op.Cat(1, b, c)), m.n2.Forward(op.Cat(1, a, b, c)))
}

// A concatenation read back from a wider one at an offset: bit for bit
// the step without the pass, from a slice starting past the first input.
func TestSliceFromCatInnerRun(t *testing.T) {
	pad := op.ConvOpts{Padding: [2]int{1, 1}}
	spec := zoo.Spec{Name: "inner-cat", Loss: zoo.L1Loss,
		New: func(b nn.Builder) train.Model {
			return &innerCat{a: nn.NewConv2d(b.Sub("a"), 3, 2, 3, pad, true), b: nn.NewConv2d(b.Sub("b"), 3, 3, 3, pad, true),
				c: nn.NewConv2d(b.Sub("c"), 3, 1, 3, pad, true), n1: nn.NewConv2d(b.Sub("n1"), 4, 2, 3, pad, true),
				n2: nn.NewConv2d(b.Sub("n2"), 6, 2, 3, pad, true)}
		},
		Example: func(n int) (trace.Meta, trace.Meta) {
			return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 3, 6, 5}}, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 2, 6, 5}}
		}}
	defer transform.SetSliceCat(transform.SetSliceCat(false))
	base := step(t, spec, 2, setup{})
	transform.SetSliceCat(true)
	got := step(t, spec, 2, setup{})
	sameGrads(t, "slicecat inner run", got, base)
	var starts []int
	for _, n := range got.prog.Nodes {
		if s, ok := n.Op.(*prim.SliceOp); ok && n.Inputs[0].Shape()[1] == 6 && n.Outputs[0].Shape()[1] == 4 {
			starts = append(starts, s.Start)
		}
	}
	if len(starts) != 1 || starts[0] != 2 {
		t.Errorf("slices of cat(a, b, c) as cat(b, c) start at %v, want [2]", starts)
	}
}
