package memviz

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/headroom-ml/headroom/device"
)

// Limits of what the viewer sends to the page.
const (
	// MaxPoints is the most points of the timeline: a longer history is
	// cut into this many runs of consecutive events, each shown by its
	// event of most memory (so the peak is always a point).
	MaxPoints = 1000
	// MaxAllocationSeries is the most allocations the timeline of a
	// PyTorch snapshot draws as bands of their own (the largest); the rest
	// are stacked as one band, "other".
	MaxAllocationSeries = 40
	// MaxLargest is the length of the table of largest allocations.
	MaxLargest = 25
	// MaxStateBlocks is the most tiles (blocks and free spaces) a state
	// sends to the page, over all its segments: the rest of a segment past
	// it is one tile of state "elided" that counts the blocks in it. The
	// page draws what it is sent, so this bounds the reply and the drawing
	// whatever the snapshot holds.
	MaxStateBlocks = 2000
	// MaxStateSegments is the most segments a state lists; the rest are
	// counted (SegmentCount) and their bytes summed, not drawn.
	MaxStateSegments = 1000
	// MaxText is the most bytes of text taken from a snapshot (a module
	// path, a frame) that one field of a reply holds.
	MaxText = 300
	// MaxStackFrames is the most frames of an allocation's stack sent.
	MaxStackFrames = 64
	// MaxDetail is the most allocations a timeline stacked by allocation
	// may give bands of their own (the page's detail control).
	MaxDetail = 100
	// MaxOOMs is the most out-of-memory events listed (all are counted).
	MaxOOMs = 100
	// MaxEventPage is the most events one /api/events reply lists.
	MaxEventPage = 200
)

// Stacking modes of the timeline.
const (
	ByCategory   = "category"
	ByAllocation = "allocation"
)

// Colors of categories (and of allocations, in turn), Tableau 10 as
// memory_viz uses.
var palette = []string{"#4e79a7", "#f28e2c", "#e15759", "#76b7b2", "#59a14f", "#edc949", "#af7aa1", "#ff9da7", "#9c755f", "#bab0ab"}

const colorOther = "#c8c8c8"

// Analysis is the viewer's reading of one device of a snapshot: every
// allocation's lifetime over the history, from which the timeline, the
// peak and the state at any event follow.
type Analysis struct {
	snap   *Snapshot
	device int
	events []Event
	mode   string
	allocs []allocation
	series []seriesInfo
	arenas []span
	totals []int64 // active bytes after each event (one point when there are no events)
	peak   int     // first index of the largest total
	timed  bool    // every event has a time, in order: the x-axis is time

	segs      []segSpan // segments' lives (segtimeline.go)
	segOf     []int     // each segment's band
	segSeries []seriesInfo
	reserved  []int64 // reserved bytes after each event
	steps     []StepPeak

	byStart, byEnd []int32 // allocations by start and by end (orderAllocs)
	// the events that change segments, in order: a state request undoes
	// those after its event, not every event of a long history
	segChanges []int
	of         []int       // each allocation's band at the default detail
	marks      []sweepMark // the default bands' sweep every markEvery events
}

// allocation is one block's life: live after event i when start <= i < end.
type allocation struct {
	addr, size, requested int64
	amount                int64 // what it adds to the timeline: size for headroom, requested for PyTorch
	start, end            int   // start -1: allocated before the history; end: the free, or the number of points
	pendingFrom           int   // PyTorch's free_requested: pending from this index on
	category, module, op  string
	frames                []Frame
	series                int
}

type openKey struct {
	addr, size int64
	category   string
}

type seriesInfo struct {
	key, label, color string
	stack             string // an allocation's band: its stack (or module path)
}

// span is a range of addresses alive over [start, end) of the events.
type span struct {
	addr, size int64
	start, end int
}

// Analyze reads the history and final state of one device. Device 0 of a
// snapshot with nothing in it is empty, not an error.
func Analyze(s *Snapshot, dev int) (*Analysis, error) {
	if dev != 0 && !slices.Contains(s.Devices(), dev) {
		return nil, fmt.Errorf("device %d has no memory in this snapshot (devices: %v)", dev, s.Devices())
	}
	a := &Analysis{snap: s, device: dev}
	if dev < len(s.Traces) {
		a.events = s.Traces[dev]
	}
	a.mode = ByAllocation
	if s.Source == SourceHeadroom {
		a.mode = ByCategory
	} else {
		for i := range a.events {
			if c := a.events[i].Category; c != "" && c != categoryUnknown {
				a.mode = ByCategory
				break
			}
		}
	}
	a.collect()
	a.sweepTotals() // the peak first: the band of smaller allocations counts those live there
	a.assignSeries()
	a.orderAllocs()
	a.markSweeps()
	a.sweepReserved()
	a.steps = a.stepPeaks()
	a.timed = len(a.events) > 0
	for i := range a.events {
		if t := a.events[i].TimeUS; t <= 0 || i > 0 && t < a.events[i-1].TimeUS {
			a.timed = false
			break
		}
	}
	for i := range a.events {
		switch a.events[i].Action {
		case device.ActionSegmentAlloc, device.ActionSegmentFree, actionSegmentMap, actionSegmentUnmap:
			a.segChanges = append(a.segChanges, i)
		}
	}
	return a, nil
}

// Devices lists the devices with segments or history, in order.
func (s *Snapshot) Devices() []int {
	var out []int
	for d, tr := range s.Traces {
		if len(tr) > 0 {
			out = append(out, d)
		}
	}
	for _, g := range s.Segments {
		if !slices.Contains(out, g.Device) {
			out = append(out, g.Device)
		}
	}
	slices.Sort(out)
	return out
}

