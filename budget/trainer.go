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
	// Outputs keeps every step's model outputs for Outputs (training
	// metrics), planned within the budget.
	Outputs bool
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

	x, y trace.Meta // one sample's input and target (leading dimension 1)
}

// ErrShape is matched by errors.Is when a batch given to Trainer.Step is
// not of the shape and type the trainer was planned for.
var ErrShape = errors.New("budget: batch does not match the planned sample shape")

// exampleOf returns Problem.Example for batches shaped as x and y: n
// samples of x's and y's per-sample shapes (all but the first axis).
func exampleOf(x, y trace.Meta) func(n int) (trace.Meta, trace.Meta) {
	return func(n int) (trace.Meta, trace.Meta) {
		return trace.Meta{DType: x.DType, Shape: append(tensor.Shape{n}, x.Shape[1:]...)},
			trace.Meta{DType: y.DType, Shape: append(tensor.Shape{n}, y.Shape[1:]...)}
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
	if x == nil || y == nil || len(x.Shape) == 0 || len(y.Shape) == 0 {
		return nil, fmt.Errorf("%w: the example batch needs a batch axis in inputs and targets", ErrShape)
	}
	if x.Shape[0] != y.Shape[0] {
		return nil, fmt.Errorf("%w: example inputs have %d samples, targets %d", ErrShape, x.Shape[0], y.Shape[0])
	}
	if o.Batch == 0 {
		o.Batch = x.Shape[0]
	}
	kind := o.Device
	switch kind {
	case "":
		kind = "cpu"
	case "cpu", "meta":
	default:
		return nil, fmt.Errorf("budget: device %q: want cpu or meta (the trainer caps its own device at the plan's capacity)", o.Device)
	}
	xm := trace.Meta{DType: x.DType, Shape: append(tensor.Shape{1}, x.Shape[1:]...)}
	ym := trace.Meta{DType: y.DType, Shape: append(tensor.Shape{1}, y.Shape[1:]...)}
	res, err := Fit(ctx, Problem{
		Build: build, Example: exampleOf(xm, ym), Batch: o.Batch, Budget: o.Budget, NewOptimizer: newOpt,
		Cost: o.Cost, Policies: o.Policies, Precisions: o.Precisions, Compress: o.Compress, OptimizerInBackward: o.OptimizerInBackward,
		Outputs: o.Outputs,
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
	tr, err := train.SetupConfig(dev, o.Seed, build, opt, res.Best.Config())
	if err != nil {
		return nil, err
	}
	return &Trainer{Trainer: tr, Plan: res, x: xm, y: ym}, nil
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
	if err := t.check(x, y); err != nil {
		return 0, err
	}
	n := x.Shape[0]
	k := (n + t.MicroBatch() - 1) / t.MicroBatch()
	micro, err := train.Split(train.Batch{X: x, Y: y}, k)
	if err != nil {
		return 0, err
	}
	return t.StepAccumulate(ctx, micro)
}

// check reports a batch that is not of the planned sample shapes.
func (t *Trainer) check(x, y *tensor.Tensor) error {
	same := func(name string, got *tensor.Tensor, want trace.Meta) error {
		if got == nil || len(got.Shape) == 0 || got.Shape[0] < 1 {
			return fmt.Errorf("%w: %s has no samples", ErrShape, name)
		}
		if got.DType != want.DType || !got.Shape[1:].Equal(want.Shape[1:]) {
			return fmt.Errorf("%w: %s %v %v, planned %v samples of %v", ErrShape, name, got.DType, got.Shape, want.DType, want.Shape[1:])
		}
		return nil
	}
	if err := same("inputs", x, t.x); err != nil {
		return err
	}
	if err := same("targets", y, t.y); err != nil {
		return err
	}
	if x.Shape[0] != y.Shape[0] {
		return fmt.Errorf("%w: inputs have %d samples, targets %d", ErrShape, x.Shape[0], y.Shape[0])
	}
	return nil
}
