package train

import (
	"cmp"
	"fmt"
	"io"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/plan"
	"github.com/headroom-ml/headroom/trace"
)

// MemoryPlan is the byte budget of a training step, known before it runs.
type MemoryPlan struct {
	Parameters     int64 // parameter values and buffers
	Gradients      int64
	OptimizerState int64
	// Communication is the buffers of collectives with other ranks
	// (Config.Parallel), allocated with the trainer.
	Communication int64
	Activations   int64 // the step's arena bytes live at the peak
	// TransientGradients is the part of Activations that is gradients
	// in the step's arena at the peak: waiting for their update inside the
	// step (OptimizerInBackward), or produced so far and kept for the
	// optimizer at the step's end (Config.ArenaApplies); the persistent
	// Gradients are then zero.
	TransientGradients int64
	ArenaBytes         int64 // the arena's size (peak plus packing overhead)
	PeakStep           string
}

// Total is the predicted peak of allocated bytes.
func (m MemoryPlan) Total() int64 {
	return m.Parameters + m.Gradients + m.OptimizerState + m.Communication + m.Activations
}

// Plan predicts the memory of a training step on inputs x and targets y
// under the trainer's configuration. It allocates and frees nothing: the
// persistent bytes are read from the allocator (gradient buffers released
// by ReleaseMemory count as they were when last allocated).
func (t *Trainer) Plan(x, y trace.Meta) (MemoryPlan, error) {
	m, _, err := t.PlanConfig(t.cfg, x, y)
	return m, err
}

// PlanConfig is Plan under configuration cfg, with the compiled step it
// planned: a pure function of the model, cfg and the input shapes (the
// trainer's own configuration and compiled steps are left as they are).
// extra are a MultiModel's further inputs (x1, x2, ...).
func (t *Trainer) PlanConfig(cfg Config, x, y trace.Meta, extra ...trace.Meta) (MemoryPlan, *Compiled, error) {
	return t.planConfig(cfg, x, y, extra...)
}

// planConfig is PlanConfig with a MultiModel's extra inputs.
func (t *Trainer) planConfig(cfg Config, x, y trace.Meta, extra ...trace.Meta) (MemoryPlan, *Compiled, error) {
	mode := t.gradMode(cfg, 1)
	c, err := t.compile(cfg, x, y, mode, extra...)
	if err != nil {
		return MemoryPlan{}, nil, err
	}
	p := c.Program
	var m MemoryPlan
	// Persistent tensors were allocated when the trainer was made (the
	// optimizer's state too), so their bytes are read from the allocator:
	// exactly what it counts, including large blocks handed out whole.
	st := t.Device.Alloc.Stats()
	m.Parameters = st.ByCategory[device.Parameter]
	m.OptimizerState = st.ByCategory[device.OptimizerState]
	m.Communication = st.ByCategory[device.Communication]
	if mode != writeGrads {
		// Gradient buffers other than the parameters' own (the shards
		// of ZeRO stage 2, say) are held through such steps too.
		m.Gradients = st.ByCategory[device.Gradient] - t.heldGradBytes()
	} else {
		// Steps with the optimizer in the backward pass or gradients in
		// the arena hold no gradient buffers; the usual step holds them.
		m.Gradients = st.ByCategory[device.Gradient]
		if m.Gradients == 0 {
			m.Gradients = t.gradBytes
		}
		if m.Gradients == 0 {
			m.Gradients = t.gradEstimate()
		}
	}
	m.Activations = p.Plan.PeakBytes
	m.ArenaBytes = p.Plan.ArenaBytes
	if len(p.Plan.Order) > 0 {
		m.PeakStep = p.Plan.Order[p.Plan.PeakStep].Label()
		m.TransientGradients = p.Plan.ByCategory(p.Plan.PeakStep)[plan.Gradient]
	}
	return m, c, nil
}

// heldGradBytes is what the parameters' gradient buffers take now (not
// counting gradients the last step left in the arena).
func (t *Trainer) heldGradBytes() int64 {
	var n int64
	for i, p := range t.Store.Trainable() {
		if p.Grad != nil && !t.isGradView(i, p) {
			// As the allocator counts it (a large block may be handed
			// out whole, larger than the request rounded).
			n += cmp.Or(p.GradBlockBytes(), device.RoundSize(p.Bytes()))
		}
	}
	return n
}

// gradEstimate is the gradient buffers' bytes for a trainer that never
// allocated them (made to run the optimizer in the backward pass): each
// rounded as the allocator rounds a request.
func (t *Trainer) gradEstimate() int64 {
	var n int64
	for _, p := range t.Store.Trainable() {
		n += device.RoundSize(p.Bytes())
	}
	return n
}

// Print writes the plan as the table printed before training starts.
func (m MemoryPlan) Print(w io.Writer) {
	row := func(k string, v int64) { fmt.Fprintf(w, "  %-22s %12s\n", k, device.FormatBytes(v)) }
	fmt.Fprintln(w, "memory plan (per step, before the first step runs):")
	row("parameters", m.Parameters)
	row("gradients", m.Gradients)
	if m.TransientGradients > 0 {
		fmt.Fprintf(w, "  %-22s %12s   (in the arena at the peak, freed once the optimizer read them)\n", "gradients (transient)", device.FormatBytes(m.TransientGradients))
	}
	row("optimizer state", m.OptimizerState)
	if m.Communication > 0 {
		row("communication", m.Communication)
	}
	row("activations at peak", m.Activations-m.TransientGradients)
	fmt.Fprintf(w, "  %-22s %12s   (at %s)\n", "total peak", device.FormatBytes(m.Total()), m.PeakStep)
	if m.Activations > 0 {
		fmt.Fprintf(w, "  %-22s %12s   (%.1f%% packing overhead)\n", "arena reserved", device.FormatBytes(m.ArenaBytes), 100*(float64(m.ArenaBytes)/float64(m.Activations)-1))
	}
}
