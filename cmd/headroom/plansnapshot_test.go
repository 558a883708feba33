package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// plan --memory-snapshot writes the allocation timeline a recorded step
// of the same configuration has on the cpu: the same allocations and
// frees, in the same order, with the same sizes, categories, modules and
// ops, and the same peak (only addresses and times differ).
func TestPlanSnapshotEqualsRecordedStep(t *testing.T) {
	for _, tt := range []struct {
		model string
		batch int
		args  []string
		accum int
		cfg   train.Config
	}{
		{"cnn", 16, nil, 1, train.Config{}}, // plan's default: gradients in the arena
		// Accumulates: gradient buffers, as the budget's plan sets them.
		{"mlp", 512, []string{"--budget", "5MiB", "--recompute", "none"}, 0, train.Config{GradientBuffers: true}},
	} {
		t.Run(tt.model, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "plan.json")
			var out, log bytes.Buffer
			args := append([]string{"--model", tt.model, "--batch-size", fmt.Sprint(tt.batch), "--memory-snapshot", path}, tt.args...)
			if err := planMain(context.Background(), args, &out, &log); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "wrote the planned memory timeline of one step") {
				t.Errorf("output:\n%s", out.String())
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var planned device.Snapshot
			if err := json.Unmarshal(data, &planned); err != nil {
				t.Fatal(err)
			}
			accum := tt.accum
			if accum == 0 {
				// The budget's plan: read back how many micro-batches it chose.
				accum = countAccum(t, out.String())
			}
			// The same step, run for real on the cpu.
			spec, _ := zoo.Lookup(tt.model)
			dev, err := device.New("cpu")
			if err != nil {
				t.Fatal(err)
			}
			dev.Alloc.RecordHistory(planSnapshotHistory)
			opt, _ := newOptimizer("adam", 1e-3, -1)
			tr, err := train.SetupConfig(dev, 1, func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss }, opt, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			x, y := spec.Example(tt.batch)
			xs, ys := tensor.New(x.DType, x.Shape), tensor.New(y.DType, y.Shape)
			parts, err := train.Split(train.Batch{X: xs, Y: ys}, accum)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.StepAccumulate(context.Background(), parts); err != nil {
				t.Fatal(err)
			}
			recorded := dev.Alloc.Snapshot()
			key := func(e device.TraceEntry) string {
				if e.Category == device.OptimizerState.String() {
					// The meta device accounts for optimizer state by
					// parameter (train's prepareOptimizer), the cpu by
					// the optimizer's buffers: same blocks, other labels.
					return fmt.Sprintf("%s %d %d %s", e.Action, e.Size, e.BlockSize, e.Category)
				}
				return fmt.Sprintf("%s %d %d %s %s %s", e.Action, e.Size, e.BlockSize, e.Category, e.Module, e.Op)
			}
			p, r := planned.DeviceTraces[0], recorded.DeviceTraces[0]
			if len(p) != len(r) {
				t.Errorf("%d planned entries, %d recorded", len(p), len(r))
			}
			for i := range min(len(p), len(r)) {
				if key(p[i]) != key(r[i]) {
					t.Fatalf("entry %d: planned %s, recorded %s", i, key(p[i]), key(r[i]))
				}
			}
			if a, b := planned.Headroom.Stats["allocated_bytes.all.peak"], recorded.Headroom.Stats["allocated_bytes.all.peak"]; a != b || a == 0 {
				t.Errorf("peak allocated: planned %d, recorded %d", a, b)
			}
			t.Logf("%d micro-batches: %d entries, peak %d", accum, len(p), planned.Headroom.Stats["allocated_bytes.all.peak"])
		})
	}
}

// countAccum reads the accumulation steps of the budget's plan.
func countAccum(t *testing.T, out string) int {
	t.Helper()
	var micro, accum int
	i := strings.Index(out, "micro-batch")
	if _, err := fmt.Sscanf(out[i:], "micro-batch %d x %d", &micro, &accum); err != nil {
		t.Fatalf("no accumulation in %q", out[i:min(len(out), i+60)])
	}
	return accum
}
