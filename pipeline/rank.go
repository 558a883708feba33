package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// NewRank builds this rank's stage of a pipeline whose stages are the
// ranks of c, in rank order: layers[cuts[r]:cuts[r+1]] on dev for rank r
// (cuts from 0 to len(layers), c.Size()+1 of them). Activations go
// forward and their gradients back by c's Send and Recv, into blocks of
// dev allocated just before they are received (an input: category
// activation; a gradient: communication). Every rank calls Step with the
// whole batch (rank 0 reads its inputs, the last rank its targets, the
// others only its shape); Plan is the rank's own device.
func NewRank(c comm.Comm, layers []Layer, loss train.LossFunc, cuts []int, dev *device.Device, newOpt func() (optim.Optimizer, error), micro int, seed int64) (*Pipeline, error) {
	S, r := c.Size(), c.Rank()
	if len(cuts) != S+1 || cuts[0] != 0 || cuts[S] != len(layers) {
		return nil, fmt.Errorf("pipeline: cuts %v do not divide %d layers among %d ranks", cuts, len(layers), S)
	}
	if micro < 1 {
		return nil, fmt.Errorf("pipeline: %d micro-batches", micro)
	}
	lo, hi := cuts[r], cuts[r+1]
	if hi <= lo {
		return nil, fmt.Errorf("pipeline: rank %d has no layers (cuts %v)", r, cuts)
	}
	p := &Pipeline{Loss: loss, Micro: micro, layers: layers, newOpt: newOpt, base: r, total: S, c: c, cuts: slices.Clone(cuts)}
	st, err := newStage(layers, lo, hi, dev, newOpt, seed)
	if st != nil {
		p.Stages = []*Stage{st}
	}
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("pipeline: rank %d on %v: %w", r, dev, err)
	}
	for _, t := range st.ties {
		peer, err := tiePeer(t, cuts)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.peers = append(p.peers, peer)
	}
	if err := p.rankSyncValues(context.Background()); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// rankOps are the operations on stage s's device when each stage is a
// rank: the rank follows its own list of events and receives a gradient
// just before the pass that needs it, and an input then too, with the
// inputs before it not yet received: inputs are received in the order
// the stage before sends them (GPipe's last stage runs its passes last
// micro-batch first; receiving that one first would wait on a send that
// waits on it).
func rankOps(s, S, M int, sched Schedule) []devOp {
	var ops []devOp
	next := 0 // the next input to receive
	last := s == S-1
	for _, e := range stageLists(S, M, sched)[s] {
		for ; next <= e.m && (!e.backward || last); next++ {
			ops = append(ops, devOp{opInput, next})
		}
		if !e.backward {
			ops = append(ops, devOp{opForward, e.m})
			continue
		}
		if !last {
			ops = append(ops, devOp{opGrad, e.m})
		}
		ops = append(ops, devOp{opBackward, e.m})
	}
	return ops
}

// ops are the operations on stage s's device in a step of M
// micro-batches.
func (p *Pipeline) ops(s, M int) []devOp {
	if p.c != nil {
		return rankOps(s, p.total, M, p.Schedule)
	}
	return deviceOps(s, p.total, M, p.Schedule)
}

// stageInputs maps the micro-batches' shapes to those of the first local
// stage's inputs: the outputs of the layers before it.
func (p *Pipeline) stageInputs(xs []trace.Meta) ([]trace.Meta, error) {
	lo := p.Stages[0].Lo
	if lo == 0 {
		return xs, nil
	}
	if p.prefix == nil {
		st, err := newStage(p.layers, 0, lo, device.Meta(), p.newOpt, 0)
		if err != nil {
			if st != nil {
				st.close()
			}
			return nil, err
		}
		p.prefix = st
	}
	outs := make([]trace.Meta, len(xs))
	for m, x := range xs {
		prog, err := p.prefix.program(p.Loss, false, false, x, trace.Meta{})
		if err != nil {
			return nil, fmt.Errorf("pipeline: layers 0-%d: %w", lo-1, err)
		}
		outs[m] = prog.Graph.Outputs[0].Meta
	}
	return outs, nil
}

// Message tags: micro-batch m's activation goes forward with tag 2m, its
// gradient back with 2m+1.
func fwdTag(m int) int { return 2 * m }
func bwdTag(m int) int { return 2*m + 1 }

