package budget

import (
	"errors"
	"fmt"
	"math"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/transform"
)

// CostModel estimates how long a node takes, from the work it does: a
// roofline with a compute rate, a memory bandwidth and a fixed per-node
// overhead. It ranks plans; it does not promise seconds.
//
// It is charged node by node on the step as it will run (recomputed,
// cast, compressed and fused), so what a precision or a compression adds is
// whatever nodes it adds: the cast pairs and rounds of emulated low
// precision (no faster matmuls where the cpu kernels compute in float32),
// a compressing node after each compressed value and a restoring one
// before its backward readers, each at the measured rate of format
// conversions (Convert). A node's arithmetic is what its op declares
// (prim.Cost, the textbook algorithm) unless the backend that runs it
// says its kernel does other arithmetic (On): the cpu's Winograd
// convolutions.
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
	// BF16FLOPS is the compute rate of a native bfloat16 kernel: of ops
	// whose floating-point inputs are all bfloat16, and of the matmuls,
	// convolutions and attention autocast runs in bf16 (bf16-mixed,
	// bf16-true); 0 means there is none: they run at FLOPS, as emulated
	// bf16 does (the products widen their operands to float32). It is
	// where a CPU with native bf16 arithmetic makes low precision faster
	// (CPUCost). Such a CPU also converts to and from bfloat16 with
	// instructions (AVX512-BF16's VCVTNEPS2BF16) at memory speed, so
	// where BF16FLOPS is set those conversions are charged by the
	// roofline, not at Convert. fp16 has no native kernel here.
	BF16FLOPS float64
	// BF16ConvFLOPS is the rate of the native bfloat16 convolutions where
	// it differs from BF16FLOPS (the cpu's, which gather their operands
	// from the image, run slower than its matrix products); 0 means
	// BF16FLOPS.
	BF16ConvFLOPS float64
	// low: the step runs in bf16-mixed or bf16-true, where the ops of
	// autocast class prim.AutocastLow (matmul, convolution, attention and
	// their gradients) run in bfloat16 (ForPrecision).
	low bool
	// kernels is the backend whose account of its kernels' arithmetic
	// replaces the ops' declarations where it gives one (On); nil: the
	// declarations alone.
	kernels backend.Coster
}

// On is c for steps run by backend b: where b's kernel for a node does
// other arithmetic than the op declares (backend.Coster: the cpu's
// Winograd convolutions), the node is charged b's count. Which algorithm
// runs is the backend's fact alone; the planner asks the backend of the
// device it plans on (Fit does, with the meta device's backend, which is
// the cpu's). A backend that is not a Coster leaves c's declarations.
func (c CostModel) On(b backend.Backend) CostModel {
	c.kernels, _ = b.(backend.Coster)
	return c
}

// ForPrecision is c for a step in precision p: under bf16-mixed and
// bf16-true the ops autocast runs in the low type are charged at
// BF16FLOPS where a native bf16 kernel runs them (the emulation reads
// float32 copies of some of their operands, so their input types do not
// say), and at FLOPS with the float32 kernel's arithmetic where the
// backend runs them on the widened values instead (backend.LowCoster:
// the cpu's Winograd and direct convolutions). fp16-mixed runs at FLOPS:
// no CPU row has a native fp16 kernel.
func (c CostModel) ForPrecision(p transform.Precision) CostModel {
	c.low = p == transform.BF16Mixed || p == transform.BF16True
	return c
}

// ErrCost is matched by errors.Is for a cost model that cannot rank
// plans: a literal such as CostModel{FLOPS: 1e11} leaves Bandwidth at 0
// by omission, which makes every plan's time infinite and every plan
// equal. (The zero CostModel means DefaultCost.)
var ErrCost = errors.New("budget: cost model cannot rank plans")

// check refuses rates that are not positive and finite (FLOPS,
// Bandwidth) or negative (Overhead, Convert, HostBandwidth: 0 is
// documented for them).
func (c CostModel) check() error {
	for _, f := range []struct {
		name string
		v    float64
		zero bool
	}{{"FLOPS", c.FLOPS, false}, {"Bandwidth", c.Bandwidth, false}, {"Overhead", c.Overhead, true}, {"Convert", c.Convert, true}, {"HostBandwidth", c.HostBandwidth, true}, {"BF16FLOPS", c.BF16FLOPS, true}, {"BF16ConvFLOPS", c.BF16ConvFLOPS, true}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || f.v == 0 && !f.zero {
			return fmt.Errorf("%w: %s is %v (start from DefaultCost and change what you measured)", ErrCost, f.name, f.v)
		}
	}
	return nil
}

// DefaultCost is a 2-core x86 machine running headroom's cpu kernels.
// Convert was measured there: a cast of a float32 tensor to bfloat16 takes
// about 2.2 ns per element (and see prim.Cost's Convert, each conversion's
// cost relative to it).
var DefaultCost = CostModel{FLOPS: 60e9, Bandwidth: 8e9, Overhead: 2e-6, Convert: 4.5e8}

