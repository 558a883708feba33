package nn

import "github.com/headroom-ml/headroom/trace"

// Checkpoint runs f(x) inside a checkpoint region: when the trainer
// rematerializes (transform.Regions), the activations f creates are not
// kept for the backward pass but recomputed from x (torch.utils.checkpoint).
func Checkpoint(x *trace.Tensor, f func(*trace.Tensor) *trace.Tensor) *trace.Tensor {
	var y *trace.Tensor
	x.Graph().Checkpoint(func() { y = f(x) })
	return y
}

// CheckpointSequential applies layers in order, split into segments
// contiguous segments, each but the last checkpointed, like
// torch.utils.checkpoint.checkpoint_sequential. segments <= 0 means
// round(sqrt(len(layers))), which minimizes memory for a uniform chain.
func CheckpointSequential(x *trace.Tensor, segments int, layers ...func(*trace.Tensor) *trace.Tensor) *trace.Tensor {
	n := len(layers)
	if n == 0 {
		return x
	}
	if segments <= 0 {
		segments = 1
		for (segments+1)*(segments+1) <= n {
			segments++
		}
		if s := segments + 1; s*s-n < n-segments*segments {
			segments = s
		}
	}
	segments = min(segments, n)
	size := (n + segments - 1) / segments
	for start := 0; start < n; start += size {
		end := min(start+size, n)
		run := func(h *trace.Tensor) *trace.Tensor {
			for _, l := range layers[start:end] {
				h = l(h)
			}
			return h
		}
		if end < n {
			x = Checkpoint(x, run)
		} else {
			x = run(x)
		}
	}
	return x
}
