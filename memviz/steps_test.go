package memviz_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/memviz"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/zoo"
)

const leakBytes = 1 << 20

// trainedSnapshot trains the mlp of the zoo for steps steps on the cpu
// device (on meta no node runs, so none is observed) with the allocator's history recorded; with leak, every step
// allocates leakBytes at its first op and never frees them (a step that
// leaks, as a tensor kept in a list across steps would).
func trainedSnapshot(t testing.TB, steps int, leak bool) *device.Snapshot {
	t.Helper()
	spec, err := zoo.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	dev := device.CPU()
	dev.Alloc.RecordHistory(1 << 20)
	opt, err := optim.NewAdam(optim.AdamDefaults())
	if err != nil {
		t.Fatal(err)
	}
	tr := testkit.Trainer(t, dev, 1, testkit.Build(spec), opt)
	defer tr.Close()
	if leak {
		last := -1
		tr.RunOptions = &exec.Options{Observe: func(i int, _ *trace.Node, _ time.Duration) {
			first := i <= last || last < 0 // the first node run of a pass
			last = i
			if first {
				if _, err := dev.Alloc.Allocate(leakBytes, device.Tag{Category: device.Activation, Module: "leaky", Op: "kept"}); err != nil {
					t.Error(err)
				}
			}
		}}
	}
	x, y := testkit.SpecBatch(spec, 8, 1)
	for range steps {
		if _, err := tr.Step(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
	}
	return dev.Alloc.Snapshot()
}

// The trainer marks each step in the allocator's history, and the viewer
// finds each step's peak: with a step that leaks 1 MiB, each step after
// the first peaks exactly 1 MiB above the one before, and the summary says
// the peaks rise; without the leak they are equal and nothing rises. The
// markers survive the pickle memory_viz reads.
func TestStepPeaks(t *testing.T) {
	const steps = 5
	for _, leak := range []bool{false, true} {
		ds := trainedSnapshot(t, steps, leak)
		data, err := memviz.Pickle(ds)
		if err != nil {
			t.Fatal(err)
		}
		fromPickle, err := memviz.Decode("x.pickle", data)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []*memviz.Snapshot{memviz.FromDevice(ds), fromPickle} {
			st := analyze(t, s).Summary("x").Steps
			if st.Count != steps || len(st.Steps) != steps {
				t.Fatalf("leak %v: %d steps (%d listed), want %d", leak, st.Count, len(st.Steps), steps)
			}
			var step int64 = 0
			for k, p := range st.Steps {
				step++
				if p.Step != step || p.Last != step || p.Begin >= p.PeakEvent || p.PeakEvent > p.End || p.Peak < p.Start {
					t.Errorf("leak %v: step %d: %+v", leak, k, p)
				}
				if k < 2 {
					continue
				}
				want := st.Steps[k-1].Peak
				if leak {
					want += leakBytes
				}
				if p.Peak != want {
					t.Errorf("leak %v: step %d peaks at %d, want %d (the step before: %d)", leak, p.Step, p.Peak, want, st.Steps[k-1].Peak)
				}
			}
			wantRising, wantRise := 0, int64(0)
			if leak {
				wantRising, wantRise = steps-2, (steps-2)*leakBytes
			}
			if st.Rising != wantRising || st.RiseBytes != wantRise || st.Leak() != leak {
				t.Errorf("leak %v: rising %d by %d (leak %v), want %d by %d", leak, st.Rising, st.RiseBytes, st.Leak(), wantRising, wantRise)
			}
		}
	}
}

// Step markers are written in the JSON as the schema says.
func TestStepMarkerJSON(t *testing.T) {
	ds := trainedSnapshot(t, 1, false)
	var first *device.TraceEntry
	for i, e := range ds.DeviceTraces[0] {
		if e.Action == device.ActionStepBegin {
			first = &ds.DeviceTraces[0][i]
			break
		}
	}
	data, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	var e map[string]any
	json.Unmarshal(data, &e)
	if e["action"] != device.ActionStepBegin || e["step"] != 1.0 || e["addr"] != 0.0 || e["size"] != 0.0 {
		t.Errorf("first entry %s", data)
	}
}

// More steps than MaxSteps are grouped: each entry covers consecutive
// steps and shows their highest peak.
func TestStepPeaksGrouped(t *testing.T) {
	var tr []memviz.Event
	n := 2*memviz.MaxSteps + 10
	for s := int64(1); s <= int64(n); s++ {
		addr := 1000 * s
		tr = append(tr,
			memviz.Event{Action: device.ActionStepBegin, Step: s},
			memviz.Event{Action: device.ActionAlloc, Addr: addr, Size: 512 * s, BlockSize: 512 * s},
			memviz.Event{Action: device.ActionFree, Addr: addr, Size: 512 * s, BlockSize: 512 * s},
			memviz.Event{Action: device.ActionStepEnd, Step: s})
	}
	st := analyze(t, &memviz.Snapshot{Source: memviz.SourceHeadroom, Traces: [][]memviz.Event{tr}}).Summary("x").Steps
	if st.Count != n || len(st.Steps) != memviz.MaxSteps {
		t.Fatalf("%d steps, %d listed", st.Count, len(st.Steps))
	}
	next := int64(1)
	for _, g := range st.Steps {
		if g.Step != next || g.Last < g.Step || g.Peak != 512*g.Last {
			t.Fatalf("group %+v (next step %d)", g, next)
		}
		next = g.Last + 1
	}
	if next != int64(n)+1 || st.Rising != n-2 {
		t.Errorf("groups end before step %d; rising %d", next, st.Rising)
	}
}

// The SVG export draws the step peaks (a bar each, the rising ones red,
// the leak said in the panel's head) and the cached-segment timeline (a
// band per segment), below the timeline and its legend.
func TestStepsAndSegmentsSVG(t *testing.T) {
	sum := analyze(t, memviz.FromDevice(trainedSnapshot(t, 5, true))).Summary("leak.json")
	var buf bytes.Buffer
	if err := sum.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	bars, red, bands := 0, 0, 0
	for _, e := range svgElems(t, buf.Bytes()) {
		switch {
		case e.name == "rect" && e.attr["class"] == "stepbar":
			if e.attr["data-peak"] != strconv.FormatInt(sum.Steps.Steps[bars].Peak, 10) || e.attr["data-step"] != strconv.Itoa(bars+1) {
				t.Errorf("bar %d: %v", bars, e.attr)
			}
			if e.attr["fill"] == "#e15759" {
				red++
			}
			bars++
		case e.name == "path" && e.attr["class"] == "segband":
			bands++
		case e.name == "text" && e.attr["id"] == "steps-head":
			if e.attr["data-rising"] != "3" {
				t.Errorf("steps head %v", e.attr)
			}
		}
	}
	if bars != 5 || red != 3 || bands != len(sum.Reserved.Series) || bands == 0 {
		t.Errorf("%d bars (%d red), %d segment bands (want %d)", bars, red, bands, len(sum.Reserved.Series))
	}
	if !strings.Contains(buf.String(), "rose in each of the last 3 steps, by 3.00 MiB") {
		t.Error("the SVG does not say the peak rose")
	}
}
