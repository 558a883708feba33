package memviz

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/headroom-ml/headroom/device"
)

// MaxLiveSteps is the most steps a live view keeps (the latest).
const MaxLiveSteps = 10000

// liveRefresh is how often at most a live server takes a new snapshot of
// the allocator: taking one copies its history.
const liveRefresh = time.Second

// LiveStep is what a training step reports to the live view.
type LiveStep struct {
	Step  int64 `json:"step"`
	Epoch int   `json:"epoch"`
	// Loss is nil when it is not a finite number (or none was computed,
	// on the meta device).
	Loss          *float64 `json:"loss"`
	Samples       int      `json:"samples"`
	SamplesPerSec float64  `json:"samples_per_s"`
	StepSec       float64  `json:"step_s"`
	Allocated     int64    `json:"allocated"` // after the step
	Reserved      int64    `json:"reserved"`
	PeakAllocated int64    `json:"peak_allocated"` // during the step
	PeakReserved  int64    `json:"peak_reserved"`
	TimeUS        int64    `json:"time_us"` // when it ended
	// Process is the whole process's memory after the step, next to the
	// allocator's (nil: not sampled).
	Process *ProcessMemory `json:"process,omitempty"`
}

// ProcessMemory is a whole process's memory at one moment, beside the
// device allocator's own numbers (the role Memray plays for Python): the
// Go heap, the resident memory the OS counts, the device segments the
// allocator mapped (outside the Go heap on the cpu device), and the data
// loader's buffers. Resident memory holds the touched part of the
// segments, the Go heap and everything else (code, stacks, the runtime).
type ProcessMemory struct {
	// Resident and ResidentPeak are VmRSS and VmHWM (/proc/self/status);
	// -1 where the OS does not say (off Linux).
	Resident     int64 `json:"resident"`
	ResidentPeak int64 `json:"resident_peak"`
	// GoHeap is the bytes of Go heap objects (live, and dead ones not yet
	// swept: runtime/metrics /memory/classes/heap/objects:bytes),
	// GoHeapObjects their count, GoRuntime all the memory the Go runtime
	// has mapped (/memory/classes/total:bytes) and GCCycles the garbage
	// collections completed.
	GoHeap        int64 `json:"go_heap"`
	GoHeapObjects int64 `json:"go_heap_objects"`
	GoRuntime     int64 `json:"go_runtime"`
	GCCycles      int64 `json:"gc_cycles"`
	// Segments is the bytes of the device segments the allocator has
	// mapped (its reserved bytes), SegmentCount how many; Allocated the
	// bytes of its allocated blocks.
	Segments     int64 `json:"segments"`
	SegmentCount int64 `json:"segment_count"`
	Allocated    int64 `json:"allocated"`
	// LoaderStaging is the data loader's staging buffers on the device
	// (the allocator's input category), LoaderHeap what it holds on the
	// Go heap (shuffle state, decode scratch, a source kept in memory);
	// both 0 without a loader.
	LoaderStaging int64 `json:"loader_staging"`
	LoaderHeap    int64 `json:"loader_heap"`
}

// FiniteLoss is a LiveStep's Loss: nil unless v is finite.
func FiniteLoss(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// Live is a training run as the viewer shows it while it runs: its steps
// as they complete, and its allocator's snapshot, taken when the page asks
// (at most once a second). headroom train --live serves it.
//
// A Live made by NewLiveFollow has no allocator to ask: its snapshots are
// given to it (SetSnapshot) as another process writes them to a file
// (headroom viz --follow), and each new one is announced to the pages.
type Live struct {
	snapshot func() *device.Snapshot // nil: snapshots are set

	mu      sync.Mutex
	steps   []LiveStep // the latest MaxLiveSteps
	total   int64      // steps published; steps[0] is number total-len(steps)
	snap    *Snapshot  // the latest set (NewLiveFollow)
	snaps   int64      // snapshots set
	changed chan struct{}
	done    bool
	doneMsg string
}

// NewLive returns the live view of a run whose allocator snapshot takes.
func NewLive(snapshot func() *device.Snapshot) *Live {
	return &Live{snapshot: snapshot, changed: make(chan struct{})}
}

// NewLiveFollow returns a live view whose snapshots are set as they
// come (SetSnapshot), first is the first of them.
func NewLiveFollow(first *Snapshot) *Live {
	return &Live{snap: first, snaps: 1, changed: make(chan struct{})}
}

// SetSnapshot replaces the snapshot of a view made by NewLiveFollow and
// tells the pages (a "snapshot" event in their streams).
func (l *Live) SetSnapshot(s *Snapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snap = s
	l.snaps++
	close(l.changed)
	l.changed = make(chan struct{})
}

// current is the snapshot to show now.
func (l *Live) current() *Snapshot {
	if l.snapshot != nil {
		return FromDevice(l.snapshot())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snap
}

// version changes whenever there is something new to show: a step or a
// snapshot.
func (l *Live) version() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total + l.snaps
}

// Publish adds a completed step and wakes the pages that wait for one.
func (l *Live) Publish(s LiveStep) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.steps) == MaxLiveSteps {
		l.steps = append(l.steps[:0], l.steps[1:]...)
	}
	l.steps = append(l.steps, s)
	l.total++
	close(l.changed)
	l.changed = make(chan struct{})
}

