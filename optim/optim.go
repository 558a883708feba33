// Package optim holds the optimizers (SGD, Adam, AdamW), gradient clipping
// and learning-rate schedules, with the semantics of PyTorch 1.13.
//
// Everything works on flat float32 slices, so this package knows nothing of
// graphs or devices: the engine hands each step the parameters' storage,
// wherever it lives. Updates follow the arithmetic order of PyTorch's
// single-tensor (foreach=False) CPU code, float32 for tensor math and float64
// for the scalar math PyTorch does in Python, so results agree with PyTorch
// to float32 rounding (usually bit for bit).
package optim

import (
	"errors"
	"fmt"
)

// Param is one parameter as an optimizer sees it. Value and Grad are the
// parameter's storage; they may live outside the Go heap (device memory
// mapped by the engine), so optimizers update them in place and never keep
// or reallocate them.
type Param struct {
	// Name identifies the parameter across steps: optimizer state is keyed
	// by it, as PyTorch keys state by the parameter object.
	Name  string
	Value []float32
	// Grad nil means no gradient this step; the parameter is skipped and its
	// state left untouched, as PyTorch does for p.grad is None.
	Grad []float32
}

// Optimizer updates parameters in place from their gradients.
type Optimizer interface {
	// Step performs one update. Parameters are checked before any is
	// changed, so an error leaves values and state as they were.
	Step(params []Param) error
	// StateBytes is the memory held now in optimizer state buffers (the
	// ones obtained from the AllocFunc).
	StateBytes() int64
	// SetAlloc sets where state buffers come from (nil: make). Every
	// optimizer takes its state from it, so that an engine can place all
	// of it in device memory and count it against the budget.
	SetAlloc(f AllocFunc)
	// StateBytesFor is what a parameter of numel elements will need once it
	// has taken a step, so that the memory planner can count optimizer
	// state before the first step.
	StateBytesFor(numel int64) int64
	LR() float64
	SetLR(lr float64)
	// State returns the per-parameter state for checkpointing, keyed by
	// parameter name and then by PyTorch's names ("momentum_buffer",
	// "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"). Buffers are the
	// optimizer's own storage, not copies; "step" is a fresh one-element
	// slice.
	State() map[string]map[string][]float32
}

// AllocFunc returns n float32s for state buffer buffer (for example
// "exp_avg") of parameter param. They need not be zeroed (a caching
// allocator hands back used blocks); the optimizer clears them. The engine supplies one that places state
// in device memory under the category "optimizer state", and its error (an
// out-of-memory, say) comes back from Step; nil means make.
type AllocFunc func(param, buffer string, n int) ([]float32, error)

// ConfigError reports an invalid hyperparameter. Msg is PyTorch's wording,
// so that messages read the same as in PyTorch.
type ConfigError struct {
	Kind string // "SGD", "Adam", "AdamW", "StepLR", ...
	Msg  string
	Err  error // a sentinel such as ErrUnsetBetas, or nil
}

func (e *ConfigError) Unwrap() error { return e.Err }

func (e *ConfigError) Error() string { return "optim: " + e.Kind + ": " + e.Msg }

// ErrParam is wrapped by every error Step returns for malformed parameters
// (missing or repeated names, gradient and value lengths that differ).
var ErrParam = errors.New("optim: bad parameter")

// checkParams validates params before an update touches anything. sizes holds
// the element count each parameter had when its state was created, so a
// parameter that changed size is caught instead of corrupting state.
func checkParams(params []Param, sizes func(name string) (int, bool)) error {
	seen := make(map[string]struct{}, len(params))
	for i, p := range params {
		if p.Name == "" {
			return fmt.Errorf("%w: parameter %d has no name", ErrParam, i)
		}
		if _, dup := seen[p.Name]; dup {
			return fmt.Errorf("%w: parameter %q appears twice", ErrParam, p.Name)
		}
		seen[p.Name] = struct{}{}
		if p.Grad == nil {
			continue
		}
		if len(p.Grad) != len(p.Value) {
			return fmt.Errorf("%w: parameter %q has %d values but a gradient of %d", ErrParam, p.Name, len(p.Value), len(p.Grad))
		}
		if n, ok := sizes(p.Name); ok && n != len(p.Value) {
			return fmt.Errorf("%w: parameter %q has %d values but its optimizer state has %d", ErrParam, p.Name, len(p.Value), n)
		}
	}
	return nil
}

// alloc calls f, or make when f is nil, and insists on the length asked for:
// a short buffer from a custom allocator would otherwise fail later as an
// index panic far from its cause.
func alloc(f AllocFunc, param, buffer string, n int) ([]float32, error) {
	if f == nil {
		return make([]float32, n), nil
	}
	b, err := f(param, buffer, n)
	if err != nil {
		return nil, fmt.Errorf("optim: allocating %s of %q: %w", buffer, param, err)
	}
	if len(b) != n {
		return nil, fmt.Errorf("optim: allocating %s of %q: got %d elements, want %d", buffer, param, len(b), n)
	}
	// State starts at zero, as PyTorch's zeros_like; reused device memory
	// would otherwise seed the moments with garbage.
	clear(b)
	return b, nil
}

var (
	_ Optimizer = (*SGD)(nil)
	_ Optimizer = (*Adam)(nil)
	_ chainable = (*StepLR)(nil)
	_ chainable = (*LinearLR)(nil)
	_ chainable = (*CosineAnnealingLR)(nil)
	_ Scheduler = (*SequentialLR)(nil)
)

// ParamStepper is implemented by optimizers whose update of one parameter
// depends only on that parameter, its gradient and its own state (SGD,
// Adam, AdamW): StepParam(p) is Step([]Param{p}), and stepping parameters
// one at a time, in any order, gives exactly Step's result. The engine uses
// it to update each parameter inside the backward pass as soon as its
// gradient is final (train.Config.OptimizerInBackward).
type ParamStepper interface {
	Optimizer
	StepParam(p Param) error
}

var (
	_ ParamStepper = (*SGD)(nil)
	_ ParamStepper = (*Adam)(nil)
)

// Preparer is implemented by optimizers that can allocate their state
// before the first step. PyTorch allocates state lazily in the first step;
// allocating it up front makes an out-of-memory appear at start-up and lets
// the memory plan hold exactly from the first step. The values are what the
// lazy initialization would produce, so updates are unchanged.
type Preparer interface {
	Prepare(params []Param) error
}
