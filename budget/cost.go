package budget

import (
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// CostModel estimates how long a node takes, from the work it does: a
// roofline with a compute rate, a memory bandwidth and a fixed per-node
// overhead. It ranks plans; it does not promise seconds.
//
// It is charged node by node on the step as it will run (recomputed,
// cast, compressed and fused), so what a precision or a compression adds is
// whatever nodes it adds: the cast pairs and rounds of emulated low
// precision (no faster matmuls: the cpu kernels compute in float32), a
// compressing node after each compressed value and a restoring one before
// its backward readers, each at the measured rate of format conversions
// (Convert).
type CostModel struct {
	FLOPS     float64 // multiply-adds count as 2
	Bandwidth float64 // bytes per second
	Overhead  float64 // seconds per node
	// Convert is the rate, in elements per second, of one pass of a
	// format conversion (casts to and from 16 bits, rounding, int8
	// quantization, ReLU bit masks): headroom's cpu kernels for them are
	// scalar loops, slower than memory. 0 charges them by the roofline
	// alone.
	Convert float64
	// HostBandwidth is the rate of copies to and from the host pool of
	// offloaded activations, bytes per second; 0 means Bandwidth/2 (on
	// the cpu the pool is the same memory, and a copy reads and writes).
	HostBandwidth float64
}

// DefaultCost is a 2-core x86 machine running headroom's cpu kernels.
// Convert was measured there: a cast of a float32 tensor to bfloat16 takes
// about 2.2 ns per element (and see convertPasses).
var DefaultCost = CostModel{FLOPS: 60e9, Bandwidth: 8e9, Overhead: 2e-6, Convert: 4.5e8}

// convertPasses is what a format conversion costs in passes of Convert per
// element (of its largest input or output), relative to a cast to 16 bits,
// as measured on the reference machine: the float32 result of a cast back,
// a dequantization and a rounding cost about one pass or less; a mask
// packs bit by bit; quantization reads twice and rounds in float64.
func convertPasses(n *trace.Node) float64 {
	switch o := n.Op.(type) {
	case *op.Cast:
		switch {
		case o.To == tensor.BFloat16 || o.To == tensor.Float16:
			return 1
		case o.To == tensor.Float32 && (n.Inputs[0].DType() == tensor.BFloat16 || n.Inputs[0].DType() == tensor.Float16):
			return 0.6
		}
	case *op.Round, *op.RoundState, *op.AccumulateRounded, *op.Dequantize:
		return 1
	case *op.ReLUBackwardMask:
		return 1.2
	case *op.PackMask:
		return 1.7
	case *op.Quantize:
		return 3
	}
	return 0
}

func numel(t *trace.Tensor) float64 { return float64(t.Shape().NumElements()) }

// Flops is the arithmetic of node n.
func Flops(n *trace.Node) float64 {
	if n.Kind != trace.KindOp {
		return 0
	}
	switch o := n.Op.(type) {
	case *op.MatMul:
		_, m, k, nn, err := o.Dims(n.Inputs[0].Shape(), n.Inputs[1].Shape())
		if err != nil {
			return 0
		}
		return 2 * float64(m*k*nn) * numel(n.Outputs[0]) / float64(m*nn)
	case *op.Conv2dOp:
		w := n.Inputs[1].Shape()
		return 2 * numel(n.Outputs[0]) * float64(w[1]*w[2]*w[3])
	case *op.Conv2dBackwardInput:
		w := n.Inputs[1].Shape()
		return 2 * numel(n.Inputs[0]) * float64(w[1]*w[2]*w[3])
	case *op.Conv2dBackwardWeight:
		w := n.Outputs[0].Shape()
		return 2 * numel(n.Inputs[0]) * float64(w[1]*w[2]*w[3])
	case *op.AttentionOp:
		q, v := n.Inputs[0].Shape(), n.Inputs[2].Shape()
		s := n.Inputs[1].Shape()
		return 2 * numel(n.Inputs[0]) / float64(q[len(q)-1]) * float64(s[len(s)-2]) * float64(q[len(q)-1]+v[len(v)-1])
	case *op.AttentionBackward:
		q, v := n.Inputs[1].Shape(), n.Inputs[3].Shape()
		s := n.Inputs[2].Shape()
		return 5 * numel(n.Inputs[1]) / float64(q[len(q)-1]) * float64(s[len(s)-2]) * float64(q[len(q)-1]+v[len(v)-1]) / 2
	case *op.Fused:
		// The producer's arithmetic plus a couple of operations per
		// element and instruction of the chain.
		f := 2 * float64(o.Elems) * float64(len(o.Prog))
		if o.Producer != nil && o.NProd <= len(n.Inputs) {
			ins := n.Inputs[:o.NProd]
			metas := make([]trace.Meta, len(ins))
			for i, t := range ins {
				metas[i] = t.Meta
			}
			outs, err := o.Producer.Infer(metas)
			if err != nil {
				return f
			}
			p := &trace.Node{Kind: trace.KindOp, Op: o.Producer, Inputs: ins}
			for i, m := range outs {
				p.Outputs = append(p.Outputs, &trace.Tensor{Node: p, Index: i, Meta: m})
			}
			f += Flops(p)
		}
		return f
	}
	// Elementwise and data movement: a few operations per element.
	var e float64
	for _, t := range n.Outputs {
		e += numel(t)
	}
	return 2 * e
}

// Bytes is the memory traffic of node n: inputs read and outputs written.
// Int8 quantization reads its input twice (per-channel maxima, then codes).
func Bytes(n *trace.Node) float64 {
	var b float64
	if _, ok := n.Op.(*op.Quantize); ok && n.Kind == trace.KindOp {
		b += float64(n.Inputs[0].Meta.Bytes())
	}
	for _, t := range n.Inputs {
		b += float64(t.Meta.Bytes())
	}
	for _, t := range n.Outputs {
		b += float64(t.Meta.Bytes())
	}
	return b
}

// Node estimates the seconds node n takes.
func (c CostModel) Node(n *trace.Node) float64 {
	if n.Kind != trace.KindOp {
		return 0
	}
	if _, alias := n.Op.(trace.Aliaser); alias {
		return 0
	}
	switch n.Op.(type) {
	case *op.OptimizerStep:
		// The update's own work is the optimizer's, the same in either
		// mode, and the usual step runs it outside the program, where it
		// is not charged: an update node costs what the gradient write it
		// replaces (op.Accumulate) costs, so moving the optimizer into the
		// backward pass is never slower.
		return float64(n.Inputs[0].Meta.Bytes()+n.Inputs[1].Meta.Bytes())/c.Bandwidth + c.Overhead
	case *op.Offload:
		return float64(n.Inputs[0].Meta.Bytes())/c.host() + c.Overhead
	case *op.Reload:
		return float64(n.Outputs[0].Meta.Bytes())/c.host() + c.Overhead
	}
	t := max(Flops(n)/c.FLOPS, Bytes(n)/c.Bandwidth)
	if p := convertPasses(n); p > 0 && c.Convert > 0 {
		var e float64
		for _, x := range n.Inputs {
			e = max(e, numel(x))
		}
		for _, x := range n.Outputs {
			e = max(e, numel(x))
		}
		t = max(t, p*e/c.Convert)
	}
	return t + c.Overhead
}

func (c CostModel) host() float64 {
	if c.HostBandwidth > 0 {
		return c.HostBandwidth
	}
	return c.Bandwidth / 2
}

// Graph estimates the seconds of all nodes in order.
func (c CostModel) Graph(order []*trace.Node) float64 {
	var s float64
	for _, n := range order {
		s += c.Node(n)
	}
	return s
}
