package pipeline

import (
	"fmt"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// StagePlan is the memory of one stage's device over a step, known before
// the step runs.
type StagePlan struct {
	Lo, Hi                                int // the stage's layers
	Parameters, Gradients, OptimizerState int64
	// Inputs is the stage's inputs of all micro-batches, kept from their
	// forward pass to their backward pass (GPipe keeps them all).
	Inputs int64
	// Message is the largest gradient received from the next stage
	// (category communication); 0 on the last stage.
	Message int64
	// Forward and Backward are the peaks of the stage's programs' arena
	// (the last stage runs only its backward program, which recomputes
	// its forward pass).
	Forward, Backward int64
	// Peak is the device's peak of allocated bytes over the step.
	Peak int64
}

func (sp StagePlan) String() string {
	return fmt.Sprintf("layers %d-%d: peak %s (parameters %s, gradients %s, optimizer state %s, inputs in flight %s, gradient received %s, forward %s, backward %s)",
		sp.Lo, sp.Hi-1, device.FormatBytes(sp.Peak), device.FormatBytes(sp.Parameters), device.FormatBytes(sp.Gradients), device.FormatBytes(sp.OptimizerState),
		device.FormatBytes(sp.Inputs), device.FormatBytes(sp.Message), device.FormatBytes(sp.Forward), device.FormatBytes(sp.Backward))
}

// microMetas are the micro-batches' shapes of a batch of x and y split as
// Step splits it.
func microMetas(micro int, x, y trace.Meta) (xs, ys []trace.Meta) {
	n := x.Shape[0]
	k := min(micro, n)
	for i := range k {
		size := n / k
		if i < n%k {
			size++
		}
		xm, ym := x, y
		xm.Shape, ym.Shape = x.Shape.Clone(), y.Shape.Clone()
		xm.Shape[0], ym.Shape[0] = size, size
		xs, ys = append(xs, xm), append(ys, ym)
	}
	return xs, ys
}

// Plan returns each stage's memory over a step on a batch of inputs x
// and targets y: what each device's allocator will measure as its peak.
// It compiles and allocates nothing new beyond the programs.
func (p *Pipeline) Plan(x, y trace.Meta) ([]StagePlan, error) {
	xs, ys := microMetas(p.Micro, x, y)
	var plans []StagePlan
	for s, st := range p.Stages {
		sp, outs, err := st.plan(p.Loss, xs, ys)
		if err != nil {
			return nil, fmt.Errorf("pipeline: stage %d: %w", s, err)
		}
		plans = append(plans, sp)
		xs = outs
	}
	return plans, nil
}

// plan is the stage's memory for micro-batches of inputs xs (and targets
// ys), with its outputs' shapes (the next stage's inputs).
func (st *Stage) plan(loss train.LossFunc, xs, ys []trace.Meta) (StagePlan, []trace.Meta, error) {
	sp := StagePlan{Lo: st.Lo, Hi: st.Hi}
	a := st.Device.Alloc.Stats()
	sp.Parameters, sp.Gradients, sp.OptimizerState = a.ByCategory[device.Parameter], a.ByCategory[device.Gradient], a.ByCategory[device.OptimizerState]
	M := len(xs)
	outs := make([]trace.Meta, M)
	msg := make([]int64, M)
	var stored, phase int64
	// The forward phase: micro-batch m's input arrives, then its forward
	// program runs.
	for m, x := range xs {
		stored += device.RoundSize(x.Bytes())
		if st.last {
			continue
		}
		prog, err := st.program(loss, false, false, x, trace.Meta{})
		if err != nil {
			return sp, nil, err
		}
		outs[m] = prog.Graph.Outputs[0].Meta
		msg[m] = device.RoundSize(outs[m].Bytes())
		sp.Forward = max(sp.Forward, prog.Plan.PeakBytes)
		phase = max(phase, stored+prog.Plan.PeakBytes)
	}
	sp.Inputs = stored
	// The backward phase, last micro-batch first: its gradient arrives,
	// the backward program runs, then its input and gradient are freed.
	for k := M - 1; k >= 0; k-- {
		var ym trace.Meta
		if st.last {
			ym = ys[k]
		}
		prog, err := st.program(loss, true, k != M-1, xs[k], ym)
		if err != nil {
			return sp, nil, err
		}
		if !st.last {
			sp.Message = max(sp.Message, msg[k])
		}
		sp.Backward = max(sp.Backward, prog.Plan.PeakBytes)
		var m int64
		if !st.last {
			m = msg[k]
		}
		phase = max(phase, stored+m+prog.Plan.PeakBytes)
		stored -= device.RoundSize(xs[k].Bytes())
	}
	sp.Peak = sp.Parameters + sp.Gradients + sp.OptimizerState + phase
	return sp, outs, nil
}

// Cut chooses where to cut layers into stages, one per budget in order,
// so that each stage's planned peak (StagePlan.Peak, on a batch of x and
// y in micro micro-batches) fits its budget: each stage takes as many of
// the remaining layers as fit (the last must take the rest). It plans on
// the meta device; nothing runs. It returns the cuts for New (from 0 to
// len(layers); fewer stages than budgets when the first ones hold every
// layer) and each stage's plan, or an error wrapping ErrBudget that names
// the layer that fits nowhere.
func Cut(layers []Layer, loss train.LossFunc, newOpt func() (optim.Optimizer, error), budgets []int64, micro int, x, y trace.Meta) ([]int, []StagePlan, error) {
	xs, ys := microMetas(micro, x, y)
	cuts := []int{0}
	var plans []StagePlan
	lo := 0
	for s, budget := range budgets {
		var best *StagePlan
		var bestOuts []trace.Meta
		for hi := lo + 1; hi <= len(layers); hi++ {
			sp, outs, err := planCandidate(layers, lo, hi, loss, newOpt, xs, ys)
			if err != nil {
				return nil, nil, err
			}
			if sp.Peak > budget {
				break
			}
			best, bestOuts = &sp, outs
		}
		if best == nil {
			sp, _, err := planCandidate(layers, lo, lo+1, loss, newOpt, xs, ys)
			if err != nil {
				return nil, nil, err
			}
			return nil, nil, fmt.Errorf("%w: layer %d alone needs %s on device %d, whose budget is %s (%v)", ErrBudget, lo, device.FormatBytes(sp.Peak), s, device.FormatBytes(budget), sp)
		}
		plans = append(plans, *best)
		lo = best.Hi
		cuts = append(cuts, lo)
		xs = bestOuts
		if lo == len(layers) {
			return cuts, plans, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: layers %d to %d are left when every one of the %d budgets is full", ErrBudget, lo, len(layers)-1, len(budgets))
}

// planCandidate plans layers [lo, hi) as a stage of their own on a fresh
// meta device.
func planCandidate(layers []Layer, lo, hi int, loss train.LossFunc, newOpt func() (optim.Optimizer, error), xs, ys []trace.Meta) (StagePlan, []trace.Meta, error) {
	dev, err := device.New("meta")
	if err != nil {
		return StagePlan{}, nil, err
	}
	st, err := newStage(layers, lo, hi, dev, newOpt, 0)
	if st != nil {
		defer st.close()
	}
	if err != nil {
		return StagePlan{}, nil, err
	}
	return st.plan(loss, xs, ys)
}
