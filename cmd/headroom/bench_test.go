package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/internal/bench"
	"github.com/headroom-ml/headroom/internal/parallel"
)

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--workloads", "resnet9000"},
		{"bench", "--steps", "0"},
		{"bench", "--rounds", "0"},
		{"bench", "--cpuprofile", "x.pprof"}, // needs exactly one workload
		{"bench", "extra"},
		{"bench", "--threads", "0"},
		{"bench", "--threads", "-2"},
	} {
		if err := run(context.Background(), args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// The child protocol: one measurement, one result line on standard output.
func TestBenchChild(t *testing.T) {
	defer parallel.SetThreads(parallel.Threads())
	var out, log bytes.Buffer
	f := benchFlags{child: "mlp", steps: 1, warmup: 0, threads: 1, seed: 1, opProfile: true}
	if err := benchChild(context.Background(), f, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	rs, err := bench.ScanResults(&out, nil)
	if err != nil || len(rs) != 1 {
		t.Fatalf("results %v, %v:\n%s", rs, err, out.String())
	}
	r := rs[0]
	if r.Workload != "mlp" || r.Engine != bench.Headroom || len(r.Steps) != 1 || r.Batch != 128 || r.Planned <= 0 || r.RSSPeak <= 0 {
		t.Errorf("result %+v", r)
	}
	if !strings.Contains(log.String(), "time per step by op") || !strings.Contains(log.String(), "matmul") {
		t.Errorf("no op profile in the log:\n%s", log.String())
	}
}
