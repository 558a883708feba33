package memviz

import "github.com/headroom-ml/headroom/device"

// MaxSteps is the most per-step peaks a summary lists: a longer run's
// steps are grouped into runs of consecutive steps, each shown by its
// highest peak, so a rising trend (a leak) still shows.
const MaxSteps = 1000

// StepPeak is the peak of one training step (or of a group of consecutive
// steps, when there are more than MaxSteps), found between the step_begin
// and step_end entries the trainer writes into the allocator's history
// (device.Allocator.MarkStep).
type StepPeak struct {
	Step int64 `json:"step"` // the step, or the first of the group
	Last int64 `json:"last"` // the last step of the group (Step when not grouped)
	// Begin and End are the events of its step_begin and step_end (End is
	// the history's last event for a step the history ends in).
	Begin int `json:"begin"`
	End   int `json:"end"`
	// Start is the active bytes when the step began: what earlier steps
	// left allocated. Peak is the most active bytes after any of its
	// events, first reached after event PeakEvent.
	Start     int64 `json:"start"`
	Peak      int64 `json:"peak"`
	PeakEvent int   `json:"peak_event"`
	TimeUS    int64 `json:"time_us"` // when it began (0: not recorded)
	DurUS     int64 `json:"dur_us"`  // how long it took (0: not recorded)
}

// Steps is the peak of each training step of the history.
type Steps struct {
	Count int        `json:"count"` // steps whose start is in the history
	Steps []StepPeak `json:"steps"` // at most MaxSteps (grouped beyond)
	// Rising is the number of steps, at the end of the history, each of
	// which peaked higher than the one before; RiseBytes is by how much
	// the last of them exceeds the step before the first. The first step
	// is left out (it allocates the gradients and the optimizer's state,
	// which later steps reuse). Rising >= 2 means the steps do not give
	// back what they allocate: a leak.
	Rising    int   `json:"rising"`
	RiseBytes int64 `json:"rise_bytes"`
}

// LeakSteps is how many consecutive rising step peaks Steps.Leak calls a
// leak.
const LeakSteps = 2

// Leak says whether the per-step peaks rise step after step at the end of
// the history.
func (s *Steps) Leak() bool { return s.Rising >= LeakSteps }

// stepPeaks finds every step of the history whose step_begin it holds.
func (a *Analysis) stepPeaks() []StepPeak {
	var out []StepPeak
	open := map[int64]int{} // step -> index in out
	for i := range a.events {
		e := &a.events[i]
		switch e.Action {
		case device.ActionStepBegin:
			out = append(out, StepPeak{Step: e.Step, Last: e.Step, Begin: i, End: -1, TimeUS: e.TimeUS})
			open[e.Step] = len(out) - 1
		case device.ActionStepEnd:
			if j, ok := open[e.Step]; ok {
				out[j].End = i
				if out[j].TimeUS > 0 && e.TimeUS >= out[j].TimeUS {
					out[j].DurUS = e.TimeUS - out[j].TimeUS
				}
				delete(open, e.Step)
			}
		}
	}
	for k := range out {
		s := &out[k]
		if s.End < 0 {
			s.End = len(a.events) - 1
		}
		s.Start = a.totals[s.Begin]
		s.PeakEvent = s.Begin
		for i := s.Begin; i <= s.End; i++ {
			if a.totals[i] > a.totals[s.PeakEvent] {
				s.PeakEvent = i
			}
		}
		s.Peak = a.totals[s.PeakEvent]
	}
	return out
}

// StepSummary is the per-step peaks, grouped down to MaxSteps entries.
func (a *Analysis) StepSummary() *Steps {
	all := a.steps
	out := &Steps{Count: len(all), Steps: []StepPeak{}}
	for k := len(all) - 1; k >= 2 && all[k].Peak > all[k-1].Peak; k-- {
		out.Rising++
		out.RiseBytes = all[len(all)-1].Peak - all[k-1].Peak
	}
	n := len(all)
	if n <= MaxSteps {
		out.Steps = append(out.Steps, all...)
		return out
	}
	for b := range MaxSteps {
		lo, hi := b*n/MaxSteps, (b+1)*n/MaxSteps
		g := all[lo]
		for _, s := range all[lo+1 : hi] {
			if s.Peak > g.Peak {
				g.Peak, g.PeakEvent = s.Peak, s.PeakEvent
			}
		}
		g.Last, g.End = all[hi-1].Last, all[hi-1].End
		if all[hi-1].TimeUS > 0 && g.TimeUS > 0 {
			g.DurUS = all[hi-1].TimeUS + all[hi-1].DurUS - g.TimeUS
		}
		out.Steps = append(out.Steps, g)
	}
	return out
}
