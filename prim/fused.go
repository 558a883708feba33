package prim

import (
	"fmt"
	"strings"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() { register(&Fused{Prog: []FusedInstr{{Op: &Unary{Kind: ReLUKind}}}}) }

// Fused runs a chain of elementwise ops as one kernel, optionally as the
// epilogue of a producer op (a matrix product, a convolution, a
// normalization) whose output 0 it transforms in place, so that values only
// the chain reads are never written to memory. transform.Fuse builds it
// after autodiff; it has no gradient.
//
// The node's inputs are the producer's NProd inputs, then the extra inputs
// the epilogue reads. The program works on values, numbered in this order:
// the producer's outputs, then Loads (views of extra inputs broadcast to
// the program's length), then one value per instruction. Every value but
// the producer's outputs 1.. has Elems elements (producer output 0 too);
// the program treats them as flat vectors, so reshapes inside a chain cost
// nothing.
type Fused struct {
	Producer trace.Op // nil: elementwise ops only
	NProd    int      // inputs of the producer (the node's first inputs)
	NProdOut int      // outputs of the producer (0 without one)
	Elems    int      // elements of every program value
	Loads    []FusedLoad
	Prog     []FusedInstr
	Outs     []FusedOut
}

// FusedLoad is extra input Input (0 is the node's input NProd) read as a
// vector of the program's length: element i is input element (i/Inner)%Mid,
// which covers broadcasting over leading axes (a bias [N] over [M, N]:
// Inner 1, Mid N), over trailing ones (a channel bias [C, 1, 1] over
// [N, C, H, W]: Inner H*W, Mid C) and scalars (Mid 1). Mid is the input's
// element count.
type FusedLoad struct {
	Input, Inner, Mid int
}

// Full reports whether the load is the input itself, element for element.
func (l FusedLoad) Full(elems int) bool { return l.Inner == 1 && l.Mid == elems }

// FusedInstr applies Op (a FuseElementwise op: *Binary, *Unary,
// *UnaryBackward) to values
// Args. Module and Shape are those of the node it replaces, for reports
// (a diagnosis names the op that made a NaN, not the fused node).
type FusedInstr struct {
	Op     trace.Op
	Args   []int
	Module string
	Shape  tensor.Shape
}

// FusedOut is an output of the node: value Value with shape Shape (a
// reshape of it, as the op it replaces returned it).
type FusedOut struct {
	Value int
	Shape tensor.Shape
	// Narrow: the value is a 16-bit one (a Cast's or a load's), stored in
	// its own type; Infer sets the output's type from the value's.
	Narrow bool
}

// FusedElementwise reports whether o can be an instruction of a Fused:
// its fusion role is FuseElementwise.
func FusedElementwise(o trace.Op) bool {
	p, ok := o.(Primitive)
	return ok && p.Traits().Fusion == FuseElementwise
}

// FusedInstruction reports whether o can be an instruction of a Fused
// other than its first: an elementwise op, a Round (the rounding of a
// value to a 16-bit type and back, which mixed precision puts between a
// product and its epilogue) or a Cast between float32 and a 16-bit type
// (FusedCast). A Round does not start a program: the parameters it rounds
// have readers of their own.
func FusedInstruction(o trace.Op) bool {
	_, ok := o.(*Round)
	return ok || FusedElementwise(o) || isCast(o)
}

func isCast(o trace.Op) bool {
	_, ok := o.(*Cast)
	return ok
}

// FusedCast reports whether a cast from from to to can be an instruction
// of a float32 program: a rounding to bfloat16 or float16, or the widening
// of such a value back to float32.
func FusedCast(from, to tensor.DType) bool {
	return from == tensor.Float32 && low16(to) || low16(from) && to == tensor.Float32
}

func low16(d tensor.DType) bool { return d == tensor.BFloat16 || d == tensor.Float16 }

func (o *Fused) Name() string {
	var parts []string
	if o.Producer != nil {
		parts = append(parts, o.Producer.Name())
	}
	for _, in := range o.Prog {
		parts = append(parts, in.Op.Name())
	}
	return strings.Join(parts, "+")
}

// Traits: Fuse makes it after autocast, recomputation and compression.
func (o *Fused) Traits() Traits {
	return Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
}

// Cost: the producer's arithmetic plus a couple of operations per element
// and instruction of the chain.
func (o *Fused) Cost(in, out []trace.Meta) Cost { return o.costOn(nil, in, out) }

// costOn is Cost with the producer's arithmetic as a reports it (CostOn).
func (o *Fused) costOn(a Arithmetic, in, out []trace.Meta) Cost {
	c := Cost{Flops: 2 * float64(o.Elems) * float64(len(o.Prog)), Bytes: ioBytes(in, out)}
	if o.Producer == nil || o.NProd > len(in) {
		return c
	}
	pout, err := o.Producer.Infer(in[:o.NProd])
	if err != nil {
		return c
	}
	c.Flops += CostOn(a, o.Producer, in[:o.NProd], pout).Flops
	return c
}

// InPlaceInputs lists the inputs the program reads element for element
// (plan.InPlacer), for nodes without a producer (which would write output
// 0 first) and with one output: the kernel stores a tile of an output
// that shares an input's memory only after every instruction of the tile
// read that input.
func (o *Fused) InPlaceInputs(in []trace.Meta) []int {
	if o.Producer != nil || len(o.Outs) != 1 || o.Outs[0].Narrow {
		return nil
	}
	var ks []int
	for _, l := range o.Loads {
		// (a 16-bit input is widened, not read in place)
		if l.Full(o.Elems) && o.NProd+l.Input < len(in) && !low16(in[o.NProd+l.Input].DType) {
			ks = append(ks, o.NProd+l.Input)
		}
	}
	return ks
}

// MainOut is the first output of the program's length (producer output 0
// or an instruction's result), -1 if none: the kernel's element type, and
// where the producer writes output 0 when only the program reads it.
func (o *Fused) MainOut() int {
	for j, f := range o.Outs {
		if !f.Narrow && (f.Value == 0 || f.Value >= o.FirstInstr()) {
			return j
		}
	}
	return -1
}

// Scratch reports whether the producer's output 0 has no output's buffer
// to be written in (every output of the program's length is a 16-bit
// value): the kernel's workspace then holds it, Elems float32 values.
func (o *Fused) Scratch() bool {
	return o.Producer != nil && o.MainOut() < 0
}

// FirstLoad is the value number of Loads[0]; instruction i's result is
// value FirstLoad()+len(Loads)+i.
func (o *Fused) FirstLoad() int { return o.NProdOut }

// FirstInstr is the value number of the first instruction's result.
func (o *Fused) FirstInstr() int { return o.NProdOut + len(o.Loads) }

func (o *Fused) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if o.NProd > len(in) {
		return nil, fmt.Errorf("expected at least %d inputs, got %d", o.NProd, len(in))
	}
	var vals []trace.Meta
	if o.Producer != nil {
		pm, err := o.Producer.Infer(in[:o.NProd])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.Producer.Name(), err)
		}
		if len(pm) != o.NProdOut {
			return nil, fmt.Errorf("%s has %d outputs, not %d", o.Producer.Name(), len(pm), o.NProdOut)
		}
		if pm[0].Shape.NumElements() != o.Elems {
			return nil, fmt.Errorf("%s output %v does not have %d elements", o.Producer.Name(), pm[0].Shape, o.Elems)
		}
		vals = append(vals, pm...)
	} else if o.NProd != 0 || o.NProdOut != 0 {
		return nil, fmt.Errorf("producer inputs or outputs without a producer")
	}
	extra := in[o.NProd:]
	flat := tensor.Shape{o.Elems}
	for _, l := range o.Loads {
		if l.Input < 0 || l.Input >= len(extra) {
			return nil, fmt.Errorf("load of input %d of %d", l.Input, len(extra))
		}
		m := extra[l.Input]
		if l.Inner < 1 || l.Mid != m.Shape.NumElements() || l.Mid < 1 || o.Elems%(l.Inner*l.Mid) != 0 {
			return nil, fmt.Errorf("input %v cannot be read as %d×%d of %d elements", m, l.Mid, l.Inner, o.Elems)
		}
		vals = append(vals, trace.Meta{DType: m.DType, Shape: flat})
	}
	// One element type for the whole program, the kernel's: producer
	// output 0's or the first load's not of 16 bits; 16-bit values only
	// in float32 programs.
	if o.Producer == nil && len(o.Loads) == 0 {
		return nil, fmt.Errorf("no producer and no inputs")
	}
	dt := tensor.Float32
	if o.Producer != nil {
		dt = vals[0].DType
	} else {
		for _, v := range vals {
			if !low16(v.DType) {
				dt = v.DType
				break
			}
		}
	}
	for i, ins := range o.Prog {
		if !FusedInstruction(ins.Op) {
			return nil, fmt.Errorf("instruction %d: %s is not elementwise", i, ins.Op.Name())
		}
		args := make([]trace.Meta, len(ins.Args))
		for j, a := range ins.Args {
			// Only producer output 0 has the program's length.
			if a < 0 || a >= len(vals) || a > 0 && a < o.NProdOut {
				return nil, fmt.Errorf("instruction %d reads value %d", i, a)
			}
			args[j] = trace.Meta{DType: vals[a].DType, Shape: flat}
		}
		m, err := ins.Op.Infer(args)
		if err != nil {
			return nil, fmt.Errorf("instruction %d (%s): %w", i, ins.Op.Name(), err)
		}
		if c, ok := ins.Op.(*Cast); ok && (dt != tensor.Float32 || !FusedCast(args[0].DType, c.To)) {
			return nil, fmt.Errorf("instruction %d: %s of %v in a %v program", i, ins.Op.Name(), args[0].DType, dt)
		}
		if !isCast(ins.Op) {
			for j, a := range args {
				if a.DType != dt {
					return nil, fmt.Errorf("instruction %d (%s) reads a %v value (arg %d) in a %v program", i, ins.Op.Name(), a.DType, j, dt)
				}
			}
		}
		if len(m) != 1 || !m[0].Shape.Equal(flat) {
			return nil, fmt.Errorf("instruction %d (%s) is not elementwise", i, ins.Op.Name())
		}
		vals = append(vals, m[0])
	}
	for i := o.FirstLoad(); i < len(vals); i++ {
		if d := vals[i].DType; d != dt && !(dt == tensor.Float32 && low16(d)) || !dt.IsFloat() {
			return nil, fmt.Errorf("value %d is %v, the program computes in %v", i, d, dt)
		}
	}
	out := make([]trace.Meta, len(o.Outs))
	main := false
	for i, f := range o.Outs {
		main = main || !f.Narrow && (f.Value == 0 || f.Value >= o.FirstInstr())
		if f.Value < 0 || f.Value >= len(vals) || f.Value >= o.FirstLoad() && f.Value < o.FirstInstr() {
			return nil, fmt.Errorf("output %d is value %d", i, f.Value)
		}
		v := vals[f.Value]
		if f.Shape.NumElements() != v.Shape.NumElements() {
			return nil, fmt.Errorf("output %d: shape %v for %v", i, f.Shape, v)
		}
		if f.Narrow != (v.DType != dt) {
			return nil, fmt.Errorf("output %d: value %d is %v, Narrow %v in a %v program", i, f.Value, v.DType, f.Narrow, dt)
		}
		out[i] = trace.Meta{DType: v.DType, Shape: f.Shape.Clone()}
	}
	for _, f := range o.Outs {
		// the workspace holds producer output 0; the kernel computes in
		// float32
		main = main || f.Narrow
	}
	if !main {
		// The kernel needs one buffer of the program's length to work in.
		return nil, fmt.Errorf("no output of the program's length")
	}
	return out, nil
}
