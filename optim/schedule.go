package optim

import (
	"fmt"
	"math"
	"reflect"
)

// LRSetter is what a scheduler drives: an optimizer's learning rate. Every
// Optimizer is one.
type LRSetter interface {
	LR() float64
	SetLR(lr float64)
}

// Scheduler changes an optimizer's learning rate over training, as
// torch.optim.lr_scheduler does. A scheduler sets the epoch-0 rate when it
// is created; call Step once after each optimizer step (or epoch) to move to
// the next.
type Scheduler interface {
	Step()
	// LR is the rate set by the constructor or the last Step (PyTorch's
	// get_last_lr()).
	LR() float64
}

// The schedulers reproduce PyTorch's actual sequence of rates, which comes
// from the recursive ("chainable") form of each formula: every step derives
// the new rate from the optimizer's current one. For CosineAnnealingLR that
// differs from the closed form in the last bits, and a rate changed by hand
// between steps carries on, both as in PyTorch.

// schedCore is the state shared by every scheduler, _LRScheduler's fields.
type schedCore struct {
	opt   LRSetter
	base  float64 // base_lrs[0], the optimizer's initial_lr
	epoch int     // last_epoch
	count int     // _step_count
	last  float64 // _last_lr[0]
}

// chainable is a scheduler SequentialLR can drive.
type chainable interface {
	Scheduler
	core() *schedCore
	// next is get_lr(): the new rate from the current one, after epoch and
	// count have advanced.
	next(lr float64) float64
	// closed is _get_closed_form_lr(): the rate at epoch from base alone.
	closed() float64
}

func (c *schedCore) core() *schedCore { return c }

// LR is the rate set by the constructor or the last Step.
func (c *schedCore) LR() float64 { return c.last }

func (c *schedCore) set(lr float64) {
	c.opt.SetLR(lr)
	c.last = lr
}

// start is _LRScheduler.__init__ and _initial_step: epoch -1 plus one step.
func start(s chainable, opt LRSetter) {
	c := s.core()
	*c = schedCore{opt: opt, base: opt.LR(), epoch: -1}
	step(s)
}

// step is _LRScheduler.step() without an epoch.
func step(s chainable) {
	c := s.core()
	c.count++
	c.epoch++
	c.set(s.next(c.opt.LR()))
}

// jump is _LRScheduler.step(epoch), which SequentialLR uses at milestones:
// the closed form at the given epoch.
func jump(s chainable, epoch int) {
	c := s.core()
	c.count++
	c.epoch = epoch
	c.set(s.closed())
}

