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
		{"plan", "--precision", "fp8"},
		{"plan", "--compress", "zstd"},
		{"plan", "--precision", "auto"}, // a choice needs --budget
		{"train", "--precision", "fp8"},
		{"train", "--compress", "int4"},
		{"train", "--compress", "auto", "--limit", "1"}, // a choice needs --budget
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

// --optimizer-in-backward trains with transient gradients: the plan's total
// is lower than with gradient buffers and still equals the measured peak;
// with accumulation it does not apply and says why.
func TestTrainOptimizerInBackward(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	run := func(inBack bool, accum int) (planned, peak float64, out, log string) {
		var o, l bytes.Buffer
		// With gradient buffers where the optimizer is not in the
		// backward pass: the comparison is with them.
		f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 128, inBack: inBack, accum: accum, gradBuffers: true}
		if err := trainFashion(context.Background(), f, &o, &l); err != nil {
			t.Fatalf("%v\n%s", err, l.String())
		}
		bytesOf := func(re string) float64 {
			m := regexp.MustCompile(re).FindStringSubmatch(o.String())
			if m == nil {
				t.Fatalf("no %q in:\n%s", re, o.String())
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			switch m[2] {
			case "KiB":
				v *= 1 << 10
			case "MiB":
				v *= 1 << 20
			}
			return v
		}
		return bytesOf(`total peak\s+([0-9.]+) (\w+)`), bytesOf(`training peak allocated ([0-9.]+) (\w+)`), o.String(), l.String()
	}
	basePlan, basePeak, _, _ := run(false, 1)
	plan, peak, out, _ := run(true, 1)
	if plan != peak || basePlan != basePeak {
		t.Errorf("planned %v / measured %v (usual %v / %v)", plan, peak, basePlan, basePeak)
	}
	if plan >= basePlan || !strings.Contains(out, "gradients (transient)") {
		t.Errorf("in-backward peak %v not below the usual %v, or no transient gradients in the plan:\n%s", plan, basePlan, out)
	}
	if _, _, _, log := run(true, 2); !strings.Contains(log, "does not apply") {
		t.Errorf("accumulation with --optimizer-in-backward: no warning in %q", log)
	}
}
