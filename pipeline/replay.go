package pipeline

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// A plan that adds up rounded sizes is exact only while every block is
// split to its request: the large pool hands a cached block out whole
// when what would be left is at most 1 MiB (device.shouldSplit), so a
// 4.75 MiB input can occupy 5.75 MiB, depending on which segments the
// earlier steps left cached and how the arena grew. The peak is therefore
// found by replaying the step's allocations, in Step's order, on a meta
// device whose allocator is in the same state as the stage's device: the
// allocator's own rules then decide every block's size.

// devOp is one thing a step does on one stage's device.
type devOp struct {
	kind opKind
	m    int
}

type opKind uint8

const (
	opInput    opKind = iota // the micro-batch's input arrives
	opGrad                   // the gradient of the stage's output arrives
	opForward                // the stage's forward program runs
	opBackward               // its backward program runs; input and gradient are freed
	opTie                    // tied parameter m's gradient is received, added and freed (ranks)
	opEval                   // the evaluation program runs; the input is freed (Evaluate)
)

// deviceOps are the operations on stage s's device of a step run in one
// process (Step): an input arrives when the stage before runs its
// forward pass (stage 0's just before its own pass), a gradient when the
// stage after runs its backward pass.
func deviceOps(s, S, M int, sched Schedule) []devOp {
	var ops []devOp
	have := make([]bool, M)
	arrive := func(m int) {
		if !have[m] {
			have[m] = true
			ops = append(ops, devOp{opInput, m})
		}
	}
	for _, e := range order(S, M, sched) {
		switch {
		case !e.backward && e.s == s-1:
			arrive(e.m)
		case !e.backward && e.s == s:
			arrive(e.m)
			ops = append(ops, devOp{opForward, e.m})
		case e.backward && e.s == s+1:
			ops = append(ops, devOp{opGrad, e.m})
		case e.backward && e.s == s:
			arrive(e.m)
			ops = append(ops, devOp{opBackward, e.m})
		}
	}
	return ops
}

// metaTensor is a tensor of m's shape with no bytes, fed to programs on
// a meta device.
func metaTensor(m trace.Meta) *tensor.Tensor { return &tensor.Tensor{DType: m.DType, Shape: m.Shape} }

// replay runs ops on st, which must be on a meta device, for
// micro-batches of inputs xs (targets ys on the last stage) whose outputs
// have shapes outs, allocating what Step allocates in the same order, and
// returns the device's statistics over them (their peaks reset first). Every block it
// allocates is freed before it returns; the arena stays as Step leaves it.
func (st *Stage) replay(ctx context.Context, loss train.LossFunc, sched Schedule, ops []devOp, xs, ys, outs []trace.Meta) (device.Stats, error) {
	dev := st.Device
	if dev.HasData() {
		return device.Stats{}, fmt.Errorf("pipeline: replay on %v, not a meta device", dev)
	}
	M := len(xs)
	first := firstBackward(M, sched)
	ins, grads := make([]*device.Block, M), make([]*device.Block, M)
	defer func() {
		for m := range M {
			dev.Alloc.Free(ins[m])
			dev.Alloc.Free(grads[m])
		}
	}()
	dev.Alloc.ResetPeak()
	for _, o := range ops {
		m := o.m
		var err error
		switch o.kind {
		case opInput:
			ins[m], err = dev.Alloc.Allocate(xs[m].Bytes(), device.Tag{Category: device.Activation, Op: "stage input"})
		case opGrad:
			grads[m], err = dev.Alloc.Allocate(outs[m].Bytes(), device.Tag{Category: device.Communication, Op: "stage output gradient"})
		case opForward:
			err = st.run(ctx, loss, false, false, xs[m], trace.Meta{}, outs[m])
		case opBackward:
			var ym trace.Meta
			if st.last {
				ym = ys[m]
			}
			err = st.run(ctx, loss, true, m != first, xs[m], ym, outs[m])
			dev.Alloc.Free(ins[m])
			dev.Alloc.Free(grads[m])
			ins[m], grads[m] = nil, nil
		case opEval:
			var ym trace.Meta
			if st.last {
				ym = ys[m]
			}
			var prog *exec.Program
			if prog, err = st.evalProgram(loss, xs[m], ym); err == nil {
				feed := map[string]*tensor.Tensor{"x": metaTensor(xs[m])}
				if st.last {
					feed["y"] = metaTensor(ym)
				}
				_, err = prog.Run(ctx, st.arena, st.Store, feed, nil)
			}
			dev.Alloc.Free(ins[m])
			ins[m] = nil
		case opTie:
			var b *device.Block
			b, err = dev.Alloc.Allocate(st.ties[m].p.Bytes(), device.Tag{Category: device.Communication, Op: "tied gradient"})
			dev.Alloc.Free(b)
		}
		if err != nil {
			return device.Stats{}, err
		}
	}
	return dev.Alloc.Stats(), nil
}

// run runs one of the stage's programs on meta tensors.
func (st *Stage) run(ctx context.Context, loss train.LossFunc, backward, accumulate bool, x, y, out trace.Meta) error {
	prog, err := st.program(loss, backward, accumulate, x, y)
	if err != nil {
		return err
	}
	feed := map[string]*tensor.Tensor{"x": metaTensor(x)}
	if backward {
		if st.last {
			feed["y"] = metaTensor(y)
			lm := prog.Graph.InputNode(train.LossScaleInput).Outputs[0].Meta
			feed[train.LossScaleInput] = metaTensor(lm)
		} else {
			feed["gout"] = metaTensor(out)
		}
	}
	_, err = prog.Run(ctx, st.arena, st.Store, feed, nil)
	return err
}