// Finish says the run ended (msg says how); the pages' streams end.
func (l *Live) Finish(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done, l.doneMsg = true, msg
	close(l.changed)
	l.changed = make(chan struct{})
}

// LivePage is a page of the live view's steps (GET /api/live?poll=1&from=N).
type LivePage struct {
	From  int64      `json:"from"`  // the number of Steps[0]
	Next  int64      `json:"next"`  // the number to ask from next
	Steps []LiveStep `json:"steps"` // the steps from From on that are kept
	Done  bool       `json:"done"`
	Msg   string     `json:"msg,omitempty"`
	// Snapshots counts the snapshots set (NewLiveFollow; 0 otherwise).
	Snapshots int64 `json:"snapshots"`
}

// since returns the steps from number n on that are kept, and the channel
// closed when the next one is published.
func (l *Live) since(n int64) (LivePage, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := l.total - int64(len(l.steps))
	n = max(n, first)
	p := LivePage{From: n, Next: l.total, Steps: append([]LiveStep{}, l.steps[min(n-first, int64(len(l.steps))):]...), Done: l.done, Msg: l.doneMsg, Snapshots: l.snaps}
	return p, l.changed
}

// ServeHTTP serves the steps: as server-sent events (one "step" message
// per step, then a "done" message when the run ends), or with poll=1 as
// one JSON LivePage of the steps from number from on.
func (l *Live) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !guard(w, r) {
		return
	}
	from, err := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
	if err != nil {
		from = 0
	}
	if r.URL.Query().Get("poll") != "" {
		p, _ := l.since(from)
		writeJSON(w, p)
		return
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			from = n + 1
		}
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here: ask with poll=1", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	// The snapshots the page has been told of: none, so that a followed
	// file's count comes first (the page may have loaded the one before).
	var snaps int64
	for {
		p, changed := l.since(from)
		for i, s := range p.Steps {
			data, _ := json.Marshal(s)
			fmt.Fprintf(w, "id: %d\ndata: %s\n\n", p.From+int64(i), data)
		}
		if p.Snapshots != snaps {
			fmt.Fprintf(w, "event: snapshot\ndata: %d\n\n", p.Snapshots)
		}
		snaps = p.Snapshots
		from = p.Next
		if p.Done {
			data, _ := json.Marshal(p.Msg)
			fmt.Fprintf(w, "event: done\ndata: %s\n\n", data)
			fl.Flush()
			return
		}
		fl.Flush()
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-keep.C:
			fmt.Fprint(w, ": still training\n\n")
		}
	}
}

// NewLiveServer returns the viewer of a run while it runs: the page of
// Server, its snapshot taken from l (again when steps have completed, at
// most once a second), and /api/live.
func NewLiveServer(name string, l *Live) *Server {
	s := &Server{name: name, live: l, views: map[int]*Analysis{}, seen: -1}
	return s
}

// refresh takes a new snapshot when steps completed or a snapshot was
// set since the last one (s.mu held).
func (s *Server) refresh() {
	n := s.live.version()
	if s.snap != nil && (n == s.seen || time.Since(s.taken) < liveRefresh) {
		return
	}
	s.snap = s.live.current()
	s.views = map[int]*Analysis{}
	s.seen, s.taken = n, time.Now()
}
