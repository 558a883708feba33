package budget

import (
	"errors"
	"fmt"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/trace"
)

// ErrBudget is matched by errors.Is for every *TooSmallError.
var ErrBudget = errors.New("budget too small")

// TooSmallError says the budget cannot hold the run, and what would.
type TooSmallError struct {
	Budget int64
	// Minimum is the smallest budget that works within the allowed
	// precisions, compressions and recomputation policies: accepted at
	// Minimum, refused at Minimum-1.
	Minimum int64
	// Persistent is what parameters, gradients and optimizer state
	// allocate: no budget below it can work, with the optimizer in the
	// backward pass too (a run allocates the gradient buffers with the
	// model, before its first step frees them).
	Persistent int64
	// Shortfall says what does not fit; Least is the plan that needs the
	// least memory (the one Minimum holds).
	Shortfall Shortfall
	Least     Choice
	Reason    string
}

// Shortfall is what does not fit a budget.
type Shortfall uint8

const (
	// StateTooLarge: parameters, gradients (with gradient buffers) and
	// optimizer state alone do not fit.
	StateTooLarge Shortfall = iota + 1
	// StepTooLarge: they fit, but not the step of the plan that needs
	// the least memory next to them.
	StepTooLarge
)

func (s Shortfall) String() string {
	switch s {
	case StateTooLarge:
		return "persistent state"
	case StepTooLarge:
		return "step"
	}
	return fmt.Sprintf("Shortfall(%d)", uint8(s))
}

func (e *TooSmallError) Error() string {
	return fmt.Sprintf("budget %s is too small: %s; the smallest budget that works is %s",
		device.FormatBytes(e.Budget), e.Reason, device.FormatBytes(e.Minimum))
}

func (e *TooSmallError) Is(t error) bool { return t == ErrBudget }

// ErrProblem is matched by errors.Is for a Problem missing a function it
// needs (Build, Example, NewOptimizer).
var ErrProblem = errors.New("budget: incomplete problem")

// ErrBatch is matched by errors.Is for a batch size that cannot be
// planned: not positive, or so large that its tensors' sizes overflow.
var ErrBatch = errors.New("budget: impossible batch size")

// CheckBatch refuses batch sizes whose inputs cannot be sized: a byte
// count past 2^63 would wrap and every size derived from it would be
// nonsense (negative shapes, divisions by zero).
func CheckBatch(p Problem) error {
	if p.Example == nil {
		return fmt.Errorf("%w: Example is required", ErrProblem)
	}
	if p.Batch < 1 {
		return fmt.Errorf("%w: batch size must be positive, got %d", ErrBatch, p.Batch)
	}
	x, y := p.Example(p.Batch)
	for _, m := range append([]trace.Meta{x, y}, p.extra(p.Batch)...) {
		// The check the graph makes of every value, made before any trace.
		if err := m.Shape.Check(m.DType); err != nil {
			return fmt.Errorf("%w: a batch of %d samples: %w", ErrBatch, p.Batch, err)
		}
	}
	return nil
}
