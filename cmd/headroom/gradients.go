package main

import (
	"fmt"
	"io"

	"github.com/headroom-ml/headroom/train"
)

// gradBuffersHelp is the help of train's and plan's --gradient-buffers.
const gradBuffersHelp = "keep every gradient in a buffer held for the whole step (the old step) instead of in the step's arena from the backward pass that produces it to the optimizer step, the default where a step is one micro-batch on one process (PyTorch's zero_grad(set_to_none=True); same results, less memory); with --budget the planner then counts gradient buffers"

// printGradients says where a step of microBatches micro-batches keeps
// its gradients under tr's configuration (the optimizer in the backward
// pass says so on its own line). buffers: --gradient-buffers was given.
func printGradients(w io.Writer, tr *train.Trainer, microBatches int, buffers bool) {
	cfg := tr.Config()
	switch {
	case tr.GradientsInArena(microBatches):
		fmt.Fprintln(w, "gradients: in the arena (held from backward to the optimizer step)")
	case cfg.OptimizerInBackward && tr.CheckOptimizerInBackward(microBatches) == nil:
	case buffers:
		fmt.Fprintln(w, "gradients: in buffers held for the whole step (--gradient-buffers)")
	case microBatches > 1:
		fmt.Fprintf(w, "gradients: in buffers held for the whole step (not in the arena: %d micro-batches are added up in them)\n", microBatches)
	case cfg.Parallel != nil:
		fmt.Fprintln(w, "gradients: in buffers held for the whole step (not in the arena: reduced across ranks)")
	default:
		fmt.Fprintf(w, "gradients: in buffers held for the whole step (not in the arena with %v precision)\n", cfg.Precision)
	}
}
