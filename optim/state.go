package optim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// SavedState is an optimizer's whole state, for a checkpoint: enough for a
// fresh optimizer of the same kind and hyperparameters to continue exactly
// where this one stopped.
type SavedState struct {
	// Kind is "SGD", "Adam" or "AdamW": loading one kind's state into
	// another is an error, not a silent reinterpretation.
	Kind string
	// LR is the learning rate now (a schedule may have moved it).
	LR float64
	// Buffers are the per-parameter float32 buffers under PyTorch's names
	// ("momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"). On
	// save they are the optimizer's own storage, not copies: write them out
	// before the next step.
	Buffers map[string]map[string][]float32
	// Counts are the per-parameter integers: Adam's "step" (kept exact;
	// PyTorch's float32 step is not past 2^24) and SGD's "started" (1 once
	// the momentum buffer holds a blend, 0 while the next update copies the
	// gradient into it).
	Counts map[string]map[string]int64
}

// Stateful is implemented by every optimizer of this package: SaveState
// and LoadState round-trip everything later steps depend on, so that a
// resumed run's updates are bit for bit those of an uninterrupted one.
type Stateful interface {
	Optimizer
	SaveState() SavedState
	// LoadState replaces the state with s, copying the buffers into the
	// optimizer's own storage (allocated through its AllocFunc when
	// missing). It checks everything before changing anything.
	LoadState(s SavedState) error
}

var (
	_ Stateful = (*SGD)(nil)
	_ Stateful = (*Adam)(nil)
)

// ErrState is wrapped by LoadState's errors: a state that does not belong
// to this optimizer (another kind, a missing or mis-sized buffer).
var ErrState = errors.New("optim: state does not match the optimizer")

// SaveState implements Stateful.
func (o *SGD) SaveState() SavedState {
	s := SavedState{Kind: "SGD", LR: o.cfg.LR, Buffers: map[string]map[string][]float32{}, Counts: map[string]map[string]int64{}}
	for name, st := range o.state {
		started := int64(0)
		if st.started {
			started = 1
		}
		s.Buffers[name] = map[string][]float32{"momentum_buffer": st.buf}
		s.Counts[name] = map[string]int64{"started": started}
	}
	return s
}

// LoadState implements Stateful.
func (o *SGD) LoadState(s SavedState) error {
	if s.Kind != "SGD" {
		return fmt.Errorf("%w: a %s state given to SGD", ErrState, s.Kind)
	}
	if o.cfg.Momentum == 0 && len(s.Buffers) > 0 {
		return fmt.Errorf("%w: momentum buffers given to SGD without momentum", ErrState)
	}
	for _, name := range sortedKeys(s.Buffers) {
		if err := checkBuffers(name, s.Buffers[name], []string{"momentum_buffer"}, o.size(name)); err != nil {
			return err
		}
	}
	fresh, err := allocMissing(o.Alloc, s.Buffers, func(name string) bool { return o.state[name] != nil }, []string{"momentum_buffer"})
	if err != nil {
		return err
	}
	for name, bufs := range fresh {
		o.state[name] = &sgdState{buf: bufs["momentum_buffer"]}
	}
	for name, bufs := range s.Buffers {
		st := o.state[name]
		copy(st.buf, bufs["momentum_buffer"])
		st.started = s.Counts[name]["started"] != 0
	}
	o.cfg.LR = s.LR
	return nil
}

func (o *SGD) size(name string) int {
	if st := o.state[name]; st != nil {
		return len(st.buf)
	}
	return -1
}

// SaveState implements Stateful.
func (o *Adam) SaveState() SavedState {
	s := SavedState{Kind: o.kind(), LR: o.cfg.LR, Buffers: map[string]map[string][]float32{}, Counts: map[string]map[string]int64{}}
	for name, st := range o.state {
		b := map[string][]float32{"exp_avg": st.expAvg, "exp_avg_sq": st.expAvgSq}
		if st.maxExpSq != nil {
			b["max_exp_avg_sq"] = st.maxExpSq
		}
		s.Buffers[name] = b
		s.Counts[name] = map[string]int64{"step": st.step}
	}
	return s
}

func (o *Adam) kind() string {
	if o.decoupled {
		return "AdamW"
	}
	return "Adam"
}

// LoadState implements Stateful.
func (o *Adam) LoadState(s SavedState) error {
	if s.Kind != o.kind() {
		return fmt.Errorf("%w: a %s state given to %s", ErrState, s.Kind, o.kind())
	}
	want := []string{"exp_avg", "exp_avg_sq"}
	if o.cfg.AMSGrad {
		want = append(want, "max_exp_avg_sq")
	}
	for _, name := range sortedKeys(s.Buffers) {
		size := -1
		if st := o.state[name]; st != nil {
			size = len(st.expAvg)
		}
		if err := checkBuffers(name, s.Buffers[name], want, size); err != nil {
			return err
		}
		if step, ok := s.Counts[name]["step"]; !ok || step < 0 {
			return fmt.Errorf("%w: parameter %q has no valid step count", ErrState, name)
		}
	}
	fresh, err := allocMissing(o.Alloc, s.Buffers, func(name string) bool { return o.state[name] != nil }, want)
	if err != nil {
		return err
	}
	for name, bufs := range fresh {
		o.state[name] = &adamState{expAvg: bufs["exp_avg"], expAvgSq: bufs["exp_avg_sq"], maxExpSq: bufs["max_exp_avg_sq"]}
	}
	for name, bufs := range s.Buffers {
		st := o.state[name]
		copy(st.expAvg, bufs["exp_avg"])
		copy(st.expAvgSq, bufs["exp_avg_sq"])
		copy(st.maxExpSq, bufs["max_exp_avg_sq"])
		st.step = s.Counts[name]["step"]
	}
	o.cfg.LR = s.LR
	return nil
}

// checkBuffers checks that a parameter's saved buffers are exactly want,
// of one length, and of the size its existing state has (size -1: none).
func checkBuffers(name string, bufs map[string][]float32, want []string, size int) error {
	if len(bufs) != len(want) {
		return fmt.Errorf("%w: parameter %q has buffers %v, want %v", ErrState, name, sortedKeys(bufs), want)
	}
	n := -1
	for _, b := range want {
		v, ok := bufs[b]
		if !ok {
			return fmt.Errorf("%w: parameter %q has no %s", ErrState, name, b)
		}
		if n >= 0 && len(v) != n {
			return fmt.Errorf("%w: parameter %q: %s has %d elements, the others %d", ErrState, name, b, len(v), n)
		}
		n = len(v)
	}
	if size >= 0 && n != size {
		return fmt.Errorf("%w: parameter %q: saved state has %d elements, the optimizer's %d", ErrState, name, n, size)
	}
	return nil
}

// allocMissing allocates, before anything is changed, the buffers of the
// parameters that have no state yet.
func allocMissing(f AllocFunc, saved map[string]map[string][]float32, has func(string) bool, want []string) (map[string]map[string][]float32, error) {
	fresh := map[string]map[string][]float32{}
	for _, name := range sortedKeys(saved) {
		if has(name) {
			continue
		}
		m := map[string][]float32{}
		for _, b := range want {
			buf, err := alloc(f, name, b, len(saved[name][b]))
			if err != nil {
				return nil, err
			}
			m[b] = buf
		}
		fresh[name] = m
	}
	return fresh, nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
