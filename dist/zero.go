package dist

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
)

// zeroOpt is the optimizer of ZeRO stages 1 and 2: the inner optimizer
// sees only this rank's shard of each parameter (span), so its state is
// 1/N of the whole; after the update the parameters are all-gathered.
// Optimizers are elementwise per parameter (SGD, Adam, AdamW), so updating
// the shards gives, bit for bit, the update of the whole.
type zeroOpt struct {
	inner optim.Optimizer
	d     *DataParallel
	// meta: planned on the meta device, where allocateMeta made the
	// state of the rank's shards (and StateBytesFor answers 0, so that
	// train allocates none for whole parameters).
	meta bool
	// params are the parameters' names and lengths, in the trainer's
	// order: what every rank gathers, in the same order.
	params []paramLen
	// saved is the whole state GatherState gathered, which the next
	// SaveState returns (and a step makes stale).
	saved *optim.SavedState
}

type paramLen struct {
	name string
	n    int
}

var _ optim.Stateful = (*zeroOpt)(nil)

var (
	_ optim.ParamStepper = (*zeroOpt)(nil)
	_ optim.Preparer     = (*zeroOpt)(nil)
)

func (z *zeroOpt) span(n int) (lo, hi, c int) { return span(n, z.d.c.Rank(), z.d.c.Size()) }

// shardOf returns p's shard as the inner optimizer sees it (ok false when
// this rank owns none of it). Under stage 2 the gradient is first
// reduce-scattered into the rank's gradient shard.
func (z *zeroOpt) shardOf(p optim.Param) (optim.Param, bool, error) {
	lo, hi, c := z.span(len(p.Value))
	s := optim.Param{Name: p.Name, Value: p.Value[lo:hi]}
	if p.Grad != nil {
		s.Grad = p.Grad[lo:hi]
		if z.d.stage == 2 {
			if len(p.Grad) != len(p.Value) {
				return s, false, fmt.Errorf("%w: parameter %q has %d values but a gradient of %d", optim.ErrParam, p.Name, len(p.Value), len(p.Grad))
			}
			gs := z.d.grads[p.Name]
			if len(gs) != c {
				return s, false, fmt.Errorf("dist: parameter %q has no gradient shard of %d", p.Name, c)
			}
			if err := z.reduceScatter(p.Grad, gs); err != nil {
				return s, false, err
			}
			s.Grad = gs[:hi-lo]
		}
	}
	return s, hi > lo, nil
}

// chunks calls fn for the pieces [k, k+m) of a shard of c values that fit
// the communication buffer, m values per rank at a time: collectives of
// a parameter larger than the buffer go in several rounds.
func (z *zeroOpt) chunks(c int, fn func(k, m int) error) error {
	b := len(z.d.buf) / z.d.c.Size()
	for k := 0; k < c; k += b {
		if err := fn(k, min(b, c-k)); err != nil {
			return err
		}
	}
	return nil
}

// piece is values [lo, lo+m) of v, as far as v has them.
func piece(v []float32, lo, m int) []float32 {
	lo = min(lo, len(v))
	return v[lo:min(lo+m, len(v))]
}

// reduceScatter sums gradient g over the ranks into this rank's shard gs
// (c values: rank r's shard is g[r*c:(r+1)*c], zero-padded).
func (z *zeroOpt) reduceScatter(g, gs []float32) error {
	size, c := z.d.c.Size(), len(gs)
	return z.chunks(c, func(k, m int) error {
		send := z.d.buf[:m*size]
		for r := range size {
			dst := send[r*m : (r+1)*m]
			clear(dst[copy(dst, piece(g, r*c+k, m)):])
		}
		return z.d.c.ReduceScatter(z.d.ctx, send, gs[k:k+m], comm.Sum)
	})
}

// gather all-gathers parameter value v from every rank's updated shard.
func (z *zeroOpt) gather(v []float32) error {
	_, _, c := z.span(len(v))
	rank, size := z.d.c.Rank(), z.d.c.Size()
	return z.chunks(c, func(k, m int) error {
		buf := z.d.buf[:m*size]
		mine := buf[rank*m : (rank+1)*m]
		clear(mine[copy(mine, piece(v, rank*c+k, m)):])
		if err := z.d.c.AllGather(z.d.ctx, mine, buf); err != nil {
			return err
		}
		for r := range size {
			copy(piece(v, r*c+k, m), buf[r*m:(r+1)*m])
		}
		return nil
	})
}