func (a *Analysis) points() int { return max(len(a.events), 1) }

func (a *Analysis) collect() {
	n, end := len(a.events), a.points()
	headroom := a.snap.Source == SourceHeadroom
	// Open allocations by address. headroom's Track has no address: its
	// allocs and frees pair up by size and category instead.
	open := map[openKey][]int{}
	key := func(e *Event) openKey {
		if e.Addr == 0 {
			return openKey{size: e.Size, category: e.Category}
		}
		return openKey{addr: e.Addr}
	}
	pop := func(k openKey) (int, bool) {
		l := open[k]
		if len(l) == 0 {
			return 0, false
		}
		j := l[len(l)-1]
		if len(l) == 1 {
			delete(open, k)
		} else {
			open[k] = l[:len(l)-1]
		}
		return j, true
	}
	newAlloc := func(e *Event, start int) int {
		al := allocation{addr: e.Addr, size: e.bytes(), requested: e.Size, start: start, end: end, pendingFrom: end,
			category: e.Category, module: e.Module, op: e.Op, frames: e.Frames}
		al.amount = al.size
		if !headroom {
			al.amount = al.requested
		}
		a.allocs = append(a.allocs, al)
		return len(a.allocs) - 1
	}
	arenaOpen := map[int64]int{}
	for i := 0; i < n; i++ {
		e := &a.events[i]
		switch e.Action {
		case device.ActionAlloc:
			k := key(e)
			if e.Addr != 0 {
				if j, ok := pop(k); ok {
					a.allocs[j].end = i // freed without a record of it
				}
			}
			open[k] = append(open[k], newAlloc(e, i))
		case actionFreeRequested:
			k := key(e)
			l := open[k]
			if len(l) == 0 {
				l = append(l, newAlloc(e, -1))
				open[k] = l
			}
			j := l[len(l)-1]
			a.allocs[j].pendingFrom = min(a.allocs[j].pendingFrom, i)
		case device.ActionFree, actionFreeCompleted:
			j, ok := pop(key(e))
			if !ok {
				j = newAlloc(e, -1)
			}
			a.allocs[j].end = i
		case device.ActionReserve:
			a.arenas = append(a.arenas, span{addr: e.Addr, size: e.bytes(), start: i, end: end})
			arenaOpen[e.Addr] = len(a.arenas) - 1
		case device.ActionRelease:
			if j, ok := arenaOpen[e.Addr]; ok {
				a.arenas[j].end = i
				delete(arenaOpen, e.Addr)
			} else {
				a.arenas = append(a.arenas, span{addr: e.Addr, size: e.bytes(), start: -1, end: i})
			}
		}
	}
	// The final state: blocks still allocated were allocated in the
	// history (and their blocks tell their true size) or before it.
	// Arena space in the final state not covered by an arena reserved in
	// the history was reserved before it.
	covered := func(addr int64) bool {
		for _, j := range arenaOpen {
			if r := a.arenas[j]; r.addr <= addr && addr < r.addr+r.size {
				return true
			}
		}
		return false
	}
	for _, seg := range a.snap.Segments {
		if seg.Device != a.device {
			continue
		}
		run := -1
		for _, b := range seg.Blocks {
			switch {
			case !b.Arena || covered(b.Address):
				run = -1
			case run >= 0 && a.arenas[run].addr+a.arenas[run].size == b.Address:
				a.arenas[run].size += b.Size
			default:
				a.arenas = append(a.arenas, span{addr: b.Address, size: b.Size, start: -1, end: end})
				run = len(a.arenas) - 1
			}
			if b.State != device.StateActiveAllocated && b.State != statePendingFree {
				continue
			}
			j, ok := pop(openKey{addr: b.Address})
			if !ok {
				e := Event{Addr: b.Address, Size: b.Requested, BlockSize: b.Size, Category: b.Category, Module: b.Module, Op: b.Op, Frames: b.Frames}
				j = newAlloc(&e, -1)
			}
			al := &a.allocs[j]
			al.size = b.Size
			if al.frames == nil {
				al.frames = b.Frames
			}
			if b.State == statePendingFree && al.pendingFrom == end {
				al.pendingFrom = -1
			}
		}
	}
}

func (a *Analysis) assignSeries() {
	if a.mode == ByCategory {
		seen := map[string]bool{}
		for i := range a.allocs {
			c := a.allocs[i].category
			if c == "" {
				c = categoryUnknown
			}
			seen[c] = true
		}
		var keys []string
		for _, c := range device.Categories() {
			if seen[c.String()] {
				keys = append(keys, c.String())
				delete(seen, c.String())
			}
		}
		unknown := seen[categoryUnknown]
		delete(seen, categoryUnknown)
		rest := make([]string, 0, len(seen))
		for c := range seen {
			rest = append(rest, c)
		}
		sort.Strings(rest)
		keys = append(keys, rest...)
		if unknown {
			keys = append(keys, categoryUnknown)
		}
		// Categories are the file's strings: past MaxAllocationSeries of
		// them, the rest share one band, so the timeline stays bounded.
		var others []string
		if len(keys) > MaxAllocationSeries {
			keys, others = keys[:MaxAllocationSeries], keys[MaxAllocationSeries:]
		}
		index := map[string]int{}
		for i, k := range keys {
			index[k] = i
			a.series = append(a.series, seriesInfo{key: clipText(k), label: clipText(k), color: categoryColor(k, i)})
		}
		for _, k := range others {
			index[k] = len(keys)
		}
		if len(others) > 0 {
			a.series = append(a.series, seriesInfo{key: "other", label: fmt.Sprintf("%d other categories", len(others)), color: colorOther})
		}
		for i := range a.allocs {
			c := a.allocs[i].category
			if c == "" {
				c = categoryUnknown
			}
			a.allocs[i].series = index[c]
		}
		return
	}
	a.series, _ = a.allocationSeries(MaxAllocationSeries, true)
}

