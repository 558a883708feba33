package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// syncBuffer is a bytes.Buffer written by the run and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

// train --live serves the viewer while training runs: every completed
// step (its loss, throughput and memory) at /api/live, and the run's
// allocator snapshot, with a marker per step, at /api/summary; when
// training ends the stream says so.
func TestTrainLive(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	liveHold = make(chan struct{})
	defer func() { liveHold = nil }()
	const steps = 5
	f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 256, steps: steps,
		watch: watchFlags{live: "127.0.0.1:0"}}
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- trainFashion(context.Background(), f, &out, &bytes.Buffer{}) }()
	var url string
	for deadline := time.Now().Add(60 * time.Second); url == ""; time.Sleep(20 * time.Millisecond) {
		if m := regexp.MustCompile(`live view at (http://\S+/)`).FindStringSubmatch(out.String()); m != nil {
			url = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no live view announced:\n%s", out.String())
		}
	}
	var page struct {
		Next  int64 `json:"next"`
		Done  bool  `json:"done"`
		Msg   string
		Steps []struct {
			Step          int64    `json:"step"`
			Loss          *float64 `json:"loss"`
			SamplesPerSec float64  `json:"samples_per_s"`
			Allocated     int64    `json:"allocated"`
			Reserved      int64    `json:"reserved"`
			PeakAllocated int64    `json:"peak_allocated"`
			Process       *struct {
				Segments int64 `json:"segments"`
				GoHeap   int64 `json:"go_heap"`
			} `json:"process"`
		} `json:"steps"`
	}
	for deadline := time.Now().Add(60 * time.Second); !page.Done; time.Sleep(20 * time.Millisecond) {
		getJSON(t, url+"api/live?poll=1", &page)
		if time.Now().After(deadline) {
			t.Fatalf("training did not end: %+v", page)
		}
	}
	if page.Next != steps || len(page.Steps) != steps || page.Msg != "training finished" {
		t.Fatalf("live steps %+v", page)
	}
	for i, s := range page.Steps {
		if s.Step != int64(i+1) || s.Loss == nil || *s.Loss <= 0 || s.SamplesPerSec <= 0 || s.Allocated <= 0 || s.Reserved < s.Allocated || s.PeakAllocated < s.Allocated {
			t.Errorf("step %d: %+v", i, s)
		}
		// the process view, sampled with the allocator's numbers
		if s.Process == nil || s.Process.Segments != s.Reserved || s.Process.GoHeap <= 0 {
			t.Errorf("step %d: process %+v, reserved %d", i, s.Process, s.Reserved)
		}
	}
	var sum struct {
		Live  bool `json:"live"`
		Steps struct {
			Count int `json:"count"`
		} `json:"steps"`
		Reserved struct {
			Total []int64 `json:"total"`
		} `json:"reserved"`
	}
	getJSON(t, url+"api/summary", &sum)
	if !sum.Live || sum.Steps.Count != steps || len(sum.Reserved.Total) == 0 {
		t.Errorf("live summary %+v", sum)
	}
	// the stream: every step, then the end
	resp, err := http.Get(url + "api/live")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	resp.Body.Close()
	if n := strings.Count(body.String(), "\ndata: {"); n != steps || !strings.HasPrefix(body.String(), "id: 0\ndata: {") ||
		!strings.HasSuffix(body.String(), "event: done\ndata: \"training finished\"\n\n") {
		t.Errorf("stream:\n%s", body.String())
	}
	close(liveHold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(url + "api/summary"); err == nil {
		t.Error("still serving after training ended")
	}
}

