package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Primitive is what every op of this package declares about itself, in its
// own file, so that the passes ask the op instead of keeping tables keyed
// by op names: its static traits, what running it costs, and which inputs
// its kernel may overwrite. A type that leaves a method out does not
// compile where its file registers it (register); a Traits field left out
// is its type's zero value, "undeclared", which Check reports.
type Primitive interface {
	trace.Op
	// Traits are the op's static traits (they may depend on the op's
	// attributes, not on its inputs).
	Traits() Traits
	// Cost is the work of one run on inputs in producing outputs out.
	Cost(in, out []trace.Meta) Cost
	// InPlaceInputs lists the inputs whose memory the kernel may write its
	// output over (plan.InPlacer): element i of such an input is read
	// before element i of the output is written, and never after. nil for
	// none.
	InPlaceInputs(in []trace.Meta) []int
}

// Traits are an op's static traits. Every field's zero value means
// "undeclared" (Check fails) except GradOf, which only AutocastFP32
// backward ops set.
type Traits struct {
	Autocast Autocast
	// GradOf is, for an AutocastFP32 backward op whose output 0 is the
	// gradient of a forward value it reads, that input (a gradient has
	// its value's type under autocast); 0 for none (input 0 of a backward
	// op is the incoming gradient, never a forward value).
	GradOf    int
	Fusion    Fusion
	Stats     Stats
	Recompute Recompute
	Kernel    Kernel
}

// Autocast is how an op computes under the mixed-precision modes
// (transform.Autocast), after PyTorch's autocast lists.
type Autocast uint8

const (
	autocastUnset Autocast = iota
	// AutocastLow ops run in the low type (PyTorch's "lower precision"
	// list: matmul, conv2d, attention), with the backward ops autograd
	// runs in the same type.
	AutocastLow
	// AutocastFP32 ops run in float32 in both passes (PyTorch's float32
	// list: softmax, log-softmax, layer and group norm, losses, exp, log,
	// pow, rsqrt, reciprocal), with their backward ops.
	AutocastFP32
	// AutocastFP32Forward ops are reductions: float32 in the forward
	// pass; in the backward pass a reduction is a gradient's sum over
	// broadcast axes (a bias gradient), which runs in the gradient's type
	// (as AutocastPromote).
	AutocastFP32Forward
	// AutocastFirstInput ops compute in float32 and return output 0 in the
	// type of input 0 whatever the type of their parameters (batch norm,
	// whose statistics stay float32).
	AutocastFirstInput
	// AutocastPromote ops run in the type of their inputs, float32 if any
	// floating input is float32 (type promotion).
	AutocastPromote
	// AutocastExact ops promote, and from low-precision inputs produce
	// only values that already are low-precision numbers (selections,
	// sign changes, data movement), so their outputs need no rounding.
	AutocastExact
)

var autocastNames = [...]string{"unset", "low", "fp32", "fp32-forward", "first-input", "promote", "exact"}

func (a Autocast) String() string { return enumName(autocastNames[:], a) }

// Fusion is an op's role in fused kernels (transform.Fuse, Fused).
type Fusion uint8

const (
	fusionUnset Fusion = iota
	// FuseNone ops are never part of a Fused node.
	FuseNone
	// FuseProducer ops may head a Fused node: an elementwise chain reads
	// their output 0 (products, convolutions, normalizations and their
	// backward ops). The backend runs the producer's own kernel.
	FuseProducer
	// FuseElementwise ops may be instructions of a Fused program: one
	// output, computed element for element from inputs of its shape or
	// broadcast to it (the backend runs each instruction with the unfused
	// kernel's loop).
	FuseElementwise
)

var fusionNames = [...]string{"unset", "none", "producer", "elementwise"}

func (f Fusion) String() string { return enumName(fusionNames[:], f) }

// Stats says which outputs of an op are statistics: a normalization's
// saved mean or inverse standard deviation, attention's or cross-entropy's
// logsumexp. They are small and precision-critical (the backward divides
// by them or exponentiates them): autocast never rounds them and the
// compression policies keep them.
type Stats uint8

const (
	statsUnset Stats = iota
	// StatsNone: no output is a statistic.
	StatsNone
	// StatsAfterFirst: every output after the first is a statistic.
	StatsAfterFirst
)

