package transform

import (
	"fmt"
	"strings"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Precision is a training step's numeric precision.
//
// The cpu kernels compute in float32 (but for bf16×bf16 matmuls and bf16
// conv weight gradients on CPUs with AVX512-BF16, which run on a native
// kernel), so the low-precision
// modes are emulated: a value "held in bfloat16" is a float32 tensor whose numbers
// are exactly bfloat16 numbers, made by rounding (a cast to bfloat16 and
// back, round-to-nearest-even). An op "run in bfloat16" reads rounded
// operands, computes in float32 (the float32 accumulation of real bf16/fp16
// matmul and convolution kernels) and has its outputs rounded. That is
// exactly what a bf16/fp16 kernel with float32 accumulation computes, up to
// the order of the float32 summation. Saved activations held in low
// precision are stored in their 16-bit form between forward and backward
// (Compress), so activation memory behaves like real mixed precision;
// values in flight inside the forward or backward pass stay 4 bytes. A
// matmul, a bf16 conv weight gradient and, under the bf16 modes,
// attention read their 16-bit operands in place (ReadLow, which
// ApplyPrecision runs last); other low-precision ops (forward and
// input-gradient convolutions) read transient float32 copies of their
// rounded operands where a native kernel would read 2-byte ones (the plan
// counts them). Under the bf16 modes attention's inner products are
// bfloat16 products (prim.AttentionOp.BF16: probabilities and score
// gradients rounded before their products, as PyTorch's autocast of
// att @ v and bf16 attention kernels round them).
//
//   - FP32: everything in float32 (the identity).
//   - BF16Mixed, FP16Mixed: PyTorch's autocast, by each op's autocast
//     class (prim.Traits): prim.AutocastLow ops (matmul, linear, conv2d,
//     attention, and their backward ops) run in the low type;
//     prim.AutocastFP32 ops (softmax, log-softmax, layer and group norm,
//     losses, exp/log/pow) and, in the forward pass, prim.AutocastFP32Forward
//     ones (reductions) run in float32; batch norm returns its input's type
//     (prim.AutocastFirstInput); every other op runs in the type of its
//     inputs, float32 if any floating input is float32 (type promotion).
//     Parameters stay float32 in the store (master weights): the graph rounds
//     them where a low-precision op reads them. A linear layer's bias add is
//     part of the layer (addmm): the bias is rounded and the sum rounded once.
//     In the backward pass the gradients of low-precision values are
//     low-precision too, but rounded lazily: where a low-precision or float32
//     op reads them and where they reach a parameter's gradient
//     (prim.AccumulateRounded), so parameter gradients are low-precision
//     numbers, as the upcast of a bf16 .grad is; the elementwise ops in
//     between are not rounded one by one (PyTorch rounds after each, so the
//     two can differ by a double rounding). FP16Mixed needs a GradScaler
//     (train.Trainer.SetPrecision installs one).
//   - BF16True: everything in bfloat16: every floating output is rounded
//     (normalization statistics and logsumexps excepted, which bf16 kernels
//     keep in float32), step inputs are rounded, and parameters and buffers
//     are rounded in place at the start of each step, which rounds the
//     optimizer's previous update as a bf16 parameter tensor would. The
//     optimizer's own state stays float32 (in PyTorch it would be bf16), and
//     parameters and gradients still take 4 bytes each in the store. Its
//     matmuls read bfloat16 operands as bf16-mixed's do (a 2-byte copy of
//     each parameter; gradients read in bfloat16 even where a bias
//     gradient reads them too: readLowShared), so they run on the native
//     bf16 kernel where the CPU has one.
type Precision uint8

const (
	FP32 Precision = iota
	BF16Mixed
	FP16Mixed
	BF16True
)

var precisionNames = [...]string{"fp32", "bf16-mixed", "fp16-mixed", "bf16-true"}

// Precisions is the list of names ParsePrecision accepts.
var Precisions = precisionNames[:]

func (p Precision) String() string {
	if int(p) < len(precisionNames) {
		return precisionNames[p]
	}
	return fmt.Sprintf("Precision(%d)", p)
}

// ParsePrecision returns the precision named name: fp32, bf16-mixed,
// fp16-mixed or bf16-true.
func ParsePrecision(name string) (Precision, error) {
	for i, n := range precisionNames {
		if n == name {
			return Precision(i), nil
		}
	}
	if p, ok := lightningPrecisions[name]; ok {
		return p, nil
	}
	return FP32, fmt.Errorf("unknown precision %q (valid: %s; Lightning's 32-true, 32, 16-mixed, 16 and bf16 also)", name, strings.Join(precisionNames[:], ", "))
}

// lightningPrecisions are PyTorch Lightning's names for the same modes
// (Trainer(precision=...)), accepted so that its users need not translate.
var lightningPrecisions = map[string]Precision{
	"32-true": FP32, "32": FP32, "16-mixed": FP16Mixed, "16": FP16Mixed, "bf16": BF16Mixed,
}

// LowDType is the 16-bit type of the mode (float32 for FP32).
func (p Precision) LowDType() tensor.DType {
	switch p {
	case BF16Mixed, BF16True:
		return tensor.BFloat16
	case FP16Mixed:
		return tensor.Float16
	}
	return tensor.Float32
}

// Format is the storage format of the mode's low-precision values.
func (p Precision) Format() Format {
	switch p {
	case BF16Mixed, BF16True:
		return BF16
	case FP16Mixed:
		return FP16
	}
	return Keep
}

// NeedsScaler reports whether training in p needs dynamic loss scaling
// (float16's narrow range: small gradients underflow without it).
func (p Precision) NeedsScaler() bool { return p == FP16Mixed }

// LowValues is the set of float32 values of an autocast graph that hold
// low-precision numbers exactly.
type LowValues struct {
	set    map[*trace.Tensor]bool
	format Format
}

// Has reports whether t holds low-precision numbers.
func (l LowValues) Has(t *trace.Tensor) bool { return l.set[t] }

// Len is the number of low-precision values.
func (l LowValues) Len() int { return len(l.set) }

// Storing returns the policy that stores saved low-precision values in
// their 16-bit format (losslessly, as real mixed precision holds them),
// ReLU outputs read only as masks as bits, and asks c (nil: keep
// everything) about the others. For a low-precision value c may still
// choose Int8; BF16 or FP16 mean the mode's format.
func (l LowValues) Storing(c CompressPolicy) CompressPolicy { return lowPolicy{l, c} }

type lowPolicy struct {
	low  LowValues
	then CompressPolicy
}

func (p lowPolicy) Format(s Saved) Format {
	f := Keep
	if p.then != nil {
		f = p.then.Format(s)
	}
	switch {
	case !p.low.Has(s.Value) || f == Bits || f == Int8 || f == Offload:
		return f
	case s.MaskOnly():
		// A real run keeps 2 bytes; the emulation would also need a
		// float32 copy in the backward pass. The mask is exact and smaller.
		return Bits
	}
	return p.low.format
}

func (p lowPolicy) Exact(t *trace.Tensor, f Format) bool { return f == p.low.format && p.low.Has(t) }

// AutocastStats describes what Autocast did.
type AutocastStats struct {
	Rounded int // values rounded to the low type (cast pairs inserted)
	Low     int // values holding low-precision numbers
}

// Autocast returns a copy of g computing in precision p, emulated in
// float32 as Precision describes, and the set of its values that hold
// low-precision numbers. FP32 returns g itself.
func Autocast(g *trace.Graph, p Precision) (*trace.Graph, LowValues, AutocastStats, error) {
	low := LowValues{set: map[*trace.Tensor]bool{}, format: p.Format()}
	var st AutocastStats
	if p == FP32 {
		return g, low, st, nil
	}
	if p > BF16True {
		return nil, low, st, fmt.Errorf("transform: unknown precision %v", p)
	}
	a := &autocast{g: g, p: p, lo: p.LowDType(), out: trace.New(), low: low.set, logical: map[*trace.Tensor]bool{}, st: &st,
		mapped: map[*trace.Tensor]*trace.Tensor{}, rounded: map[roundKey]*trace.Tensor{}}
	err := trace.Capture(a.run)
	st.Low = len(low.set)
	if err != nil {
		return nil, low, st, err
	}
	return a.out, low, st, nil
}

type roundKey struct {
	t        *trace.Tensor
	backward bool
}

type autocast struct {
	g, out *trace.Graph
	p      Precision
	lo     tensor.DType
	// low holds the values (of out) that are low-precision numbers;
	// logical also those a real run would hold in the low type but that
	// the emulation rounds only where it matters (gradients in the
	// backward pass, see mixedBackward).
	low, logical map[*trace.Tensor]bool
	st           *AutocastStats
	mapped       map[*trace.Tensor]*trace.Tensor
	rounded      map[roundKey]*trace.Tensor
	// fusedAdd marks the bias adds of linear layers (in g); fusedMatmul
	// the matmuls whose output goes only to such an add (in g).
	fusedAdd, fusedMatmul map[*trace.Node]bool
	// biasAdd is the bias add of each fusedMatmul (in g).
	biasAdd map[*trace.Node]*trace.Node
}

// inner reports whether n runs in the backward pass (or is recomputed for
// it): its roundings are its own, not the forward's.
func inner(n *trace.Node) bool { return n.Phase != trace.Forward || n.Recompute }

func isF32(t *trace.Tensor) bool { return t.DType() == tensor.Float32 }

// round returns the rounded copy of t (of out) for consumer n (of g),
// recorded with n's module and phase. A value rounded in the forward pass
// is rounded once (its saved copy serves the backward); a parameter is
// rounded again in the backward pass rather than keeping a copy alive
// across the step, by prim.Round (no 16-bit intermediate: the float32 master
// is not in the arena). Other values go through a cast to the 16-bit type
// and back, whose 16-bit half is what Compress stores if the backward
// reads the value.
func (a *autocast) round(t *trace.Tensor, n *trace.Node) *trace.Tensor {
	if a.low[t] {
		return t
	}
	if r := a.roundedCopy(t, n); r != nil {
		return r
	}
	var r *trace.Tensor
	at(a.out, n.Module, n.Phase, func() {
		if t.Node.Kind == trace.KindState {
			r = prim.Apply1(&prim.Round{To: a.lo}, t)
		} else {
			lo := prim.To(t, a.lo)
			lo.Node.Recompute = n.Recompute
			r = prim.To(lo, tensor.Float32)
		}
		r.Node.Recompute = n.Recompute
	})
	a.st.Rounded++
	a.rounded[roundKey{t, inner(n)}] = r
	a.low[r], a.logical[r] = true, true
	return r
}

// roundGrad returns gradient t (of out, made by n of g) rounded to the low
// type, as it leaves the step or reaches an update in the backward pass:
// the rounded copy some reader made, else a prim.Round, which the planner
// runs in t's own bytes where t dies there (no 16-bit intermediate, unlike
// round's cast pair, whose 16-bit half is for Compress to store).
func (a *autocast) roundGrad(t *trace.Tensor, n *trace.Node) *trace.Tensor {
	if r := a.roundedCopy(t, n); r != nil {
		return r
	}
	var r *trace.Tensor
	at(a.out, n.Module, n.Phase, func() {
		r = prim.Apply1(&prim.Round{To: a.lo}, t)
		r.Node.Recompute = n.Recompute
	})
	a.st.Rounded++
	a.rounded[roundKey{t, inner(n)}] = r
	a.low[r], a.logical[r] = true, true
	return r
}

// roundedCopy is the rounded copy of t that consumer n may read, if one
// was made: the forward's copy serves the backward, except for parameters.
func (a *autocast) roundedCopy(t *trace.Tensor, n *trace.Node) *trace.Tensor {
	if r, ok := a.rounded[roundKey{t, inner(n)}]; ok {
		return r
	}
	if inner(n) && t.Node.Kind != trace.KindState {
		return a.rounded[roundKey{t, false}]
	}
	return nil
}

// exactConst reports whether a constant's numbers are all low-precision
// numbers.
func (a *autocast) exactConst(c *tensor.Tensor) bool {
	if c.DType != tensor.Float32 {
		return false
	}
	for _, v := range c.F32() {
		var r float32
		if a.lo == tensor.BFloat16 {
			r = tensor.BFloat16ToFloat32(tensor.Float32ToBFloat16(v))
		} else {
			r = tensor.Float16ToFloat32(tensor.Float32ToFloat16(v))
		}
		if r != v && (r == r || v == v) {
			return false
		}
	}
	return true
}

// findFused finds linear layers' matmul + bias add pairs: a matmul whose
// output's only reader is an add with a 1-D parameter.
func (a *autocast) findFused() {
	a.fusedAdd, a.fusedMatmul = map[*trace.Node]bool{}, map[*trace.Node]bool{}
	a.biasAdd = map[*trace.Node]*trace.Node{}
	cons := a.g.Consumers()
	for _, n := range a.g.Nodes {
		if n.Kind != trace.KindOp || n.Phase != trace.Forward {
			continue
		}
		if _, ok := n.Op.(*prim.MatMul); !ok || len(cons[n.ID]) != 1 {
			continue
		}
		add := cons[n.ID][0]
		b, ok := add.Op.(*prim.Binary)
		if !ok || b.Kind != prim.AddKind || add.Phase != n.Phase || add.Recompute != n.Recompute {
			continue
		}
		other := add.Inputs[1]
		if add.Inputs[0] != n.Outputs[0] {
			other = add.Inputs[0]
			if add.Inputs[1] != n.Outputs[0] {
				continue
			}
		}
		if other.Node.Kind == trace.KindState && len(other.Shape()) == 1 && isF32(other) {
			a.fusedAdd[add], a.fusedMatmul[n] = true, true
			a.biasAdd[n] = add
		}
	}
}

func (a *autocast) run() {
	a.findFused()
	// stepGrads are the gradients an update in the backward pass reads
	// (prim.OptimizerStep's input 1): rounded where they are made (below),
	// not where the update is recorded (after every backward node), so
	// that the float32 gradient dies at once rather than at the step's end.
	stepGrads := map[*trace.Tensor]bool{}
	for _, n := range a.g.Nodes {
		if _, ok := n.Op.(*prim.OptimizerStep); ok && isEffect(n) && len(n.Inputs) > 1 {
			stepGrads[n.Inputs[1]] = true
		}
	}
	for _, n := range a.g.Nodes {
		ins := make([]*trace.Tensor, len(n.Inputs))
		for i, in := range n.Inputs {
			ins[i] = a.mapped[in]
			if ins[i] == nil {
				panic(&trace.ShapeError{Module: n.Module, Op: "autocast", Err: fmt.Errorf("input %d of %s has no mapping", i, n.Label())})
			}
			// A value a real run holds in the low type is read in it
			// wherever a rounded copy exists, so the float32 original can
			// die at the rounding.
			if a.logical[ins[i]] && !a.low[ins[i]] {
				if r := a.roundedCopy(ins[i], n); r != nil {
					ins[i] = r
				}
			}
		}
		var outs []*trace.Tensor
		switch {
		case n.Kind == trace.KindState:
			outs = a.clone(n, nil)
			if a.p == BF16True && isF32(outs[0]) && (n.Category == "parameter" || n.Category == "buffer") {
				at(a.out, n.Module, n.Phase, func() { prim.RoundStateInPlace(outs[0], a.lo) })
				a.low[outs[0]], a.logical[outs[0]] = true, true
			}
		case n.Kind == trace.KindConst:
			outs = a.clone(n, nil)
			if a.exactConst(n.Const) {
				a.low[outs[0]], a.logical[outs[0]] = true, true
			} else if a.p == BF16True && isF32(outs[0]) {
				outs[0] = a.round(outs[0], n)
			}
		case n.Kind == trace.KindInput:
			outs = a.clone(n, nil)
			if a.p == BF16True && isF32(outs[0]) {
				outs[0] = a.round(outs[0], n)
			}
		case isEffect(n):
			outs = a.effect(n, ins)
		case a.p == BF16True && n.Phase == trace.Forward:
			a.productParams(n, ins)
			outs = a.clone(n, ins)
			a.roundOutputs(n, outs, a.exact(n, ins))
		case a.p == BF16True:
			outs = a.trueBackward(n, ins)
		case n.Phase == trace.Forward:
			outs = a.mixedForward(n, ins)
		default:
			outs = a.mixedBackward(n, ins)
		}
		for i, o := range n.Outputs {
			a.mapped[o] = outs[i]
			if m := outs[i]; stepGrads[o] && isF32(m) && a.logical[m] && !a.low[m] {
				a.roundGrad(m, n) // the update finds it (roundedCopy)
			}
		}
	}
	for i, t := range a.g.Outputs {
		o := a.mapped[t]
		// An output that a real run holds in the low type (a parameter's
		// gradient kept in the arena: train's gradsInArena) leaves the step
		// rounded, as AccumulateRounded rounds it into a gradient buffer.
		if isF32(o) && a.logical[o] && !a.low[o] {
			o = a.roundGrad(o, t.Node)
		}
		a.out.Output(a.g.OutputNames[i], o)
	}
}

// clone copies n into the output graph. The returned slice is the caller's
// to change (Clone returns the new node's own Outputs).
func (a *autocast) clone(n *trace.Node, ins []*trace.Tensor) []*trace.Tensor {
	if op := a.lowOp(n.Op); op != nil {
		c := *n
		c.Op = op
		n = &c
	}
	return append([]*trace.Tensor(nil), a.out.Clone(n, ins)...)
}

// lowOp is the variant of op that runs its inner products in bfloat16
// under the bf16 modes (attention: its probabilities and their gradients
// rounded for their products, as PyTorch's autocast and bf16 attention
// kernels do), or nil.
func (a *autocast) lowOp(op trace.Op) trace.Op {
	if a.lo != tensor.BFloat16 {
		return nil
	}
	switch o := op.(type) {
	case *prim.AttentionOp:
		if !o.BF16 {
			c := *o
			c.BF16 = true
			return &c
		}
	case *prim.AttentionBackward:
		if !o.BF16 {
			c := *o
			c.BF16 = true
			return &c
		}
	}
	return nil
}

func isEffect(n *trace.Node) bool {
	_, ok := n.Op.(trace.Effecter)
	return n.Kind == trace.KindOp && ok
}

// class is n's autocast class.
func class(n *trace.Node) prim.Autocast { return prim.TraitsOf(n.Op).Autocast }

// exact reports whether op n, reading ins, produces low-precision numbers
// without rounding: a prim.AutocastExact op whose floating inputs all hold
// them.
func (a *autocast) exact(n *trace.Node, ins []*trace.Tensor) bool {
	return class(n) == prim.AutocastExact && all(ins, a.low)
}

// all reports whether ins has floating values and set holds all of them.
func all(ins []*trace.Tensor, set map[*trace.Tensor]bool) bool {
	any := false
	for _, t := range ins {
		if !t.DType().IsFloat() {
			continue
		}
		if !set[t] {
			return false
		}
		any = true
	}
	return any
}

// roundOutputs rounds n's floating outputs (statistics excepted) in place
// in outs, or, with exact, marks them low-precision as they are.
func (a *autocast) roundOutputs(n *trace.Node, outs []*trace.Tensor, exact bool) {
	for i, o := range outs {
		if !isF32(o) || statistic(o) {
			continue
		}
		if exact {
			a.low[o], a.logical[o] = true, true
		} else {
			outs[i] = a.round(o, n)
		}
	}
}

// roundInputs rounds n's float32 operands (statistics excepted) in ins;
// with onlyLogical, only those a real run would hold in the low type.
func (a *autocast) roundInputs(n *trace.Node, ins []*trace.Tensor, onlyLogical bool) {
	for i, t := range ins {
		if isF32(t) && !statistic(t) && (!onlyLogical || a.logical[t]) {
			ins[i] = a.round(t, n)
		}
	}
}

// mixedForward records forward node n under the mixed modes: every value a
// real run holds in the low type is rounded where it is produced, so that
// saved activations are low-precision numbers (stored losslessly in 16
// bits) and recomputation reproduces them.
func (a *autocast) mixedForward(n *trace.Node, ins []*trace.Tensor) []*trace.Tensor {
	c := class(n)
	switch {
	case c == prim.AutocastLow:
		a.roundInputs(n, ins, false)
		if add := a.biasAdd[n]; add != nil {
			// The bias is rounded before the product, not between it and
			// its add: Fuse then runs matmul+add as one node (a node
			// allocating in between would keep it from delaying the
			// matmul).
			for _, t := range add.Inputs {
				if t.Node.Kind == trace.KindState {
					a.round(a.mapped[t], add)
				}
			}
		}
		outs := a.clone(n, ins)
		if !a.fusedMatmul[n] { // else rounded after the bias add
			a.roundOutputs(n, outs, false)
		}
		return outs
	case a.fusedAdd[n]:
		// addmm: round the bias, not the unrounded product.
		for i, t := range ins {
			if t.Node.Kind == trace.KindState {
				ins[i] = a.round(t, n)
			}
		}
		outs := a.clone(n, ins)
		a.roundOutputs(n, outs, false)
		return outs
	case c == prim.AutocastFP32, c == prim.AutocastFP32Forward:
		return a.clone(n, ins)
	case c == prim.AutocastFirstInput:
		outs := a.clone(n, ins)
		if a.low[ins[0]] {
			a.roundOutputs(n, outs[:1], false)
		}
		return outs
	}
	outs := a.clone(n, ins)
	if all(ins, a.low) {
		a.roundOutputs(n, outs, c == prim.AutocastExact)
	}
	return outs
}

// mixedBackward records backward node n under the mixed modes. Gradients
// a real run holds in the low type (those of low-precision values) are
// rounded lazily: where a low-precision or float32 op reads them, and
// where they are accumulated into a parameter's gradient, not after every
// elementwise op in between. Numerically that is the real run without its
// intermediate double roundings; in memory it saves a rounded copy per
// elementwise backward op.
func (a *autocast) mixedBackward(n *trace.Node, ins []*trace.Tensor) []*trace.Tensor {
	t := prim.TraitsOf(n.Op)
	switch t.Autocast {
	case prim.AutocastLow:
		a.roundInputs(n, ins, false)
		outs := a.clone(n, ins)
		a.markLogical(outs)
		return outs
	case prim.AutocastFP32:
		a.roundInputs(n, ins, true)
		outs := a.clone(n, ins)
		// The gradient of a low-precision input has its type (autocast's
		// cast to float32 casts the gradient back).
		if i := t.GradOf; i > 0 && a.logical[ins[i]] {
			a.markLogical(outs[:1])
		}
		return outs
	case prim.AutocastFirstInput:
		a.roundInputs(n, ins[:1], true)
		outs := a.clone(n, ins)
		if a.logical[ins[0]] {
			a.markLogical(outs[:1])
		}
		return outs
	}
	outs := a.clone(n, ins)
	if all(ins, a.logical) {
		if t.Autocast == prim.AutocastExact && all(ins, a.low) {
			a.roundOutputs(n, outs, true)
		} else {
			a.markLogical(outs)
		}
	}
	return outs
}

// trueBackward records backward node n under bf16-true: every op reads
// rounded operands, rounded lazily as in mixedBackward (each gradient once,
// where a non-exact op first reads it; rounding commutes with the exact
// ops, but for a split, whose input is rounded rather than each piece),
// which is numerically the same as rounding every output.
func (a *autocast) trueBackward(n *trace.Node, ins []*trace.Tensor) []*trace.Tensor {
	if class(n) == prim.AutocastExact {
		if len(n.Outputs) > 1 {
			// A split: its input rounded once (a pass its producer can
			// fuse) rather than each piece where it is read (a cast pair
			// each, and the pieces' adds out of reach of splitAdds).
			a.roundInputs(n, ins, true)
		}
		outs := a.clone(n, ins)
		if all(ins, a.low) {
			a.roundOutputs(n, outs, true)
		} else if all(ins, a.logical) {
			a.markLogical(outs)
		}
		return outs
	}
	a.roundInputs(n, ins, true)
	a.productParams(n, ins)
	outs := a.clone(n, ins)
	a.markLogical(outs)
	return outs
}

// productParams gives matmul n (bf16-true) a prim.Round copy of each
// parameter operand in ins, one per parameter and pass as bf16-mixed's
// rounding makes: the parameter already holds bfloat16 numbers (rounded
// in place), so the copy has its numbers, and ReadLow makes it a 2-byte
// cast that the product reads in place: the native bf16 product rather
// than the float32 one a float32 operand keeps it on.
func (a *autocast) productParams(n *trace.Node, ins []*trace.Tensor) {
	if _, ok := n.Op.(*prim.MatMul); !ok || a.lo != tensor.BFloat16 {
		return
	}
	for i, t := range ins {
		if t.Node.Kind != trace.KindState || !isF32(t) {
			continue
		}
		if r := a.rounded[roundKey{t, inner(n)}]; r != nil {
			ins[i] = r
			continue
		}
		var r *trace.Tensor
		at(a.out, n.Module, n.Phase, func() {
			r = prim.Apply1(&prim.Round{To: a.lo}, t)
			r.Node.Recompute = n.Recompute
		})
		a.rounded[roundKey{t, inner(n)}] = r
		a.low[r], a.logical[r] = true, true
		ins[i] = r
	}
}

// effect records side-effect node n: a gradient
// that a real run holds in the low type reaches a parameter's float32
// gradient rounded (prim.AccumulateRounded), with no rounded copy, and an
// optimizer update in the backward pass (prim.OptimizerStep) reads it
// rounded.
func (a *autocast) effect(n *trace.Node, ins []*trace.Tensor) []*trace.Tensor {
	lowGrad := len(ins) > 1 && isF32(ins[1]) && a.logical[ins[1]] && !a.low[ins[1]]
	if acc, ok := n.Op.(*prim.Accumulate); ok && lowGrad {
		at(a.out, n.Module, n.Phase, func() {
			a.out.Apply(&prim.AccumulateRounded{To: a.lo, Add: acc.Add}, ins...)
		})
		return nil
	}
	if _, ok := n.Op.(*prim.OptimizerStep); ok && lowGrad {
		// The update in the backward pass reads the gradient as a
		// gradient buffer would hold it (run rounds it where it is made;
		// this is for a gradient that reached the update otherwise).
		ins[1] = a.roundGrad(ins[1], n)
	}
	return a.clone(n, ins)
}

// markLogical marks float32 outputs (statistics excepted) as values a real
// run would hold in the low type.
func (a *autocast) markLogical(outs []*trace.Tensor) {
	for _, o := range outs {
		if isF32(o) && !statistic(o) {
			a.logical[o] = true
		}
	}
}

// ApplyPrecision is what a training step goes through after autodiff and
// rematerialization: Autocast to precision p, then Compress with the
// saved low-precision values stored in their 16-bit format and the others
// as c says (nil: kept). With FP32 and no c it returns g.
func ApplyPrecision(g *trace.Graph, p Precision, c CompressPolicy) (*trace.Graph, error) {
	if p == FP32 && c == nil {
		return g, nil
	}
	g, low, _, err := Autocast(g, p)
	if err != nil {
		return nil, err
	}
	if p != FP32 {
		c = low.Storing(c)
	}
	if g, _, err = Compress(g, c); err != nil || p == FP32 || !readLow {
		return g, err
	}
	g, _, err = readLowFor(g, p, nil)
	return g, err
}

// readLow is off only in tests that compare against the emulation's
// float32 copies.
var readLow = true

// foldOnly stops ReadLow after foldCasts, in tests that compare a folded
// step with one whose matmuls read the same float32 copies.
var foldOnly = false

// ReadLow returns a copy of g in which matrix products read 16-bit operands
// in place: a float32 copy of a bfloat16 or float16 tensor (a cast back
// from it, as Autocast and Compress make) that only matmuls (and bf16
// attention ops) read is dropped and the matmuls (prim.MatMul with Mixed)
// read the 16-bit tensor (for bfloat16, conv weight gradients too:
// convReadsLow, the conv ops with Mixed);
// a parameter rounded for matmuls only (prim.Round) is cast to the 16-bit
// type instead, a 2-byte copy rather than a 4-byte one. A mixed matmul
// converts its operands exactly as it packs them and computes the same
// float32 sums, so every value of g is unchanged, bit for bit; only the
// transient float32 copies (what a native bf16 kernel does not need) go.
// It first drops casts to the 16-bit type of values that are casts from
// it (foldCasts). It returns how many casts it removed.
func ReadLow(g *trace.Graph) (*trace.Graph, int, error) { return readLowWith(g, nil) }

// readLowWith is ReadLow with the backend's backend.LowRunner (nil: none),
// which says where convolutions get bfloat16 operands (convLow).
func readLowWith(g *trace.Graph, runsLow func(o trace.Op, in, out []trace.Meta) bool) (*trace.Graph, int, error) {
	g, folded, err := foldCasts(g)
	if err != nil {
		return nil, 0, err
	}
	if foldOnly {
		return g, folded, nil
	}
	out, removed, err := readLow16(g, runsLow)
	return out, folded + removed, err
}

// readLow16 is ReadLow after foldCasts.
func readLow16(g *trace.Graph, runsLow func(o trace.Op, in, out []trace.Meta) bool) (*trace.Graph, int, error) {
	native := func(c *trace.Node) bool { return convLow(c, runsLow) }
	cons := g.Consumers()
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	// onlyMatmuls reports whether n's output (16-bit type lo) is read only
	// by float32 matmuls and, for a bfloat16 value, bf16 attention ops and
	// conv weight gradients, directly or through reshapes (which then
	// reshape the 16-bit value instead).
	var onlyMatmuls func(n *trace.Node, lo tensor.DType) bool
	onlyMatmuls = func(n *trace.Node, lo tensor.DType) bool {
		if len(cons[n.ID]) == 0 {
			return false
		}
		for _, c := range cons[n.ID] {
			if isAlias(c) && len(c.Inputs) == 1 && !outputs[c.Outputs[0]] && onlyMatmuls(c, lo) {
				continue
			}
			if lo == tensor.BFloat16 && (readsBF16(c, n.Outputs[0]) || convReadsLow(c, n.Outputs[0], native) || normReadsLow(c, n.Outputs[0])) {
				continue
			}
			if mm, ok := c.Op.(*prim.MatMul); !ok || mm.Mixed || !isF32(c.Outputs[0]) {
				return false
			}
		}
		return true
	}
	// widened reports whether n makes a float32 copy of a 16-bit value
	// (its 16-bit type, or Invalid) that only float32 matmuls read.
	widened := func(n *trace.Node) tensor.DType {
		if n.Kind != trace.KindOp || len(cons[n.ID]) == 0 {
			return tensor.Invalid
		}
		lo := tensor.Invalid
		switch o := n.Op.(type) {
		case *prim.Cast:
			if d := n.Inputs[0].DType(); o.To == tensor.Float32 && (d == tensor.BFloat16 || d == tensor.Float16) {
				lo = d
			}
		case *prim.Round:
			if n.Inputs[0].Node.Kind == trace.KindState {
				lo = o.To
			}
		}
		if lo == tensor.Invalid || outputs[n.Outputs[0]] {
			return tensor.Invalid
		}
		if !onlyMatmuls(n, lo) {
			return tensor.Invalid
		}
		return lo
	}
	// narrowed[v] is a cast of float32 value v to bfloat16. A native
	// convolution's input, rounded by autocast, has one where it is saved
	// for the backward pass in bf16 (Compress): the convolution reads that
	// copy (exact: the value holds bf16 numbers), emitted before it.
	narrowed := map[*trace.Tensor]*trace.Node{}
	for _, n := range g.Nodes {
		if c, ok := n.Op.(*prim.Cast); ok && n.Kind == trace.KindOp && c.To == tensor.BFloat16 && isF32(n.Inputs[0]) && narrowed[n.Inputs[0]] == nil {
			narrowed[n.Inputs[0]] = n
		}
	}
	emitted := map[*trace.Node]bool{}
	out := trace.New()
	mapped := map[*trace.Tensor]*trace.Tensor{}
	removed := 0
	err := trace.Capture(func() {
		for _, n := range g.Nodes {
			if emitted[n] {
				continue
			}
			ins := make([]*trace.Tensor, len(n.Inputs))
			for i, in := range n.Inputs {
				ins[i] = mapped[in]
			}
			if c := narrowedInput(narrowed, n); c != nil && c.Phase == n.Phase && !isF32(ins[1]) && native(n) {
				if !emitted[c] {
					for i, o := range out.Clone(c, []*trace.Tensor{mapped[c.Inputs[0]]}) {
						mapped[c.Outputs[i]] = o
					}
					emitted[c] = true
				}
				ins[0] = mapped[c.Outputs[0]]
			}
			if isConv(n) && native(n) {
				for i, in := range n.Inputs[:2] {
					switch {
					case !isF32(ins[i]):
					case widening(in.Node) && in.Node.Inputs[0].DType() == tensor.BFloat16:
						// The bf16 value a widening that other readers
						// keep widens.
						ins[i] = mapped[in.Node.Inputs[0]]
					default:
						// A float32 operand holding bf16 numbers (autocast
						// rounded it, or it is a recomputed max pooling of
						// rounded values): its bf16 copy, exact, so that
						// the kernel is the native one whatever the graph
						// kept (recomputation stays bit for bit).
						at(out, n.Module, n.Phase, func() { ins[i] = prim.To(ins[i], tensor.BFloat16) })
						ins[i].Node.Recompute = n.Recompute
					}
				}
			}
			node := n
			switch lo := widened(n); {
			case lo != tensor.Invalid && n.Inputs[0].Node.Kind == trace.KindState:
				// The parameter's 16-bit copy replaces its rounded one.
				c := *n
				c.Op = &prim.Cast{To: lo}
				node = &c
				removed++
			case lo != tensor.Invalid:
				// Readers take the 16-bit value this cast widens.
				mapped[n.Outputs[0]] = ins[0]
				removed++
				continue
			}
			if mm, ok := n.Op.(*prim.MatMul); ok && !mm.Mixed && (!isF32(ins[0]) || !isF32(ins[1])) {
				c := *n
				c.Op = &prim.MatMul{TransA: mm.TransA, TransB: mm.TransB, Mixed: true}
				node = &c
			}
			if op, ok := mixedConv(n, ins); ok {
				c := *node
				c.Op = op
				node = &c
			}
			if op, ok := mixedNorm(n, ins); ok {
				c := *node
				c.Op = op
				node = &c
			}
			for i, o := range out.Clone(node, ins) {
				mapped[n.Outputs[i]] = o
			}
		}
		for i, t := range g.Outputs {
			out.Output(g.OutputNames[i], mapped[t])
		}
	})
	return out, removed, err
}

// readsBF16 reports whether node c reads value v only where it takes a
// bfloat16 tensor in place of a float32 one of the same numbers: a bf16
// attention's operands (its backward's logsumexp excepted).
func readsBF16(c *trace.Node, v *trace.Tensor) bool {
	operands := 0
	switch o := c.Op.(type) {
	case *prim.AttentionOp:
		if o.BF16 {
			operands = 3
		}
	case *prim.AttentionBackward:
		if o.BF16 {
			operands = 5
		}
	}
	if operands == 0 {
		return false
	}
	for i, in := range c.Inputs {
		if in == v && i >= operands {
			return false
		}
	}
	return true
}

// convReadsLow reports whether c is a float32 convolution that reads t,
// one of its operands, as bfloat16 in place: a weight gradient, whose
// kernel reads 16-bit operands as a matmul's does (the native bf16
// product where the CPU has one and the other operand holds bf16 values
// too; else widened, the float32 convolution's arithmetic), or a forward
// convolution's input (not its weight), which its float32 Winograd
// kernel gathers widening as it loads (cpu.convWinoBF16; elsewhere the
// kernel widens it into its workspace first). Reading the input in
// place costs no memory: the kernel's workspace reserves the float32
// copy the dropped widening held at that step, and the widening's own
// step, where both copies were live, goes (a DenseNet block's
// concatenation then writes only its 16-bit values). An input-gradient
// convolution reads both in bf16 where convLow says (its native
// product); else it keeps its float32 copies.
func convReadsLow(c *trace.Node, t *trace.Tensor, native func(*trace.Node) bool) bool {
	switch o := c.Op.(type) {
	case *prim.Conv2dBackwardWeight:
		return !o.Mixed && isF32(c.Outputs[0])
	case *prim.Conv2dBackwardInput:
		// A native one reads both in bf16 (convLow).
		return !o.Mixed && isF32(c.Outputs[0]) && native != nil && native(c)
	case *prim.Conv2dOp:
		if !convReadsInputLow || o.Mixed || !isF32(c.Outputs[0]) || len(c.Inputs) > 2 && c.Inputs[2] == t {
			return false
		}
		in, w := c.Inputs[0] == t, c.Inputs[1] == t
		return in && !w || w && !in && native != nil && native(c)
	}
	return false
}

// isConv reports whether n is a convolution or one of its gradients.
func isConv(n *trace.Node) bool {
	switch n.Op.(type) {
	case *prim.Conv2dOp, *prim.Conv2dBackwardInput, *prim.Conv2dBackwardWeight:
		return n.Kind == trace.KindOp
	}
	return false
}

// narrowedInput is the cast to bfloat16 of forward convolution n's input,
// if any.
func narrowedInput(narrowed map[*trace.Tensor]*trace.Node, n *trace.Node) *trace.Node {
	if _, fwd := n.Op.(*prim.Conv2dOp); !fwd || len(n.Inputs) == 0 {
		return nil
	}
	return narrowed[n.Inputs[0]]
}

// convLow reports whether convolution c (forward, input or weight
// gradient) is one ReadLow hands bfloat16 operands (a weight gradient
// reads the 16-bit value a kept widening widens): where the backend
// multiplies them natively (runsLow: cpu's pointwise convolutions, whose
// kernel multiplies the images' planes as they lie, ResNet-152's 1×1
// layers about twice as fast as the float32 kernels on Zen 4, and the
// others its cost model sends to native bf16 kernels). Elsewhere a
// kernel would only widen them again. Tests force pointwise ones on
// (convPointwiseLow pwOn), whose kernels then widen them: the float32
// convolution of the same values.
func convLow(c *trace.Node, runsLow func(o trace.Op, in, out []trace.Meta) bool) bool {
	if convPointwiseLow == pwOff || len(c.Inputs) < 2 || len(c.Outputs) == 0 {
		return false
	}
	var opts prim.ConvOpts
	var w tensor.Shape
	var mixed trace.Op
	switch o := c.Op.(type) {
	case *prim.Conv2dOp:
		opts, w = o.Opts, c.Inputs[1].Shape()
		m := *o
		m.Mixed, mixed = true, &m
	case *prim.Conv2dBackwardInput:
		opts, w = o.Opts, c.Inputs[1].Shape()
		m := *o
		m.Mixed, mixed = true, &m
	case *prim.Conv2dBackwardWeight:
		opts, w = o.Opts, o.WeightShape
		m := *o
		m.Mixed, mixed = true, &m
	default:
		return false
	}
	n := opts.Normalized()
	if len(w) != 4 || n.Groups != 1 {
		return false
	}
	switch convPointwiseLow {
	case pwOn:
		return w[2] == 1 && w[3] == 1 && n.Stride == [2]int{1, 1} && n.Padding == [2]int{}
	case pwAll:
		return true
	}
	if runsLow == nil {
		return false
	}
	in := []trace.Meta{{DType: tensor.BFloat16, Shape: c.Inputs[0].Shape()}, {DType: tensor.BFloat16, Shape: c.Inputs[1].Shape()}}
	return runsLow(mixed, in, []trace.Meta{c.Outputs[0].Meta})
}

// convPointwiseLow is pwAuto (convolutions read bf16 where the backend
// multiplies them natively, convLow); tests set pwOff, or pwOn (pointwise
// ones) or pwAll (every one) to hand them bf16 operands whatever the
// kernel (which then widens them).
var convPointwiseLow = pwAuto

const (
	pwAuto = iota
	pwOff
	pwOn
	pwAll
)

// normReadsLow reports whether c is a float32 batch norm (forward or
// backward) that reads t only as its input x, which its kernel widens as it
// loads (cpu's bnX): the float32 copy autocast reads batch norm from (the
// convolution's bf16 output, widened; the same saved for the backward)
// goes, a pass over it and its bytes. A 16-bit gradient keeps its copy.
func normReadsLow(c *trace.Node, t *trace.Tensor) bool {
	if !normReadsInputLow || len(c.Outputs) == 0 || !isF32(c.Outputs[0]) {
		return false
	}
	x := -1
	switch o := c.Op.(type) {
	case *prim.BatchNormOp:
		if !o.Mixed {
			x = 0
		}
	case *prim.BatchNormBackward:
		if !o.Mixed {
			x = 1
		}
	}
	if x < 0 {
		return false
	}
	for i, in := range c.Inputs {
		if (in == t) != (i == x) {
			return false
		}
	}
	return true
}

// normReadsInputLow is off only in tests and measurements that compare
// with batch norms reading float32 copies.
var normReadsInputLow = true

// mixedNorm is batch norm n as a Mixed op when its (mapped) x is bfloat16.
func mixedNorm(n *trace.Node, ins []*trace.Tensor) (trace.Op, bool) {
	switch o := n.Op.(type) {
	case *prim.BatchNormOp:
		if len(ins) > 0 && ins[0].DType() == tensor.BFloat16 {
			c := *o
			c.Mixed = true
			return &c, true
		}
	case *prim.BatchNormBackward:
		if len(ins) > 1 && ins[1].DType() == tensor.BFloat16 {
			c := *o
			c.Mixed = true
			return &c, true
		}
	}
	return nil, false
}

// convReadsInputLow is off only in tests and measurements that compare
// with forward convolutions reading float32 copies.
var convReadsInputLow = true

// mixedConv is convolution n as a mixed op when its (mapped) inputs ins
// are not all float32.
func mixedConv(n *trace.Node, ins []*trace.Tensor) (trace.Op, bool) {
	if len(ins) < 2 || isF32(ins[0]) && isF32(ins[1]) {
		return nil, false
	}
	switch o := n.Op.(type) {
	case *prim.Conv2dOp:
		c := *o
		c.Mixed = true
		return &c, true
	case *prim.Conv2dBackwardInput:
		c := *o
		c.Mixed = true
		return &c, true
	case *prim.Conv2dBackwardWeight:
		c := *o
		c.Mixed = true
		return &c, true
	}
	return nil, false
}
