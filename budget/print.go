package budget

import (
	"fmt"
	"io"
	"strings"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/transform"
)

// same reports whether c and o are the same plan as far as the planner
// can tell (same micro-batching, precision, recomputation, arena and
// estimated time): auto recomputing nothing is none, storing ReLU masks as
// bits in a model without ReLUs changes nothing, and so does a compression
// threshold above every tensor but the masks.
func (c Choice) same(o Choice) bool {
	return c.MicroBatch == o.MicroBatch && c.Precision == o.Precision && c.Policy == o.Policy && c.Recomputed == o.Recomputed &&
		c.InBackward == o.InBackward && c.ArenaGradients == o.ArenaGradients && c.Memory.ArenaBytes == o.Memory.ArenaBytes && c.Time == o.Time
}

// Describe is one line naming the choice's micro-batching, precision,
// compression, recomputation and, when it runs there, the optimizer in the
// backward pass.
func (c Choice) Describe() string {
	comp := c.Compression
	if comp == "none" && c.Precision != transform.FP32 {
		comp = "16-bit"
	}
	if b := c.minBytes(); b > transform.DefaultMinBytes {
		comp += " >= " + device.FormatBytes(b)
	}
	d := fmt.Sprintf("micro-batch %d x %d, %s, saved %s, recompute %s", c.MicroBatch, c.Accumulation, c.Precision, comp, c.Policy)
	if c.Stride > 0 {
		d += fmt.Sprintf(" (residual segments of %d)", c.Stride)
	}
	if c.InBackward {
		d += ", optimizer in backward"
	}
	if c.ArenaGradients {
		d += ", gradients in arena"
	}
	return d
}

// Print writes the result as `headroom plan` shows it.
func (r *Result) Print(w io.Writer, budget int64) {
	b := r.Best
	fmt.Fprintf(w, "plan within %s:\n", device.FormatBytes(budget))
	fmt.Fprintf(w, "  micro-batch %d x %d accumulation steps (effective batch %d)\n", b.MicroBatch, b.Accumulation, r.Baseline.MicroBatch)
	prec := b.Precision.String()
	if b.Precision != transform.FP32 {
		how := "emulated on the cpu, so rounding costs time"
		if r.nativeBF16 && b.Precision.LowDType() == tensor.BFloat16 {
			how = "bf16 products native on this CPU, charged at its bf16 rate"
		}
		prec += fmt.Sprintf(" (%d values rounded per micro-batch; %s)", b.Rounded, how)
	}
	fmt.Fprintf(w, "  precision %s\n", prec)
	fmt.Fprintf(w, "  saved activations: %s\n", b.storage())
	chain := ""
	if b.Stride > 0 {
		chain = fmt.Sprintf("; residual chain in segments: one block output in %d kept, the rest recomputed", b.Stride)
	}
	fmt.Fprintf(w, "  recomputation: %s (%d forward nodes recomputed%s)\n", b.Policy, b.Recomputed, chain)
	switch {
	case b.InBackward:
		fmt.Fprintf(w, "  optimizer: in the backward pass (each parameter updated once its gradient is final; gradients freed as consumed, no gradient buffers)\n")
	case r.notInBackward != "" && b.ArenaGradients:
		fmt.Fprintf(w, "  optimizer: after the backward pass (not in the backward pass: %s)\n", r.notInBackward)
	case r.notInBackward != "":
		fmt.Fprintf(w, "  optimizer: after the backward pass, with gradient buffers (not in the backward pass: %s)\n", r.notInBackward)
	}
	switch {
	case b.ArenaGradients:
		fmt.Fprintf(w, "  gradients: in the arena (held from backward to the optimizer step)\n")
	case r.notArena != "":
		fmt.Fprintf(w, "  gradients: in buffers held for the whole step (not in the arena: %s)\n", r.notArena)
	}
	b.Memory.Print(w)
	fmt.Fprintf(w, "  %-22s %12s   (segments the allocator maps; budget %s)\n", "device memory needed", device.FormatBytes(b.Bytes()), device.FormatBytes(budget))
	if b.Capacity > 0 && b.Capacity < budget {
		fmt.Fprintf(w, "  %-22s %12s   (a device capped at the budget itself would map the allocator's regular segments, which do not fit)\n", "device capped at", device.FormatBytes(b.Capacity))
	}
	base := r.Baseline
	fmt.Fprintf(w, "  estimated slowdown     %11.2fx   (against the whole batch in %s with nothing recomputed or compressed, which needs %s)\n",
		r.Slowdown(), base.Precision, device.FormatBytes(base.Bytes()))
	if len(r.Candidates) > 1 {
		fmt.Fprintln(w, "  also considered:")
		for _, c := range r.Candidates[1:] {
			fmt.Fprintf(w, "    %s: %s, est. %.2fx\n", c.Describe(), device.FormatBytes(c.Bytes()), c.Time/base.Time)
		}
	}
	if r.Pruned > 0 {
		fmt.Fprintf(w, "  %d more settings not searched: even their whole-batch step is slower than the plan chosen\n", r.Pruned)
	}
}

// storage describes how the choice stores saved activations.
func (c Choice) storage() string {
	var how string
	switch {
	case c.Compression == "none" && c.Precision == transform.FP32:
		how = "kept as produced"
	case c.Compression == "none":
		how = "low-precision values in 16 bits"
	case c.Compression == "masks":
		how = "ReLU masks as bits"
	default:
		how = c.Compression
		if b := c.minBytes(); b > transform.DefaultMinBytes {
			how += " for tensors of at least " + device.FormatBytes(b)
		}
		how += ", ReLU masks as bits"
	}
	st := c.Saved
	if st.Saved == 0 {
		return how
	}
	var parts []string
	for f, n := range st.Tensors {
		if n > 0 && transform.Format(f) != transform.Keep {
			parts = append(parts, fmt.Sprintf("%d %s", n, transform.Format(f)))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%s (%d saved tensors)", how, st.Saved)
	}
	return fmt.Sprintf("%s (%d of %d saved tensors stored as %s; %s -> %s)", how, st.Saved-st.Tensors[transform.Keep], st.Saved,
		strings.Join(parts, ", "), device.FormatBytes(st.Before), device.FormatBytes(st.After))
}