// allocationSeries gives the n largest allocations bands of their own, in
// the order they were allocated, and stacks the rest as one; set writes
// the assignment into the allocations (the default detail), otherwise it
// is returned.
func (a *Analysis) allocationSeries(n int, set bool) ([]seriesInfo, []int) {
	order := make([]int, len(a.allocs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(a.allocs[y].amount, a.allocs[x].amount) })
	own := order[:min(len(order), n)]
	slices.Sort(own) // allocation order: allocs are appended as the history goes
	other := len(own)
	of := make([]int, len(a.allocs))
	for i := range of {
		of[i] = other
	}
	var series []seriesInfo
	for k, j := range own {
		of[j] = k
		al := &a.allocs[j]
		series = append(series, seriesInfo{key: fmt.Sprintf("a%d", j), label: allocationLabel(al), color: palette[k%len(palette)],
			stack: cmp.Or(formatStack(al.frames), a.where(al))})
	}
	if len(own) < len(a.allocs) {
		// The band's count is of what it holds at the peak (what its
		// height there is made of), then of all it ever held.
		live := 0
		for _, j := range a.liveAt(a.peak) {
			if of[j] == other {
				live++
			}
		}
		series = append(series, seriesInfo{key: "other", color: colorOther,
			label: fmt.Sprintf("%d smaller allocations live at the peak (%d over the history)", live, len(a.allocs)-len(own))})
	}
	if set {
		for i := range a.allocs {
			a.allocs[i].series = of[i]
		}
	}
	return series, of
}

func categoryColor(c string, i int) string {
	if c == categoryUnknown {
		return colorOther
	}
	for j, k := range device.Categories() {
		if k.String() == c {
			return palette[j]
		}
	}
	return palette[(len(device.Categories())+i)%len(palette)]
}

func allocationLabel(al *allocation) string {
	where := whereOf(SourcePyTorch, al.category, al.module, al.op, al.frames)
	if where == "" {
		where = "no stack recorded"
	}
	return fmt.Sprintf("%s at %#x: %s", device.FormatBytes(al.amount), al.addr, where)
}

// where says who asked for an allocation: headroom's module path and op,
// or the innermost Python frame of PyTorch's stack (see topFrame).
func (a *Analysis) where(al *allocation) string {
	return whereOf(a.snap.Source, al.category, al.module, al.op, al.frames)
}

func whereOf(source, category, module, op string, frames []Frame) string {
	return clipText(whereOf1(source, category, module, op, frames))
}

