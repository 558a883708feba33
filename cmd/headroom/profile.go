package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/runreport"
	"github.com/headroom-ml/headroom/internal/safefile"
	"github.com/headroom-ml/headroom/memviz"
	"github.com/headroom-ml/headroom/trace"
)

// The tracks (Chrome trace "threads") of a profile.
const (
	tidSteps = 1 // a slice per training step
	tidNodes = 2 // a slice per executed node
	tidData  = 3 // a slice per wait for the data loader
)

// profiler writes train --profile's trace in the Chrome trace-event format
// (the JSON object form, {"traceEvents": [...]}), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open: a complete ("X") slice per
// executed node, per step and per data wait, and counter ("C") events of
// the allocator's allocated and reserved bytes after each node. Events
// are written as they happen, through a buffer, to a temporary file put
// in place when training ends (safefile), so memory stays flat however
// long the run.
//
// The same writer serves bench --profile (bench.go): each workload's child
// process writes its own trace under a process id of its own, and the
// parent merges them into one file (mergeProfiles), one Perfetto process
// per child.
type profiler struct {
	mu    sync.Mutex
	pid   int
	proc  *procProbe // the whole-process counters (procview.go); nil: none
	f     *safefile.File
	w     *bufio.Writer
	err   error
	dev   *device.Device
	t0    time.Time
	step  int64     // the step running (from 1)
	begin time.Time // when it began
	pass  int       // forward/backward passes in the step
	last  int       // the last node index observed (-1: none in this pass)
	alloc int64     // allocated bytes at the last event
	max   int64     // the most allocated after a node of this step
	nodes int64     // node slices written
}

// newProfiler starts a trace at path of the process named process (its
// pid in the trace; train is 1) running on dev, with proc's counters.
func newProfiler(path, process string, pid int, dev *device.Device, proc *procProbe) (*profiler, error) {
	f, err := safefile.Create(path, 0o644)
	if err != nil {
		return nil, err
	}
	p := &profiler{f: f, w: bufio.NewWriterSize(f, 1<<16), dev: dev, t0: time.Now(), last: -1, pid: pid, proc: proc}
	producer, _ := json.Marshal(process + " --profile")
	p.w.WriteString(`{"displayTimeUnit":"ms","otherData":{"producer":` + string(producer) + `},"traceEvents":[` + "\n")
	meta := func(tid int, name string, sort int) {
		p.event(map[string]any{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": map[string]any{"name": name}})
		p.event(map[string]any{"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": map[string]any{"sort_index": sort}})
	}
	p.event(map[string]any{"name": "process_name", "ph": "M", "pid": pid, "args": map[string]any{"name": process}})
	p.event(map[string]any{"name": "process_sort_index", "ph": "M", "pid": pid, "args": map[string]any{"sort_index": pid}})
	meta(tidSteps, "steps", 0)
	meta(tidNodes, "nodes (ops)", 1)
	meta(tidData, "data loader", 2)
	if proc != nil {
		p.processCounters(proc.sample()) // where the run starts from
	}
	return p, nil
}

// processCounters writes the whole-process view at this moment as
// counters, one track each (Perfetto draws a counter event's arguments
// as tracks of their own): resident memory beside the device segments
// and the Go heap, in bytes; the data loader's bytes; the Go heap's
// objects and collections.
func (p *profiler) processCounters(m memviz.ProcessMemory) {
	ts := p.us(time.Now())
	mem := map[string]any{"device_segments": m.Segments, "go_heap": m.GoHeap, "go_runtime": m.GoRuntime}
	if m.Resident >= 0 { // unknown off Linux: left out, not drawn as 0
		mem["resident"] = m.Resident
	}
	p.event(map[string]any{"name": "process memory", "ph": "C", "pid": p.pid, "ts": ts, "args": mem})
	p.event(map[string]any{"name": "data loader", "ph": "C", "pid": p.pid, "ts": ts,
		"args": map[string]any{"staging": m.LoaderStaging, "heap": m.LoaderHeap}})
	p.event(map[string]any{"name": "go gc", "ph": "C", "pid": p.pid, "ts": ts,
		"args": map[string]any{"heap_objects": m.GoHeapObjects, "cycles": m.GCCycles}})
}

// us is t in microseconds since the profile began.
func (p *profiler) us(t time.Time) float64 { return float64(t.Sub(p.t0).Nanoseconds()) / 1e3 }

// event writes one trace event (p.mu held, or before any concurrency).
func (p *profiler) event(e map[string]any) {
	if p.err != nil {
		return
	}
	data, err := json.Marshal(e)
	if err != nil {
		p.err = err
		return
	}
	if _, err := p.w.Write(append(data, ",\n"...)); err != nil {
		p.err = err
	}
}

func (p *profiler) stepStart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.step++
	p.begin, p.pass, p.last, p.max = time.Now(), 0, -1, 0
}

// stepMax is the most bytes allocated after a node of the step (a peak
// seen at node ends, for runs that do not reset the allocator's).
func (p *profiler) stepMax() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.max
}

