package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/zoo"
)

var (
	stepLoss = regexp.MustCompile(`(?m)^step (\d+): loss (\S+)$`)
	rankPeak = regexp.MustCompile(`(?m)^rank (\d+), stage \d+ \(layers [^)]*\): planned peak (\d+), measured (\d+)$`)
)

// pipeLosses parses `train --pipeline` output: the losses, and checks
// that every rank printed a planned peak equal to its measured one.
func pipeLosses(t *testing.T, out string, ranks int) []float64 {
	t.Helper()
	peaks := rankPeak.FindAllStringSubmatch(out, -1)
	if len(peaks) != ranks {
		t.Fatalf("%d ranks' peaks printed, want %d:\n%s", len(peaks), ranks, out)
	}
	for _, m := range peaks {
		if m[2] != m[3] {
			t.Errorf("rank %s: planned peak %s, measured %s", m[1], m[2], m[3])
		}
	}
	var ls []float64
	for _, m := range stepLoss.FindAllStringSubmatch(out, -1) {
		l, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return ls
}

// `headroom train --pipeline P` without mpirun runs P in-process ranks:
// each rank's planned peak equals its measured one, and GPipe and 1F1B
// (the same gradients summed in another order) give the same losses.
func TestTrainPipelineInProcess(t *testing.T) {
	for _, tc := range []struct {
		model string
		p     string
	}{{"mlp", "2"}, {"cnn", "3"}} {
		losses := map[string][]float64{}
		for _, sched := range []string{"gpipe", "1f1b"} {
			var out, errb bytes.Buffer
			args := []string{"--pipeline", tc.p, "--model", tc.model, "--schedule", sched, "--steps", "3", "--batch-size", "24", "--micro-batches", "4", "--limit", "96"}
			if err := pipeTrainMain(context.Background(), args, &out, &errb); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, errb.String())
			}
			p, _ := strconv.Atoi(tc.p)
			losses[sched] = pipeLosses(t, out.String(), p)
			t.Logf("%s %s:\n%s", tc.model, sched, out.String())
		}
		g, o := losses["gpipe"], losses["1f1b"]
		if len(g) != 3 || len(o) != 3 {
			t.Fatalf("%s: losses %v, %v", tc.model, g, o)
		}
		for i := range g {
			if math.IsNaN(g[i]) || math.Abs(g[i]-o[i]) > 1e-5*math.Abs(g[i]) {
				t.Errorf("%s step %d: GPipe loss %v, 1F1B %v", tc.model, i+1, g[i], o[i])
			}
		}
	}
	if wantsPipeline([]string{"--pipeline", "1"}) || !wantsPipeline([]string{"--pipeline=2"}) || !wantsPipeline([]string{"--model", "cnn", "-pipeline", "3"}) {
		t.Error("wantsPipeline")
	}
}