// clipText bounds text from a snapshot to MaxText bytes.
func clipText(s string) string {
	if len(s) <= MaxText {
		return s
	}
	n := MaxText
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func whereOf1(source, category, module, op string, frames []Frame) string {
	if source == SourceHeadroom {
		if category == "" && module == "" && op == "" {
			return ""
		}
		return cmp.Or(module, topLevel) + " " + cmp.Or(op, category)
	}
	if module != "" || op != "" {
		return cmp.Or(module, topLevel) + " " + op
	}
	if f, ok := topFrame(frames); ok {
		return fmt.Sprintf("%s:%d %s", f.Filename, f.Line, f.Name)
	}
	return ""
}

// Frames memory_viz leaves out of stacks (its frameFilter).
var (
	omitFunctions = []string{"unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start", "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_"}
	omitFiles     = []string{"core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c", "Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h"}
)

func keepFrame(f Frame) bool {
	for _, s := range omitFunctions {
		if strings.Contains(f.Name, s) {
			return false
		}
	}
	for _, s := range omitFiles {
		if strings.Contains(f.Filename, s) {
			return false
		}
	}
	return true
}

// topFrame is the frame that says who asked: the innermost Python frame
// outside the framework (the user's line that called into torch.nn, not
// conv.py's _conv_forward, which every convolution shares; see
// libraryFile), else the innermost Python frame (PyTorch's C++ frames,
// when recorded, are the allocator's and the dispatcher's), else the
// innermost frame memory_viz would show. The side pane shows the whole
// stack.
func topFrame(fs []Frame) (Frame, bool) {
	for _, f := range fs {
		if strings.HasSuffix(f.Filename, ".py") && !libraryFile(f.Filename) {
			return f, true
		}
	}
	for _, f := range fs {
		if strings.HasSuffix(f.Filename, ".py") {
			return f, true
		}
	}
	for _, f := range fs {
		if keepFrame(f) {
			return f, true
		}
	}
	return Frame{}, false
}

// libraryParts mark a Python file as a library's: installed packages,
// and PyTorch's own files wherever they are (a source checkout).
var libraryParts = []string{"/site-packages/", "/dist-packages/", "/torch/"}

// libraryFile reports whether a Python file is the framework's or another
// library's rather than the user's: an installed package, PyTorch, the
// standard library (.../lib/python3.11/, Debian's /usr/lib/python3/) or a
// frozen module (<frozen runpy>). scripts/reference/snapshot_ref.py's
// library_file is the same rule.
func libraryFile(name string) bool {
	if strings.HasPrefix(name, "<") {
		return true
	}
	for _, p := range libraryParts {
		if strings.Contains(name, p) {
			return true
		}
	}
	parts := strings.Split(name, "/")
	for i := 0; i+2 < len(parts); i++ {
		if parts[i] == "lib" && strings.HasPrefix(parts[i+1], "python") {
			return true
		}
	}
	return false
}

func formatStack(fs []Frame) string {
	var b strings.Builder
	n := 0
	for i, f := range fs {
		if !keepFrame(f) {
			continue
		}
		if n == MaxStackFrames {
			fmt.Fprintf(&b, "... (%d more frames)\n", len(fs)-i)
			break
		}
		n++
		fmt.Fprintf(&b, "%s\n", clipText(fmt.Sprintf("%s:%d:%s", f.Filename, f.Line, f.Name)))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// sweepTotals computes the active bytes after every event and the peak.
func (a *Analysis) sweepTotals() {
	np := a.points()
	delta := make([]int64, np+1)
	var base int64
	for i := range a.allocs {
		al := &a.allocs[i]
		if al.start >= al.end {
			continue
		}
		if al.start < 0 {
			base += al.amount
		} else {
			delta[al.start] += al.amount
		}
		if al.end < np {
			delta[al.end] -= al.amount
		}
	}
	a.totals = make([]int64, np)
	cur := base
	for i := range np {
		cur += delta[i]
		a.totals[i] = cur
		if cur > a.totals[a.peak] {
			a.peak = i
		}
	}
}

// samples picks the event indices the timeline shows.
func (a *Analysis) samples() []int { return a.samplesIn(0, len(a.totals)-1) }

// samplesIn picks at most MaxPoints event indices of [lo, hi]: every one
// when they fit, else each of MaxPoints runs of consecutive events by its
// event of most memory (so the range's peak is always a point).
func (a *Analysis) samplesIn(lo, hi int) []int {
	np := hi - lo + 1
	if np <= MaxPoints {
		out := make([]int, np)
		for i := range out {
			out[i] = lo + i
		}
		return out
	}
	out := make([]int, 0, MaxPoints)
	for b := range MaxPoints {
		l, h := lo+b*np/MaxPoints, lo+(b+1)*np/MaxPoints
		best := l
		for i := l + 1; i < h; i++ {
			if a.totals[i] > a.totals[best] {
				best = i
			}
		}
		out = append(out, best)
	}
	return out
}

// seriesAt returns each series' bytes after each of the given (increasing)
// event indices: one sweep over the allocations in the order they start
// and in the order they end (orders made once, in Analyze), so a zoomed
// range of a long history costs no memory per event.
func (a *Analysis) seriesAt(idx []int, of []int, nseries int) [][]int64 {
	out := make([][]int64, nseries)
	for s := range out {
		out[s] = make([]int64, 0, len(idx))
	}
	var from *sweepMark
	if len(idx) > 0 && len(of) > 0 && len(a.of) > 0 && &of[0] == &a.of[0] {
		// the default bands: start from the last mark before the range
		if k := sort.Search(len(a.marks), func(k int) bool { return a.marks[k].at > idx[0] }) - 1; k >= 0 {
			from = &a.marks[k]
		}
	}
	a.sweep(idx, of, nseries, from, func(_ int, cur []int64, _, _ int) {
		for s := range out {
			out[s] = append(out[s], cur[s])
		}
	})
	return out
}

// sweepMark is the state of a sweep (see sweep) at event at, for the
// default bands: a zoomed range of a long history starts from the last
// mark before it instead of from the first event.
type sweepMark struct {
	at, ps, pe int
	cur        []int64
}

// markEvery is the events between sweep marks: a mark costs a value per
// band, and a range's sweep at most this many events before it.
const markEvery = 1 << 16

// sweep visits the given events (in order) with the bytes of each band
// live after each, from the start of the history or from a mark.
func (a *Analysis) sweep(idx []int, of []int, nseries int, from *sweepMark, visit func(k int, cur []int64, ps, pe int)) {
	cur := make([]int64, nseries)
	ps, pe := 0, 0
	if from != nil {
		copy(cur, from.cur)
		ps, pe = from.ps, from.pe
	} else {
		for i := range a.allocs {
			if al := &a.allocs[i]; al.start < 0 && al.start < al.end {
				cur[of[i]] += al.amount
			}
		}
	}
	for k, i := range idx {
		for ; ps < len(a.byStart) && a.allocs[a.byStart[ps]].start <= i; ps++ {
			j := a.byStart[ps]
			cur[of[j]] += a.allocs[j].amount
		}
		for ; pe < len(a.byEnd) && a.allocs[a.byEnd[pe]].end <= i; pe++ {
			j := a.byEnd[pe]
			cur[of[j]] -= a.allocs[j].amount
		}
		visit(k, cur, ps, pe)
	}
}

// markSweeps keeps each allocation's default band and the sweep's state
// every markEvery events, once: a zoom request then neither copies the
// bands of every allocation nor sweeps the history before its range.
func (a *Analysis) markSweeps() {
	a.of = make([]int, len(a.allocs))
	for i := range a.allocs {
		a.of[i] = a.allocs[i].series
	}
	var at []int
	for i := markEvery; i < a.points(); i += markEvery {
		at = append(at, i)
	}
	a.sweep(at, a.of, len(a.series), nil, func(k int, cur []int64, ps, pe int) {
		a.marks = append(a.marks, sweepMark{at: at[k], ps: ps, pe: pe, cur: slices.Clone(cur)})
	})
}

// orderAllocs makes the orders seriesAt sweeps: the allocations that
// start in the history by start, those that end in it by end (each only
// if it lives at all).
func (a *Analysis) orderAllocs() {
	np := a.points()
	a.byStart, a.byEnd = nil, nil
	for i := range a.allocs {
		al := &a.allocs[i]
		if al.start >= al.end {
			continue
		}
		if al.start >= 0 {
			a.byStart = append(a.byStart, int32(i))
		}
		if al.end < np {
			a.byEnd = append(a.byEnd, int32(i))
		}
	}
	slices.SortStableFunc(a.byStart, func(x, y int32) int { return cmp.Compare(a.allocs[x].start, a.allocs[y].start) })
	slices.SortStableFunc(a.byEnd, func(x, y int32) int { return cmp.Compare(a.allocs[x].end, a.allocs[y].end) })
}

func (a *Analysis) liveAt(i int) []int {
	var out []int
	for j := range a.allocs {
		if al := &a.allocs[j]; al.start <= i && i < al.end {
			out = append(out, j)
		}
	}
	return out
}

// Summary is what the page draws first: the timeline, the peak and the
// largest allocations at it (GET /api/summary).
type Summary struct {
	File    string `json:"file"`
	Source  string `json:"source"`
	Device  int    `json:"device"`
	Devices []int  `json:"devices"`
	Mode    string `json:"mode"`
	// Axis is what the timeline's x-axis shows: "time" when every event
	// of the history has a time, in order (Timeline.Time), else "event".
	Axis   string `json:"axis"`
	Events int    `json:"events"` // events shown (after merging)
	// FileEvents is the entries of the file's history for this device;
	// Merged of them were free_requested and free_completed pairs shown
	// as one free each: FileEvents = Events + Merged.
	FileEvents int `json:"file_events"`
	Merged     int `json:"merged"`
	// OOMCount is the out-of-memory events of the history, of which OOMs
	// lists the first MaxOOMs.
	OOMCount int   `json:"oom_count"`
	OOMs     []OOM `json:"ooms"`
	// Detail is how many allocations have bands of their own (stacked by
	// allocation; 0 when stacked by category), of Allocations in all.
	Detail      int          `json:"detail"`
	Allocations int          `json:"allocations"`
	Headroom    *HeadroomSum `json:"headroom,omitempty"`
	Timeline    Timeline     `json:"timeline"`
	// Reserved is the cached-segment timeline: the reserved bytes at the
	// same points, stacked by segment.
	Reserved *Timeline `json:"reserved"`
	// Steps is the peak of each training step, from the step markers the
	// trainer writes into the history.
	Steps   *Steps  `json:"steps"`
	Peak    Peak    `json:"peak"`
	Largest []Alloc `json:"largest"`
	// Live: the snapshot is a training run's, taken while it runs
	// (/api/live streams its steps).
	Live bool `json:"live,omitempty"`
}

// OOM is an out-of-memory event: the request refused and what the
// device had free then.
type OOM struct {
	Event     int   `json:"event"`
	Requested int64 `json:"requested"`
	// DeviceFree is the device's free bytes as the file records them (-1
	// for headroom's device without a limit; 0 when not recorded).
	DeviceFree int64  `json:"device_free"`
	TimeUS     int64  `json:"time_us"`
	Active     int64  `json:"active"` // active bytes at that moment, as the timeline counts them
	Where      string `json:"where"`
}

// HeadroomSum is what headroom's own statistics say, for comparison with
// what the history shows.
type HeadroomSum struct {
	Device         string           `json:"device"`
	Capacity       int64            `json:"capacity"`
	Limit          int64            `json:"limit"`
	AllocatedPeak  int64            `json:"allocated_peak"`
	ReservedPeak   int64            `json:"reserved_peak"`
	CategoryAtPeak map[string]int64 `json:"category_at_peak"`
}

// Timeline is the active memory after each shown event, stacked.
type Timeline struct {
	Index  []int    `json:"index"`          // event index of each point
	Time   []int64  `json:"time,omitempty"` // with Summary.Axis "time": each point's time (µs since the Unix epoch)
	Total  []int64  `json:"total"`
	Series []Series `json:"series"` // bottom first
	// Reserved, in a zoomed range's reply (/api/timeline), is the
	// cached-segment timeline at the same points.
	Reserved *Timeline `json:"reserved,omitempty"`
}

// Series is one stacked band of the timeline.
type Series struct {
	Key    string  `json:"key"`
	Label  string  `json:"label"`
	Color  string  `json:"color"`
	Stack  string  `json:"stack,omitempty"` // an allocation's band: its stack, innermost first
	Values []int64 `json:"values"`
}

// Peak is the first event after which the active memory is largest.
type Peak struct {
	Event  int         `json:"event"`
	Total  int64       `json:"total"`
	Series []SeriesVal `json:"series"`
}

// SeriesVal is a series' bytes at the peak.
type SeriesVal struct {
	Key   string `json:"key"`
	Label string `json:"label"`
	Color string `json:"color"`
	Bytes int64  `json:"bytes"`
}

// Alloc is an allocation in a table.
type Alloc struct {
	Address   int64  `json:"address"`
	Size      int64  `json:"size"` // bytes counted in the timeline
	Requested int64  `json:"requested"`
	Block     int64  `json:"block"` // bytes the block occupies
	Category  string `json:"category"`
	Module    string `json:"module"`
	Op        string `json:"op"`
	Where     string `json:"where"`
	Stack     string `json:"stack"`
	Since     int    `json:"since"` // event of the alloc; -1: before the history
	Color     string `json:"color"`
}

// Summary returns the timeline, the peak and the largest allocations there,
// at the default detail.
func (a *Analysis) Summary(file string) *Summary { return a.SummaryDetail(file, 0) }

// SummaryDetail is Summary with detail allocations given bands of their
// own when the timeline is stacked by allocation (0: MaxAllocationSeries;
// clamped to 1..MaxDetail).
func (a *Analysis) SummaryDetail(file string, detail int) *Summary {
	s := &Summary{File: file, Source: a.snap.Source, Device: a.device, Devices: a.snap.Devices(), Mode: a.mode, Events: len(a.events),
		Allocations: len(a.allocs), OOMs: []OOM{}, Axis: "event", Steps: a.StepSummary()}
	if a.timed {
		s.Axis = "time"
	}
	s.FileEvents = s.Events
	if a.device < len(a.snap.Merged) {
		s.Merged = a.snap.Merged[a.device]
		s.FileEvents += s.Merged
	}
	for i := range a.events {
		if e := &a.events[i]; e.Action == device.ActionOOM {
			s.OOMCount++
			if len(s.OOMs) < MaxOOMs {
				s.OOMs = append(s.OOMs, OOM{Event: i, Requested: e.Size, DeviceFree: e.DeviceFree, TimeUS: e.TimeUS,
					Active: a.totals[i], Where: whereOf(a.snap.Source, e.Category, e.Module, e.Op, e.Frames)})
			}
		}
	}
	if h := a.snap.Headroom; h != nil {
		s.Headroom = &HeadroomSum{Device: clipText(h.Device), Capacity: h.Capacity, Limit: h.Limit,
			AllocatedPeak: h.Stats["allocated_bytes.all.peak"], ReservedPeak: h.Stats["reserved_bytes.all.peak"],
			CategoryAtPeak: largestEntries(h.CategoryBytesAtPeak, MaxAllocationSeries)}
	}
	series, of, detail := a.assignment(detail)
	s.Detail = detail
	idx := a.samples()
	vals := a.seriesAt(idx, of, len(series))
	s.Timeline.Index = idx
	s.Timeline.Time = a.times(idx)
	s.Timeline.Total = make([]int64, len(idx))
	for k, i := range idx {
		s.Timeline.Total[k] = a.totals[i]
	}
	s.Reserved = a.reservedAt(idx)
	pk := max(0, slices.Index(idx, a.peak))
	s.Peak = Peak{Event: a.peak, Total: a.totals[a.peak]}
	for i, si := range series {
		s.Timeline.Series = append(s.Timeline.Series, Series{Key: si.key, Label: si.label, Color: si.color, Stack: si.stack, Values: vals[i]})
		s.Peak.Series = append(s.Peak.Series, SeriesVal{Key: si.key, Label: si.label, Color: si.color, Bytes: vals[i][pk]})
	}
	live := a.liveAt(a.peak)
	slices.SortFunc(live, func(x, y int) int {
		return cmp.Or(cmp.Compare(a.allocs[y].amount, a.allocs[x].amount), cmp.Compare(a.allocs[x].addr, a.allocs[y].addr), cmp.Compare(x, y))
	})
	for _, j := range live[:min(len(live), MaxLargest)] {
		s.Largest = append(s.Largest, a.alloc(j))
	}
	if s.Largest == nil {
		s.Largest = []Alloc{}
	}
	return s
}

// assignment is the bands at the given detail (see SummaryDetail) and
// each allocation's band; the detail used (0 when stacked by category).
func (a *Analysis) assignment(detail int) ([]seriesInfo, []int, int) {
	series, of := a.series, a.of // shared: read only
	if a.mode != ByAllocation {
		return series, of, 0
	}
	if detail <= 0 {
		detail = MaxAllocationSeries
	}
	detail = min(detail, MaxDetail)
	if detail != MaxAllocationSeries {
		series, of = a.allocationSeries(detail, false)
	}
	return series, of, detail
}

// TimelineRange is the timeline of events from to to (clamped to the
// history), at most MaxPoints of them, at the given detail: what the page
// draws when zoomed into a history longer than the summary's points
// (GET /api/timeline?from=A&to=B&detail=K).
func (a *Analysis) TimelineRange(from, to, detail int) *Timeline {
	last := len(a.totals) - 1
	from, to = max(0, min(from, last)), max(0, min(to, last))
	if from > to {
		from, to = to, from
	}
	series, of, _ := a.assignment(detail)
	idx := a.samplesIn(from, to)
	vals := a.seriesAt(idx, of, len(series))
	t := &Timeline{Index: idx, Time: a.times(idx), Total: make([]int64, len(idx)), Reserved: a.reservedAt(idx)}
	for k, i := range idx {
		t.Total[k] = a.totals[i]
	}
	for i, si := range series {
		t.Series = append(t.Series, Series{Key: si.key, Label: si.label, Color: si.color, Stack: si.stack, Values: vals[i]})
	}
	return t
}

// times is the time of each of the given events, nil when the x-axis is
// not time.
func (a *Analysis) times(idx []int) []int64 {
	if !a.timed {
		return nil
	}
	out := make([]int64, len(idx))
	for k, i := range idx {
		out[k] = a.events[i].TimeUS
	}
	return out
}

// largestEntries is m, or its n largest entries when it has more (a
// crafted file may name any number of categories).
func largestEntries(m map[string]int64, n int) map[string]int64 {
	if len(m) <= n {
		return m
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int { return cmp.Or(cmp.Compare(m[y], m[x]), strings.Compare(x, y)) })
	out := make(map[string]int64, n)
	for _, k := range keys[:n] {
		out[clipText(k)] = m[k]
	}
	return out
}

func (a *Analysis) alloc(j int) Alloc {
	al := &a.allocs[j]
	out := Alloc{Address: al.addr, Size: al.amount, Requested: al.requested, Block: al.size, Category: clipText(al.category),
		Module: clipText(al.module), Op: clipText(al.op), Where: a.where(al), Stack: formatStack(al.frames), Since: al.start,
		Color: a.series[al.series].color}
	if out.Module == "" && out.Op == "" {
		if a.snap.Source == SourceHeadroom {
			if out.Category != "" {
				out.Module = topLevel
			}
		} else if f, ok := topFrame(al.frames); ok {
			// PyTorch's: the innermost frame stands for module and op
			out.Module, out.Op = clipText(fmt.Sprintf("%s:%d", f.Filename, f.Line)), clipText(f.Name)
		}
	}
	return out
}

// State is the allocator's segments and blocks after one event (GET
// /api/state?event=N).
type State struct {
	Event    int        `json:"event"`
	Events   int        `json:"events"`
	Desc     string     `json:"desc"`  // the event, in words
	Stack    string     `json:"stack"` // the event's stack (or module path), innermost first
	Reserved int64      `json:"reserved"`
	Active   int64      `json:"active"` // as the timeline counts it
	Blocks   int        `json:"blocks"` // live blocks
	Segments []SegState `json:"segments"`
	// SegmentCount is the number of segments, of which Segments lists at
	// most MaxStateSegments.
	SegmentCount int `json:"segment_count"`
	Unplaced     int `json:"unplaced"` // live blocks without an address (headroom's Track) or outside every segment
	// Truncated: more than MaxStateBlocks tiles or MaxStateSegments
	// segments, so some blocks are elided or some segments not listed.
	Truncated bool `json:"truncated"`
}

// SegState is a segment at an event.
type SegState struct {
	Address int64       `json:"address"`
	Size    int64       `json:"size"`
	Type    string      `json:"type"`
	Active  int64       `json:"active"` // bytes of its live blocks
	Blocks  []BlockTile `json:"blocks"`
}

// BlockTile is a piece of a segment at an event: a live block or free
// space.
type BlockTile struct {
	Address   int64  `json:"address"`
	Size      int64  `json:"size"`
	Requested int64  `json:"requested,omitempty"`
	State     string `json:"state"`           // active_allocated, active_pending_free, inactive, arena (free space held by a step arena), or elided
	Count     int    `json:"count,omitempty"` // for an elided tile: the live blocks in it, not sent
	Category  string `json:"category,omitempty"`
	Where     string `json:"where,omitempty"`
	Color     string `json:"color,omitempty"`
}

const (
	stateArena  = "arena"
	stateElided = "elided"
)

// State returns the segments and blocks after event i (clamped to the
// history), found by undoing the later events' segment changes from the
// snapshot's final state, as memory_viz does.
func (a *Analysis) State(i int) *State {
	i = max(0, min(i, a.points()-1))
	st := &State{Event: i, Events: len(a.events), Segments: []SegState{}}
	if i < len(a.events) {
		st.Desc = a.describe(i)
		st.Stack = a.eventStack(i)
	} else {
		st.Desc = "no history recorded: the state when the snapshot was taken"
	}
	segs := a.segmentsAt(i)
	live := a.liveAt(i)
	slices.SortFunc(live, func(x, y int) int { return cmp.Compare(a.allocs[x].addr, a.allocs[y].addr) })
	var arenas []span
	for _, s := range a.arenas {
		if s.start <= i && i < s.end {
			arenas = append(arenas, s)
		}
	}
	slices.SortFunc(arenas, func(x, y span) int { return cmp.Compare(x.addr, y.addr) })
	bySeg := make([][]int, len(segs))
	for _, j := range live {
		al := &a.allocs[j]
		st.Active += al.amount
		st.Blocks++
		k := sort.Search(len(segs), func(k int) bool { return segs[k].addr+segs[k].size > al.addr })
		if k == len(segs) || segs[k].addr > al.addr {
			st.Unplaced++
			continue
		}
		bySeg[k] = append(bySeg[k], j)
	}
	shown := 0
	st.SegmentCount = len(segs)
	for k, sg := range segs {
		st.Reserved += sg.size
		if len(st.Segments) == MaxStateSegments {
			st.Truncated = true
			continue
		}
		ss := SegState{Address: sg.addr, Size: sg.size, Type: sg.typ, Blocks: []BlockTile{}}
		at, end := sg.addr, sg.addr+sg.size
		gap := func(to int64) {
			for at < to {
				// split free space by the arenas that hold it
				next, state := to, device.StateInactive
				for _, r := range arenas {
					if r.addr <= at && at < r.addr+r.size {
						next, state = min(to, r.addr+r.size), stateArena
						break
					}
					if r.addr > at && r.addr < next {
						next = r.addr
					}
				}
				if next <= at {
					break // an inconsistent file: do not loop
				}
				ss.Blocks = append(ss.Blocks, BlockTile{Address: at, Size: next - at, State: state})
				at = next
			}
		}
		for _, j := range bySeg[k] {
			al := &a.allocs[j]
			gap(min(al.addr, end))
			state := device.StateActiveAllocated
			if al.pendingFrom <= i {
				state = statePendingFree
			}
			ss.Blocks = append(ss.Blocks, BlockTile{Address: al.addr, Size: al.size, Requested: al.requested, State: state,
				Category: clipText(al.category), Where: a.where(al), Color: a.series[al.series].color})
			ss.Active += al.size
			at = max(at, min(al.addr+al.size, end))
		}
		gap(end)
		if keep := max(MaxStateBlocks-shown, 0); len(ss.Blocks) > keep {
			// One tile stands for the rest of the segment.
			rest := ss.Blocks[keep:]
			el := BlockTile{Address: rest[0].Address, Size: end - rest[0].Address, State: stateElided}
			for _, b := range rest {
				if b.State == device.StateActiveAllocated || b.State == statePendingFree {
					el.Count++
				}
			}
			ss.Blocks = append(ss.Blocks[:keep:keep], el)
			st.Truncated = true
		}
		shown += len(ss.Blocks)
		st.Segments = append(st.Segments, ss)
	}
	return st
}

type segRange struct {
	addr, size int64
	typ        string
	stream     int64
}

// segmentsAt undoes the segment events after i from the final segments.
func (a *Analysis) segmentsAt(i int) []segRange {
	var segs []segRange
	for _, g := range a.snap.Segments {
		if g.Device == a.device {
			segs = append(segs, segRange{addr: g.Address, size: g.TotalSize, typ: g.Type, stream: g.Stream})
		}
	}
	slices.SortFunc(segs, func(x, y segRange) int { return cmp.Compare(x.addr, y.addr) })
	find := func(addr int64) int {
		return sort.Search(len(segs), func(k int) bool { return segs[k].addr+segs[k].size > addr })
	}
	for c := len(a.segChanges) - 1; c >= 0 && a.segChanges[c] > i; c-- {
		e := &a.events[a.segChanges[c]]
		switch e.Action {
		case device.ActionSegmentFree: // undo: the segment comes back
			k := find(e.Addr)
			segs = slices.Insert(segs, k, segRange{addr: e.Addr, size: e.Size, typ: e.Pool, stream: e.Stream})
		case device.ActionSegmentAlloc: // undo: the segment goes
			if k := find(e.Addr); k < len(segs) && segs[k].addr == e.Addr {
				segs = slices.Delete(segs, k, k+1)
			}
		case actionSegmentUnmap: // undo: the range is mapped again, merged with its neighbours
			k := find(e.Addr)
			r := segRange{addr: e.Addr, size: e.Size, typ: e.Pool, stream: e.Stream}
			if k < len(segs) && segs[k].addr < r.addr+r.size {
				continue // overlaps a mapped range: an inconsistent file
			}
			if k < len(segs) && segs[k].addr == r.addr+r.size && segs[k].stream == r.stream {
				r.size += segs[k].size
				r.typ = cmp.Or(r.typ, segs[k].typ)
				segs = slices.Delete(segs, k, k+1)
			}
			if k > 0 && segs[k-1].addr+segs[k-1].size == r.addr && segs[k-1].stream == r.stream {
				segs[k-1].size += r.size
				continue
			}
			segs = slices.Insert(segs, k, r)
		case actionSegmentMap: // undo: the range is unmapped, splitting its segment
			k := find(e.Addr)
			if k == len(segs) || segs[k].addr > e.Addr || e.Addr+e.Size > segs[k].addr+segs[k].size {
				continue
			}
			g := segs[k]
			left := segRange{addr: g.addr, size: e.Addr - g.addr, typ: g.typ, stream: g.stream}
			right := segRange{addr: e.Addr + e.Size, size: g.addr + g.size - e.Addr - e.Size, typ: g.typ, stream: g.stream}
			segs = slices.Delete(segs, k, k+1)
			if right.size > 0 {
				segs = slices.Insert(segs, k, right)
			}
			if left.size > 0 {
				segs = slices.Insert(segs, k, left)
			}
		}
	}
	return segs
}

func (a *Analysis) describe(i int) string {
	e := &a.events[i]
	var b strings.Builder
	fmt.Fprintf(&b, "event %d: %s", i, e.Action)
	switch e.Action {
	case device.ActionOOM:
		fmt.Fprintf(&b, " of %s", device.FormatBytes(e.Size))
	case device.ActionSnapshot, device.ActionEmptyCache:
	default:
		if e.Addr == 0 {
			fmt.Fprintf(&b, " %s (no address)", device.FormatBytes(e.Size))
		} else {
			fmt.Fprintf(&b, " %s at %#x", device.FormatBytes(e.Size), e.Addr)
		}
	}
	if e.Category != "" && e.Category != categoryUnknown {
		fmt.Fprintf(&b, ", %s", clipText(e.Category))
	}
	if w := whereOf(a.snap.Source, e.Category, e.Module, e.Op, e.Frames); w != "" {
		fmt.Fprintf(&b, ", %s", w)
	}
	return b.String()
}

// eventStack is the stack of event i, or who asked when no frame is
// recorded.
func (a *Analysis) eventStack(i int) string {
	e := &a.events[i]
	return cmp.Or(formatStack(e.Frames), whereOf(a.snap.Source, e.Category, e.Module, e.Op, e.Frames))
}

// EventRow is one event of the event list.
type EventRow struct {
	Index  int    `json:"index"`
	Action string `json:"action"`
	Size   int64  `json:"size"`
	Desc   string `json:"desc"`
	Active int64  `json:"active"` // after the event, as the timeline counts
}

// Events is a page of the event list (GET /api/events?from=N).
type Events struct {
	From   int        `json:"from"`
	Events int        `json:"events"` // in all
	Rows   []EventRow `json:"rows"`
}

// Events lists at most MaxEventPage events from event from on (clamped
// to the history).
func (a *Analysis) Events(from int) *Events {
	from = max(0, min(from, len(a.events)))
	out := &Events{From: from, Events: len(a.events), Rows: []EventRow{}}
	for i := from; i < len(a.events) && len(out.Rows) < MaxEventPage; i++ {
		e := &a.events[i]
		out.Rows = append(out.Rows, EventRow{Index: i, Action: clipText(e.Action), Size: e.Size, Desc: a.describe(i), Active: a.totals[i]})
	}
	return out
}
