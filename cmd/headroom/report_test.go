package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/internal/tfevents"
)

// A run's --log becomes a report with every chart, the plan and the
// evaluations; --tensorboard writes the same scalars as event files that
// read back with the step of each.
func TestReportAndTensorBoard(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	dir := t.TempDir()
	logA, logB, tb := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl"), filepath.Join(dir, "tb")
	common := []string{"--model", "mlp", "--limit", "80", "--batch-size", "16", "--epochs", "2", "--val-split", "0.2"}
	trainArgs(t, append(common, "--log", logA, "--tensorboard", tb)...)
	trainArgs(t, append(common, "--log", logB, "--precision", "bf16-mixed")...)

	out := filepath.Join(dir, "report.html")
	if err := cmdReport(context.Background(), []string{logA, logB, "--out", out, "--svg", filepath.Join(dir, "svg")}); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a vs b", "bf16-mixed", "memory plan (per step", "val loss", "test loss", "Accuracy (evaluation)", "planned peak", "optimizer state"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the report has no %q", want)
		}
	}
	if n := strings.Count(string(page), "<svg "); n != 6 {
		t.Errorf("%d charts, want 6 (loss, accuracy, lr, throughput, memory of each run)", n)
	}
	svgs, _ := filepath.Glob(filepath.Join(dir, "svg", "*.svg"))
	if len(svgs) != 6 {
		t.Errorf("--svg wrote %v", svgs)
	}
	if err := cmdReport(context.Background(), []string{filepath.Join(dir, "none.jsonl")}); err == nil {
		t.Error("a missing log: no error")
	}

	files, _ := filepath.Glob(filepath.Join(tb, "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("event files %v", files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	events, err := tfevents.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string][]int64{}
	for _, e := range events[1:] {
		for _, v := range e.Values {
			tags[v.Tag] = append(tags[v.Tag], e.Step)
		}
	}
	if events[0].FileVersion != tfevents.FileVersion {
		t.Errorf("first event %+v", events[0])
	}
	// 64 training samples / 16: 4 steps an epoch, evaluated after each.
	for tag, want := range map[string]string{"train/loss": "[1 2 3 4 5 6 7 8]", "memory/planned_peak_MiB": "[1 2 3 4 5 6 7 8]", "val/accuracy": "[4 8]", "test/loss": "[4 8]"} {
		if got := fmt.Sprint(tags[tag]); got != want {
			t.Errorf("%s at steps %s, want %s", tag, got, want)
		}
	}
}
