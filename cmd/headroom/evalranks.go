package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
)

// evalComm is the communicator evaluation's forward passes are collective
// over — ZeRO 3 gathers the parameters, tensor parallelism all-reduces
// the activations — or nil when each rank evaluates on its own. Every
// rank of it must run the same forward passes, so a batch is split on
// every rank or on none (evaluate).
func (d *distFlags) evalComm() comm.Comm {
	if d.sharded() {
		return d.c
	}
	return nil
}

// evalFitError is an evaluation batch of one sample whose forward pass
// does not fit on some rank: the ranks cannot split it further, and every
// rank returns this error alike.
type evalFitError struct {
	set    string
	sample int
	// need[r] is the arena rank r could not reserve, 0 where it fitted.
	need []int64
	oom  error // this rank's out-of-memory, if it was one that failed
}

func (e *evalFitError) Error() string {
	var ranks []string
	for r, n := range e.need {
		if n > 0 {
			ranks = append(ranks, fmt.Sprintf("rank %d needs an arena of %s", r, device.FormatBytes(n)))
		}
	}
	msg := fmt.Sprintf("evaluating %s: the forward pass of sample %d alone does not fit on every rank (%s); lower the memory a rank needs (more ranks, --precision) or raise its device's capacity",
		e.set, e.sample, strings.Join(ranks, ", "))
	if e.oom != nil {
		msg += ": " + e.oom.Error()
	}
	return msg
}

func (e *evalFitError) Unwrap() error {
	if e.oom != nil {
		return e.oom
	}
	return device.ErrOutOfMemory
}

// fitsOnEveryRank reserves on this rank the arena of x's forward pass
// and tells every rank of c whether every rank could: need[r] is what
// rank r failed to reserve (0: it fitted). The reservation comes before
// any collective of the pass (the arena is the only memory a forward pass
// takes), so ranks agree on splitting a batch before one of them is left
// waiting in a collective the others will not join. oom is this rank's
// own out-of-memory, if any.
func fitsOnEveryRank(ctx context.Context, tr *train.Trainer, c comm.Comm, x *tensor.Tensor) (need []int64, oom error, err error) {
	// The program Predict runs: compiled in evaluation mode.
	was := tr.Store.Training()
	tr.Store.SetTraining(false)
	p, err := tr.EvalProgram(train.MetaOf(x))
	tr.Store.SetTraining(was)
	if err != nil {
		return nil, nil, err
	}
	slots := make([]float64, c.Size()) // bytes, exact in float64
	if oom = tr.Arena().Ensure(p.Plan.ArenaBytes); oom != nil {
		if !errors.Is(oom, device.ErrOutOfMemory) {
			return nil, nil, oom
		}
		slots[c.Rank()] = float64(max(p.Plan.ArenaBytes, 1))
	}
	if err := c.AllReduce64(ctx, slots, comm.Sum); err != nil {
		return nil, nil, err
	}
	need = make([]int64, len(slots))
	for r, v := range slots {
		need[r] = int64(v)
	}
	return need, oom, nil
}

// agreeFits is evaluate's test under collective forward passes: whether
// the batch of samples idx (x) fits on every rank of c. A batch of one
// sample that does not fit ends the evaluation on every rank alike.
func agreeFits(ctx context.Context, tr *train.Trainer, c comm.Comm, set string, idx []int, x *tensor.Tensor) (bool, error) {
	need, oom, err := fitsOnEveryRank(ctx, tr, c, x)
	if err != nil {
		return false, err
	}
	if !slices.ContainsFunc(need, func(n int64) bool { return n > 0 }) {
		return true, nil
	}
	if len(idx) > 1 {
		return false, nil
	}
	return false, &evalFitError{set: set, sample: idx[0], need: need, oom: oom}
}
