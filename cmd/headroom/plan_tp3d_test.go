package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dist"
)

// plan --pipeline P --tensor T prints each stage's ranks of a GPT split
// both ways (Megatron's tensor × pipeline layout, N = D×P×T); with
// --budget and no --tensor, the tensor degrees are tried next to the
// pipeline alone; train refuses the layout, saying where it is planned.
func TestPlanTP3DCommand(t *testing.T) {
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := planMain(context.Background(), args, &out, &out)
		return out.String(), err
	}
	out, err := run("--ranks", "12", "--pipeline", "2", "--tensor", "2", "--model", "gpt-bytes", "--batch-size", "6")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"12 ranks, ZeRO 0, 2 pipeline stages, tensor parallel 2", " 0–1, 4–5, 8–9 ", " 2–3, 6–7, 10–11 "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// gpt-bytes has 6 heads: tensor degrees 2 (4 on 8 ranks does not
	// divide them). The pipeline alone sends less and is chosen when it
	// fits; a budget below its reservation (178 MiB) and above the
	// pieces' (122 MiB) chooses tensor × pipeline.
	for _, tc := range []struct{ budget, chosen string }{
		{"64GiB", "chosen: 8 ranks, ZeRO 0, 2 pipeline stages\n"},
		{"150MiB", "chosen: 8 ranks, ZeRO 0, 2 pipeline stages, tensor parallel 2\n"},
	} {
		out, err = run("--ranks", "8", "--pipeline", "2", "--model", "gpt-bytes", "--batch-size", "8", "--budget", tc.budget)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"8 ranks, ZeRO 0, 2 pipeline stages, tensor parallel 2 ", tc.chosen} {
			if !strings.Contains(out, want) {
				t.Errorf("--budget %s: output lacks %q:\n%s", tc.budget, want, out)
			}
		}
		if strings.Contains(out, "tensor parallel 4") {
			t.Errorf("--budget %s: a tensor degree that does not divide the heads:\n%s", tc.budget, out)
		}
	}
	if _, err := run("--ranks", "8", "--pipeline", "2", "--tensor", "2", "--zero", "2", "--model", "gpt-bytes"); !errors.Is(err, dist.ErrNotAvailable) {
		t.Errorf("ZeRO 2: %v", err)
	}
	var sink bytes.Buffer
	err = pipeTrainMain(context.Background(), []string{"--pipeline", "2", "--tensor", "2", "--model", "gpt-bytes"}, &sink, &sink)
	if !errors.Is(err, dist.ErrNotAvailable) || !strings.Contains(err.Error(), "plan --ranks") {
		t.Errorf("train --pipeline 2 --tensor 2: %v", err)
	}
}
