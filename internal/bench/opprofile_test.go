package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// opNode is a node of op with inputs of these dtypes and shapes.
func opNode(op trace.Op, phase trace.Phase, ins ...trace.Meta) *trace.Node {
	n := &trace.Node{Kind: trace.KindOp, Op: op, Phase: phase}
	for _, m := range ins {
		n.Inputs = append(n.Inputs, &trace.Tensor{Meta: m})
	}
	return n
}

func meta(d tensor.DType, shape ...int) trace.Meta { return trace.Meta{DType: d, Shape: shape} }

// The op profile groups calls by op and phase and, by shapes, each op's
// by input shapes: longest first, percentages of all kernel time, figures
// per step, and the shapes past the first N in one line.
func TestOpProfileShapes(t *testing.T) {
	f32, bf16 := tensor.Float32, tensor.BFloat16
	// Two nodes of one shape (their calls add up), one of another, an
	// op of its own, and a mixed-precision product whose bf16 operands
	// make it a shape of its own.
	big1 := opNode(&prim.MatMul{TransB: true}, trace.Backward, meta(f32, 64, 32), meta(f32, 16, 32))
	big2 := opNode(&prim.MatMul{TransB: true}, trace.Backward, meta(f32, 64, 32), meta(f32, 16, 32))
	small := opNode(&prim.MatMul{TransA: true}, trace.Backward, meta(f32, 8, 4), meta(f32, 8, 2))
	mixed := opNode(&prim.MatMul{TransB: true, Mixed: true}, trace.Backward, meta(bf16, 64, 32), meta(bf16, 16, 32))
	add := opNode(&prim.Binary{Kind: prim.AddKind}, trace.Forward, meta(f32, 4), meta(f32, 4))
	type call struct {
		n *trace.Node
		d time.Duration
	}
	// Per step: big 60ms in 2 calls, small 10ms, mixed 5ms, add 25ms: 100ms.
	step := []call{{big1, 30 * time.Millisecond}, {small, 10 * time.Millisecond}, {big2, 30 * time.Millisecond},
		{add, 25 * time.Millisecond}, {mixed, 5 * time.Millisecond}}
	const (
		matmulLine = "    matmul (backward)                             4 calls     75.0ms  75.0%\n"
		addLine    = "    add (forward)                                 1 calls     25.0ms  25.0%\n"
		bigLine    = "           2 calls     60.0ms  60.0%  f32[64,32] f32[16,32] M×N×K=64×16×32 TransB\n"
		smallLine  = "           1 calls     10.0ms  10.0%  f32[8,4] f32[8,2] M×N×K=4×2×8 TransA\n"
		mixedLine  = "           1 calls     5.00ms   5.0%  bf16[64,32] bf16[16,32] M×N×K=64×16×32 TransB Mixed\n"
		addShape   = "           1 calls     25.0ms  25.0%  f32[4] f32[4]\n"
	)
	for _, c := range []struct {
		name   string
		shapes int
		steps  int
		want   string
	}{
		{"ops only", 0, 2, "  time per step by op (kernels only, 100ms per step in all):\n" + matmulLine + addLine},
		{"all shapes", 5, 2, "  time per step by op and input shapes (kernels only, 100ms per step in all):\n" +
			matmulLine + bigLine + smallLine + mixedLine + addLine + addShape},
		{"one step", 3, 1, "  time per step by op and input shapes (kernels only, 100ms per step in all):\n" +
			matmulLine + bigLine + smallLine + mixedLine + addLine + addShape},
		{"top 2", 2, 2, "  time per step by op and input shapes (kernels only, 100ms per step in all):\n" +
			matmulLine + bigLine + smallLine +
			"           1 calls     5.00ms   5.0%  … 1 more shape\n" + addLine + addShape},
		{"top 1", 1, 2, "  time per step by op and input shapes (kernels only, 100ms per step in all):\n" +
			matmulLine + bigLine +
			"           2 calls     15.0ms  15.0%  … 2 more shapes\n" + addLine + addShape},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newOpProfile(c.shapes)
			for s := range c.steps {
				for _, k := range step {
					p.observe(s, k.n, k.d)
				}
			}
			var b strings.Builder
			p.write(&b, c.steps)
			if got := b.String(); got != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// A call's description: a fused product by its product and its
// epilogue's inputs, a convolution's parameters, but not the fused op's
// own fields nor defaults.
func TestDescribeCall(t *testing.T) {
	f32, bf16 := tensor.Float32, tensor.BFloat16
	fused := &prim.Fused{Producer: &prim.MatMul{TransB: true, Mixed: true}, NProd: 2, NProdOut: 1, Elems: 8 * 6}
	conv := &prim.Conv2dOp{Opts: prim.ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 0}}.Normalized()}
	for _, c := range []struct {
		n    *trace.Node
		want string
	}{
		{opNode(fused, trace.Forward, meta(bf16, 2, 4, 5), meta(bf16, 6, 5), meta(f32, 6)),
			"bf16[2,4,5] bf16[6,5] M×N×K=4×6×5 batch=2 TransB Mixed + f32[6]"},
		{opNode(&prim.Fused{Elems: 4}, trace.Forward, meta(f32, 4)), "f32[4]"},
		{opNode(conv, trace.Forward, meta(f32, 8, 3, 32, 32), meta(f32, 16, 3, 3, 3)),
			"f32[8,3,32,32] f32[16,3,3,3] Stride=2 Padding=[1,0]"},
		{opNode(&prim.Conv2dBackwardInput{Opts: prim.ConvOpts{}.Normalized(), InputShape: tensor.Shape{8, 3, 32, 32}}, trace.Backward,
			meta(f32, 8, 16, 32, 32), meta(f32, 16, 3, 3, 3)),
			"f32[8,16,32,32] f32[16,3,3,3] InputShape=[8,3,32,32]"},
		// A dtype (an 8-bit enum with names) by its name.
		{opNode(&prim.Cast{To: bf16}, trace.Forward, meta(f32, 4)), "f32[4] To=bfloat16"},
		// An unsigned enum without names says nothing the op's name does not.
		{opNode(&prim.Unary{Kind: prim.UnaryKind(16)}, trace.Forward, meta(f32, 4)), "f32[4]"},
	} {
		if got := describeCall(c.n); got != c.want {
			t.Errorf("%s: got %q, want %q", c.n.Op.Name(), got, c.want)
		}
	}
}