var statsNames = [...]string{"unset", "none", "after-first"}

func (s Stats) String() string { return enumName(statsNames[:], s) }

// Statistic reports whether output i is a statistic.
func (s Stats) Statistic(i int) bool { return s == StatsAfterFirst && i > 0 }

// Recompute is what recomputing an op's outputs for the backward pass
// costs, relative to the memory they hold (transform.CheapOps, the budget
// planner's candidate order).
type Recompute uint8

const (
	recomputeUnset Recompute = iota
	// RecomputeCheap ops (elementwise activations, normalizations,
	// dropout, scalar scaling) cost little to recompute relative to the
	// memory their outputs hold: the default selective policy recomputes
	// them.
	RecomputeCheap
	// RecomputeResidual ops are additions that, reading two activations,
	// are residual connections: recomputing them would chain every block's
	// output to the one before, so the backward pass would recompute the
	// whole chain at once and hold all of it. Kept by the default policy;
	// the budget planner checkpoints such chains in segments.
	RecomputeResidual
	// RecomputeExpensive ops (products, convolutions, everything else)
	// are kept by the default policy.
	RecomputeExpensive
	// RecomputeNever ops are side effects (trace.Effecter), never run
	// twice.
	RecomputeNever
)

var recomputeNames = [...]string{"unset", "cheap", "residual", "expensive", "never"}

func (r Recompute) String() string { return enumName(recomputeNames[:], r) }

// Kernel says whether a backend runs the op with a kernel of its own.
type Kernel uint8

const (
	kernelUnset Kernel = iota
	// KernelRequired ops need a kernel in every backend.
	KernelRequired
	// KernelNone ops are run by the executor itself: aliases
	// (trace.Aliaser, no data moves), the optimizer step (the
	// optimizer's own code) and offload transfers (copies to and from the
	// host store a run binds).
	KernelNone
)

var kernelNames = [...]string{"unset", "required", "none"}

func (k Kernel) String() string { return enumName(kernelNames[:], k) }

func enumName[E ~uint8](names []string, e E) string {
	if int(e) < len(names) {
		return names[e]
	}
	return fmt.Sprintf("%T(%d)", e, uint8(e))
}

// Cost is the work of one run of an op, for the cost model (budget).
type Cost struct {
	Flops float64 // arithmetic; a multiply-add counts as 2
	Bytes float64 // device memory read and written
	// HostBytes are copied between the device and the host pool of
	// offloaded activations.
	HostBytes float64
	// Convert is, for a format conversion (casts to and from 16 bits,
	// rounding, int8 quantization, ReLU bit masks), its cost in passes of
	// a cast to 16 bits per element of its largest input or output, as
	// measured on the reference machine; 0 for other ops.
	Convert float64
	// Format is, for a conversion to or from a 16-bit float type (casts,
	// roundings to bf16 or fp16 values), that type; tensor.Invalid for
	// every other op. A CPU with native instructions for the type
	// converts at memory speed where the emulation loops element by
	// element (budget.CostModel).
	Format tensor.DType
}

func numel(m trace.Meta) float64 { return float64(m.Shape.NumElements()) }

// ioBytes is the bytes of in read and out written once.
func ioBytes(in, out []trace.Meta) float64 {
	var b float64
	for _, m := range in {
		b += float64(m.Bytes())
	}
	for _, m := range out {
		b += float64(m.Bytes())
	}
	return b
}

// elementwiseCost is the cost of ops doing a few operations per output
// element (elementwise arithmetic, data movement, pooling, lookups): two
// flops per output element, inputs read and outputs written once.
func elementwiseCost(in, out []trace.Meta) Cost {
	var e float64
	for _, m := range out {
		e += numel(m)
	}
	return Cost{Flops: 2 * e, Bytes: ioBytes(in, out)}
}

// Of returns o's declarations. Every op type of this package is a
// Primitive (TestRegistry); anything else is a programming error, and Of
// panics naming its type rather than letting a pass guess a default.
func Of(o trace.Op) Primitive {
	p, ok := o.(Primitive)
	if !ok {
		panic(fmt.Sprintf("op: %T (%s) declares no traits (op.Primitive)", o, o.Name()))
	}
	return p
}

