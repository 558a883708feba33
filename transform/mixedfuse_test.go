package transform_test

import (
	"testing"

	"github.com/headroom-ml/headroom/internal/env"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/transform"
)

// Under bf16-mixed a linear layer's product and bias add run as one fused
// node, as in fp32 (autocast rounds the bias before the product, not
// between it and the add), autocast's roundings (casts to bfloat16 and
// back) join their producer's program, and no cast to bfloat16 narrows
// again a value widened from bfloat16 (ReadLow's cast folding). All change
// passes over memory, never numbers: the step is bit for bit the unfused,
// unfolded one.
func TestMixedFusesLinearsAndFoldsCasts(t *testing.T) {
	spec := mustSpec(t, "gpt-bytes") // linear layers with biases
	s := setup{precision: transform.BF16Mixed}
	oldRL, oldFold := transform.SetReadLow(false), transform.SetFoldOnly(false)
	defer func() { transform.SetReadLow(oldRL); transform.SetFoldOnly(oldFold) }()
	t.Setenv(env.Fuse, "0")
	base := step(t, spec, 1, s)
	t.Setenv(env.Fuse, "1")
	transform.SetReadLow(true)
	transform.SetFoldOnly(true)
	got := step(t, spec, 1, s)
	sameGrads(t, "bf16-mixed gpt-bytes, fused and folded", got, base)

	fusedLinears, looseAdds, refolds, loneRounds := 0, 0, 0, 0
	fusedRounds := map[trace.Phase]int{}
	for _, n := range got.prog.Nodes {
		if n.Kind != trace.KindOp {
			continue
		}
		if f, ok := n.Op.(*prim.Fused); ok && f.Producer != nil {
			for _, ins := range f.Prog {
				c, narrow := ins.Op.(*prim.Cast)
				if _, ok := ins.Op.(*prim.Round); ok || narrow && c.To == tensor.BFloat16 {
					fusedRounds[n.Phase]++
				}
			}
		}
		if _, ok := n.Op.(*prim.Round); ok && n.Inputs[0].Node.Kind != trace.KindState {
			loneRounds++
		}
		if n.Phase != trace.Forward {
			continue
		}
		switch o := n.Op.(type) {
		case *prim.Fused:
			if _, ok := o.Producer.(*prim.MatMul); ok {
				if b, ok := o.Prog[0].Op.(*prim.Binary); ok && b.Kind == prim.AddKind {
					fusedLinears++
				}
			}
		case *prim.Binary:
			for _, in := range n.Inputs {
				if _, ok := trace.Root(in).Node.Op.(*prim.MatMul); ok && o.Kind == prim.AddKind {
					looseAdds++
				}
			}
		case *prim.Cast:
			src := trace.Root(n.Inputs[0])
			if c, ok := src.Node.Op.(*prim.Cast); ok && o.To == tensor.BFloat16 && c.To == tensor.Float32 && src.Node.Inputs[0].DType() == tensor.BFloat16 {
				refolds++
			}
		}
	}
	// 6 blocks of 4 linear layers with biases (attention's c_attn and
	// c_proj, the MLP's c_fc and c_proj).
	if fusedLinears != 24 || looseAdds != 0 {
		t.Errorf("bf16-mixed gpt-bytes: %d matmul+add fused nodes (want 24), %d adds reading a matmul unfused", fusedLinears, looseAdds)
	}
	// The roundings of both c_proj outputs join their matmul+add (and
	// c_attn's, a narrowing since q, k and v are cut from its bfloat16
	// value, where the batch is large enough: TestMixedFusesGeluCasts); in
	// the backward, those of matmuls' input gradients that layer norm
	// reads.
	t.Logf("fused roundings: forward %d, backward %d", fusedRounds[trace.Forward], fusedRounds[trace.Backward])
	if fusedRounds[trace.Forward] < 12 || fusedRounds[trace.Backward] < 12 {
		t.Errorf("bf16-mixed gpt-bytes: %d forward, %d backward roundings fused with a producer (want >= 12, >= 12)", fusedRounds[trace.Forward], fusedRounds[trace.Backward])
	}
	// A rounding that joins no program stays a cast there and back.
	if loneRounds != 0 {
		t.Errorf("bf16-mixed gpt-bytes: %d unfused roundings of non-parameters", loneRounds)
	}
	if refolds != 0 {
		t.Errorf("bf16-mixed gpt-bytes: %d casts to bfloat16 of widened bfloat16 values left", refolds)
	}
}

