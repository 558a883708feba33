// Package gan trains a generator against a discriminator, as ESRGAN does:
// a generator step with the discriminator frozen, then a discriminator
// step, each with its own optimizer, both compiled and memory-planned
// before the first step runs. The losses are BasicSR's: L1 pixel loss, a
// perceptual loss on VGG19 features and the relativistic average GAN loss
// (GANLoss 'vanilla' as ESRGANModel uses it).
package gan

import (
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// Weights are the loss weights of the generator's objective.
type Weights struct {
	Pixel      float64 // L1 between output and target
	Perceptual float64 // L1 between their VGG features
	GAN        float64 // the relativistic GAN loss
}

// ESRGANWeights are ESRGAN's (BasicSR's train_ESRGAN_x4.yml): pixel 1e-2,
// perceptual 1, GAN 5e-3.
func ESRGANWeights() Weights { return Weights{Pixel: 1e-2, Perceptual: 1, GAN: 5e-3} }

// BCEWithLogits is F.binary_cross_entropy_with_logits(x, full_like(x,
// target)), the mean over x. It is max(x, 0) - x*target +
// log(1 + exp(-|x|)), which neither overflows nor loses the gradient at
// x = 0: maximum's gradient splits ties in halves, giving sigmoid(0) = 1/2
// there as PyTorch does.
func BCEWithLogits(x *trace.Tensor, target float64) *trace.Tensor {
	pos := op.Maximum(x, prim.FullLike(x, 0))
	soft := op.Log(op.AddScalar(op.Exp(prim.Neg(op.Abs(x))), 1))
	l := prim.Add(pos, soft)
	if target != 0 {
		l = op.Sub(l, prim.Scale(x, target))
	}
	return op.Mean(l, false)
}

// GeneratorGANLoss is ESRGANModel's relativistic loss of the generator:
// weight * (bce(real - mean(fake), 0) + bce(fake - mean(real), 1)) / 2,
// with the discriminator's predictions on real images detached.
func GeneratorGANLoss(realPred, fakePred *trace.Tensor, weight float64) *trace.Tensor {
	real := op.StopGradient(realPred)
	lReal := BCEWithLogits(op.Sub(real, op.Mean(fakePred, false)), 0)
	lFake := BCEWithLogits(op.Sub(fakePred, op.Mean(real, false)), 1)
	return prim.Scale(prim.Add(lReal, lFake), weight/2)
}

// DiscriminatorGANLoss is ESRGANModel's discriminator loss in its two
// halves: 0.5 * bce(real - mean(fake), 1) and 0.5 * bce(fake - mean(real),
// 0), each with the other batch's mean detached, as BasicSR's two backward
// passes compute them (their sum's gradient is the sum of theirs).
func DiscriminatorGANLoss(realPred, fakePred *trace.Tensor) (lReal, lFake *trace.Tensor) {
	mFake := op.StopGradient(op.Mean(fakePred, false))
	mReal := op.StopGradient(op.Mean(realPred, false))
	lReal = prim.Scale(BCEWithLogits(op.Sub(realPred, mFake), 1), 0.5)
	lFake = prim.Scale(BCEWithLogits(op.Sub(fakePred, mReal), 0), 0.5)
	return lReal, lFake
}

// PixelLoss is weight * F.l1_loss(out, target).
func PixelLoss(out, target *trace.Tensor, weight float64) *trace.Tensor {
	return prim.Scale(op.L1Loss(out, target, prim.ReductionMean), weight)
}

// FeatureNet maps images to features: the perceptual loss's network
// (zoo.VGG19Extractor to conv5_4 for ESRGAN).
type FeatureNet interface {
	Forward(x *trace.Tensor) *trace.Tensor
}

// PerceptualLoss is BasicSR's PerceptualLoss with one layer and the L1
// criterion: weight * F.l1_loss(net(out), net(target.detach())).
func PerceptualLoss(net FeatureNet, out, target *trace.Tensor, weight float64) *trace.Tensor {
	return prim.Scale(op.L1Loss(net.Forward(out), net.Forward(op.StopGradient(target)), prim.ReductionMean), weight)
}

// ESRGANAdam is the optimizer of both ESRGAN networks: Adam, lr 1e-4,
// betas (0.9, 0.99), eps 1e-8, no weight decay.
func ESRGANAdam() optim.AdamConfig {
	return optim.AdamConfig{LR: 1e-4, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}
}