// train --profile writes a Chrome trace (the JSON object form Perfetto and
// chrome://tracing read): metadata naming the tracks, a slice per step,
// per data wait and per executed node — as many per step as the step's
// schedule has kernels to run, each with its op, module path and bytes —
// and memory counters; every slice has a start and a duration.
func TestTrainProfile(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	path := filepath.Join(t.TempDir(), "trace.json")
	const steps = 3
	f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 256, steps: steps,
		watch: watchFlags{profile: path}}
	if err := trainFashion(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string          `json:"name"`
			Cat  string          `json:"cat"`
			Ph   string          `json:"ph"`
			Ts   *float64        `json:"ts"`
			Dur  *float64        `json:"dur"`
			Pid  *int            `json:"pid"`
			Tid  *int            `json:"tid"`
			Args json.RawMessage `json:"args"`
		} `json:"traceEvents"`
		DisplayTimeUnit string          `json:"displayTimeUnit"`
		OtherData       json.RawMessage `json:"otherData"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tr); err != nil {
		t.Fatalf("not the trace-event JSON object: %v", err)
	}

	// the schedule of a step, from the trainer the run builds
	spec, _ := zoo.Lookup("mlp")
	opt, _ := optim.NewAdam(optim.AdamDefaults())
	trainer := testkit.Trainer(t, device.CPU(), 1, testkit.Build(spec), opt)
	defer trainer.Close()
	// As the run: its gradients in the arena (train's default).
	if err := trainer.SetConfig(train.Config{}); err != nil {
		t.Fatal(err)
	}
	xm, ym := spec.Example(32)
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

	perStep := map[int64]int{}
	stepSlices, dataSlices, counters, threads, procCounters := 0, 0, 0, 0, 0
	var lastTs float64
	var lastReserved int64
	for i, e := range tr.TraceEvents {
		if e.Pid == nil || *e.Pid != 1 {
			t.Fatalf("event %d %+v: no pid", i, e)
		}
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				threads++
			}
		case "X":
			if e.Ts == nil || e.Dur == nil || *e.Dur < 0 || *e.Ts < 0 || e.Tid == nil {
				t.Fatalf("slice %d %+v: no start, duration or track", i, e)
			}
			var a struct {
				Step        int64  `json:"step"`
				Op          string `json:"op"`
				Module      string `json:"module"`
				OutputBytes *int64 `json:"output_bytes"`
				Phase       string `json:"phase"`
			}
			json.Unmarshal(e.Args, &a)
			switch e.Cat {
			case "op", "recompute":
				perStep[a.Step]++
				if a.Op == "" || a.OutputBytes == nil || a.Phase == "" || !strings.HasSuffix(e.Name, a.Op) {
					t.Errorf("node slice %d: %s %s", i, e.Name, e.Args)
				}
				if *e.Ts < lastTs {
					t.Errorf("node slice %d starts at %v, before the one before (%v)", i, *e.Ts, lastTs)
				}
				lastTs = *e.Ts
			case "step":
				stepSlices++
			case "data":
				dataSlices++
			default:
				t.Errorf("slice %d: category %q", i, e.Cat)
			}
		case "C":
			var a map[string]int64
			if err := json.Unmarshal(e.Args, &a); err != nil || e.Ts == nil {
				t.Errorf("counter %d: %s (%v)", i, e.Args, err)
			}
			switch e.Name {
			case "memory":
				if a["allocated"] <= 0 || a["reserved"] < a["allocated"] {
					t.Errorf("counter %d: %s", i, e.Args)
				}
				counters++
				lastReserved = a["reserved"]
			case "process memory":
				// the segments are the allocator's reserved bytes (as the
				// last node left them: nothing maps between steps here),
				// and resident memory holds them and the Go heap
				if (lastReserved != 0 && a["device_segments"] != lastReserved) || a["go_heap"] <= 0 || a["go_runtime"] < a["go_heap"] ||
					runtime.GOOS == "linux" && a["resident"] < a["device_segments"]+a["go_heap"]/2 {
					t.Errorf("process counter %d: %s (reserved %d)", i, e.Args, lastReserved)
				}
				procCounters++
			case "data loader", "go gc":
				if _, ok := a["staging"]; !ok && e.Name == "data loader" || e.Name == "go gc" && a["heap_objects"] <= 0 {
					t.Errorf("counter %d %s: %s", i, e.Name, e.Args)
				}
			default:
				t.Errorf("counter %d: %q", i, e.Name)
			}
		default:
			t.Errorf("event %d: phase %q", i, e.Ph)
		}
	}
	if stepSlices != steps || dataSlices != steps || threads != 3 || tr.DisplayTimeUnit != "ms" {
		t.Errorf("%d step slices, %d data waits, %d named tracks", stepSlices, dataSlices, threads)
	}
	nodes := 0
	for s := int64(1); s <= steps; s++ {
		if perStep[s] != kernels {
			t.Errorf("step %d: %d node slices, the schedule runs %d", s, perStep[s], kernels)
		}
		nodes += perStep[s]
	}
	if len(perStep) != steps || counters != nodes {
		t.Errorf("node slices in steps %v; %d counters for %d nodes", perStep, counters, nodes)
	}
	if procCounters != steps+1 {
		t.Errorf("%d process counters, want one at the start and one per step (%d)", procCounters, steps+1)
	}
}

// --live and --profile are checked before any work.
func TestWatchFlagsChecked(t *testing.T) {
	for _, w := range []watchFlags{{live: "127.0.0.1:99999"}, {live: "nohost"}, {profile: t.TempDir()}} {
		f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 64, watch: w}
		err := trainFashion(context.Background(), f, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "--live") && !strings.Contains(err.Error(), "--profile") {
			t.Errorf("%+v: %v", w, err)
		}
	}
}
