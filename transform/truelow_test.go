package transform_test

import (
	"testing"

	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// Under bf16-true every matmul reads two bfloat16 operands (the native
// bf16 product's case): parameters through a 2-byte copy, gradients in
// bfloat16 even where a bias gradient reads them too (readLowShared).
// (With int8 saved activations backward products may read dequantized
// ones, float32.) Reading them changes no number (the native kernel off: a mixed product
// widens as it packs) and no step holds more.
func TestBF16TrueProductsReadBF16(t *testing.T) {
	defer cpu.SetNativeBF16(cpu.SetNativeBF16(false))
	for _, c := range []struct {
		model string
		batch int
		int8  bool // saved activations in int8: products may read dequantized ones
	}{
		{"mlp", 8, false},
		{"cnn", 8, false},
		{"cnn", 8, true},
		{"gpt-bytes", 1, false},
	} {
		if testing.Short() && c.model == "gpt-bytes" {
			continue
		}
		spec := mustSpec(t, c.model)
		s := setup{precision: transform.BF16True}
		if c.int8 {
			s.compress = transform.Compression{To: transform.Int8, MinBytes: 0, Masks: true}
		}
		old := transform.SetSplitLow(false)
		base := step(t, spec, c.batch, s)
		transform.SetSplitLow(true)
		got := step(t, spec, c.batch, s)
		transform.SetSplitLow(old)
		sameGrads(t, c.model+" bf16-true", got, base)
		mms, wide := 0, 0
		for _, n := range got.prog.Nodes {
			// A fused product's first inputs are the product's.
			if f, ok := n.Op.(*prim.Fused); ok {
				if _, ok := f.Producer.(*prim.MatMul); !ok {
					continue
				}
			} else if _, ok := n.Op.(*prim.MatMul); !ok {
				continue
			}
			mms++
			if n.Inputs[0].DType() != tensor.BFloat16 || n.Inputs[1].DType() != tensor.BFloat16 {
				wide++
				t.Logf("%s: %s reads %v and %v", c.model, n.Label(), n.Inputs[0].DType(), n.Inputs[1].DType())
			}
		}
		if mms == 0 || wide > 0 && !c.int8 {
			t.Errorf("%s bf16-true: %d of %d matmuls read a float32 operand", c.model, wide, mms)
		}
		if got.plan.Total() > base.plan.Total() {
			t.Errorf("%s bf16-true: planned peak %d, %d without reading gradients in bfloat16", c.model, got.plan.Total(), base.plan.Total())
		}
		t.Logf("%s: %d matmuls, planned peak %d -> %d bytes", c.model, mms, base.plan.Total(), got.plan.Total())
	}
}

// Under bf16-true a backward split (a concatenation's gradient: RRDBNet's
// dense blocks) reads its input rounded, once, so no piece is rounded
// again where it is read: no backward narrowing reads a split's output.
func TestBF16TrueSplitRoundsOnce(t *testing.T) {
	spec := zoo.Spec{Name: "rrdbnet-tiny", Loss: zoo.L1Loss,
		New: func(b nn.Builder) train.Model {
			return zoo.NewRRDBNet(b, zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 8, NB: 1, GC: 4})
		},
		Example: func(n int) (trace.Meta, trace.Meta) {
			return trace.Meta{Shape: tensor.Shape{n, 3, 8, 8}, DType: tensor.Float32}, trace.Meta{Shape: tensor.Shape{n, 3, 32, 32}, DType: tensor.Float32}
		}}
	got := step(t, spec, 2, setup{precision: transform.BF16True})
	splits, pieces := 0, 0
	for _, n := range got.prog.Nodes {
		switch n.Op.(type) {
		case *prim.SplitOp, *prim.SplitAdd:
			if n.Phase == trace.Backward {
				splits++
			}
		}
		c, ok := n.Op.(*prim.Cast)
		if !ok || c.To != tensor.BFloat16 || n.Phase != trace.Backward {
			continue
		}
		// (A split_with_sizes+add's outputs are sums, rounded for their
		// readers.)
		if _, ok := n.Inputs[0].Node.Op.(*prim.SplitOp); ok {
			pieces++
		}
	}
	if splits == 0 || pieces > 0 {
		t.Errorf("%d backward splits, %d of their pieces rounded", splits, pieces)
	}
}
