package dist

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Tensor parallelism: every rank runs the same step on the same batch with
// its slice of the model (zoo.TPGPT, Megatron-LM's layout); the ranks meet
// in the collectives inside the step's graph (op.AllReduce, op.CopyToRanks),
// which run on the communicator bound to the trainer's runs. Their
// buffers are tensors of the step's arena, planned like any other, so each
// rank's memory plan (train.Trainer.Plan) is its measured peak.

// NewTensorTrainer makes rank c.Rank()'s trainer of a tensor-parallel
// model: train.NewConfig, with c bound to every run of the step
// (Trainer.RunOptions.Comm). The model must be traced for c.Size() ranks
// (zoo.NewTPGPT with size c.Size()); every rank gets the same batches.
// The ranks check that they agree (model shapes, configuration,
// optimizer; the differing rank is named).
func NewTensorTrainer(ctx context.Context, c comm.Comm, dev *device.Device, store *nn.Store, model train.Model, loss train.LossFunc, opt optim.Optimizer, cfg train.Config) (*train.Trainer, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: no communicator", ErrConfig)
	}
	if cfg.Parallel != nil {
		return nil, fmt.Errorf("%w: tensor parallelism with data parallelism (Config.Parallel) is not supported", ErrConfig)
	}
	if dev.HasData() {
		d := &DataParallel{c: c}
		if err := d.agree(ctx, store, opt, cfg, Options{Agree: "tensor parallel"}); err != nil {
			return nil, err
		}
	}
	t, err := train.NewConfig(dev, store, model, loss, opt, cfg)
	if err != nil {
		return nil, err
	}
	o := exec.Options{}
	if t.RunOptions != nil {
		o = *t.RunOptions
	}
	o.Comm = c
	t.RunOptions = &o
	return t, nil
}

// TensorGPT is what PlanTensorGPT plans: rank Rank of Size ranks training
// a GPT of Config on batches of Batch sequences of Seq tokens.
type TensorGPT struct {
	Config     zoo.GPTConfig
	Rank, Size int
	Batch, Seq int
	Train      train.Config
	// NewOptimizer makes the optimizer (nil: none, so no optimizer state).
	NewOptimizer func() (optim.Optimizer, error)
}

// PlanTensorGPT is the memory plan of one rank of tensor-parallel GPT
// training, on the meta device: nothing runs and no communicator is
// needed (collectives move no data there), so it plans any number of
// ranks. It is what the same rank's trainer on a device with data plans
// and measures (TestTensorPlanOnMeta).
func PlanTensorGPT(p TensorGPT) (train.MemoryPlan, error) {
	dev := device.Meta()
	s := nn.NewStore()
	m, err := zoo.NewTPGPT(s.Root(), p.Config, p.Rank, p.Size)
	if err != nil {
		return train.MemoryPlan{}, err
	}
	if err := s.Materialize(dev, 0); err != nil {
		return train.MemoryPlan{}, err
	}
	defer s.Release()
	var opt optim.Optimizer
	if p.NewOptimizer != nil {
		if opt, err = p.NewOptimizer(); err != nil {
			return train.MemoryPlan{}, err
		}
	}
	t, err := train.NewConfig(dev, s, m, zoo.GPTLoss, opt, p.Train)
	if err != nil {
		return train.MemoryPlan{}, err
	}
	defer t.Close()
	x := tensor.Shape{p.Batch, p.Seq}
	return t.Plan(train.MetaOf(&tensor.Tensor{DType: tensor.Int64, Shape: x}), train.MetaOf(&tensor.Tensor{DType: tensor.Int64, Shape: x}))
}
