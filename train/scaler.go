package train

import (
	"math"

	"github.com/headroom-ml/headroom/optim"
)

// GradScaler is torch.cuda.amp.GradScaler's dynamic loss scaling: the loss
// is multiplied by Scale before backward; gradients are unscaled before
// clipping and the optimizer; a step whose gradients hold an inf or NaN is
// skipped and the scale multiplied by BackoffFactor; after GrowthInterval
// clean steps in a row the scale is multiplied by GrowthFactor.
type GradScaler struct {
	Scale          float64
	GrowthFactor   float64
	BackoffFactor  float64
	GrowthInterval int

	growthTracker int
	// Skipped counts steps skipped for non-finite gradients.
	Skipped int
}

// NewGradScaler returns a scaler with PyTorch's defaults: initial scale
// 2^16, growth ×2 every 2000 clean steps, backoff ×0.5.
func NewGradScaler() *GradScaler {
	return &GradScaler{Scale: 65536, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 2000}
}

// unscale divides every gradient by the scale (as float32 multiplication by
// the float32 reciprocal, like PyTorch's _amp_foreach_non_finite_check_and_unscale_)
// and updates the scale. It reports whether the optimizer should step.
func (s *GradScaler) unscale(params []optim.Param) bool {
	inv := float32(1 / s.Scale)
	finite := true
	for _, p := range params {
		for i, g := range p.Grad {
			v := g * inv
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				finite = false
			}
			p.Grad[i] = v
		}
	}
	if !finite {
		s.Scale *= s.BackoffFactor
		s.growthTracker = 0
		s.Skipped++
		return false
	}
	s.growthTracker++
	if s.growthTracker == s.GrowthInterval {
		s.Scale *= s.GrowthFactor
		s.growthTracker = 0
	}
	return true
}
