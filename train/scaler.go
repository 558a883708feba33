package train

import (
	"errors"
	"fmt"
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

// ErrScaler is matched by errors.Is when a step is refused because the
// trainer's GradScaler cannot scale: a literal such as
// GradScaler{Scale: 1024} leaves its factors at 0 by omission, and a
// backoff of 0 would turn the scale to 0 at the first overflow, after
// which every step is skipped, silently. Start from NewGradScaler.
var ErrScaler = errors.New("train: GradScaler cannot scale (start from NewGradScaler)")

// check refuses a scaler whose fields cannot work (nil: no scaler, fine):
// PyTorch asserts growth > 1 and backoff < 1; 1 is allowed here for a
// static scale.
func (s *GradScaler) check() error {
	if s == nil {
		return nil
	}
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: %s is %v, want %s", ErrScaler, field, v, want)
	}
	switch {
	case !(s.Scale > 0) || math.IsInf(s.Scale, 0):
		return bad("Scale", s.Scale, "a positive finite number (PyTorch's default 65536)")
	case !(s.GrowthFactor >= 1) || math.IsInf(s.GrowthFactor, 0):
		return bad("GrowthFactor", s.GrowthFactor, "at least 1 (PyTorch's default 2)")
	case !(s.BackoffFactor > 0 && s.BackoffFactor <= 1):
		return bad("BackoffFactor", s.BackoffFactor, "in (0, 1] (PyTorch's default 0.5)")
	case s.GrowthInterval < 1:
		return bad("GrowthInterval", s.GrowthInterval, "a positive step count (PyTorch's default 2000)")
	}
	return nil
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