// observe is exec.Options.Observe: node n (index i of its program) took d.
func (p *profiler) observe(i int, n *trace.Node, d time.Duration) {
	now := time.Now()
	st := p.dev.Alloc.Stats()
	p.mu.Lock()
	defer p.mu.Unlock()
	if i <= p.last || p.last < 0 {
		p.pass++ // a new forward/backward pass (a micro-batch)
	}
	p.last = i
	var out int64
	for _, o := range n.Outputs {
		out += o.Meta.Bytes()
	}
	name, cat := n.Op.Name(), "op"
	if n.Recompute {
		cat = "recompute"
	}
	args := map[string]any{"op": name, "module": n.Module, "node": n.ID, "index": i, "step": p.step, "pass": p.pass,
		"phase": n.Phase.String(), "output_bytes": out, "allocated_delta": st.AllocatedBytes.Current - p.alloc, "recompute": n.Recompute}
	label := name
	if n.Module != "" {
		label = n.Module + "/" + name
	}
	p.event(map[string]any{"name": label, "cat": cat, "ph": "X", "pid": p.pid, "tid": tidNodes, "ts": p.us(now.Add(-d)), "dur": float64(d.Nanoseconds()) / 1e3, "args": args})
	p.event(map[string]any{"name": "memory", "ph": "C", "pid": p.pid, "ts": p.us(now),
		"args": map[string]any{"allocated": st.AllocatedBytes.Current, "reserved": st.ReservedBytes.Current}})
	p.alloc = st.AllocatedBytes.Current
	p.max = max(p.max, p.alloc)
	p.nodes++
}

// stepDone writes the step's slice, the wait for its data before it, and
// the process's memory after it (pm).
func (p *profiler) stepDone(rec runreport.Step, pm memviz.ProcessMemory) {
	p.stepDoneAs(rec, pm, "")
}

// stepDoneAs is stepDone with a note on the step's name (bench's warm-up
// steps).
func (p *profiler) stepDoneAs(rec runreport.Step, pm memviz.ProcessMemory, note string) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if rec.DataWaitSec > 0 {
		wait := time.Duration(rec.DataWaitSec * float64(time.Second))
		p.event(map[string]any{"name": "data wait", "cat": "data", "ph": "X", "pid": p.pid, "tid": tidData,
			"ts": p.us(p.begin.Add(-wait)), "dur": float64(wait.Nanoseconds()) / 1e3, "args": map[string]any{"step": p.step}})
	}
	args := map[string]any{"step": rec.Step, "epoch": rec.Epoch, "samples": rec.Samples, "passes": p.pass, "peak_allocated": rec.PeakAllocated, "peak_reserved": rec.PeakReserved}
	if l := rec.Loss; l == l && l-l == 0 { // finite: JSON has no NaN
		args["loss"] = l
	}
	name := fmt.Sprintf("step %d", rec.Step)
	if note != "" {
		name += " (" + note + ")"
		args["note"] = note
	}
	p.event(map[string]any{"name": name, "cat": "step", "ph": "X", "pid": p.pid, "tid": tidSteps,
		"ts": p.us(p.begin), "dur": float64(now.Sub(p.begin).Nanoseconds()) / 1e3, "args": args})
	if p.proc != nil {
		p.processCounters(pm)
	}
}

// close ends the JSON and puts the file in place.
func (p *profiler) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A last metadata event, so the list ends without a trailing comma.
	data, _ := json.Marshal(map[string]any{"name": "process_labels", "ph": "M", "pid": p.pid,
		"args": map[string]any{"labels": fmt.Sprintf("%d nodes executed in %d steps", p.nodes, p.step)}})
	p.w.Write(data)
	p.w.WriteString("\n]}\n")
	if p.err == nil {
		p.err = p.w.Flush()
	}
	if p.err != nil {
		p.f.Abort()
		return p.err
	}
	return p.f.Commit()
}
