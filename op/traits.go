package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// The traits and the registry live in package prim; these aliases keep
// op's callers compiling while the node types move.

type (
	Primitive = prim.Primitive
	Traits    = prim.Traits
	Autocast  = prim.Autocast
	Fusion    = prim.Fusion
	Stats     = prim.Stats
	Recompute = prim.Recompute
	Kernel    = prim.Kernel
	Cost      = prim.Cost
)

const (
	AutocastLow         = prim.AutocastLow
	AutocastFP32        = prim.AutocastFP32
	AutocastFP32Forward = prim.AutocastFP32Forward
	AutocastFirstInput  = prim.AutocastFirstInput
	AutocastPromote     = prim.AutocastPromote
	AutocastExact       = prim.AutocastExact

	FuseNone        = prim.FuseNone
	FuseProducer    = prim.FuseProducer
	FuseElementwise = prim.FuseElementwise

	StatsNone       = prim.StatsNone
	StatsAfterFirst = prim.StatsAfterFirst

	RecomputeCheap     = prim.RecomputeCheap
	RecomputeResidual  = prim.RecomputeResidual
	RecomputeExpensive = prim.RecomputeExpensive
	RecomputeNever     = prim.RecomputeNever

	KernelRequired = prim.KernelRequired
	KernelNone     = prim.KernelNone
)

func Of(o trace.Op) Primitive       { return prim.Of(o) }
func TraitsOf(o trace.Op) Traits    { return prim.TraitsOf(o) }
func NodeCost(n *trace.Node) Cost   { return prim.NodeCost(n) }
func All() []Primitive              { return prim.All() }
func Check(p Primitive) error       { return prim.Check(p) }
func register(samples ...Primitive) { prim.Register(samples...) }

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
