package main

import (
	"bytes"
	"context"
	"math"
	"regexp"
	"strconv"
	"testing"
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
