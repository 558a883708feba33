package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/device"
)

// compareSnapshot is a run with a parameter and an activation of act
// bytes live at its peak.
func compareSnapshot(t *testing.T, act int64) *device.Snapshot {
	t.Helper()
	a := device.Meta().Alloc
	a.RecordHistory(100)
	if _, err := a.Allocate(1<<20, device.Tag{Category: device.Parameter, Module: "fc", Op: "fc.weight"}); err != nil {
		t.Fatal(err)
	}
	x, err := a.Allocate(act, device.Tag{Category: device.Activation, Module: "fc", Op: "linear"})
	if err != nil {
		t.Fatal(err)
	}
	a.Free(x)
	return a.Snapshot()
}

// viz --compare A B prints the differences and serves them; with --text
// it only prints; it wants exactly two files and no --svg.
func TestVizCompare(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "plan.json"), filepath.Join(dir, "run.pickle")
	if err := writeSnapshot(a, compareSnapshot(t, 2<<20)); err != nil {
		t.Fatal(err)
	}
	if err := writeSnapshot(b, compareSnapshot(t, 3<<20)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := viz(context.Background(), []string{"--compare", "--text", a, b}, &out, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"A: plan.json (headroom): peak 3.00 MiB", "B: run.pickle (headroom): peak 4.00 MiB", "peak: B - A = +1.00 MiB", "fc linear", "(1 of 2 differ"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- viz(ctx, []string{"--compare", a, b}, &bytes.Buffer{}, ready) }()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("not serving after 10 s")
	}
	resp, err := http.Get(url + "api/compare")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		PeakDiff   int64 `json:"peak_diff"`
		Categories []struct {
			Key  string `json:"key"`
			Diff int64  `json:"diff"`
		} `json:"categories"`
	}
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if c.PeakDiff != 1<<20 || len(c.Categories) != 2 || c.Categories[0].Key != "activation" || c.Categories[0].Diff != 1<<20 {
		t.Errorf("served %+v", c)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}

	for _, args := range [][]string{{"--compare", a}, {"--compare", a, b, a}, {"--compare", "--svg", filepath.Join(dir, "x.svg"), a, b}} {
		if err := viz(context.Background(), args, &bytes.Buffer{}, nil); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
