package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/bench"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// traceEvent is one event of a Chrome trace, decoded strictly.
type traceEvent struct {
	Name string          `json:"name"`
	Cat  string          `json:"cat"`
	Ph   string          `json:"ph"`
	Ts   *float64        `json:"ts"`
	Dur  *float64        `json:"dur"`
	Pid  *int            `json:"pid"`
	Tid  *int            `json:"tid"`
	Args json.RawMessage `json:"args"`
}

func readTrace(t *testing.T, path string) []traceEvent {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents     []traceEvent    `json:"traceEvents"`
		DisplayTimeUnit string          `json:"displayTimeUnit"`
		OtherData       json.RawMessage `json:"otherData"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tr); err != nil {
		t.Fatalf("%s: not the trace-event JSON object: %v", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("%s: more after the object (%v)", path, err)
	}
	return tr.TraceEvents
}

// kernelsOf is the number of nodes bench's training step of the zoo model at
// batch runs kernels for (views run none).
func kernelsOf(t *testing.T, model string, batch int) int {
	t.Helper()
	spec, _ := zoo.Lookup(model)
	opt, _ := optim.NewAdam(optim.AdamDefaults())
	trainer := testkit.Trainer(t, device.CPU(), 1, testkit.Build(spec), opt)
	defer trainer.Close()
	// bench's step: gradients in the arena (no copies into buffers).
	if err := trainer.SetConfig(train.Config{}); err != nil {
		t.Fatal(err)
	}
	xm, ym := spec.Example(batch)
	prog, err := trainer.TrainProgram(xm, ym)
	if err != nil {
		t.Fatal(err)
	}
	kernels := 0
	for _, n := range prog.Plan.Order {
		if _, alias := n.Op.(trace.Aliaser); n.Kind == trace.KindOp && !alias {
			kernels++
		}
	}
	return kernels
}

// bench --profile: every headroom child writes its trace as a process of
// its own, and the parent merges them into one file. Decoded strictly,
// each process has a slice per step (warm-up ones named so), and in each
// step as many node slices as the step's schedule runs kernels, with
// memory and whole-process counters.
func TestBenchProfile(t *testing.T) {
	defer parallel.SetThreads(parallel.Threads())
	dir := t.TempDir()
	path := filepath.Join(dir, "bench.json")
	prof, err := newBenchProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	const warmup, steps = 1, 1
	for round := 1; round <= 2; round++ {
		// the flags the parent gives its child, parsed as the child does
		var f benchFlags
		fs := benchFlagSet(&f)
		if err := fs.Parse(append([]string{"--child", "zoo:mlp:16", "--steps", "1", "--warmup", "1", "--threads", "1"}, prof.childArgs("zoo:mlp:16")...)); err != nil {
			t.Fatal(err)
		}
		var out, log bytes.Buffer
		if err := benchChild(context.Background(), f, &out, &log); err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		if rs, err := bench.ScanResults(&out, nil); err != nil || len(rs) != 1 || rs[0].Error != "" {
			t.Fatalf("results %v, %v", rs, err)
		}
	}
	n, err := prof.finish()
	if err != nil || n != 2 {
		t.Fatalf("merged %d processes: %v", n, err)
	}
	if _, err := os.Stat(prof.dir); !os.IsNotExist(err) {
		t.Errorf("the parts' directory is left: %v", err)
	}
	kernels := kernelsOf(t, "mlp", 16)

	type key struct {
		pid  int
		step int64
	}
	nodes := map[key]int{}
	stepSlices, procCounters := map[int]int{}, map[int]int{}
	names := map[int]string{}
	warm := 0
	for i, e := range readTrace(t, path) {
		if e.Pid == nil {
			t.Fatalf("event %d %+v: no pid", i, e)
		}
		pid := *e.Pid
		switch e.Ph {
		case "M":
			if e.Name == "process_name" {
				var a struct{ Name string }
				json.Unmarshal(e.Args, &a)
				names[pid] = a.Name
			}
		case "X":
			if e.Ts == nil || e.Dur == nil || *e.Dur < 0 || e.Tid == nil {
				t.Fatalf("slice %d %+v", i, e)
			}
			var a struct {
				Step int64  `json:"step"`
				Op   string `json:"op"`
				Note string `json:"note"`
			}
			json.Unmarshal(e.Args, &a)
			switch e.Cat {
			case "op", "recompute":
				nodes[key{pid, a.Step}]++
			case "step":
				stepSlices[pid]++
				if a.Note != "" {
					warm++
					if a.Step > warmup || !strings.Contains(e.Name, "warm-up") {
						t.Errorf("step slice %d: %s %s", i, e.Name, e.Args)
					}
				}
			default:
				t.Errorf("slice %d: category %q", i, e.Cat)
			}
		case "C":
			var a map[string]int64
			if err := json.Unmarshal(e.Args, &a); err != nil {
				t.Errorf("counter %d: %v", i, err)
			}
			if e.Name == "process memory" {
				procCounters[pid]++
				if a["go_heap"] <= 0 {
					t.Errorf("counter %d: %s", i, e.Args)
				}
			}
		}
	}
	for pid := 1; pid <= 2; pid++ {
		want := "headroom bench zoo:mlp:16, round " + string(rune('0'+pid))
		if names[pid] != want || stepSlices[pid] != warmup+steps || procCounters[pid] != warmup+steps+1 {
			t.Errorf("process %d %q: %d step slices, %d process counters", pid, names[pid], stepSlices[pid], procCounters[pid])
		}
		for s := int64(1); s <= warmup+steps; s++ {
			if nodes[key{pid, s}] != kernels {
				t.Errorf("process %d step %d: %d node slices, the schedule runs %d", pid, s, nodes[key{pid, s}], kernels)
			}
		}
	}
	if len(nodes) != 2*(warmup+steps) || warm != 2*warmup {
		t.Errorf("node slices in %v; %d warm-up steps", nodes, warm)
	}
}

// --profile is checked before anything is measured, and the internal
// flags stay out of bench -h.
func TestBenchProfileFlags(t *testing.T) {
	if err := run(context.Background(), []string{"bench", "--workloads", "mlp", "--profile", t.TempDir()}); err == nil || !strings.Contains(err.Error(), "--profile") {
		t.Errorf("a directory as --profile: %v", err)
	}
	var f benchFlags
	fs := benchFlagSet(&f)
	var help strings.Builder
	writeBenchUsage(&help, fs)
	if !strings.Contains(help.String(), "--profile file") || strings.Contains(help.String(), "--profile-pid") {
		t.Errorf("bench -h:\n%s", help.String())
	}
}
