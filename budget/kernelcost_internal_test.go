package budget

import (
	"testing"

	"github.com/headroom-ml/headroom/internal/env"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// twoConvs: a dilated 3×3 convolution (48→64 channels: direct on the cpu)
// and then an ordinary one (64→64: Winograd on the cpu, 4/3 of the first's
// declared arithmetic), whose outputs the backward pass keeps (the next
// convolution's weight gradient reads each) and are the same size.
type twoConvs struct{ dil, wino, head *nn.Conv2d }

func (m *twoConvs) Forward(x *trace.Tensor) *trace.Tensor {
	x = m.head.Forward(m.wino.Forward(m.dil.Forward(x)))
	x = op.AdaptiveAvgPool2d(x, [2]int{1, 1})
	return op.Reshape(x, tensor.Shape{x.Dim(0), 10})
}

// needWinograd skips a test when $HEADROOM_WINOGRAD turns the cpu's
// Winograd paths off (then the kernels and their costs are direct).
func needWinograd(t *testing.T) {
	if on, err := env.Bool(env.Winograd, true); err != nil || !on {
		t.Skip("Winograd is off ($" + env.Winograd + ")")
	}
}

func twoConvsProblem() Problem {
	return Problem{
		Build: func(s *nn.Store) (train.Model, train.LossFunc) {
			b := s.Root()
			return &twoConvs{
					dil:  nn.NewConv2d(b.Sub("dil"), 48, 64, 3, op.ConvOpts{Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}}, false),
					wino: nn.NewConv2d(b.Sub("wino"), 64, 64, 3, op.ConvOpts{Padding: [2]int{1, 1}}, false),
					head: nn.NewConv2d(b.Sub("head"), 64, 10, 1, op.ConvOpts{}, false),
				}, func(out, y *trace.Tensor) *trace.Tensor {
					return op.CrossEntropy(out, y, op.DefaultCrossEntropyOpts())
				}
		},
		Example: func(n int) (trace.Meta, trace.Meta) {
			return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 48, 32, 32}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}
		},
		Batch: 2, Budget: 1 << 40, Cost: DefaultCost,
		NewOptimizer: func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) },
	}
}

// The planner ranks recomputation candidates by the arithmetic of the
// kernels that would run them, as the backend reports it: the Winograd
// convolution, 4/3 of the dilated one's declared arithmetic but 3.7×
// fewer operations on the cpu, becomes the cheaper one to recompute.
func TestCandidatesRankedByKernelCost(t *testing.T) {
	needWinograd(t)
	f, err := newFitter(twoConvsProblem())
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	g, err := f.graph(2)
	if err != nil {
		t.Fatal(err)
	}
	// Where each 3×3 convolution stands in the candidate list.
	rank := func() (dil, wino int) {
		f.cands = map[int][]int{}
		ids, err := f.candidates(2)
		if err != nil {
			t.Fatal(err)
		}
		dil, wino = -1, -1
		for i, id := range ids {
			n := g.Nodes[id]
			c, ok := n.Op.(*prim.Conv2dOp)
			switch {
			case !ok || c.Opts.Stride != [2]int{1, 1} || n.Inputs[1].Shape()[2] != 3:
			case c.Opts.Dilation[0] == 2:
				dil = i
			default:
				wino = i
			}
		}
		if dil < 0 || wino < 0 {
			t.Fatalf("candidates %v: the two 3×3 convolutions are not both there", ids)
		}
		return dil, wino
	}
	if f.cost.kernels == nil {
		t.Fatal("the fitter's cost model does not ask the meta device's backend")
	}
	dil, wino := rank()
	if wino > dil {
		t.Errorf("the cpu's kernel costs: Winograd conv ranked %d, dilated conv %d; want the Winograd one first", wino, dil)
	}
	f.cost.kernels = nil // the ops' declarations alone
	dil, wino = rank()
	if dil > wino {
		t.Errorf("declared costs: dilated conv ranked %d, Winograd conv %d; want the dilated one (fewer declared flops) first", dil, wino)
	}
}

// Splitting the batch changes which algorithm runs: at one sample the
// 64→64 convolution (75 MFLOP) is below the size the cpu takes Winograd
// for, so two micro-batches of one are estimated slower than one of two
// by the arithmetic its forward pass and input gradient lose, (2·75.5 −
// 41.3) MFLOP each, and its weight gradient, (2·75.5 − 41.1) MFLOP,
// counted from the shapes as in cpu's TestWinogradFlops. The ops' declarations alone would see the two plans
// as equal but for per-node overheads.
func TestMicroBatchLosesWinograd(t *testing.T) {
	needWinograd(t)
	f, err := newFitter(twoConvsProblem())
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	step := func(m int) float64 {
		c, err := f.plan(setting{prec: f.sets[0].prec, comp: "none"}, m, RecomputeNone, 0, 0, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		return c.Time
	}
	const (
		direct   = 2.0 * 9 * 64 * 64 * 32 * 32                               // one image
		winograd = 2*36*64*64*128 + 12*19*64*128 + 10*13*64*128 + 9*17*64*64 // two images, 128 tiles
		// The weight gradient's: ȳ's transforms instead of the output's,
		// the weight gradient's instead of the weight's.
		wgrad = 2*36*64*64*128 + 12*19*64*128 + 10*11*64*128 + 9*16*64*64
	)
	// Forward and input gradient, and the weight gradient.
	lost := (2*(2*direct-winograd) + (2*direct - wgrad)) / DefaultCost.FLOPS
	extra := step(1) - step(2)
	t.Logf("1 x 2 over 2 x 1: %.3f ms estimated; Winograd's arithmetic lost: %.3f ms", extra*1e3, lost*1e3)
	if extra < lost || extra > 1.1*lost {
		t.Errorf("one-sample micro-batches cost %.3f ms more, want the %.3f ms of Winograd's lost arithmetic (+10%% for overheads)", extra*1e3, lost*1e3)
	}
	f.cost.kernels = nil
	f.memo = map[evalKey]Choice{}
	if d := step(1) - step(2); d > 0.1*lost {
		t.Errorf("declared costs: one-sample micro-batches cost %.3f ms more, want about nothing", d*1e3)
	}
}
