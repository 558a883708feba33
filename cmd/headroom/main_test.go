package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/safetensors"
)

// Train briefly on the built-in subset, save, and reload the weights; the
// printed plan's total equals the peak the run reports.
func TestTrainSavesAndReportsPlan(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "cnn.safetensors")
	var out, log bytes.Buffer
	f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, save: ckpt, limit: 256}
	if err := trainFashion(context.Background(), f, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	s := out.String()
	for _, want := range []string{"memory plan", "parameters", "optimizer state", "activations at peak", "total peak", "test accuracy", "saved weights"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	total := regexp.MustCompile(`total peak\s+([0-9.]+ \w+)`).FindStringSubmatch(s)
	peak := regexp.MustCompile(`training peak allocated ([0-9.]+ \w+)`).FindStringSubmatch(s)
	if total == nil || peak == nil || total[1] != peak[1] {
		t.Errorf("planned total %v and measured peak %v differ:\n%s", total, peak, s)
	}
	acc := regexp.MustCompile(`test accuracy ([0-9.]+)%`).FindStringSubmatch(s)
	if v, _ := strconv.ParseFloat(acc[1], 64); v < 40 {
		t.Errorf("accuracy %v%% after 256 images; a working MLP gets well above chance (10%%)", v)
	}
	sd, err := safetensors.Load(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	store := nn.NewStore()
	if _, err := buildFashionModel("mlp", store); err != nil {
		t.Fatal(err)
	}
	if len(sd) != len(store.Params()) {
		t.Fatalf("checkpoint has %d tensors, model %d", len(sd), len(store.Params()))
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"train", "--model", "transformer-xl"},
		{"train", "--optimizer", "lamb", "--limit", "1"},
		{"train", "--batch-size", "0"},
		{"train", "--device", "tpu"},
		{"plan", "--model", "nope"},
	} {
		err := run(context.Background(), args)
		if err == nil {
			t.Errorf("%v: accepted", args)
			continue
		}
		if !strings.Contains(err.Error(), "valid") && !strings.Contains(err.Error(), "unknown") && !strings.Contains(err.Error(), "must be") {
			t.Errorf("%v: error does not say what is valid: %v", args, err)
		}
	}
}
