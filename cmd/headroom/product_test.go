package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
)

// Evaluation runs under the device's capacity as training does: at batch
// 500 a forward pass of the CNN does not fit in 12 MiB, so it is split
// (it ran out of memory after training had succeeded, and the weights
// were never saved).
func TestEvalSplitsUnderCapacity(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	var out, log bytes.Buffer
	f := trainFlags{model: "cnn", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu:mem=12MiB", seed: 1, limit: 64}
	if err := trainFashion(context.Background(), f, &out, &log); err != nil {
		t.Fatalf("%v\n%s%s", err, out.String(), log.String())
	}
	if !strings.Contains(out.String(), "test accuracy") {
		t.Errorf("no accuracy reported:\n%s", out.String())
	}
}
