package optim

import (
	"errors"
	"fmt"
	"math"
)

// ErrNonfiniteNorm is wrapped by the error ClipGradNorm returns when the
// gradients' total norm is NaN or infinite.
var ErrNonfiniteNorm = errors.New("optim: non-finite gradient norm")

// ClipGradNorm scales the gradients in place so that their total norm (the
// norm of all gradients taken as one vector) is at most maxNorm, like
// torch.nn.utils.clip_grad_norm_, and returns the total norm before
// clipping. normType is 2 (Euclidean), math.Inf(1) (largest magnitude) or
// any other p > 0. Parameters whose Grad is nil are ignored; with none left
// the norm is 0.
//
// As in PyTorch, gradients are multiplied by min(1, maxNorm/(norm+1e-6))
// in float32, even when that is 1, and the returned norm is float32
// precision.
//
// Unlike PyTorch's default, a NaN or infinite total norm is an error
// (wrapping ErrNonfiniteNorm) and leaves the gradients untouched, as
// error_if_nonfinite=True does: scaling by it would only turn every
// gradient into NaN. Callers that expect overflow, as with a loss scaler,
// can test for it with errors.Is and skip the step.
func ClipGradNorm(params []Param, maxNorm, normType float64) (float64, error) {
	if !(maxNorm >= 0) {
		return 0, fmt.Errorf("optim: ClipGradNorm: max_norm must be >= 0, got %s", pyFloat(maxNorm))
	}
	if !(normType > 0) {
		return 0, fmt.Errorf("optim: ClipGradNorm: norm_type must be > 0 or inf, got %s", pyFloat(normType))
	}
	// PyTorch takes each gradient's norm as a float32 tensor, then the norm
	// of those norms. Each partial sum here is float64 and only the results
	// are rounded to float32, so they are the correctly rounded values that
	// PyTorch's float32 reduction approximates.
	var total float32
	found := false
	if math.IsInf(normType, 1) {
		for _, p := range params {
			if p.Grad == nil {
				continue
			}
			found = true
			for _, g := range p.Grad {
				a := float32(math.Abs(float64(g)))
				// NaN must win, as it does in torch.max.
				if a > total || a != a {
					total = a
				}
				if total != total {
					break
				}
			}
		}
	} else {
		var sum float64
		for _, p := range params {
			if p.Grad == nil {
				continue
			}
			found = true
			var s float64
			for _, g := range p.Grad {
				s += powAbs(float64(g), normType)
			}
			n := float32(rootP(s, normType))
			sum += powAbs(float64(n), normType)
		}
		total = float32(rootP(sum, normType))
	}
	if !found {
		return 0, nil
	}
	norm := float64(total)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, fmt.Errorf("%w: the total norm of order %s of the gradients is %s, so they cannot be clipped",
			ErrNonfiniteNorm, pyFloat(normType), pyFloat(norm))
	}
	// clip_coef = max_norm / (total_norm + 1e-6), where Tensor.__rtruediv__
	// is reciprocal() * max_norm; then clamp(max=1.0). All float32.
	coef := float32(1/(total+float32(1e-6))) * float32(maxNorm)
	coef = min(coef, 1)
	for _, p := range params {
		for i := range p.Grad {
			p.Grad[i] *= coef
		}
	}
	return norm, nil
}

// powAbs is |x|**p, with the common p=2 kept exact and fast.
func powAbs(x, p float64) float64 {
	if p == 2 {
		return x * x
	}
	if p == 1 {
		return math.Abs(x)
	}
	return math.Pow(math.Abs(x), p)
}

func rootP(s, p float64) float64 {
	switch p {
	case 2:
		return math.Sqrt(s)
	case 1:
		return s
	}
	return math.Pow(s, 1/p)
}
