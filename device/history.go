package device

import "time"

// Actions of history entries. The first six are PyTorch's names
// (torch.cuda.memory._snapshot()["device_traces"]), "free" as PyTorch's
// memory_viz calls a free_requested immediately followed by its
// free_completed (on this allocator a free always completes at once). The
// rest are headroom's: a step arena reserved or released (its tensors have
// their own alloc and free entries), a call to EmptyCache, and the start
// and end of a training step (MarkStep), which PyTorch's history has no
// entry for: memory_viz lists an action it does not know and draws nothing
// for it.
const (
	ActionAlloc        = "alloc"
	ActionFree         = "free"
	ActionSegmentAlloc = "segment_alloc"
	ActionSegmentFree  = "segment_free"
	ActionOOM          = "oom"
	ActionSnapshot     = "snapshot"
	ActionReserve      = "reserve"
	ActionRelease      = "release"
	ActionEmptyCache   = "empty_cache"
	ActionStepBegin    = "step_begin"
	ActionStepEnd      = "step_end"
)

// TraceEntry is one event of the allocator's history, laid out as an
// entry of PyTorch's device_traces plus headroom's fields (see
// docs/snapshot-schema.md).
type TraceEntry struct {
	Action string `json:"action"`
	// Addr is the block's or segment's address (0 for oom, empty_cache,
	// snapshot, and for Track without a position).
	Addr int64 `json:"addr"`
	// Size is the requested bytes of an alloc, free, reserve or release,
	// the segment size of segment_alloc and segment_free, the rounded
	// request of an oom.
	Size   int64 `json:"size"`
	Stream int64 `json:"stream"`
	// TimeUS is microseconds since the Unix epoch.
	TimeUS int64 `json:"time_us"`
	// DeviceFree is, for oom, the bytes of the limit not reserved (-1 when
	// the device has no limit).
	DeviceFree int64 `json:"device_free,omitempty"`

	// headroom's fields.
	BlockSize int64  `json:"block_size,omitempty"` // bytes the block occupies (counted in allocated_bytes)
	Pool      string `json:"pool,omitempty"`       // "small" or "large"
	Category  string `json:"category,omitempty"`
	Module    string `json:"module,omitempty"`
	Op        string `json:"op,omitempty"`
	// Step is the training step a step_begin or step_end entry marks,
	// counted from 1 per allocator.
	Step int64 `json:"step,omitempty"`
}

// history is a ring buffer of trace entries.
type history struct {
	on   bool
	max  int
	buf  []TraceEntry
	next int   // oldest entry once full
	step int64 // the last step MarkStep began
}

func (h *history) add(e TraceEntry) {
	if len(h.buf) < h.max {
		h.buf = append(h.buf, e)
		return
	}
	h.buf[h.next] = e
	h.next++
	if h.next == h.max {
		h.next = 0
	}
}

// entries returns the history oldest first.
func (h *history) entries() []TraceEntry {
	out := make([]TraceEntry, 0, len(h.buf))
	out = append(out, h.buf[h.next:]...)
	return append(out, h.buf[:h.next]...)
}

// RecordHistory starts recording alloc, free, segment, oom and empty_cache
// events, keeping the latest maxEntries of them (as
// torch.cuda.memory._record_memory_history(max_entries=...)); maxEntries <= 0
// stops recording and keeps what was recorded. Changing the size keeps the
// newest entries that fit. Recording is off by default; when off, the
// allocator tests one boolean per event.
func (a *Allocator) RecordHistory(maxEntries int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if maxEntries <= 0 {
		a.hist.on = false
		return
	}
	old := a.hist.entries()
	if len(old) > maxEntries {
		old = old[len(old)-maxEntries:]
	}
	a.hist = history{on: true, max: maxEntries, buf: old, step: a.hist.step}
}

// MarkStep records the start of a training step in the history (a
// step_begin entry with the step's number, counted from 1 on this
// allocator) and returns the function that records its end (step_end), so
// a viewer can find each step's peak; a growing peak is a leak. It records
// nothing while history is off, and costs one locked boolean test then.
func (a *Allocator) MarkStep() (end func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.hist.on {
		return func() {}
	}
	a.hist.step++
	n := a.hist.step
	a.recordLocked(TraceEntry{Action: ActionStepBegin, Step: n}, nil)
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.hist.on {
			a.recordLocked(TraceEntry{Action: ActionStepEnd, Step: n}, nil)
		}
	}
}

// ClearHistory drops every recorded entry.
func (a *Allocator) ClearHistory() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hist.buf, a.hist.next = nil, 0
}

// History returns the recorded entries, oldest first.
func (a *Allocator) History() []TraceEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hist.entries()
}

func (a *Allocator) recordLocked(e TraceEntry, tag *Tag) {
	e.TimeUS = time.Now().UnixMicro()
	if tag != nil {
		e.Category, e.Module, e.Op = tag.Category.String(), tag.Module, tag.Op
	}
	a.hist.add(e)
}
