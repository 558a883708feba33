package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
)

// waitFor polls until cond holds (a minute at most: no timing is
// checked, only that it happens).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

type followSummary struct {
	Live bool `json:"live"`
	Peak struct {
		Total int64 `json:"total"`
	} `json:"peak"`
	Steps struct {
		Count int `json:"count"`
	} `json:"steps"`
}

// viz --follow serves a snapshot file that does not exist yet, shows it
// when it is written, and again each time it is written anew; with --log
// the run's step lines appear as they are appended, a cut-off last line
// once it is complete.
func TestVizFollow(t *testing.T) {
	defer func(p time.Duration) { followPoll = p }(followPoll)
	followPoll = 10 * time.Millisecond
	dir := t.TempDir()
	snap, logPath := filepath.Join(dir, "run.json"), filepath.Join(dir, "run.jsonl")
	a := device.Meta().Alloc
	a.RecordHistory(100)
	write := func(mib int64) {
		if _, err := a.Allocate(mib<<20, device.Tag{Category: device.Activation, Module: "m", Op: "op"}); err != nil {
			t.Fatal(err)
		}
		if err := writeSnapshot(snap, a.Snapshot()); err != nil {
			t.Fatal(err)
		}
	}
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urlc := make(chan string, 1)
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- viz(ctx, []string{"--follow", snap, "--log", logPath}, out, urlc) }()
	waitFor(t, "viz to wait for the file", func() bool { return strings.Contains(out.String(), "waiting for") })
	write(1)
	url := <-urlc
	var sum followSummary
	getJSON(t, url+"api/summary", &sum)
	if !sum.Live || sum.Peak.Total != 1<<20 {
		t.Fatalf("first snapshot: %+v", sum)
	}
	write(2) // 3 MiB in all
	waitFor(t, "the rewritten snapshot", func() bool {
		getJSON(t, url+"api/summary", &sum)
		return sum.Peak.Total == 3<<20
	})
	var page memviz.LivePage
	getJSON(t, url+"api/live?poll=1", &page)
	if page.Snapshots != 2 || len(page.Steps) != 0 || page.Done {
		t.Errorf("after two writes: %+v", page)
	}
	// the log: a run line, two steps, and half of a third
	fmt.Fprintf(lf, `{"kind":"run","model":"mlp"}`+"\n"+`{"step":1,"epoch":1,"loss":2.5,"samples":8,"samples_per_s":80,"peak_allocated":1024,"peak_reserved":2048}`+"\n")
	fmt.Fprintf(lf, `{"step":2,"epoch":1,"loss":2.25,"samples":8,"samples_per_s":90,"peak_allocated":1024,"peak_reserved":2048}`+"\n"+`{"step":3,"epoch":1,"lo`)
	waitFor(t, "two steps", func() bool { getJSON(t, url+"api/live?poll=1", &page); return len(page.Steps) == 2 })
	if s := page.Steps[1]; s.Step != 2 || s.Loss == nil || *s.Loss != 2.25 || s.PeakAllocated != 1024 || s.SamplesPerSec != 90 {
		t.Errorf("step 2: %+v", s)
	}
	fmt.Fprintf(lf, `ss":2.0,"samples":8}`+"\n")
	waitFor(t, "the completed third step", func() bool { getJSON(t, url+"api/live?poll=1", &page); return len(page.Steps) == 3 })
	if s := page.Steps[2]; s.Step != 3 || s.Loss == nil || *s.Loss != 2 {
		t.Errorf("step 3: %+v", s)
	}
	// the stream announces a new snapshot
	resp, err := http.Get(url + "api/live")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// the stream says which snapshot is current first, then each new one
	newSnap := regexp.MustCompile(`event: snapshot\ndata: [3-9]\n`)
	got := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for !newSnap.MatchString(b.String()) {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- b.String()
	}()
	time.Sleep(50 * time.Millisecond) // let the stream start before the write (no pass/fail on it)
	write(1)
	select {
	case s := <-got:
		if !regexp.MustCompile(`(?s)^id: 0\n.*event: snapshot\ndata: 2\n\n.*event: snapshot\ndata: [3-9]\n`).MatchString(s) {
			t.Errorf("stream:\n%s", s)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no snapshot event")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "following "+snap+" and the steps of "+logPath) {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestVizFollowFlags(t *testing.T) {
	for _, args := range [][]string{{"--log", "x.jsonl", "a.json"}, {"--follow", "--svg", "x.svg", "a.json"}, {"--follow"}} {
		if err := viz(context.Background(), args, &bytes.Buffer{}, nil); err == nil {
			t.Errorf("viz %v: no error", args)
		}
	}
}

// train --memory-snapshot-every rewrites the snapshot while training: at
// the first step's end, then whenever the interval has passed, each file
// the whole history so far.
func TestTrainSnapshotEvery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	dev := device.Meta()
	dev.Alloc.RecordHistory(1000)
	var out bytes.Buffer
	w, err := newTrainWatch(context.Background(), watchFlags{snapEvery: time.Nanosecond, snapshot: path}, dev, nil, newProcProbe(dev), &out)
	if err != nil || w == nil {
		t.Fatal(w, err)
	}
	for step := int64(1); step <= 2; step++ {
		end := dev.Alloc.MarkStep()
		if _, err := dev.Alloc.Allocate(1<<20, device.Tag{Category: device.Activation}); err != nil {
			t.Fatal(err)
		}
		end()
		w.stepDone(step, 1, 1, 8, time.Millisecond, 0, dev.Alloc.Stats())
		s, err := memviz.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := memviz.Analyze(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := sum.Summary("run.json").Steps; got == nil || got.Count != int(step) {
			t.Errorf("after step %d the file has steps %+v", step, got)
		}
	}
	if err := w.end(nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "headroom viz --follow "+path) {
		t.Errorf("output:\n%s", out.String())
	}
	for _, f := range []watchFlags{{snapEvery: time.Second}, {snapEvery: -1, snapshot: path}, {keep: true}} {
		if err := f.check(f.snapshot); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
}

// train --live --live-keep serves on after training, the run's end said,
// until the run's context ends (Ctrl-C).
func TestTrainLiveKeep(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 64, steps: 2,
		watch: watchFlags{live: "127.0.0.1:0", keep: true}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- trainFashion(ctx, f, out, &bytes.Buffer{}) }()
	var url string
	waitFor(t, "the live view to stay", func() bool {
		m := regexp.MustCompile(`training finished; the live view stays at (http://\S+/) until Ctrl-C`).FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	if !strings.Contains(out.String(), "live view at "+url+" (while training runs, and after it until Ctrl-C)") {
		t.Errorf("output:\n%s", out.String())
	}
	var page memviz.LivePage
	getJSON(t, url+"api/live?poll=1", &page)
	var sum followSummary
	getJSON(t, url+"api/summary", &sum)
	if !page.Done || len(page.Steps) != 2 || sum.Steps.Count != 2 {
		t.Errorf("after training: %+v, summary %+v", page, sum)
	}
	select {
	case err := <-done:
		t.Fatalf("train returned before Ctrl-C: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(url + "api/summary"); err == nil {
		t.Error("still serving after Ctrl-C")
	}
}
