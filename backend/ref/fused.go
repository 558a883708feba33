package ref

import (
	"fmt"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// fused runs a prim.Fused as what it stands for: the producer into tensors
// of its own, then the program's instructions one by one on float64
// vectors, then each output stored from its value.
func (b Backend) fused(n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	o := n.Op.(*prim.Fused)
	var vals [][]float64
	if o.Producer != nil {
		metas := make([]trace.Meta, o.NProd)
		for i, t := range in[:o.NProd] {
			metas[i] = trace.Meta{DType: t.DType, Shape: t.Shape}
		}
		pm, err := o.Producer.Infer(metas)
		if err != nil {
			return fmt.Errorf("ref: %s: %w", o.Producer.Name(), err)
		}
		pouts := make([]*tensor.Tensor, len(pm))
		for i, m := range pm {
			pouts[i] = tensor.New(m.DType, m.Shape)
		}
		k, err := b.Kernel(o.Producer)
		if err != nil {
			return err
		}
		pn := &trace.Node{Kind: trace.KindOp, Op: o.Producer, Module: n.Module, Phase: n.Phase}
		if err := k(pn, in[:o.NProd], pouts, ws); err != nil {
			return err
		}
		for _, t := range pouts {
			vals = append(vals, values(t))
		}
	}
	for _, l := range o.Loads {
		src := values(in[o.NProd+l.Input])
		v := make([]float64, o.Elems)
		for i := range v {
			v[i] = src[(i/l.Inner)%l.Mid]
		}
		vals = append(vals, v)
	}
	for _, ins := range o.Prog {
		args := make([][]float64, len(ins.Args))
		for i, a := range ins.Args {
			args[i] = vals[a]
		}
		switch op := ins.Op.(type) {
		case *prim.Cast:
			vals = append(vals, convert(args[0], op.To))
		case *prim.Round:
			vals = append(vals, convert(args[0], op.To))
		default:
			vals = append(vals, apply(ins.Op, args))
		}
	}
	for j, f := range o.Outs {
		store(out[j], vals[f.Value])
	}
	return nil
}

// convert is v rounded to dt's numbers (a cast or a Round in a program).
func convert(v []float64, dt tensor.DType) []float64 {
	return tensor.FromFloat64(tensor.Shape{len(v)}, v).Convert(dt).Float64s()
}
