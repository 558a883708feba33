package pipeline

import "fmt"

// Schedule is the order in which stages run the micro-batches of a step.
type Schedule uint8

const (
	// GPipe runs every micro-batch forward, then every one backward (the
	// last first): each stage keeps the inputs of all micro-batches.
	GPipe Schedule = iota
	// OneFOneB (1F1B, PipeDream-Flush) starts the backward pass of a
	// micro-batch as soon as it can, each stage alternating one forward
	// and one backward after a warm-up of as many forwards as stages
	// after it: a stage keeps the inputs of a few micro-batches (bounded
	// by the number of stages), not of all M.
	OneFOneB
)

func (s Schedule) String() string {
	switch s {
	case GPipe:
		return "gpipe"
	case OneFOneB:
		return "1f1b"
	}
	return fmt.Sprintf("Schedule(%d)", s)
}

// event is a stage running a micro-batch's forward or backward program.
type event struct {
	s, m     int
	backward bool
}

// order is the sequence in which a step of M micro-batches on S stages
// runs its events, in one process: each stage's own list (by the
// schedule) is followed, stages taking turns, one event each per round,
// whenever the event's inputs are ready. The last stage has no forward
// events: its backward program runs its forward pass. Plan simulates
// the same order, so each device's planned peak is the one measured.
func order(S, M int, sched Schedule) []event {
	lists := stageLists(S, M, sched)
	return interleave(S, M, sched, lists)
}

// stageLists are the events of each stage in the order the schedule runs
// them on that stage.
func stageLists(S, M int, sched Schedule) [][]event {
	lists := make([][]event, S)
	for s := range S {
		last := s == S-1
		var l []event
		switch sched {
		case OneFOneB:
			w := min(S-1-s, M)
			for m := range w {
				l = append(l, event{s, m, false})
			}
			for i := range M - w {
				if !last {
					l = append(l, event{s, w + i, false})
				}
				l = append(l, event{s, i, true})
			}
			for m := M - w; m < M; m++ {
				l = append(l, event{s, m, true})
			}
		default:
			if !last {
				for m := range M {
					l = append(l, event{s, m, false})
				}
			}
			for m := M - 1; m >= 0; m-- {
				l = append(l, event{s, m, true})
			}
		}
		lists[s] = l
	}
	return lists
}

func interleave(S, M int, sched Schedule, lists [][]event) []event {
	fwd := make([][]bool, S)
	bwd := make([][]bool, S)
	for s := range S {
		fwd[s], bwd[s] = make([]bool, M), make([]bool, M)
	}
	ready := func(e event) bool {
		if !e.backward {
			return e.s == 0 || fwd[e.s-1][e.m]
		}
		if e.s == S-1 {
			return e.s == 0 || fwd[e.s-1][e.m]
		}
		return bwd[e.s+1][e.m] && fwd[e.s][e.m]
	}
	next := make([]int, S)
	var out []event
	for len(out) < 2*S*M-M {
		progressed := false
		for s := range S {
			if next[s] == len(lists[s]) {
				continue
			}
			e := lists[s][next[s]]
			if !ready(e) {
				continue
			}
			out = append(out, e)
			next[s]++
			progressed = true
			if e.backward {
				bwd[s][e.m] = true
			} else {
				fwd[s][e.m] = true
			}
		}
		if !progressed {
			panic(fmt.Sprintf("pipeline: schedule %v of %d micro-batches on %d stages is stuck", sched, M, S))
		}
	}
	return out
}

// firstBackward is the micro-batch whose backward pass runs first on
// every stage: it writes the gradient buffers, the others add to them.
func firstBackward(M int, sched Schedule) int {
	if sched == OneFOneB {
		return 0
	}
	return M - 1
}