// `train --pipeline` of a ResNet (cut at its residual blocks) trains on
// generated data with each rank's peak equal to its plan; --save gathers
// the stages into one file that loads strictly into the single-process
// model, and --load reads it back; --budget cuts the stages so that each rank's plan fits it, and
// a budget a block alone exceeds names the rank and what the block needs.
func TestTrainPipelineZooSaveBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("ResNet-18 steps: seconds each")
	}
	path := filepath.Join(t.TempDir(), "w.safetensors")
	var out, errb bytes.Buffer
	args := []string{"--pipeline", "2", "--model", "resnet18-64", "--schedule", "1f1b", "--steps", "2", "--batch-size", "8", "--micro-batches", "2", "--limit", "8", "--save", path}
	if err := pipeTrainMain(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errb.String())
	}
	t.Log(out.String())
	first := pipeLosses(t, out.String(), 2)
	if len(first) != 2 || math.IsNaN(first[1]) || first[1] >= first[0] {
		t.Errorf("losses %v", first)
	}
	spec, _ := zoo.Lookup("resnet18-64")
	s := nn.NewStore()
	spec.New(s.Root())
	if err := s.Materialize(device.CPU(), 7); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if err := s.LoadFile(path, true); err != nil {
		t.Fatalf("--save's file into the single-process model: %v", err)
	}
	// --load reads it back into the stages: the first step's loss on the
	// batch they trained on is the trained weights', below the initial.
	out.Reset()
	args = []string{"--pipeline", "2", "--model", "resnet18-64", "--steps", "1", "--batch-size", "8", "--micro-batches", "2", "--limit", "8", "--load", path}
	if err := pipeTrainMain(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errb.String())
	}
	if ls := pipeLosses(t, out.String(), 2); len(ls) != 1 || !(ls[0] < first[0]/2) {
		t.Errorf("losses %v after --load, %v before", ls, first)
	}
	other := filepath.Join(t.TempDir(), "other.safetensors")
	if err := s.SaveFile(other, nil); err != nil {
		t.Fatal(err)
	}
	args = []string{"--pipeline", "2", "--model", "resnet18-64", "--steps", "1", "--batch-size", "8", "--limit", "8", "--load", other, "--micro-batches", "2"}
	args[3] = "resnet18"
	if err := pipeTrainMain(context.Background(), args, &out, &errb); err == nil || !strings.Contains(err.Error(), "--load") {
		t.Errorf("--load of resnet18-64's weights into resnet18: %v", err)
	}

	const budget = 160 << 20
	out.Reset()
	args = []string{"--pipeline", "2", "--model", "resnet18-64", "--steps", "1", "--batch-size", "8", "--limit", "8", "--budget", "160MiB"}
	if err := pipeTrainMain(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errb.String())
	}
	t.Log(out.String())
	pipeLosses(t, out.String(), 2)
	for _, m := range rankPeak.FindAllStringSubmatch(out.String(), -1) {
		if p, _ := strconv.ParseInt(m[2], 10, 64); p > budget {
			t.Errorf("rank %s: planned peak %d over the budget %d", m[1], p, budget)
		}
	}
	if !strings.Contains(out.String(), "cuts [0 7 8]") {
		t.Errorf("the budget did not move the cut from the even [0 4 8]:\n%s", out.String())
	}

	args = []string{"--pipeline", "2", "--model", "resnet18-64", "--steps", "1", "--batch-size", "8", "--limit", "8", "--budget", "60MiB"}
	err := pipeTrainMain(context.Background(), args, &out, &errb)
	if !errors.Is(err, pipeline.ErrBudget) || !strings.Contains(err.Error(), "rank 1 (stage 1)") || !strings.Contains(err.Error(), "alone needs") {
		t.Errorf("--budget 60MiB: %v", err)
	}
}

// `train --pipeline --val-split` holds samples out and prints their loss
// in evaluation mode after training (pipeline.Evaluate, whose loss is
// the single-device model's: pipeline/zoo_test.go); a split that leaves
// less than a batch to train on is refused.
func TestTrainPipelineValSplit(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"--pipeline", "3", "--model", "cnn", "--schedule", "1f1b", "--steps", "2", "--batch-size", "16", "--limit", "64", "--val-split", "0.25"}
	if err := pipeTrainMain(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errb.String())
	}
	pipeLosses(t, out.String(), 3)
	m := regexp.MustCompile(`(?m)^validation loss (\S+) \(16 held-out samples\)$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no validation loss:\n%s", out.String())
	}
	if l, err := strconv.ParseFloat(m[1], 64); err != nil || math.IsNaN(l) || l <= 0 {
		t.Errorf("validation loss %q", m[1])
	}
	args[len(args)-1] = "0.9"
	if err := pipeTrainMain(context.Background(), args, &out, &errb); err == nil || !strings.Contains(err.Error(), "--val-split") {
		t.Errorf("--val-split 0.9 of 64 with batches of 16: %v", err)
	}
}