// Step updates this rank's shards, then gathers every parameter.
func (z *zeroOpt) Step(params []optim.Param) error {
	z.remember(params)
	shards := make([]optim.Param, 0, len(params))
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		s, ok, err := z.shardOf(p)
		if err != nil {
			return err
		}
		if ok {
			shards = append(shards, s)
		}
	}
	if err := z.inner.Step(shards); err != nil {
		return err
	}
	for _, p := range params {
		if p.Grad != nil {
			if err := z.gather(p.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

// StepParam is ZeRO-2 in the backward pass: p's gradient is final (and
// every read of p in the step done), so it is reduce-scattered, the
// rank's shard updated and the parameter gathered at once. The ranks
// meet here in the order their steps finish the parameters: the
// schedule's, which follows the trace and not the shapes, so ranks with
// shares of different sizes still agree (Local checks every collective's
// length; TestUnevenShares runs such shares).
func (z *zeroOpt) StepParam(p optim.Param) error {
	z.saved = nil
	s, ok, err := z.shardOf(p)
	if err != nil {
		return err
	}
	if ok {
		if err := z.inner.(optim.ParamStepper).StepParam(s); err != nil {
			return err
		}
	}
	return z.gather(p.Value)
}

// Prepare allocates the state of this rank's shards only.
func (z *zeroOpt) Prepare(params []optim.Param) error {
	z.remember(params)
	prep, ok := z.inner.(optim.Preparer)
	if !ok {
		return nil
	}
	shards := make([]optim.Param, 0, len(params))
	for _, p := range params {
		if lo, hi, _ := z.span(len(p.Value)); hi > lo {
			shards = append(shards, optim.Param{Name: p.Name, Value: p.Value[lo:hi]})
		}
	}
	return prep.Prepare(shards)
}

func (z *zeroOpt) StateBytes() int64          { return z.inner.StateBytes() }
func (z *zeroOpt) SetAlloc(f optim.AllocFunc) { z.inner.SetAlloc(f) }
func (z *zeroOpt) LR() float64                { return z.inner.LR() }
func (z *zeroOpt) SetLR(lr float64)           { z.inner.SetLR(lr) }

// StateBytesFor is the state of rank 0's shard, the largest; 0 on the meta
// device, where allocateMeta has allocated the rank's own.
func (z *zeroOpt) StateBytesFor(numel int64) int64 {
	if z.meta {
		return 0
	}
	size := int64(z.d.c.Size())
	return z.inner.StateBytesFor((numel + size - 1) / size)
}

// allocateMeta allocates on the meta device the state Prepare allocates
// on a device with data: for each trainable parameter of which this rank
// owns values, the inner optimizer's buffers of the shard's length (as
// many as StateBytesFor says, the rule train's meta path follows for whole
// parameters), in parameter order. The blocks are the DataParallel's.
func (z *zeroOpt) allocateMeta(store *nn.Store) error {
	for _, p := range store.Trainable() {
		lo, hi, _ := z.span(int(p.Numel()))
		if hi <= lo {
			continue
		}
		per := int64(hi-lo) * 4
		module := p.Name[:max(0, strings.LastIndexByte(p.Name, '.'))]
		for range z.inner.StateBytesFor(int64(hi-lo)) / per {
			b, err := z.d.dev.Alloc.Allocate(per, device.Tag{Category: device.OptimizerState, Module: module, Op: p.Name + " (shard)"})
			if err != nil {
				return fmt.Errorf("dist: rank %d: %w", z.d.c.Rank(), err)
			}
			z.d.blks = append(z.d.blks, b)
		}
	}
	return nil
}

// State is this rank's shards' state (checkpoints gather every rank's:
// DataParallel.GatherState).
func (z *zeroOpt) State() map[string]map[string][]float32 { return z.inner.State() }

// remember records the parameters, once; any gathered state is stale.
func (z *zeroOpt) remember(params []optim.Param) {
	z.saved = nil
	if z.params != nil {
		return
	}
	for _, p := range params {
		z.params = append(z.params, paramLen{p.Name, len(p.Value)})
	}
}

// GatherState gathers every rank's shards of the optimizer state, so
// that the next SaveState (train.Trainer.SaveCheckpoint) returns the whole
// state as one process holds it: a ZeRO run's checkpoint is the file one
// process writes, and resumes in one process or on any number of ranks.
// It is a collective: every rank calls it at the same point between
// steps. Under stage 0 every rank holds the whole state already.
func (d *DataParallel) GatherState(ctx context.Context) error {
	if d.t == nil {
		return fmt.Errorf("%w: no trainer", ErrConfig)
	}
	z, ok := d.t.Opt.(*zeroOpt)
	if !ok {
		return nil
	}
	so, ok := z.inner.(optim.Stateful)
	if !ok {
		return fmt.Errorf("%w: optimizer %T cannot save its state", ErrConfig, z.inner)
	}
	own := so.SaveState()
	var bufs []string // every parameter's buffers are named alike
	for _, p := range z.params {
		if b := own.Buffers[p.name]; b != nil {
			for k := range b {
				bufs = append(bufs, k)
			}
			break
		}
	}
	slices.Sort(bufs)
	whole := optim.SavedState{Kind: own.Kind, LR: own.LR, Buffers: map[string]map[string][]float32{}, Counts: map[string]map[string]int64{}}
	prev := d.ctx
	d.ctx = ctx
	defer func() { d.ctx = prev }()
	for _, p := range z.params {
		lo, hi, _ := z.span(p.n)
		m := map[string][]float32{}
		for _, b := range bufs {
			v := make([]float32, p.n)
			if hi > lo {
				copy(v[lo:hi], own.Buffers[p.name][b])
			}
			if err := z.gather(v); err != nil {
				return err
			}
			m[b] = v
		}
		if len(m) > 0 {
			whole.Buffers[p.name] = m
		}
		// Rank 0 holds a shard of every parameter, so its counts are
		// whole; they are the same on every rank that holds one.
		if c, ok := own.Counts[p.name]; ok {
			whole.Counts[p.name] = c
		}
	}
	z.saved = &whole
	return nil
}

// SaveState implements optim.Stateful: the state GatherState gathered.
// Without it, this rank's shards under a kind no optimizer loads, so that
// a checkpoint of one rank's shards cannot pass for a whole one.
func (z *zeroOpt) SaveState() optim.SavedState {
	if s := z.saved; s != nil {
		z.saved = nil
		return *s
	}
	so, ok := z.inner.(optim.Stateful)
	if !ok {
		return optim.SavedState{Kind: fmt.Sprintf("%T (not stateful)", z.inner)}
	}
	s := so.SaveState()
	s.Kind = fmt.Sprintf("%s (rank %d's ZeRO shards, not gathered: DataParallel.GatherState on every rank first)", s.Kind, z.d.c.Rank())
	return s
}

// LoadState implements optim.Stateful: the whole state (as one process
// saves it, or a ZeRO run after GatherState) is cut into this rank's
// shards.
func (z *zeroOpt) LoadState(s optim.SavedState) error {
	so, ok := z.inner.(optim.Stateful)
	if !ok {
		return fmt.Errorf("%w: optimizer %T cannot load a state", ErrConfig, z.inner)
	}
	lens := map[string]int{}
	for _, p := range z.params {
		lens[p.name] = p.n
	}
	shard := optim.SavedState{Kind: s.Kind, LR: s.LR, Buffers: map[string]map[string][]float32{}, Counts: map[string]map[string]int64{}}
	for name, bufs := range s.Buffers {
		n, ok := lens[name]
		if !ok {
			return fmt.Errorf("%w: state of %q, which is not a parameter of the model", optim.ErrState, name)
		}
		lo, hi, _ := z.span(n)
		m := map[string][]float32{}
		for b, v := range bufs {
			if len(v) != n {
				return fmt.Errorf("%w: %s of %q has %d values, the parameter %d", optim.ErrState, b, name, len(v), n)
			}
			m[b] = v[lo:hi]
		}
		if hi > lo {
			shard.Buffers[name] = m
		}
	}
	for name, c := range s.Counts {
		if n, ok := lens[name]; ok {
			if lo, hi, _ := z.span(n); hi > lo {
				shard.Counts[name] = c
			}
		}
	}
	z.saved = nil
	return so.LoadState(shard)
}