func schedError(kind, format string, args ...any) error {
	return &ConfigError{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// StepLR multiplies the rate by Gamma every StepSize steps.
type StepLR struct {
	schedCore
	stepSize int
	gamma    float64
}

// NewStepLR returns torch.optim.lr_scheduler.StepLR(opt, stepSize, gamma)
// and sets opt's rate for epoch 0 (unchanged).
func NewStepLR(opt LRSetter, stepSize int, gamma float64) (*StepLR, error) {
	if opt == nil {
		return nil, schedError("StepLR", "nil optimizer")
	}
	if stepSize < 1 {
		// PyTorch fails later with a ZeroDivisionError.
		return nil, schedError("StepLR", "step_size must be at least 1, got %d", stepSize)
	}
	s := &StepLR{stepSize: stepSize, gamma: gamma}
	start(s, opt)
	return s, nil
}

// Step advances one epoch.
func (s *StepLR) Step() { step(s) }

func (s *StepLR) next(lr float64) float64 {
	if s.epoch == 0 || s.epoch%s.stepSize != 0 {
		return lr
	}
	return lr * s.gamma
}

func (s *StepLR) closed() float64 {
	return s.base * powInt(s.gamma, int64(floorDiv(s.epoch, s.stepSize)))
}

// LinearLR scales the rate by a factor that moves linearly from
// startFactor to endFactor over totalIters steps and then stays there: a
// warm-up when startFactor < endFactor.
type LinearLR struct {
	schedCore
	sf, ef float64 // start and end factors
	total  int
}

// NewLinearLR returns torch.optim.lr_scheduler.LinearLR(opt, startFactor,
// endFactor, totalIters) (PyTorch's defaults are 1/3, 1, 5) and sets opt's
// rate for epoch 0, base*startFactor.
//
// PyTorch 1.13 accepts startFactor 0 and then divides by zero at the first
// step; it is refused here, with the message later PyTorch versions use.
func NewLinearLR(opt LRSetter, startFactor, endFactor float64, totalIters int) (*LinearLR, error) {
	switch {
	case opt == nil:
		return nil, schedError("LinearLR", "nil optimizer")
	case !(startFactor > 0 && startFactor <= 1):
		return nil, schedError("LinearLR", "Starting multiplicative factor expected to be greater than 0 and less or equal to 1.")
	case !(endFactor >= 0 && endFactor <= 1):
		return nil, schedError("LinearLR", "Ending multiplicative factor expected to be between 0 and 1.")
	case totalIters < 1:
		return nil, schedError("LinearLR", "total_iters must be at least 1, got %d", totalIters)
	}
	s := &LinearLR{sf: startFactor, ef: endFactor, total: totalIters}
	start(s, opt)
	return s, nil
}

// Step advances one epoch.
func (s *LinearLR) Step() { step(s) }

func (s *LinearLR) next(lr float64) float64 {
	switch {
	case s.epoch == 0:
		return lr * s.sf
	case s.epoch > s.total:
		return lr
	}
	// The ratio of consecutive factors, as PyTorch writes it.
	// The float64 conversions keep Go from fusing a multiply and an add
	// (it may on some architectures), which Python does not do.
	den := float64(float64(s.total)*s.sf) + float64(float64(s.epoch-1)*(s.ef-s.sf))
	return lr * (1 + (s.ef-s.sf)/den)
}

func (s *LinearLR) closed() float64 {
	return s.base * (s.sf + (s.ef-s.sf)*float64(min(s.total, s.epoch))/float64(s.total))
}

// CosineAnnealingLR follows half a cosine from the base rate down to etaMin
// over tMax steps, then (as in PyTorch, without restarts) back up.
type CosineAnnealingLR struct {
	schedCore
	tMax   int
	etaMin float64
}

// NewCosineAnnealingLR returns torch.optim.lr_scheduler.CosineAnnealingLR(
// opt, tMax, etaMin) and sets opt's rate for epoch 0 (unchanged).
func NewCosineAnnealingLR(opt LRSetter, tMax int, etaMin float64) (*CosineAnnealingLR, error) {
	if opt == nil {
		return nil, schedError("CosineAnnealingLR", "nil optimizer")
	}
	if tMax < 1 {
		// PyTorch fails later with a ZeroDivisionError.
		return nil, schedError("CosineAnnealingLR", "T_max must be at least 1, got %d", tMax)
	}
	s := &CosineAnnealingLR{tMax: tMax, etaMin: etaMin}
	start(s, opt)
	return s, nil
}

// Step advances one epoch.
func (s *CosineAnnealingLR) Step() { step(s) }

func (s *CosineAnnealingLR) next(lr float64) float64 {
	e, t, eta := float64(s.epoch), float64(s.tMax), s.etaMin
	switch {
	case s.epoch == 0:
		return lr
	case s.count == 1 && s.epoch > 0:
		return eta + (s.base-eta)*(1+math.Cos(e*math.Pi/t))/2
	case (s.epoch-1-s.tMax)%(2*s.tMax) == 0:
		// Just past the minimum, where the ratio below would divide by 0.
		return lr + (s.base-eta)*(1-math.Cos(math.Pi/t))/2
	}
	return float64((1+math.Cos(math.Pi*e/t))/(1+math.Cos(math.Pi*(e-1)/t))*(lr-eta)) + eta // float64(): no fused multiply-add, as in Python
}

func (s *CosineAnnealingLR) closed() float64 {
	return s.etaMin + (s.base-s.etaMin)*(1+math.Cos(math.Pi*float64(s.epoch)/float64(s.tMax)))/2
}

// SequentialLR hands the rate to one scheduler after another: schedulers[i]
// runs from milestones[i-1] (restarted at its epoch 0 there) until
// milestones[i]. Linear warm-up then cosine decay is
//
//	warm, _ := optim.NewLinearLR(opt, 0.01, 1, 500)
//	cos, _ := optim.NewCosineAnnealingLR(opt, 9500, 0)
//	sched, _ := optim.NewSequentialLR(opt, []optim.Scheduler{warm, cos}, []int{500})
type SequentialLR struct {
	scheds     []chainable
	milestones []int
	epoch      int
	last       float64
}

// NewSequentialLR returns torch.optim.lr_scheduler.SequentialLR. The
// schedulers must come from this package and drive opt; it undoes their
// construction steps and restarts the first at the initial rate.
//
// PyTorch's schedulers take their base rate from the optimizer's
// initial_lr, recorded by whichever was created first. Here each takes
// opt's rate when created, so SequentialLR gives them all the base rate of
// schedulers[0], which therefore must be created first (the natural order).
func NewSequentialLR(opt LRSetter, schedulers []Scheduler, milestones []int) (*SequentialLR, error) {
	const kind = "SequentialLR"
	if opt == nil {
		return nil, schedError(kind, "nil optimizer")
	}
	if len(schedulers) == 0 {
		return nil, schedError(kind, "needs at least one scheduler")
	}
	if len(milestones) != len(schedulers)-1 {
		return nil, schedError(kind, "Sequential Schedulers expects number of schedulers provided to be one more "+
			"than the number of milestone points, but got number of schedulers %d and the "+
			"number of milestones to be equal to %d", len(schedulers), len(milestones))
	}
	for i, m := range milestones {
		if m < 1 || i > 0 && m <= milestones[i-1] {
			return nil, schedError(kind, "milestones must be positive and increasing, got %v", milestones)
		}
	}
	s := &SequentialLR{milestones: append([]int(nil), milestones...)}
	canCompare := reflect.TypeOf(opt).Comparable()
	for i, sc := range schedulers {
		c, ok := sc.(chainable)
		if !ok {
			return nil, schedError(kind, "scheduler at index %d is a %T, not one of package optim's", i, sc)
		}
		if canCompare && c.core().opt != opt {
			return nil, schedError(kind, "Sequential Schedulers expects all schedulers to belong to the same optimizer, "+
				"but got schedulers at index %d to be different than the optimizer passed in.", i)
		}
		s.scheds = append(s.scheds, c)
	}
	base := s.scheds[0].core().base
	opt.SetLR(base)
	for _, c := range s.scheds {
		c.core().base = base
		c.core().epoch--
	}
	first := s.scheds[0]
	first.core().count = 0
	step(first)
	s.last = first.LR()
	return s, nil
}

// Step advances one epoch, switching scheduler at a milestone.
func (s *SequentialLR) Step() {
	s.epoch++
	idx := 0 // bisect_right(milestones, epoch)
	for idx < len(s.milestones) && s.milestones[idx] <= s.epoch {
		idx++
	}
	c := s.scheds[idx]
	if idx > 0 && s.milestones[idx-1] == s.epoch {
		jump(c, 0)
	} else {
		step(c)
	}
	s.last = c.LR()
}

// LR is the rate set by the constructor or the last Step.
func (s *SequentialLR) LR() float64 { return s.last }

// floorDiv is Python's //.
func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