// Under bf16-mixed the casts join the programs around them: layer norms
// write their outputs in bfloat16 for the products after them, c_attn's
// product writes its output in bfloat16, split into q, k and v as such;
// in the MLP, c_fc's
// product writes, from its row blocks, the bfloat16 pre-activation gelu's
// backward keeps and the bfloat16 gelu output c_proj reads (no float32
// value of the layer's width is stored), and the backward's product reads
// the saved bfloat16 pre-activation itself in its gelu_backward epilogue.
// Passes over memory change, never numbers: loss and gradients are bit
// for bit those of the unfused step. (Batch 2: at batch 1 the workspace
// that holds a product's float32 output outweighs what the program saves,
// and the casts join programs of their own.)
func TestMixedFusesGeluCasts(t *testing.T) {
	spec := mustSpec(t, "gpt-bytes")
	s := setup{precision: transform.BF16Mixed}
	t.Setenv(env.Fuse, "0")
	base := step(t, spec, 2, s)
	t.Setenv(env.Fuse, "1")
	got := step(t, spec, 2, s)
	sameGrads(t, "bf16-mixed gpt-bytes, fused", got, base)

	fcs, backs, wideCasts, qkv, lowSplits, lns := 0, 0, 0, 0, 0, 0
	for _, n := range got.prog.Nodes {
		if n.Kind != trace.KindOp {
			continue
		}
		if _, ok := n.Op.(*prim.SplitOp); ok && n.Phase == trace.Forward && n.Inputs[0].DType() == tensor.BFloat16 {
			lowSplits++
		}
		if c, ok := n.Op.(*prim.Cast); ok && c.To == tensor.Float32 && n.Outputs[0].Shape().NumElements() == 2*256*1536 {
			wideCasts++
		}
		f, ok := n.Op.(*prim.Fused)
		if !ok {
			continue
		}
		if _, ok := f.Producer.(*prim.LayerNormOp); ok && n.Phase == trace.Forward {
			for _, o := range n.Outputs {
				if o.DType() == tensor.BFloat16 {
					lns++
				}
			}
		}
		if _, ok := f.Producer.(*prim.MatMul); !ok {
			continue
		}
		gelu, geluBack, narrow := false, false, true
		for _, ins := range f.Prog {
			switch o := ins.Op.(type) {
			case *prim.Unary:
				gelu = gelu || o.Kind == prim.GELUKind
			case *prim.UnaryBackward:
				geluBack = geluBack || o.Kind == prim.GELUKind
			}
		}
		for _, o := range n.Outputs {
			narrow = narrow && o.DType() == tensor.BFloat16
		}
		if gelu && narrow && len(n.Outputs) == 2 && f.Scratch() {
			fcs++
		}
		if !gelu && narrow && len(n.Outputs) == 1 && n.Outputs[0].Shape().NumElements() == 2*256*1152 {
			qkv++
		}
		if geluBack && n.Inputs[len(n.Inputs)-1].DType() == tensor.BFloat16 {
			backs++
		}
	}
	if fcs != 6 || backs != 6 || wideCasts != 0 {
		t.Errorf("bf16-mixed gpt-bytes: %d c_fc products writing both bfloat16 values (want 6), %d gelu backward epilogues reading the bfloat16 pre-activation (want 6), %d widenings of [2, 256, 1536] left (want 0)", fcs, backs, wideCasts)
	}
	// c_attn's product writes its output in bfloat16, from which q, k and
	// v are cut (not widened, cut and narrowed again each).
	if qkv != 6 || lowSplits != 6 {
		t.Errorf("bf16-mixed gpt-bytes: %d c_attn products writing bfloat16 (want 6), %d splits of bfloat16 values (want 6)", qkv, lowSplits)
	}
	// Each layer norm writes the bfloat16 operand of the product after it
	// (the parameters' casts between them free nothing).
	if lns != 13 {
		t.Errorf("bf16-mixed gpt-bytes: %d layer norms writing bfloat16 (want 13)", lns)
	}
	if got.plan.Total() >= base.plan.Total() {
		t.Errorf("fused peak %d, unfused %d: want less", got.plan.Total(), base.plan.Total())
	}
	t.Logf("planned peak: unfused %d, fused %d", base.plan.Total(), got.plan.Total())
}
