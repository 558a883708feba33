package budget

import (
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/trace"
)

// CostModel estimates how long a node takes, from the work it does: a
// roofline with a compute rate, a memory bandwidth and a fixed per-node
// overhead. It ranks plans; it does not promise seconds.
type CostModel struct {
	FLOPS     float64 // multiply-adds count as 2
	Bandwidth float64 // bytes per second
	Overhead  float64 // seconds per node
}

// DefaultCost is a 2-core x86 machine running headroom's cpu kernels.
var DefaultCost = CostModel{FLOPS: 60e9, Bandwidth: 8e9, Overhead: 2e-6}

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
	}
	// Elementwise and data movement: a few operations per element.
	var e float64
	for _, t := range n.Outputs {
		e += numel(t)
	}
	return 2 * e
}

// Bytes is the memory traffic of node n: inputs read and outputs written.
func Bytes(n *trace.Node) float64 {
	var b float64
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
	return max(Flops(n)/c.FLOPS, Bytes(n)/c.Bandwidth) + c.Overhead
}

// Graph estimates the seconds of all nodes in order.
func (c CostModel) Graph(order []*trace.Node) float64 {
	var s float64
	for _, n := range order {
		s += c.Node(n)
	}
	return s
}
