package main

import (
	"context"
	"fmt"
	"io"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// planSnapshotHistory is the history kept for plan --memory-snapshot:
// enough for every allocation of a step of the largest zoo models.
const planSnapshotHistory = 1 << 20

// writePlanSnapshot writes the planned allocation timeline of one training
// step as a memory snapshot (docs/snapshot-schema.md): a dry run of the
// step on the meta device, which makes the allocator calls a real step
// makes (parameters, optimizer state, gradients, the step's arena and each
// tensor placed in it, in the planned order) with no data. The same calls
// give the same sizes and history on the cpu, so the file compares with
// train --memory-snapshot of a real run in headroom viz or memviz; only
// the addresses and times differ.
func writePlanSnapshot(ctx context.Context, path string, spec zoo.Spec, newOpt func() (optim.Optimizer, error), cfg train.Config, batch, accum int, out io.Writer) error {
	dev := device.Meta()
	dev.Alloc.RecordHistory(planSnapshotHistory)
	opt, err := newOpt()
	if err != nil {
		return err
	}
	tr, err := train.SetupConfig(dev, 1, func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss }, opt, cfg)
	if err != nil {
		return err
	}
	defer tr.Close()
	// The micro-batches train.Split makes of the batch, as shapes.
	var parts []train.Batch
	for i := range accum {
		size := batch / accum
		if i < batch%accum {
			size++
		}
		x, y := spec.Example(size)
		parts = append(parts, train.Batch{X: &tensor.Tensor{DType: x.DType, Shape: x.Shape}, Y: &tensor.Tensor{DType: y.DType, Shape: y.Shape}})
	}
	if _, err := tr.StepAccumulate(ctx, parts); err != nil {
		return fmt.Errorf("dry run of the step: %w", err)
	}
	if err := writeSnapshot(path, dev.Alloc.Snapshot()); err != nil {
		return fmt.Errorf("--memory-snapshot: %w", err)
	}
	st := dev.Alloc.Stats()
	fmt.Fprintf(out, "wrote the planned memory timeline of one step (peak allocated %s, reserved %s) to %s (view it with: headroom viz %s)\n",
		device.FormatBytes(st.AllocatedBytes.Peak), device.FormatBytes(st.ReservedBytes.Peak), path, path)
	return nil
}
