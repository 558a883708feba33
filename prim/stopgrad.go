package prim

import "github.com/headroom-ml/headroom/trace"

func init() { register(&StopGradientOp{}) }

// StopGradientOp is x.detach(): the same bytes, with no gradient flowing
// back to x. GAN losses need it where one network's prediction enters the
// other's loss as a constant (ESRGAN's relativistic discriminator loss
// detaches the mean of the other batch's logits).
type StopGradientOp struct{}

func (o *StopGradientOp) Name() string { return "detach" }

// Traits: an alias, run by no kernel.
func (o *StopGradientOp) Traits() Traits {
	return Traits{Autocast: AutocastExact, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelNone}
}

func (o *StopGradientOp) Cost(in, out []trace.Meta) Cost { return elementwiseCost(in, out) }

func (o *StopGradientOp) InPlaceInputs(in []trace.Meta) []int { return nil }
func (o *StopGradientOp) AliasOf() int                        { return 0 }

func (o *StopGradientOp) Infer(in []trace.Meta) ([]trace.Meta, error) {
	if err := wantInputs(in, 1); err != nil {
		return nil, err
	}
	return []trace.Meta{in[0]}, nil
}

// Grad: none reaches the input.
func (o *StopGradientOp) Grad(n *trace.Node, gouts []*trace.Tensor) []*trace.Tensor {
	return []*trace.Tensor{nil}
}
