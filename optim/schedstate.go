package optim

import "fmt"

// SchedulerState is a scheduler's position, PyTorch's scheduler
// state_dict(): enough for a scheduler built the same way to continue
// exactly where the saved one stopped. The rates are float64 and are
// stored exactly (JSON writes the shortest decimal that reads back to the
// same bits).
type SchedulerState struct {
	Kind      string  `json:"kind"`
	LastEpoch int     `json:"last_epoch"`
	StepCount int     `json:"step_count"`
	LastLR    float64 `json:"last_lr"`
	BaseLR    float64 `json:"base_lr"`
	// Schedulers holds SequentialLR's children, in order.
	Schedulers []SchedulerState `json:"schedulers,omitempty"`
}

// StatefulScheduler is implemented by every scheduler of this package.
// LoadState restores the scheduler only; the optimizer's own rate comes
// back with the optimizer's state (as in PyTorch, where the learning rate
// lives in the optimizer's param_groups).
type StatefulScheduler interface {
	Scheduler
	SaveState() SchedulerState
	LoadState(s SchedulerState) error
}

var (
	_ StatefulScheduler = (*StepLR)(nil)
	_ StatefulScheduler = (*LinearLR)(nil)
	_ StatefulScheduler = (*CosineAnnealingLR)(nil)
	_ StatefulScheduler = (*SequentialLR)(nil)
)

func (c *schedCore) save(kind string) SchedulerState {
	return SchedulerState{Kind: kind, LastEpoch: c.epoch, StepCount: c.count, LastLR: c.last, BaseLR: c.base}
}

func (c *schedCore) load(kind string, s SchedulerState) error {
	if s.Kind != kind {
		return fmt.Errorf("optim: %s: cannot load the state of a %s", kind, s.Kind)
	}
	if len(s.Schedulers) != 0 {
		return fmt.Errorf("optim: %s: the state has %d child schedulers, want none", kind, len(s.Schedulers))
	}
	c.epoch, c.count, c.last, c.base = s.LastEpoch, s.StepCount, s.LastLR, s.BaseLR
	return nil
}

// SaveState implements StatefulScheduler.
func (s *StepLR) SaveState() SchedulerState { return s.save("StepLR") }

// LoadState implements StatefulScheduler.
func (s *StepLR) LoadState(st SchedulerState) error { return s.load("StepLR", st) }

// SaveState implements StatefulScheduler.
func (s *LinearLR) SaveState() SchedulerState { return s.save("LinearLR") }

// LoadState implements StatefulScheduler.
func (s *LinearLR) LoadState(st SchedulerState) error { return s.load("LinearLR", st) }

// SaveState implements StatefulScheduler.
func (s *CosineAnnealingLR) SaveState() SchedulerState { return s.save("CosineAnnealingLR") }

// LoadState implements StatefulScheduler.
func (s *CosineAnnealingLR) LoadState(st SchedulerState) error {
	return s.load("CosineAnnealingLR", st)
}

// SaveState implements StatefulScheduler.
func (s *SequentialLR) SaveState() SchedulerState {
	st := SchedulerState{Kind: "SequentialLR", LastEpoch: s.epoch, LastLR: s.last}
	if len(s.scheds) > 0 {
		st.BaseLR = s.scheds[0].core().base
	}
	for _, c := range s.scheds {
		st.Schedulers = append(st.Schedulers, c.(StatefulScheduler).SaveState())
	}
	return st
}

// LoadState implements StatefulScheduler. Nothing changes when the state
// does not fit (another kind or number of children).
func (s *SequentialLR) LoadState(st SchedulerState) error {
	if st.Kind != "SequentialLR" {
		return fmt.Errorf("optim: SequentialLR: cannot load the state of a %s", st.Kind)
	}
	if len(st.Schedulers) != len(s.scheds) {
		return fmt.Errorf("optim: SequentialLR: the state has %d schedulers, this one %d", len(st.Schedulers), len(s.scheds))
	}
	// Every child is checked before any changes.
	for i, c := range s.scheds {
		if k := c.(StatefulScheduler).SaveState().Kind; k != st.Schedulers[i].Kind || len(st.Schedulers[i].Schedulers) != 0 {
			return fmt.Errorf("optim: SequentialLR: scheduler %d is a %s, the state's a %s", i, k, st.Schedulers[i].Kind)
		}
	}
	for i, c := range s.scheds {
		if err := c.(StatefulScheduler).LoadState(st.Schedulers[i]); err != nil {
			return err
		}
	}
	s.epoch, s.last = st.LastEpoch, st.LastLR
	return nil
}
