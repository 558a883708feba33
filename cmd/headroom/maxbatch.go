package main

import (
	"context"
	"fmt"
	"io"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// checkMaxBatch checks --max-batch's companions.
func (f *trainFlags) checkMaxBatch() error {
	if !f.maxBatch {
		return nil
	}
	switch {
	case f.budget == "":
		return fmt.Errorf("--max-batch needs --budget (the largest batch that fits it)")
	case f.accum > 1:
		return fmt.Errorf("--max-batch with --accumulate %d: the largest batch is the one that fits in one pass (no accumulation)", f.accum)
	case f.resume != "":
		return fmt.Errorf("--max-batch with --resume: give the checkpoint's --batch-size (resuming exactly needs the same batch)")
	}
	return nil
}

// chooseMaxBatch sets --batch-size to the largest batch that fits the
// budget in one pass, found from plans as plan --max-batch finds it
// (budget.MaxBatch): at most the --batch-size given, else at most the
// training samples (n, 0 when unknown: the meta device). The data
// loader's staging buffers, which grow with the batch, are counted at the
// upper bound, so the batch chosen leaves room for them.
func (f *trainFlags) chooseMaxBatch(ctx context.Context, spec zoo.Spec, n int, md *mapData, loader func() dataset.Config, out io.Writer) error {
	b, err := device.ParseBytes(f.budget)
	if err != nil {
		return fmt.Errorf("--budget: %w", err)
	}
	upper := f.batch
	if !f.given["batch-size"] && !f.given["batch"] && n > 0 {
		upper = n
	}
	if md != nil {
		cfg := loader()
		cfg.BatchSize = upper
		m, err := dataset.PlanMemory(md.source(n), md.config(cfg))
		if err != nil {
			return fmt.Errorf("--data: %w", err)
		}
		if m.Staging() >= b {
			return fmt.Errorf("--budget %s: the data loader's staging buffers alone take %s", f.budget, device.FormatBytes(m.Staging()))
		}
		b -= m.Staging()
	}
	precs, comps, err := parseNumerics(f.precision, f.compress, true)
	if err != nil {
		return err
	}
	pol, err := budget.ParsePolicy(f.recompute)
	if err != nil {
		return fmt.Errorf("--recompute: %w", err)
	}
	prob := budget.Problem{
		Build:   func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss },
		Example: spec.Example, Batch: upper, Budget: b,
		NewOptimizer: func() (optim.Optimizer, error) { return newOptimizer(f.optimizer, f.lr, f.weightDecay) },
		Precisions:   precs, Compress: comps, OptimizerInBackward: f.inBack,
		GradientBuffers: f.gradBuffers,
	}
	best, err := budget.MaxBatch(ctx, prob, pol)
	if err != nil {
		return fmt.Errorf("--max-batch: %w", err)
	}
	if best == 0 {
		return fmt.Errorf("--max-batch: not even one sample fits %s in one pass (recompute %s, %s); try --recompute selective or a larger --budget", device.FormatBytes(b), pol, precs[0])
	}
	fmt.Fprintf(out, "--max-batch: batch %d, the largest of at most %d that fits %s in one pass (recompute %s, %s, from plans)\n", best, upper, device.FormatBytes(b), pol, precs[0])
	f.batch = best
	return nil
}
