package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/runreport"
	"github.com/headroom-ml/headroom/internal/safefile"
	"github.com/headroom-ml/headroom/train"
)

// bench --profile FILE writes the trace train --profile writes
// (profile.go) for every headroom measurement: a slice per executed node,
// per step (warm-up steps named so) and the memory and whole-process
// counters. Each workload and round runs in a child process of its own
// (bench's protocol), and each child writes its trace, under a process id
// of its own, to a part file in a temporary directory beside FILE; when
// the children are done the parent merges the parts into FILE. In
// Perfetto each child is then a process ("headroom bench mlp, round 1")
// with its tracks, in the order they ran. PyTorch's children write
// nothing, and sgemm has no nodes: its process has counters only.

// benchProfile is the parent's side: the parts its children write.
type benchProfile struct {
	path  string // FILE
	dir   string // the parts' directory
	parts []string
	round map[string]int // the rounds started, per workload
}

func newBenchProfile(path string) (*benchProfile, error) {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".headroom-profile-")
	if err != nil {
		return nil, fmt.Errorf("bench: --profile: %w", err)
	}
	return &benchProfile{path: path, dir: dir, round: map[string]int{}}, nil
}

// childArgs are the flags of the next headroom child, which measures
// workload (its child name).
func (b *benchProfile) childArgs(workload string) []string {
	b.round[workload]++
	part := filepath.Join(b.dir, strconv.Itoa(len(b.parts)+1)+".json")
	b.parts = append(b.parts, part)
	name := fmt.Sprintf("headroom bench %s, round %d", workload, b.round[workload])
	return []string{"--profile", part, "--profile-pid", strconv.Itoa(len(b.parts)), "--profile-name", name}
}

// finish merges the parts written into FILE and removes them. It returns
// the number of processes merged.
func (b *benchProfile) finish() (int, error) {
	defer os.RemoveAll(b.dir)
	var found []string
	for _, p := range b.parts {
		if _, err := os.Stat(p); err == nil {
			found = append(found, p) // a child that failed early wrote none
		}
	}
	if len(found) == 0 {
		return 0, fmt.Errorf("bench: --profile: no measurement wrote a trace")
	}
	return len(found), mergeProfiles(b.path, found)
}

// mergeProfiles writes the trace events of the Chrome trace files parts,
// in order, as one trace at path. The parts' events keep their process
// ids; each part's other keys are dropped.
func mergeProfiles(path string, parts []string) error {
	f, err := safefile.Create(path, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	w.WriteString(`{"displayTimeUnit":"ms","otherData":{"producer":"headroom bench --profile"},"traceEvents":[` + "\n")
	n := 0
	for _, p := range parts {
		k, err := copyTraceEvents(w, p)
		if err != nil {
			f.Abort()
			return fmt.Errorf("%s: %w", p, err)
		}
		n += k
	}
	// A last metadata event, so the list ends without a trailing comma.
	data, _ := json.Marshal(map[string]any{"name": "trace_labels", "ph": "M", "pid": 0,
		"args": map[string]any{"labels": fmt.Sprintf("%d events of %d processes", n, len(parts))}})
	w.Write(data)
	w.WriteString("\n]}\n")
	if err := w.Flush(); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// copyTraceEvents streams the traceEvents of the trace file at path to w,
// each followed by ",\n", and returns how many.
func copyTraceEvents(w io.Writer, path string) (int, error) {
	in, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	dec := json.NewDecoder(bufio.NewReader(in))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, fmt.Errorf("not a trace-event JSON object (%v)", err)
	}
	n := 0
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return n, err
		}
		if key != "traceEvents" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return n, err
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return n, fmt.Errorf("traceEvents is not a list (%v)", err)
		}
		for dec.More() {
			var e json.RawMessage
			if err := dec.Decode(&e); err != nil {
				return n, err
			}
			if _, err := w.Write(append(e, ",\n"...)); err != nil {
				return n, err
			}
			n++
		}
		if _, err := dec.Token(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// benchWatch is a child's side: bench.Watcher writing the trace.
type benchWatch struct {
	prof *profiler
	proc *procProbe
}

// newBenchWatch starts the child's trace (f.profile, f.profilePid,
// f.profileName).
func newBenchWatch(f benchFlags) (*benchWatch, error) {
	proc := newProcProbe(nil) // the device comes with Begin
	name := f.profileName
	if name == "" {
		name = "headroom bench " + f.child
	}
	p, err := newProfiler(f.profile, name, max(f.profilePid, 1), nil, proc)
	if err != nil {
		return nil, fmt.Errorf("bench: --profile: %w", err)
	}
	return &benchWatch{prof: p, proc: proc}, nil
}

func (b *benchWatch) Begin(dev *device.Device, tr *train.Trainer) {
	b.prof.dev, b.proc.dev = dev, dev
	opts := trainerObserving(tr, b.prof.observe)
	tr.RunOptions = &opts
}

func (b *benchWatch) StepStart() { b.prof.stepStart() }

func (b *benchWatch) StepDone(i, warmup, samples int, loss float64, d time.Duration) {
	// bench does not reset the allocator's peaks (it measures over all
	// steps): the step's peak is the most seen at its nodes' ends.
	rec := runreport.Step{Step: int64(i), Epoch: 1, Loss: loss, Samples: samples, SamplesPerSec: float64(samples) / d.Seconds(), StepSec: d.Seconds(),
		PeakAllocated: b.prof.stepMax(), PeakReserved: b.prof.dev.Alloc.Stats().ReservedBytes.Current}
	note := ""
	if i <= warmup {
		note = "warm-up"
		if i == 1 {
			note = "warm-up, compiles the step"
		}
	}
	b.prof.stepDoneAs(rec, b.proc.sample(), note)
}

// close writes the trace.
func (b *benchWatch) close() error {
	if err := b.prof.close(); err != nil {
		return fmt.Errorf("bench: --profile: %w", err)
	}
	return nil
}
