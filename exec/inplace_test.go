package exec_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Random elementwise graphs, whose plans write many outputs over dying
// inputs (plan.InPlacer), compute what the same nodes compute with a fresh
// buffer for every value.
func TestInPlaceMatchesFreshBuffers(t *testing.T) {
	shape := tensor.Shape{3, 64}
	for seed := int64(0); seed < 30; seed++ {
		r := rand.New(rand.NewSource(seed))
		g := trace.New()
		err := trace.Capture(func() {
			vals := []*trace.Tensor{g.Input("a", tensor.Float32, shape), g.Input("b", tensor.Float32, shape)}
			pick := func() *trace.Tensor { return vals[len(vals)-1-r.Intn(min(4, len(vals)))] }
			for i := 0; i < 40; i++ {
				x := pick()
				var y *trace.Tensor
				switch r.Intn(6) {
				case 0:
					y = op.Tanh(x)
				case 1:
					y = op.Neg(x)
				case 2:
					y = op.Add(x, pick())
				case 3:
					y = op.Mul(pick(), x)
				case 4:
					y = op.Sub(op.Sum(x, true, 1), pick()) // a broadcast operand
				default:
					y = prim.Apply1(&prim.UnaryBackward{Kind: prim.TanhKind}, x, op.Tanh(pick()))
				}
				vals = append(vals, y)
			}
			g.Output("y", vals[len(vals)-1])
			g.Output("z", op.Sum(vals[len(vals)-2], false))
		})
		if err != nil {
			t.Fatal(err)
		}
		in := map[string]*tensor.Tensor{}
		for _, name := range []string{"a", "b"} {
			x := tensor.New(tensor.Float32, shape)
			for i := range x.F32() {
				x.F32()[i] = float32(r.NormFloat64())
			}
			in[name] = x
		}
		dev := device.CPU()
		p, err := exec.Compile(g, dev)
		if err != nil {
			t.Fatal(err)
		}
		shared := 0
		for _, n := range g.Nodes {
			if n.Kind == trace.KindOp && len(n.Inputs) > 0 && p.Plan.Of[n.Outputs[0]] == p.Plan.Of[n.Inputs[0]] {
				shared++
			}
		}
		if shared == 0 {
			t.Fatalf("seed %d: no output took an input's buffer", seed)
		}
		got, err := p.Run(context.Background(), exec.NewArena(dev), nil, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The reference: every node in graph order into its own tensor.
		vals := map[*trace.Tensor]*tensor.Tensor{}
		for _, n := range g.Nodes {
			if n.Kind == trace.KindInput {
				vals[n.Outputs[0]] = in[n.Name]
				continue
			}
			ins := make([]*tensor.Tensor, len(n.Inputs))
			for i, x := range n.Inputs {
				ins[i] = vals[x]
			}
			outs := make([]*tensor.Tensor, len(n.Outputs))
			for i, o := range n.Outputs {
				outs[i] = tensor.New(o.Meta.DType, o.Meta.Shape)
				vals[o] = outs[i]
			}
			k, err := dev.Backend.Kernel(n.Op)
			if err != nil {
				t.Fatal(err)
			}
			if err := k(n, ins, outs, make([]byte, dev.Backend.Workspace(n))); err != nil {
				t.Fatal(err)
			}
		}
		for k, name := range g.OutputNames {
			want := vals[g.Outputs[k]].F32()
			for i, v := range got[name].F32() {
				if v != want[i] && (v == v || want[i] == want[i]) {
					t.Fatalf("seed %d: %s[%d] = %v, want %v (%d outputs written in place)", seed, name, i, v, want[i], shared)
				}
			}
		}
	}
}
