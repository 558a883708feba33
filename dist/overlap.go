package dist

import (
	"context"
	"fmt"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/optim"
)

// overlapOpt is the optimizer of data parallelism with the all-reduce
// overlapped with the backward pass (Options.Overlap, stage 0). The step
// runs with the optimizer in the backward pass: as each gradient is final
// StepParam copies it into the gradient buckets (one communication buffer
// of every gradient's values, filled in the order the schedule finishes
// them, the same on every rank), and a bucket that is full is handed to a
// goroutine that all-reduces it while the backward pass goes on. Reduce
// waits for the last bucket and then runs the inner optimizer on the
// summed gradients: the update of stage 0, bit for bit.
type overlapOpt struct {
	inner optim.Optimizer
	d     *DataParallel
	// at is each parameter's offset in d.buf, by name, as the schedule
	// placed it (the first step fixes it); fill is the next free value,
	// sent is where the buckets not yet handed over begin.
	at         map[string]int
	fill, sent int
	// queue carries [lo, hi) of the buckets to all-reduce; done reports
	// the step's first error once the queue is closed and drained.
	queue chan [2]int
	done  chan error
	// early counts the buckets handed over before the backward pass
	// ended (Overlapped).
	early, launched int
	backward        bool
}

var (
	_ optim.ParamStepper = (*overlapOpt)(nil)
	_ optim.Preparer     = (*overlapOpt)(nil)
)

// start begins a step's buckets.
func (o *overlapOpt) start(ctx context.Context) {
	o.stop() // a step that failed half way
	o.fill, o.sent, o.backward = 0, 0, true
	if o.at == nil {
		o.at = map[string]int{}
	}
	o.queue, o.done = make(chan [2]int, 64), make(chan error, 1)
	go func() {
		var first error
		for b := range o.queue {
			if first == nil {
				first = o.d.c.AllReduce(ctx, o.d.buf[b[0]:b[1]], comm.Sum)
			}
		}
		o.done <- first
	}()
}

// stop ends the goroutine of a step that did not reach Reduce.
func (o *overlapOpt) stop() {
	if o.queue != nil {
		close(o.queue)
		<-o.done
		o.queue = nil
	}
}

// launch hands the bucket [sent, fill) over to the goroutine.
func (o *overlapOpt) launch() {
	if o.fill == o.sent {
		return
	}
	o.queue <- [2]int{o.sent, o.fill}
	o.launched++
	if o.backward {
		o.early++
	}
	o.sent = o.fill
}

// StepParam takes p's final gradient into its place in the buckets and
// hands over every bucket that is full.
func (o *overlapOpt) StepParam(p optim.Param) error {
	if o.queue == nil {
		return fmt.Errorf("%w: rank %d: a gradient outside a step", ErrConfig, o.d.c.Rank())
	}
	at, ok := o.at[p.Name]
	if !ok {
		at = o.fill
		o.at[p.Name] = at
	}
	if at != o.fill || at+len(p.Grad) > len(o.d.buf) {
		// The schedule finishes gradients in one order; a step that
		// does not would mismatch the ranks' buckets.
		return fmt.Errorf("%w: rank %d: gradient %q out of the buckets' order", ErrConfig, o.d.c.Rank(), p.Name)
	}
	copy(o.d.buf[at:], p.Grad)
	o.fill += len(p.Grad)
	if o.fill-o.sent >= o.d.bucketFloats {
		o.launch()
	}
	return nil
}

// end hands over the last bucket and waits for every all-reduce; with
// update, it then runs the inner optimizer on the summed gradients.
func (o *overlapOpt) end(params []optim.Param, update bool) error {
	if o.queue == nil {
		return nil
	}
	o.backward = false
	o.launch()
	close(o.queue)
	err := <-o.done
	o.queue = nil
	if err != nil || !update {
		return err
	}
	ps := make([]optim.Param, 0, len(params))
	for _, p := range params {
		at, ok := o.at[p.Name]
		if !ok {
			continue // no gradient this step
		}
		ps = append(ps, optim.Param{Name: p.Name, Value: p.Value, Grad: o.d.buf[at : at+len(p.Value)]})
	}
	return o.inner.Step(ps)
}

// Step is the usual path's (a step the backward pass could not update
// in): the gradients were all-reduced by Reduce already.
func (o *overlapOpt) Step(params []optim.Param) error { return o.inner.Step(params) }

func (o *overlapOpt) Prepare(params []optim.Param) error {
	if prep, ok := o.inner.(optim.Preparer); ok {
		return prep.Prepare(params)
	}
	return nil
}

func (o *overlapOpt) StateBytes() int64                      { return o.inner.StateBytes() }
func (o *overlapOpt) StateBytesFor(numel int64) int64        { return o.inner.StateBytesFor(numel) }
func (o *overlapOpt) SetAlloc(f optim.AllocFunc)             { o.inner.SetAlloc(f) }
func (o *overlapOpt) LR() float64                            { return o.inner.LR() }
func (o *overlapOpt) SetLR(lr float64)                       { o.inner.SetLR(lr) }
func (o *overlapOpt) State() map[string]map[string][]float32 { return o.inner.State() }

// SaveState and LoadState are the inner optimizer's (every rank holds the
// whole state under stage 0).
func (o *overlapOpt) SaveState() optim.SavedState {
	if so, ok := o.inner.(optim.Stateful); ok {
		return so.SaveState()
	}
	return optim.SavedState{Kind: fmt.Sprintf("%T (not stateful)", o.inner)}
}

func (o *overlapOpt) LoadState(s optim.SavedState) error {
	if so, ok := o.inner.(optim.Stateful); ok {
		return so.LoadState(s)
	}
	return fmt.Errorf("%w: optimizer %T cannot load a state", ErrConfig, o.inner)
}

// Overlapped reports how many gradient buckets were all-reduced and how
// many of them were handed over while the backward pass still ran, since
// the trainer was made (Options.Overlap).
func (d *DataParallel) Overlapped() (buckets, early int) {
	if d.ov == nil {
		return 0, 0
	}
	return d.ov.launched, d.ov.early
}
