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
type profiler struct {
	mu    sync.Mutex
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
	nodes int64     // node slices written
}

func newProfiler(path string, dev *device.Device) (*profiler, error) {
	f, err := safefile.Create(path, 0o644)
	if err != nil {
		return nil, err
	}
	p := &profiler{f: f, w: bufio.NewWriterSize(f, 1<<16), dev: dev, t0: time.Now(), last: -1}
	p.w.WriteString(`{"displayTimeUnit":"ms","otherData":{"producer":"headroom train --profile"},"traceEvents":[` + "\n")
	meta := func(tid int, name string, sort int) {
		p.event(map[string]any{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": map[string]any{"name": name}})
		p.event(map[string]any{"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": map[string]any{"sort_index": sort}})
	}
	p.event(map[string]any{"name": "process_name", "ph": "M", "pid": 1, "args": map[string]any{"name": "headroom train"}})
	meta(tidSteps, "steps", 0)
	meta(tidNodes, "nodes (ops)", 1)
	meta(tidData, "data loader", 2)
	return p, nil
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
	p.begin, p.pass, p.last = time.Now(), 0, -1
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
	p.event(map[string]any{"name": label, "cat": cat, "ph": "X", "pid": 1, "tid": tidNodes, "ts": p.us(now.Add(-d)), "dur": float64(d.Nanoseconds()) / 1e3, "args": args})
	p.event(map[string]any{"name": "memory", "ph": "C", "pid": 1, "ts": p.us(now),
		"args": map[string]any{"allocated": st.AllocatedBytes.Current, "reserved": st.ReservedBytes.Current}})
	p.alloc = st.AllocatedBytes.Current
	p.nodes++
}

// stepDone writes the step's slice and the wait for its data before it.
func (p *profiler) stepDone(rec runreport.Step) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if rec.DataWaitSec > 0 {
		wait := time.Duration(rec.DataWaitSec * float64(time.Second))
		p.event(map[string]any{"name": "data wait", "cat": "data", "ph": "X", "pid": 1, "tid": tidData,
			"ts": p.us(p.begin.Add(-wait)), "dur": float64(wait.Nanoseconds()) / 1e3, "args": map[string]any{"step": p.step}})
	}
	args := map[string]any{"step": rec.Step, "epoch": rec.Epoch, "samples": rec.Samples, "passes": p.pass, "peak_allocated": rec.PeakAllocated, "peak_reserved": rec.PeakReserved}
	if l := rec.Loss; l == l && l-l == 0 { // finite: JSON has no NaN
		args["loss"] = l
	}
	p.event(map[string]any{"name": fmt.Sprintf("step %d", rec.Step), "cat": "step", "ph": "X", "pid": 1, "tid": tidSteps,
		"ts": p.us(p.begin), "dur": float64(now.Sub(p.begin).Nanoseconds()) / 1e3, "args": args})
}

// close ends the JSON and puts the file in place.
func (p *profiler) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A last metadata event, so the list ends without a trailing comma.
	data, _ := json.Marshal(map[string]any{"name": "process_labels", "ph": "M", "pid": 1,
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
