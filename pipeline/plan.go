package pipeline

import (
	"context"
	"fmt"
	"slices"

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
	// Inputs is the most bytes of the stage's inputs held at once: each
	// micro-batch's is kept from its arrival to its backward pass (GPipe
	// keeps them all, 1F1B at most as many as stages from this one on).
	Inputs int64
	// Message is the largest gradient received from the next stage
	// (category communication); 0 on the last stage.
	Message int64
	// Forward and Backward are the peaks of the stage's programs' arena
	// (the last stage runs only its backward program, which recomputes
	// its forward pass).
	Forward, Backward int64
	// Peak is the device's peak of allocated bytes over the step;
	// CommunicationAtPeak the received gradients' part of it (inputs in
	// flight and the arena's tensors are activations), and Reserved the most bytes of segments the device
	// maps over the step (as a fresh device's first step maps them, for
	// Cut's plans).
	Peak                int64
	CommunicationAtPeak int64
	Reserved            int64
	// Sent is the bytes the stage sends per step: its outputs forward and
	// the gradients of its inputs back.
	Sent int64
	// Collectives is the bytes the stage's programs send per step in the
	// collectives of their graphs (a tensor-parallel stage's
	// all-reduces, to its tensor group); 0 for a stage without them.
	Collectives int64
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
// and targets y under the pipeline's schedule: what each device's
// allocator will measure as its peak. It compiles the step's programs and
// allocates nothing.
func (p *Pipeline) Plan(x, y trace.Meta) ([]StagePlan, error) {
	key := stepKey(x, y)
	if p.pending == key {
		return slices.Clone(p.pendingPlans), nil
	}
	if p.pending != "" {
		// The shadow stages are a step ahead, for other shapes.
		p.dropShadow()
	}
	if err := p.buildShadow(); err != nil {
		return nil, err
	}
	plans, err := p.planShadow(x, y)
	if err != nil {
		p.dropShadow()
		return nil, err
	}
	p.pending, p.pendingPlans = key, plans
	return slices.Clone(plans), nil
}

func stepKey(x, y trace.Meta) string { return fmt.Sprint(x, y) }

// planShadow plans a step on the shadow stages, which it advances by
// that step.
func (p *Pipeline) planShadow(x, y trace.Meta) ([]StagePlan, error) {
	xs, ys := microMetas(p.Micro, x, y)
	xs, err := p.stageInputs(xs)
	if err != nil {
		return nil, err
	}
	var plans []StagePlan
	for s, st := range p.shadow {
		ops := p.ops(p.base+s, len(xs))
		if p.c != nil {
			ops = append(ops, tieOps(st)...)
		}
		sp, outs, err := st.plan(p.Loss, p.Schedule, ops, xs, ys)
		if err != nil {
			return nil, fmt.Errorf("pipeline: stage %d: %w", s, err)
		}
		plans = append(plans, sp)
		xs = outs
	}
	return plans, nil
}

// plan is the memory of the stage as stage s of S, for micro-batches of
// inputs xs (and targets ys), with its outputs' shapes (the next stage's
// inputs). It follows the step's events (order) as they touch this
// stage's device: an input arrives when the stage before runs its
// forward pass, a gradient when the stage after runs its backward pass;
// the stage's own passes run its programs; its backward pass frees the
// micro-batch's input and gradient.
func (st *Stage) plan(loss train.LossFunc, sched Schedule, ops []devOp, xs, ys []trace.Meta) (StagePlan, []trace.Meta, error) {
	sp := StagePlan{Lo: st.Lo, Hi: st.Hi}
	a := st.Device.Alloc.Stats()
	sp.Parameters, sp.Gradients, sp.OptimizerState = a.ByCategory[device.Parameter], a.ByCategory[device.Gradient], a.ByCategory[device.OptimizerState]
	M := len(xs)
	first := firstBackward(M, sched)
	outs := make([]trace.Meta, M)
	in, msg := make([]int64, M), make([]int64, M)
	for m, x := range xs {
		in[m] = device.RoundSize(x.Bytes())
		if !st.last {
			prog, err := st.program(loss, false, false, x, trace.Meta{})
			if err != nil {
				return sp, nil, err
			}
			outs[m] = prog.Graph.Outputs[0].Meta
			msg[m] = device.RoundSize(outs[m].Bytes())
			sp.Forward = max(sp.Forward, prog.Plan.PeakBytes)
			sp.Collectives += collectiveSent(prog)
		}
		var ym trace.Meta
		if st.last {
			ym = ys[m]
		}
		prog, err := st.program(loss, true, m != first, x, ym)
		if err != nil {
			return sp, nil, err
		}
		sp.Backward = max(sp.Backward, prog.Plan.PeakBytes)
		sp.Collectives += collectiveSent(prog)
	}
	var inputs int64
	for _, o := range ops {
		switch o.kind {
		case opInput:
			inputs += in[o.m]
			sp.Inputs = max(sp.Inputs, inputs)
		case opGrad:
			sp.Message = max(sp.Message, msg[o.m])
		case opBackward:
			inputs -= in[o.m]
		}
	}
	// The peak is the allocator's, replayed (replay.go): the parts above
	// add up to it only while every block is split to its request.
	stats, err := st.replay(context.Background(), loss, sched, ops, xs, ys, outs)
	if err != nil {
		return sp, nil, err
	}
	sp.Peak, sp.Reserved = stats.AllocatedBytes.Peak, stats.ReservedBytes.Peak
	sp.CommunicationAtPeak = stats.ByCategoryAtPeak[device.Communication]
	for m := range M {
		if !st.last {
			sp.Sent += outs[m].Bytes()
		}
		if !st.first {
			sp.Sent += xs[m].Bytes()
		}
	}
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
func Cut(layers []Layer, loss train.LossFunc, newOpt func() (optim.Optimizer, error), budgets []int64, micro int, sched Schedule, x, y trace.Meta) ([]int, []StagePlan, error) {
	return cut(false, layers, loss, newOpt, budgets, micro, sched, x, y)
}

// CutRanks is Cut for a pipeline whose stages are ranks (NewRank): each
// rank receives a stage's input just before its pass, so its plans differ
// from those of one process.
func CutRanks(layers []Layer, loss train.LossFunc, newOpt func() (optim.Optimizer, error), budgets []int64, micro int, sched Schedule, x, y trace.Meta) ([]int, []StagePlan, error) {
	return cut(true, layers, loss, newOpt, budgets, micro, sched, x, y)
}

func cut(ranks bool, layers []Layer, loss train.LossFunc, newOpt func() (optim.Optimizer, error), budgets []int64, micro int, sched Schedule, x, y trace.Meta) ([]int, []StagePlan, error) {
	xs0, ys := microMetas(micro, x, y)
	xs := xs0
	// Stages are planned as stages of len(budgets): a 1F1B stage holds
	// more inputs the more stages follow it, so fewer stages only lower
	// its peak; the plans returned are those of the stages chosen.
	S := len(budgets)
	cuts := []int{0}
	var plans []StagePlan
	lo := 0
	for s, budget := range budgets {
		var best *StagePlan
		var bestOuts []trace.Meta
		for hi := lo + 1; hi <= len(layers); hi++ {
			sp, outs, err := planCandidate(ranks, layers, lo, hi, s, S, sched, loss, newOpt, xs, ys)
			if err != nil {
				return nil, nil, err
			}
			if sp.Peak > budget {
				break
			}
			best, bestOuts = &sp, outs
		}
		if best == nil {
			sp, _, err := planCandidate(ranks, layers, lo, lo+1, s, S, sched, loss, newOpt, xs, ys)
			if err != nil {
				return nil, nil, err
			}
			where := fmt.Sprintf("device %d", s)
			if ranks {
				where = fmt.Sprintf("rank %d (stage %d)", s, s)
			}
			return nil, nil, fmt.Errorf("%w: layer %d alone needs %s on %s, whose budget is %s: the smallest budget for it there (%v)", ErrBudget, lo, device.FormatBytes(sp.Peak), where, device.FormatBytes(budget), sp)
		}
		plans = append(plans, *best)
		lo = best.Hi
		cuts = append(cuts, lo)
		xs = bestOuts
		if lo == len(layers) {
			break
		}
	}
	if lo == len(layers) {
		// The plans of the stages chosen, as they will run.
		xs = xs0
		for s := range plans {
			sp, outs, err := planCandidate(ranks, layers, cuts[s], cuts[s+1], s, len(plans), sched, loss, newOpt, xs, ys)
			if err != nil {
				return nil, nil, err
			}
			if sp.Peak > budgets[s] {
				return nil, nil, fmt.Errorf("%w: stage %d (layers %d-%d) needs %s as stage %d of %d, over its budget %s", ErrBudget, s, sp.Lo, sp.Hi-1, device.FormatBytes(sp.Peak), s, len(plans), device.FormatBytes(budgets[s]))
			}
			plans[s], xs = sp, outs
		}
		return cuts, plans, nil
	}
	return nil, nil, fmt.Errorf("%w: layers %d to %d are left when every one of the %d budgets is full", ErrBudget, lo, len(layers)-1, len(budgets))
}

// planCandidate plans layers [lo, hi) as a stage of their own on a fresh
// meta device.
func planCandidate(ranks bool, layers []Layer, lo, hi, s, S int, sched Schedule, loss train.LossFunc, newOpt func() (optim.Optimizer, error), xs, ys []trace.Meta) (StagePlan, []trace.Meta, error) {
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
	ops := deviceOps(s, S, len(xs), sched)
	if ranks {
		ops = append(rankOps(s, S, len(xs), sched), tieOps(st)...)
	}
	return st.plan(loss, sched, ops, xs, ys)
}

// buildShadow makes the shadow stages, if there are none, and replays on
// them the steps run so far, so that their allocators are in the state
// of the real devices'. It assumes each device holds only its stage's
// memory (as New allocated it) and what Step left cached.
func (p *Pipeline) buildShadow() error {
	if p.shadow != nil {
		return nil
	}
	for s, st := range p.Stages {
		dev := device.Meta()
		if err := dev.Alloc.SetCapacity(st.Device.Alloc.Limit()); err != nil {
			return err
		}
		sh, err := newStage(p.layers, st.Lo, st.Hi, dev, p.newOpt, 0)
		if sh != nil {
			p.shadow = append(p.shadow, sh)
		}
		if err != nil {
			p.dropShadow()
			return fmt.Errorf("pipeline: stage %d on a meta device: %w", s, err)
		}
	}
	for _, h := range p.history {
		for range h.n {
			if h.eval {
				if err := p.evalShadow(h.x, h.y); err != nil {
					p.dropShadow()
					return err
				}
				continue
			}
			if _, err := p.planShadow(h.x, h.y); err != nil {
				p.dropShadow()
				return err
			}
		}
	}
	return nil
}

func (p *Pipeline) dropShadow() {
	for _, st := range p.shadow {
		st.close()
	}
	p.shadow, p.pending, p.pendingPlans = nil, "", nil
}

// stepped records a step run on batches of x and y, advancing the shadow
// stages by it unless Plan already did.
func (p *Pipeline) stepped(x, y trace.Meta) {
	key := stepKey(x, y)
	if n := len(p.history); n > 0 && p.history[n-1].key == key {
		p.history[n-1].n++
	} else {
		p.history = append(p.history, steps{key, trace.Meta{DType: x.DType, Shape: x.Shape.Clone()}, trace.Meta{DType: y.DType, Shape: y.Shape.Clone()}, 1, false})
	}
	if p.pending == key {
		p.pending, p.pendingPlans = "", nil
		return
	}
	p.pending, p.pendingPlans = "", nil
	if p.shadow == nil {
		return
	}
	if _, err := p.planShadow(x, y); err != nil {
		// Rebuilt from the history when next planned.
		p.dropShadow()
	}
}

// steps are n steps in a row on batches of x and y: the history a
// rebuilt shadow replays (a pipeline planned only now and then, after
// many steps of one shape, keeps one entry).
type steps struct {
	key  string
	x, y trace.Meta
	n    int
	// eval: evaluations (Evaluate), not training steps.
	eval bool
}