// rankStep is Step on a pipeline of ranks. A send runs while the rank
// receives what its next pass needs (as Megatron pairs them), so that two
// ranks sending to each other at once cannot wait on each other; it ends
// before the next pass overwrites the arena it sends from.
func (p *Pipeline) rankStep(ctx context.Context, x, y *tensor.Tensor) (float64, error) {
	micro, err := train.Split(train.Batch{X: x, Y: y}, min(p.Micro, x.Shape[0]))
	if err != nil {
		return 0, err
	}
	M, S, s, st := len(micro), p.total, p.base, p.Stages[0]
	if err := p.checkTags(M); err != nil {
		return 0, err
	}
	xs := make([]trace.Meta, M)
	for m, b := range micro {
		xs[m] = train.MetaOf(b.X)
	}
	if xs, err = p.stageInputs(xs); err != nil {
		return 0, err
	}
	ins, grads := make([]held, M), make([]held, M)
	var sending chan error
	wait := func() error {
		if sending == nil {
			return nil
		}
		err := <-sending
		sending = nil
		return err
	}
	defer func() {
		_ = wait()
		for m := range M {
			for _, h := range []held{ins[m], grads[m]} {
				if h.blk != nil {
					h.free(st.Device)
				}
			}
		}
	}()
	send := func(t *tensor.Tensor, dst, tag int) error {
		if t.DType != tensor.Float32 {
			return fmt.Errorf("pipeline: rank %d sends %v, only float32 goes between stages", s, t.DType)
		}
		buf := f32(t.Data, t.Shape.NumElements())
		if !st.Device.HasData() {
			buf = make([]float32, t.Shape.NumElements())
		}
		sending = make(chan error, 1)
		go func(ch chan error) { ch <- p.c.Send(ctx, buf, dst, tag) }(sending)
		return nil
	}
	recv := func(meta trace.Meta, c device.Category, what string, src, tag int) (held, error) {
		if meta.DType != tensor.Float32 {
			return held{}, fmt.Errorf("pipeline: rank %d receives %v, only float32 goes between stages", s, meta.DType)
		}
		b, err := st.Device.Alloc.Allocate(meta.Bytes(), device.Tag{Category: c, Op: what})
		if err != nil {
			return held{}, err
		}
		h := held{&tensor.Tensor{DType: meta.DType, Shape: meta.Shape, Data: b.Data}, b}
		n := meta.Shape.NumElements()
		buf := make([]float32, n)
		if b.Data != nil {
			buf = f32(b.Data, n)
		}
		if err := p.c.Recv(ctx, buf, src, tag); err != nil {
			h.free(st.Device)
			return held{}, err
		}
		return h, nil
	}
	outs := make([]trace.Meta, M)
	var loss float64
	n := float64(x.Shape[0])
	first := firstBackward(M, p.Schedule)
	next := 0 // the next input to receive
	for _, e := range stageLists(S, M, p.Schedule)[s] {
		m, b := e.m, micro[e.m]
		// Inputs in the order they are sent (rankOps).
		for ; next <= m && (!e.backward || st.last); next++ {
			if s == 0 {
				ins[next], err = put(st.Device, micro[next].X, device.Activation, "stage input")
			} else {
				ins[next], err = recv(xs[next], device.Activation, "stage input", s-1, fwdTag(next))
			}
			if err != nil {
				return 0, fmt.Errorf("pipeline: rank %d, micro-batch %d: %w", s, next, err)
			}
		}
		in := ins[m]
		if !e.backward {
			prog, err := st.program(p.Loss, false, false, xs[m], trace.Meta{})
			if err != nil {
				return 0, err
			}
			if err := wait(); err != nil {
				return 0, err
			}
			res, err := prog.Run(ctx, st.arena, st.Store, map[string]*tensor.Tensor{"x": in.t}, p.runOptions())
			if err != nil {
				return 0, fmt.Errorf("pipeline: rank %d forward, micro-batch %d: %w", s, m, err)
			}
			outs[m] = train.MetaOf(res["out"])
			if err := send(res["out"], s+1, fwdTag(m)); err != nil {
				return 0, err
			}
			continue
		}
		feed := map[string]*tensor.Tensor{"x": in.t}
		var ym trace.Meta
		if st.last {
			feed["y"], ym = b.Y, train.MetaOf(b.Y)
		} else {
			grads[m], err = recv(outs[m], device.Communication, "stage output gradient", s+1, bwdTag(m))
			if err != nil {
				return 0, fmt.Errorf("pipeline: rank %d, micro-batch %d: %w", s, m, err)
			}
			feed["gout"] = grads[m].t
		}
		prog, err := st.program(p.Loss, true, m != first, xs[m], ym)
		if err != nil {
			return 0, err
		}
		w := float64(b.X.Shape[0]) / n
		if st.last {
			lm := prog.Graph.InputNode(train.LossScaleInput).Outputs[0].Meta
			feed[train.LossScaleInput] = tensor.FromFloat64(lm.Shape, []float64{w}).Convert(lm.DType)
		}
		if err := wait(); err != nil {
			return 0, err
		}
		restore := st.keepBuffers()
		res, err := prog.Run(ctx, st.arena, st.Store, feed, p.runOptions())
		restore()
		for _, h := range []*held{&ins[m], &grads[m]} {
			if h.blk != nil {
				h.free(st.Device)
				*h = held{}
			}
		}
		if err != nil {
			return 0, fmt.Errorf("pipeline: rank %d backward, micro-batch %d: %w", s, m, err)
		}
		if st.last && st.Device.HasData() {
			loss += res["loss"].Float64s()[0] * w
		}
		if s > 0 {
			if err := send(res["gx"], s-1, bwdTag(m)); err != nil {
				return 0, err
			}
		}
	}
	if err := wait(); err != nil {
		return 0, err
	}
	if err := p.rankSumGrads(ctx); err != nil {
		return 0, err
	}
	if st.Device.HasData() {
		if err := st.opt.Step(st.params(true)); err != nil {
			return 0, fmt.Errorf("pipeline: rank %d: %w", s, err)
		}
	}
	// Every rank returns the loss, which only the last one computed.
	l := []float64{0}
	if st.last {
		l[0] = loss
	}
	if err := p.c.AllReduce64(ctx, l, comm.Sum); err != nil {
		return 0, errors.Join(errors.New("pipeline: sharing the loss"), err)
	}
	return l[0], nil
}
