package budget

import (
	"context"
	"errors"
	"fmt"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// Options are the settings of NewTrainer. Budget and Batch are required
// (Batch defaults to the example batch's size); the rest are Problem's
// fields of the same names.
type Options struct {
	// Budget is the memory limit in bytes.
	Budget int64
	// Batch is the number of samples per optimizer step; 0 means the
	// example batch's first dimension.
	Batch int
	// Device is "cpu" (the default) or "meta"; the trainer's device is
	// made capped at the plan's capacity (never above Budget).
	Device string
	// Seed seeds the parameters' initialization.
	Seed int64

	Cost                CostModel
	Policies            []Policy
	Precisions          []transform.Precision
	Compress            []transform.Compression
	OptimizerInBackward bool
	// GradientBuffers keeps every gradient in a buffer held for the whole
	// step (Problem.GradientBuffers); by default plans of one
	// micro-batch keep them in the step's arena.
	GradientBuffers bool
	// Outputs keeps every step's model outputs for Outputs (training
	// metrics), planned within the budget.
	Outputs bool
	// Threads is the trainer's thread count (train.Config.Threads; 0:
	// the process-wide count, on a pool of the trainer's own).
	Threads int
}

// Trainer is a train.Trainer set up to run the plan Fit chose within a
// budget, on a device of its own capped at the plan's capacity. Its Step
// takes whole batches and splits them into the plan's micro-batches.
//
// The plan holds for Step; a configuration set afterwards (SetConfig) or
// steps taken through the embedded trainer's StepAccumulate with larger
// micro-batches are outside it. A Trainer is not safe for concurrent use
// (as train.Trainer); two Trainers are independent.
type Trainer struct {
	*train.Trainer
	// Plan is what Fit chose, and what it was compared with.
	Plan *Result

	xs []trace.Meta // one sample of each input (leading dimension 1)
	y  trace.Meta   // one sample's target
}

// ErrShape is matched by errors.Is when a batch given to Trainer.Step is
// not of the shape and type the trainer was planned for.
var ErrShape = errors.New("budget: batch does not match the planned sample shape")

// batchOf is n samples of m's per-sample shape (all but the first axis).
func batchOf(m trace.Meta, n int) trace.Meta {
	return trace.Meta{DType: m.DType, Shape: append(tensor.Shape{n}, m.Shape[1:]...)}
}

// exampleOf returns Problem.Example for batches shaped as x and y: n
// samples of x's and y's per-sample shapes (all but the first axis).
func exampleOf(x, y trace.Meta) func(n int) (trace.Meta, trace.Meta) {
	return func(n int) (trace.Meta, trace.Meta) { return batchOf(x, n), batchOf(y, n) }
}

// inputsOf returns Problem.Inputs for a model's further inputs shaped as
// xs (nil for none).
func inputsOf(xs []trace.Meta) func(n int) []trace.Meta {
	if len(xs) == 0 {
		return nil
	}
	return func(n int) []trace.Meta {
		ms := make([]trace.Meta, len(xs))
		for i, x := range xs {
			ms[i] = batchOf(x, n)
		}
		return ms
	}
}

// NewTrainer plans training within o.Budget and returns the trainer that
// runs the plan: it builds the model once (build), on a new device capped
// at the plan's capacity, with the optimizer newOpt returns and the
// configuration of the plan (micro-batches, precision, recomputation,
// storage, optimizer in the backward pass). x and y are an example batch
// (the data may be absent): the sample shapes and types are taken from
// them, all but their first axis, and the batch size too unless o.Batch is
// set. It replaces the sequence Fit, device.New with the capacity,
// train.Setup, Trainer.SetConfig and splitting batches by hand.
func NewTrainer(ctx context.Context, build func(s *nn.Store) (train.Model, train.LossFunc), newOpt func() (optim.Optimizer, error), x, y *tensor.Tensor, o Options) (*Trainer, error) {
	return NewTrainerInputs(ctx, build, newOpt, []*tensor.Tensor{x}, y, o)
}

// NewTrainerInputs is NewTrainer for a model of several inputs
// (train.MultiModel): xs is an example of each input, the first one being
// what the model's Forward would get, each with the same number of
// samples. Train it with StepInputs.
func NewTrainerInputs(ctx context.Context, build func(s *nn.Store) (train.Model, train.LossFunc), newOpt func() (optim.Optimizer, error), xs []*tensor.Tensor, y *tensor.Tensor, o Options) (*Trainer, error) {
	if len(xs) == 0 {
		return nil, fmt.Errorf("%w: no example inputs", ErrShape)
	}
	if y == nil || len(y.Shape) == 0 {
		return nil, fmt.Errorf("%w: the example batch needs a batch axis in inputs and targets", ErrShape)
	}
	for i, x := range xs {
		if x == nil || len(x.Shape) == 0 {
			return nil, fmt.Errorf("%w: the example batch needs a batch axis in inputs and targets (input %d has none)", ErrShape, i)
		}
		if x.Shape[0] != y.Shape[0] {
			return nil, fmt.Errorf("%w: example input %d has %d samples, targets %d", ErrShape, i, x.Shape[0], y.Shape[0])
		}
	}
	if o.Batch == 0 {
		o.Batch = y.Shape[0]
	}
	kind := o.Device
	switch kind {
	case "":
		kind = "cpu"
	case "cpu", "meta":
	default:
		return nil, fmt.Errorf("budget: device %q: want cpu or meta (the trainer caps its own device at the plan's capacity)", o.Device)
	}
	xms := make([]trace.Meta, len(xs))
	for i, x := range xs {
		xms[i] = batchOf(train.MetaOf(x), 1)
	}
	ym := batchOf(train.MetaOf(y), 1)
	res, err := Fit(ctx, Problem{
		Build: build, Example: exampleOf(xms[0], ym), Inputs: inputsOf(xms[1:]), Batch: o.Batch, Budget: o.Budget, NewOptimizer: newOpt,
		Cost: o.Cost, Policies: o.Policies, Precisions: o.Precisions, Compress: o.Compress, OptimizerInBackward: o.OptimizerInBackward,
		GradientBuffers: o.GradientBuffers,
		Outputs:         o.Outputs,
	})
	if err != nil {
		return nil, err
	}
	dev, err := device.New(fmt.Sprintf("%s:mem=%d", kind, res.Best.Capacity))
	if err != nil {
		return nil, err
	}
	opt, err := newOpt()
	if err != nil {
		return nil, err
	}
	cfg := res.Best.Config()
	cfg.Threads = o.Threads
	tr, err := train.SetupConfig(dev, o.Seed, build, opt, cfg)
	if err != nil {
		return nil, err
	}
	return &Trainer{Trainer: tr, Plan: res, xs: xms, y: ym}, nil
}

// MicroBatch is the plan's number of samples per forward and backward pass.
func (t *Trainer) MicroBatch() int { return t.Plan.Best.MicroBatch }

// Step runs one optimizer step on the whole batch x, y: split into
// micro-batches of at most MicroBatch samples whose gradients are added
// up (the gradient of the whole batch), and returns the batch's loss. A
// batch may have any number of samples (a short last batch, or more than
// Options.Batch: more micro-batches); its samples must have the shape and
// type the trainer was planned for (ErrShape otherwise).
func (t *Trainer) Step(ctx context.Context, x, y *tensor.Tensor) (float64, error) {
	return t.StepInputs(ctx, []*tensor.Tensor{x}, y)
}

// StepInputs is Step for a model of several inputs (NewTrainerInputs): xs
// are its inputs, each with the same number of samples, split together
// into the plan's micro-batches.
func (t *Trainer) StepInputs(ctx context.Context, xs []*tensor.Tensor, y *tensor.Tensor) (float64, error) {
	if err := t.check(xs, y); err != nil {
		return 0, err
	}
	n := xs[0].Shape[0]
	k := (n + t.MicroBatch() - 1) / t.MicroBatch()
	b := train.Batch{X: xs[0], Y: y}
	if len(xs) > 1 {
		b.Inputs = xs[1:]
	}
	micro, err := train.Split(b, k)
	if err != nil {
		return 0, err
	}
	return t.StepAccumulate(ctx, micro)
}

// check reports a batch that is not of the planned sample shapes.
func (t *Trainer) check(xs []*tensor.Tensor, y *tensor.Tensor) error {
	same := func(name string, got *tensor.Tensor, want trace.Meta) error {
		if got == nil || len(got.Shape) == 0 || got.Shape[0] < 1 {
			return fmt.Errorf("%w: %s has no samples", ErrShape, name)
		}
		if got.DType != want.DType || !got.Shape[1:].Equal(want.Shape[1:]) {
			return fmt.Errorf("%w: %s %v %v, planned %v samples of %v", ErrShape, name, got.DType, got.Shape, want.DType, want.Shape[1:])
		}
		return nil
	}
	if len(xs) != len(t.xs) {
		return fmt.Errorf("%w: %d inputs, planned %d", ErrShape, len(xs), len(t.xs))
	}
	for i, x := range xs {
		name := "inputs"
		if len(xs) > 1 {
			name = fmt.Sprintf("input %d", i)
		}
		if err := same(name, x, t.xs[i]); err != nil {
			return err
		}
	}
	if err := same("targets", y, t.y); err != nil {
		return err
	}
	for i, x := range xs {
		if x.Shape[0] != y.Shape[0] {
			if len(xs) == 1 {
				return fmt.Errorf("%w: inputs have %d samples, targets %d", ErrShape, x.Shape[0], y.Shape[0])
			}
			return fmt.Errorf("%w: input %d has %d samples, targets %d", ErrShape, i, x.Shape[0], y.Shape[0])
		}
	}
	return nil
}
