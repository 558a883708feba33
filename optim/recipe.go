package optim

import (
	"fmt"
	"strconv"
)

// Schedule describes a learning-rate schedule over a run of Steps
// optimizer steps the way torchvision's reference training scripts build
// one (--lr-scheduler, --lr-warmup-epochs, --lr-warmup-decay, ...): an
// optional linear warm-up, LinearLR(WarmupFactor, 1, Warmup), followed by
// the main schedule, joined by SequentialLR at step Warmup.
type Schedule struct {
	// Kind is the main schedule: "constant" (or ""), "step" (StepLR),
	// "cosine" (CosineAnnealingLR down to MinLR at the last step) or
	// "linear" (LinearLR from the rate down to MinLR at the last step).
	Kind string
	// Steps is the length of the run, which cosine and linear need.
	Steps int
	// Warmup is the number of warm-up steps (0: none); the rate starts at
	// WarmupFactor times the base rate (torchvision's default: 0.01).
	Warmup       int
	WarmupFactor float64
	// StepSize and Gamma are StepLR's.
	StepSize int
	Gamma    float64
	// MinLR is the rate cosine and linear end at.
	MinLR float64
}

// ScheduleKinds are the values of Schedule.Kind.
var ScheduleKinds = []string{"constant", "step", "cosine", "linear"}

// String is the schedule's description, the PyTorch calls that make it;
// two schedules with the same description give the same rates.
func (s Schedule) String() string {
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	var main string
	switch s.Kind {
	case "", "constant":
		main = "constant"
	case "step":
		main = fmt.Sprintf("StepLR(step_size=%d, gamma=%s)", s.StepSize, g(s.Gamma))
	case "cosine":
		main = fmt.Sprintf("CosineAnnealingLR(T_max=%d, eta_min=%s)", s.Steps-s.Warmup, g(s.MinLR))
	case "linear":
		main = fmt.Sprintf("LinearLR(start_factor=1, end_factor=lr*%s, total_iters=%d)", g(s.MinLR), s.Steps-s.Warmup)
	default:
		main = strconv.Quote(s.Kind)
	}
	if s.Warmup == 0 {
		return main
	}
	return fmt.Sprintf("LinearLR(start_factor=%s, total_iters=%d) then %s from step %d", g(s.WarmupFactor), s.Warmup, main, s.Warmup)
}

// Build makes the schedule's scheduler on opt, whose current rate is the
// base rate, and sets opt's rate for step 0. A constant schedule without
// warm-up has no scheduler: Build returns nil and leaves opt alone.
func (s Schedule) Build(opt LRSetter) (StatefulScheduler, error) {
	bad := func(format string, args ...any) error {
		return &ConfigError{Kind: "Schedule", Msg: fmt.Sprintf(format, args...)}
	}
	if s.Warmup < 0 {
		return nil, bad("warm-up of %d steps: must be at least 0", s.Warmup)
	}
	if s.Warmup > 0 && !(s.WarmupFactor > 0 && s.WarmupFactor <= 1) {
		return nil, bad("warm-up factor %g: must be above 0 and at most 1", s.WarmupFactor)
	}
	base := opt.LR()
	// Everything is checked before a scheduler changes opt's rate.
	rest := s.Steps - s.Warmup
	switch s.Kind {
	case "", "constant":
	case "step":
		if s.StepSize < 1 {
			return nil, bad("step size %d: must be at least 1", s.StepSize)
		}
	case "cosine", "linear":
		if rest < 1 {
			return nil, bad("%s over %d steps with %d of warm-up: no steps left to decay over", s.Kind, s.Steps, s.Warmup)
		}
		if !(s.MinLR >= 0 && s.MinLR <= base) {
			return nil, bad("minimum rate %g: must be between 0 and the rate %g", s.MinLR, base)
		}
	default:
		return nil, bad("unknown schedule %q (valid: constant, step, cosine, linear)", s.Kind)
	}
	var warm *LinearLR
	if s.Warmup > 0 {
		var err error
		if warm, err = NewLinearLR(opt, s.WarmupFactor, 1, s.Warmup); err != nil {
			return nil, err
		}
	}
	var main StatefulScheduler
	var err error
	switch s.Kind {
	case "", "constant":
		if warm == nil {
			return nil, nil
		}
		// LinearLR keeps its end factor after total_iters: warm-up, then
		// constant, needs no second scheduler.
		return warm, nil
	case "step":
		main, err = NewStepLR(opt, s.StepSize, s.Gamma)
	case "cosine":
		main, err = NewCosineAnnealingLR(opt, rest, s.MinLR)
	case "linear":
		main, err = NewLinearLR(opt, 1, s.MinLR/base, rest)
	}
	if err != nil {
		return nil, err
	}
	if warm == nil {
		return main, nil
	}
	return NewSequentialLR(opt, []Scheduler{warm, main}, []int{s.Warmup})
}