// TraitsOf returns the traits of o (Of(o).Traits()).
func TraitsOf(o trace.Op) Traits { return Of(o).Traits() }

// NodeCost is the cost of running node n's op on its inputs and outputs.
func NodeCost(n *trace.Node) Cost {
	in, out := nodeMetas(n)
	return Of(n.Op).Cost(in, out)
}

// Arithmetic is a backend's account of the arithmetic (a multiply-add
// counts 2) its kernel for op o does on inputs in producing out, where it
// differs from the op's declaration: Cost counts the textbook algorithm,
// and only the backend knows whether it runs a faster one (the cpu's
// Winograd convolutions). ok is false where the declaration holds.
// backend.Coster's Flops method has this signature.
type Arithmetic func(o trace.Op, in, out []trace.Meta) (flops float64, ok bool)

// CostOn is o's Cost on a backend whose kernels do the arithmetic a
// reports: Flops replaced where a reports them, for a Fused node its
// producer's. a nil is Of(o).Cost.
func CostOn(a Arithmetic, o trace.Op, in, out []trace.Meta) Cost {
	if a != nil {
		if f, ok := a(o, in, out); ok {
			c := Of(o).Cost(in, out)
			c.Flops = f
			return c
		}
		if fu, ok := o.(*Fused); ok {
			return fu.costOn(a, in, out)
		}
	}
	return Of(o).Cost(in, out)
}

func nodeMetas(n *trace.Node) (in, out []trace.Meta) {
	in = make([]trace.Meta, len(n.Inputs))
	for i, t := range n.Inputs {
		in[i] = t.Meta
	}
	out = make([]trace.Meta, len(n.Outputs))
	for i, t := range n.Outputs {
		out[i] = t.Meta
	}
	return in, out
}

// registry holds samples of every op type, in registration order.
var registry []Primitive

// register adds samples of an op type to All: each op's file registers
// its type in init, one sample per attribute value its traits depend on.
func register(samples ...Primitive) { registry = append(registry, samples...) }

// All returns a sample of every primitive op type of this package (one per
// kind where traits depend on it), for registry checks (every op declares
// its traits; every op has a kernel in each backend).
func All() []Primitive { return append([]Primitive(nil), registry...) }

// Check reports what p leaves undeclared or declares inconsistently with
// the interfaces it implements, nil if nothing.
func Check(p Primitive) error {
	t := p.Traits()
	name := fmt.Sprintf("%T (%s)", p, p.Name())
	for _, f := range []struct {
		what     string
		val, max uint8
	}{
		{"autocast class (Traits.Autocast)", uint8(t.Autocast), uint8(AutocastExact)},
		{"fusion role (Traits.Fusion)", uint8(t.Fusion), uint8(FuseElementwise)},
		{"statistic outputs (Traits.Stats)", uint8(t.Stats), uint8(StatsAfterFirst)},
		{"recompute class (Traits.Recompute)", uint8(t.Recompute), uint8(RecomputeNever)},
		{"kernel need (Traits.Kernel)", uint8(t.Kernel), uint8(KernelNone)},
	} {
		switch {
		case f.val == 0:
			return fmt.Errorf("op %s: %s not declared", name, f.what)
		case f.val > f.max:
			return fmt.Errorf("op %s: %s %d out of range", name, f.what, f.val)
		}
	}
	if t.GradOf < 0 || t.GradOf != 0 && t.Autocast != AutocastFP32 {
		return fmt.Errorf("op %s: GradOf %d is for float32 (AutocastFP32) backward ops", name, t.GradOf)
	}
	_, effect := p.(trace.Effecter)
	if effect != (t.Recompute == RecomputeNever) {
		return fmt.Errorf("op %s: side effects (trace.Effecter) and only they are RecomputeNever (effect %v, %v)", name, effect, t.Recompute)
	}
	_, alias := p.(trace.Aliaser)
	if alias && t.Kernel != KernelNone {
		return fmt.Errorf("op %s: an alias (trace.Aliaser) runs no kernel (KernelNone)", name)
	}
	return nil
}
