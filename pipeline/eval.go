package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// ErrEvalInProcess is returned by Evaluate on a pipeline of one process
// (New): only stages on ranks evaluate so far.
var ErrEvalInProcess = errors.New("pipeline: evaluation of stages in one process is not available")

// trainingSetter is a layer's model whose modules read the training mode
// from a store of their own (a unit of a zoo model).
type trainingSetter interface{ SetTraining(on bool) }

// setTraining switches the stage's modules between training and
// evaluation (model.train() / model.eval()).
func (st *Stage) setTraining(on bool) {
	st.Store.SetTraining(on)
	for _, m := range st.model {
		if ts, ok := m.(trainingSetter); ok {
			ts.SetTraining(on)
		}
	}
}

// evalProgram is the stage's forward pass in evaluation mode: output
// "out", or on the last stage the loss of its output and targets y,
// output "loss"; no gradients.
func (st *Stage) evalProgram(loss train.LossFunc, x, y trace.Meta) (*exec.Program, error) {
	key := fmt.Sprintf("eval/%v/%v", x, y)
	if prog, ok := st.progs[key]; ok {
		return prog, nil
	}
	st.setTraining(false)
	defer st.setTraining(true)
	g := trace.New()
	err := trace.Capture(func() {
		out := st.model.Forward(g.Input("x", x.DType, x.Shape))
		if st.last {
			g.Output("loss", loss(out, g.Input("y", y.DType, y.Shape)))
		} else {
			g.Output("out", out)
		}
	})
	if err != nil {
		return nil, err
	}
	prog, err := lower(g, st.Device, false)
	if err != nil {
		return nil, err
	}
	st.progs[key] = prog
	return prog, nil
}

// evalOps are the operations on a rank's device when it evaluates M
// micro-batches: each input arrives, the pass runs, the input is freed.
func evalOps(M int) []devOp {
	var ops []devOp
	for m := range M {
		ops = append(ops, devOp{opInput, m}, devOp{opEval, m})
	}
	return ops
}

// Evaluate returns the loss of a batch in evaluation mode (batch norm's
// running statistics, no dropout), the batch split into micro-batches
// as Step splits it, each passing forward through the ranks' stages;
// every rank calls it with the whole batch and gets the loss. Nothing is
// trained. The rank's device allocates each micro-batch's input only
// while its pass runs, and later plans follow these allocations too.
func (p *Pipeline) Evaluate(ctx context.Context, x, y *tensor.Tensor) (float64, error) {
	if p.c == nil {
		return 0, ErrEvalInProcess
	}
	if p.pending != "" {
		// The shadow stages are a step ahead: rebuilt from the history.
		p.dropShadow()
	}
	loss, err := p.rankEval(ctx, x, y)
	if err != nil {
		p.dropShadow()
		p.history = nil
		return loss, err
	}
	xm, ym := train.MetaOf(x), train.MetaOf(y)
	p.history = append(p.history, steps{stepKey(xm, ym) + "/eval", trace.Meta{DType: xm.DType, Shape: xm.Shape.Clone()}, trace.Meta{DType: ym.DType, Shape: ym.Shape.Clone()}, 1, true})
	if p.shadow != nil {
		if err := p.evalShadow(xm, ym); err != nil {
			p.dropShadow()
		}
	}
	return loss, nil
}

// evalShadow advances the shadow stages by an evaluation of a batch of
// x and y.
func (p *Pipeline) evalShadow(x, y trace.Meta) error {
	xs, ys := microMetas(p.Micro, x, y)
	xs, err := p.stageInputs(xs)
	if err != nil {
		return err
	}
	for _, st := range p.shadow {
		outs := make([]trace.Meta, len(xs))
		for m := range xs {
			var ym trace.Meta
			if st.last {
				ym = ys[m]
			}
			prog, err := st.evalProgram(p.Loss, xs[m], ym)
			if err != nil {
				return err
			}
			outs[m] = prog.Graph.Outputs[0].Meta
		}
		if _, err := st.replay(context.Background(), p.Loss, p.Schedule, evalOps(len(xs)), xs, ys, outs); err != nil {
			return err
		}
		xs = outs
	}
	return nil
}

func (p *Pipeline) rankEval(ctx context.Context, x, y *tensor.Tensor) (float64, error) {
	micro, err := train.Split(train.Batch{X: x, Y: y}, min(p.Micro, x.Shape[0]))
	if err != nil {
		return 0, err
	}
	M, s, st := len(micro), p.base, p.Stages[0]
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
	var sending chan error
	wait := func() error {
		if sending == nil {
			return nil
		}
		err := <-sending
		sending = nil
		return err
	}
	defer func() { _ = wait() }()
	var loss float64
	n := float64(x.Shape[0])
	for m, b := range micro {
		var in held
		if s == 0 {
			in, err = put(st.Device, b.X, device.Activation, "stage input")
		} else {
			in, err = p.recvInto(ctx, st.Device, xs[m], s-1, fwdTag(m))
		}
		if err != nil {
			return 0, fmt.Errorf("pipeline: rank %d, evaluating micro-batch %d: %w", s, m, err)
		}
		feed := map[string]*tensor.Tensor{"x": in.t}
		var ym trace.Meta
		if st.last {
			feed["y"], ym = b.Y, train.MetaOf(b.Y)
		}
		prog, err := st.evalProgram(p.Loss, xs[m], ym)
		if err == nil {
			err = wait()
		}
		var res map[string]*tensor.Tensor
		if err == nil {
			res, err = prog.Run(ctx, st.arena, st.Store, feed, p.runOptions())
		}
		in.free(st.Device)
		if err != nil {
			return 0, fmt.Errorf("pipeline: rank %d, evaluating micro-batch %d: %w", s, m, err)
		}
		if st.last {
			if st.Device.HasData() {
				loss += res["loss"].Float64s()[0] * float64(b.X.Shape[0]) / n
			}
			continue
		}
		out := res["out"]
		buf := make([]float32, out.Shape.NumElements())
		if st.Device.HasData() {
			buf = f32(out.Data, len(buf))
		}
		sending = make(chan error, 1)
		go func(ch chan error, dst, tag int) { ch <- p.c.Send(ctx, buf, dst, tag) }(sending, s+1, fwdTag(m))
	}
	if err := wait(); err != nil {
		return 0, err
	}
	l := []float64{0}
	if st.last {
		l[0] = loss
	}
	if err := p.c.AllReduce64(ctx, l, comm.Sum); err != nil {
		return 0, errors.Join(errors.New("pipeline: sharing the evaluation loss"), err)
	}
	return l[0], nil
}

// recvInto receives a float32 tensor of meta from src into a new block
// of dev (category activation).
func (p *Pipeline) recvInto(ctx context.Context, dev *device.Device, meta trace.Meta, src, tag int) (held, error) {
	if meta.DType != tensor.Float32 {
		return held{}, fmt.Errorf("pipeline: rank %d receives %v, only float32 goes between stages", p.base, meta.DType)
	}
	b, err := dev.Alloc.Allocate(meta.Bytes(), device.Tag{Category: device.Activation, Op: "stage input"})
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
		h.free(dev)
		return held{}, err
	}
	return h, nil
}