func numel(t *trace.Tensor) float64 { return float64(t.Shape().NumElements()) }

// Flops is the arithmetic of node n, as its op declares it (prim.Cost).
func Flops(n *trace.Node) float64 {
	if n.Kind != trace.KindOp {
		return 0
	}
	return prim.NodeCost(n).Flops
}

// Bytes is the device memory traffic of node n, as its op declares it
// (prim.Cost): inputs read and outputs written.
func Bytes(n *trace.Node) float64 {
	if n.Kind != trace.KindOp {
		return 0
	}
	return prim.NodeCost(n).Bytes
}

// Node estimates the seconds node n takes.
func (c CostModel) Node(n *trace.Node) float64 {
	if n.Kind != trace.KindOp {
		return 0
	}
	if _, alias := n.Op.(trace.Aliaser); alias {
		return 0
	}
	in, out := metas(n.Inputs), metas(n.Outputs)
	k := prim.CostOn(c.arithmetic(), n.Op, in, out)
	rate := c.FLOPS
	if c.BF16FLOPS > 0 && (bf16Inputs(n) || c.low && lowProduct(n.Op)) {
		// A native bf16 kernel runs it, at its rate, with the arithmetic
		// the backend does on bfloat16 operands (its Winograd paths, for
		// one, are float32 only). The emulation's graph feeds some of
		// these ops float32 copies, so the types are the kernel's, not
		// the graph's; the bytes stay the graph's.
		bin, bout := retyped(in, tensor.BFloat16), retyped(out, tensor.BFloat16)
		rate = c.BF16FLOPS
		if c.BF16ConvFLOPS > 0 && isConv(n.Op) {
			rate = c.BF16ConvFLOPS
		}
		k.Flops = prim.CostOn(c.arithmetic(), n.Op, bin, bout).Flops
		// The backend may run it in float32 instead (a convolution as
		// Winograd or direct on the widened values): where it says which
		// (backend.LowCoster), that kernel; else the cheaper of the two.
		f := prim.CostOn(c.arithmetic(), n.Op, retyped(in, tensor.Float32), retyped(out, tensor.Float32)).Flops
		if lc, ok := c.kernels.(backend.LowCoster); ok && !lc.NativeLow(n.Op, bin, bout) || !ok && f/c.FLOPS < k.Flops/rate {
			rate, k.Flops = c.FLOPS, f
		}
	}
	t := max(k.Flops/rate, k.Bytes/c.Bandwidth)
	if k.HostBytes > 0 {
		t = max(t, k.HostBytes/c.host())
	}
	if k.Convert > 0 && c.Convert > 0 && !(c.BF16FLOPS > 0 && k.Format == tensor.BFloat16) {
		var e float64
		for _, x := range n.Inputs {
			e = max(e, numel(x))
		}
		for _, x := range n.Outputs {
			e = max(e, numel(x))
		}
		t = max(t, k.Convert*e/c.Convert)
	}
	return t + c.Overhead
}

func metas(ts []*trace.Tensor) []trace.Meta {
	ms := make([]trace.Meta, len(ts))
	for i, t := range ts {
		ms[i] = t.Meta
	}
	return ms
}

// retyped is ms with its float32, float16 and bfloat16 operands retyped
// to: bfloat16 for the operands of a native bf16 kernel, float32 for the
// float32 kernel a backend may run a low-precision product on.
func retyped(ms []trace.Meta, to tensor.DType) []trace.Meta {
	r := make([]trace.Meta, len(ms))
	for i, m := range ms {
		switch m.DType {
		case tensor.Float32, tensor.Float16, tensor.BFloat16:
			m.DType = to
		}
		r[i] = m
	}
	return r
}

// arithmetic is the backend's account of its kernels (nil for none).
func (c CostModel) arithmetic() prim.Arithmetic {
	if c.kernels == nil {
		return nil
	}
	return c.kernels.Flops
}

// lowProduct reports whether o is, or is headed by (a fused node's
// producer), an op autocast runs in the low type (prim.AutocastLow).
func lowProduct(o trace.Op) bool {
	if f, ok := o.(*prim.Fused); ok && f.Producer != nil {
		o = f.Producer
	}
	return prim.TraitsOf(o).Autocast == prim.AutocastLow
}

// isConv reports whether o is, or is headed by, a convolution or one of
// its gradients.
func isConv(o trace.Op) bool {
	if f, ok := o.(*prim.Fused); ok && f.Producer != nil {
		o = f.Producer
	}
	switch o.(type) {
	case *prim.Conv2dOp, *prim.Conv2dBackwardInput, *prim.Conv2dBackwardWeight:
		return true
	}
	return false
}

// bf16Inputs reports whether n has floating-point inputs and all are
// bfloat16.
func bf16Inputs(n *trace.Node) bool {
	half := false
	for _, x := range n.Inputs {
		switch x.DType() {
		case tensor.BFloat16:
			half = true
		case tensor.Float16, tensor.Float32, tensor.Float64:
			return false
		}
	}
	return half
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
