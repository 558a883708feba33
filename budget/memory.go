package budget

import (
	"errors"
	"fmt"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// belowBudget is the least-memory plan when it fits a capacity at or below
// the budget although nothing fits on a device capped at the budget itself
// (see minimum): the run then caps its device at Choice.Capacity, and every
// budget from the smallest that works up is accepted.
func (f *fitter) belowBudget(pols []Policy) (Choice, bool, error) {
	c, lowest, err := f.least(pols)
	if err != nil || lowest < 0 || lowest > f.p.Budget || f.p.Budget <= 0 {
		return Choice{}, false, err
	}
	st, err := f.setup(lowest, c.noBuffers())
	if err != nil {
		return Choice{}, false, nil
	}
	r, ok := fits(st, c.Memory.ArenaBytes)
	if !ok {
		return Choice{}, false, nil
	}
	c.Fits, c.Capacity, c.Reserved = true, lowest, r
	return c, true, nil
}

// tooSmall is the error for a budget nothing fits: the least-memory plan
// of the allowed search space and the smallest capacity that holds it.
// With gradient buffers that is one sample per micro-batch, the most each
// policy recomputes, each setting's full compression; with the optimizer
// in the backward pass (one micro-batch, so the whole batch) the same
// recomputation and compression in fp32. The two modes set up different
// persistent state, so each has its own smallest capacity; the smaller
// one is the minimum.
func (f *fitter) tooSmall(pols []Policy, reason string) error {
	best, lowest, err := f.least(pols)
	if err != nil {
		return err
	}
	short := StateTooLarge
	if reason == "" {
		short = StepTooLarge
		how := "one sample per micro-batch"
		switch {
		case best.InBackward:
			how = fmt.Sprintf("%d samples in one pass with the optimizer in the backward pass", best.MicroBatch)
		case best.ArenaGradients:
			how = fmt.Sprintf("%d samples in one pass with gradients in the arena", best.MicroBatch)
		}
		reason = fmt.Sprintf("even the plan that needs the least memory (%s, %s, saved activations %s, recomputation %s) allocates %s at its peak and needs %s of device memory with the allocator's segments",
			how, best.Precision, best.Compression, best.Policy, device.FormatBytes(best.Memory.Total()), device.FormatBytes(lowest))
	}
	return &TooSmallError{Budget: f.p.Budget, Minimum: lowest, Persistent: f.persistent, Shortfall: short, Least: best, Reason: reason}
}

// least is the least-memory plan of the allowed search space and the
// smallest capacity that holds it (the smallest budget that works). With
// gradient buffers that is one sample per micro-batch, the most each
// policy recomputes, each setting's full compression; with the optimizer
// in the backward pass (one micro-batch, so the whole batch) the same
// recomputation and compression in fp32. The two modes set up different
// persistent state, so each has its own smallest capacity; the smaller
// one is the minimum.
func (f *fitter) least(pols []Policy) (Choice, int64, error) {
	if f.leastMin != 0 {
		return f.leastPlan, f.leastMin, nil
	}
	var least [2]Choice // per mode: the smallest arena
	consider := func(s setting, m int, pol Policy) error {
		c, err := f.most(s, m, pol)
		if err != nil {
			return err
		}
		if l := &least[mode(c.noBuffers())]; l.MicroBatch == 0 || c.Memory.ArenaBytes < l.Memory.ArenaBytes {
			*l = c
		}
		return nil
	}
	for _, s := range f.sets {
		for _, pol := range pols {
			if err := consider(s, 1, pol); err != nil {
				return Choice{}, 0, err
			}
			if f.noBufs() && s.prec == transform.FP32 && f.p.Batch > 1 {
				if err := consider(s, f.p.Batch, pol); err != nil {
					return Choice{}, 0, err
				}
			}
		}
	}
	var best Choice
	lowest := int64(-1)
	for _, c := range least {
		if c.MicroBatch == 0 {
			continue
		}
		if m := f.minimum(c.Memory.ArenaBytes, c.Reserved, c.noBuffers()); lowest < 0 || m < lowest {
			best, lowest = c, m
		}
	}
	f.leastPlan, f.leastMin = best, lowest
	return best, lowest, nil
}

// setup allocates the run's persistent state on a meta device capped at
// capacity (0: uncapped), in the order a real run allocates it: parameters
// (nn.Store.Materialize), optimizer state (train.New), then, unless the
// run holds none (noBuffers: it updates in the backward pass or keeps its
// gradients in the arena), the gradient buffers (its first step or plan);
// an error when it does not fit.
func (f *fitter) setup(capacity int64, noBuffers bool) (*runState, error) {
	dev := device.Meta()
	if capacity > 0 {
		var err error
		if dev, err = device.New(fmt.Sprintf("meta:mem=%d", capacity)); err != nil {
			return nil, err
		}
	}
	opt, err := f.p.NewOptimizer()
	if err != nil {
		return nil, err
	}
	// Gradient buffers come after the optimizer state (train.NewConfig);
	// a run that updates in the backward pass or keeps its gradients in
	// the arena never has them.
	cfg := train.Config{OptimizerInBackward: noBuffers && f.inBack, GradientBuffers: !noBuffers || !f.arena}
	if _, err := train.SetupConfig(dev, 0, f.p.Build, opt, cfg); err != nil {
		return nil, err
	}
	return &runState{dev: dev, floor: dev.Alloc.Stats().ReservedBytes.Current}, nil
}

// fits reports whether an arena of this size can be reserved next to the
// persistent state st, and the memory the run then reserves (at least
// what setting up reserved).
//
// The allocator first tries cached free blocks, then maps a segment, and
// when that would exceed the capacity unmaps every wholly free segment and
// retries: whether the arena fits does not depend on free segments still
// being cached, so the state set up with gradients freed and their
// segments given back stands for the run's.
func fits(st *runState, arena int64) (int64, bool) {
	if st == nil {
		return 0, false
	}
	b, err := st.dev.Alloc.Reserve(arena, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		return 0, false
	}
	r := max(st.floor, st.dev.Alloc.Stats().ReservedBytes.Current)
	st.dev.Alloc.Release(b)
	st.dev.Alloc.EmptyCache()
	return r, true
}

// minimum is the smallest capacity on which the persistent state of the
// optimizer mode and an arena of this size fit, to 4 KiB; hi is known to
// fit.
//
// Fitting is not monotonic in the capacity: under a capacity the allocator
// maps segments as tight as a request where its regular sizes (2 and 20
// MiB) do not fit, so a run may fit a capacity just below 2 MiB and not one
// just above it (the first small request takes a 2 MiB segment there). A
// binary search can land on the far side of such a gap; this search
// walks up from what the allocations alone need, each failed capacity
// raised by at least what its out-of-memory lacked.
func (f *fitter) minimum(arena, hi int64, inBackward bool) int64 {
	const page = 4096
	up := func(n int64) int64 { return (n + page - 1) / page * page }
	c := up(f.full[mode(inBackward)].dev.Alloc.Stats().AllocatedBytes.Current + arena)
	for c < hi {
		short, ok := f.tryCapacity(c, arena, inBackward)
		if ok {
			return c
		}
		c += max(page, up(short))
	}
	return hi
}

// tryCapacity sets the run up on a meta device capped at capacity and
// reserves the arena; when that fails, short is how many bytes the failed
// request lacked (0 when unknown).
func (f *fitter) tryCapacity(capacity, arena int64, inBackward bool) (short int64, ok bool) {
	lacked := func(err error) int64 {
		var oom *device.OutOfMemoryError
		if !errors.As(err, &oom) || oom.Limit <= 0 {
			return 0
		}
		need := (oom.Size + 4095) / 4096 * 4096
		return max(0, need-(oom.Limit-oom.Reserved))
	}
	st, err := f.setup(capacity, inBackward)
	if err != nil {
		return lacked(err), false
	}
	b, err := st.dev.Alloc.Reserve(arena, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		return lacked(err), false
	}
	st.dev.Alloc.Release(b)
	return 0, true
}

// reserved simulates the arena's reservation next to the persistent state
// of the optimizer mode and returns the device memory reserved with it, as
// a real run on a device with the same allocator would reserve; false when
// the arena does not fit even an uncapped device (its address space).
func (f *fitter) reserved(arena int64, inBackward bool) (int64, bool) {
	return fits(f.full[mode(inBackward)], arena)
}
