package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// writeTable writes a CSV of rows rows: a label in 0..2, then 784
// features (the mlp's input).
func writeTable(t *testing.T, dir string, rows int) string {
	t.Helper()
	var csv strings.Builder
	for r := range rows {
		fmt.Fprint(&csv, r%3)
		for j := range 784 {
			fmt.Fprintf(&csv, ",%d", (r*31+j*(r%3+1))%17)
		}
		csv.WriteString("\n")
	}
	path := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(path, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeImageFolder writes classes folders of n w x h RGB PNGs each.
func writeImageFolder(t *testing.T, dir string, classes, n, w, h int) string {
	t.Helper()
	root := filepath.Join(dir, "images")
	for c := range classes {
		sub := filepath.Join(root, fmt.Sprintf("class%d", c))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			img := image.NewRGBA(image.Rect(0, 0, w, h))
			for p := range img.Pix {
				img.Pix[p] = uint8(p*7 + i*13 + c*100)
			}
			var buf bytes.Buffer
			if err := png.Encode(&buf, img); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("%d.png", i)), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// writeTokens writes n uint16 tokens in a repeating pattern.
func writeTokens(t *testing.T, dir string, n int) string {
	t.Helper()
	toks := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(toks[2*i:], uint16(i*7%65))
	}
	path := filepath.Join(dir, "train.bin")
	if err := os.WriteFile(path, toks, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func planArgs(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, log bytes.Buffer
	err := planMain(context.Background(), args, &out, &log)
	return out.String() + log.String(), err
}

// The loader's memory is planned from the data: the staging the
// allocator will hand out is its requests rounded to blocks, the shuffle
// state and scratch are PlanMemory's.
func TestPlanLoader(t *testing.T) {
	table := writeTable(t, t.TempDir(), 24)
	spec, _ := zoo.Lookup("mlp")
	md, err := openData(table, spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, depth := range []int{1, 2, 5} {
		lp, err := planLoader(md.src, dataset.Config{BatchSize: 8, Workers: 3, Depth: depth})
		if err != nil {
			t.Fatal(err)
		}
		in, tg := device.RoundSize(8*784*4), device.RoundSize(8*8)
		if lp.allocated != int64(depth)*(in+tg) || lp.mem.Depth != depth {
			t.Errorf("depth %d: allocated %d, want %d", depth, lp.allocated, int64(depth)*(in+tg))
		}
		// Under a budget the staging maps segments of its own, at most
		// one rounded to a page for each request (not the allocator's
		// regular 2 MiB).
		pages := int64(depth) * ((in+4095)/4096 + (tg+4095)/4096) * 4096
		if lp.reserved < lp.allocated || lp.reserved > pages {
			t.Errorf("depth %d: reserved %d, want %d to %d", depth, lp.reserved, lp.allocated, pages)
		}
		if lp.mem.Source != 24*784*4+24*8 || lp.heap() != 8*24+3*lp.mem.ScratchPerWorker+lp.mem.Source || lp.cost() != lp.reserved+lp.heap() {
			t.Errorf("depth %d: heap %d, cost %d of %+v", depth, lp.heap(), lp.cost(), lp.mem)
		}
	}
}

// headroom plan --data puts the loader in the plan's table, with and
// without a budget.
func TestPlanShowsLoader(t *testing.T) {
	dir := t.TempDir()
	table := writeTable(t, dir, 24)
	spec, _ := zoo.Lookup("mlp")
	md, _ := openData(table, spec)
	lp, err := planLoader(md.src, dataset.Config{BatchSize: 8, Workers: parallel.Threads(), Depth: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("  data loader (input)    %12s   (prefetch depth 3: staging 3 x 24.56 KiB", device.FormatBytes(lp.cost()))
	for _, args := range [][]string{
		{"--model", "mlp", "--data", table, "--batch-size", "8", "--prefetch", "3"},
		{"--model", "mlp", "--data", table, "--batch-size", "8", "--prefetch", "3", "--budget", "64MiB"},
	} {
		out, err := planArgs(t, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if !strings.Contains(out, want) {
			t.Errorf("%v: no %q in:\n%s", args, want, out)
		}
	}
	// With a budget the step is planned in what the loader leaves.
	out, _ := planArgs(t, "--model", "mlp", "--data", table, "--batch-size", "8", "--prefetch", "3", "--budget", "64MiB")
	if rest := device.FormatBytes(64<<20 - lp.cost()); !strings.Contains(out, "plan within "+rest) {
		t.Errorf("the step is not planned in the budget less the loader's %s:\n%s", device.FormatBytes(lp.cost()), out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--prefetch", "0", "--data", table}, "--prefetch 0: must be at least 1"},
		{[]string{"--data", filepath.Join(dir, "none.csv")}, "--data"},
	} {
		if out, err := planArgs(t, append([]string{"--model", "mlp"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q\n%s", c.args, err, c.want, out)
		}
	}
}

// stepMinimum is the least budget of the mlp's step at batch 8 alone.
func stepMinimum(t *testing.T) int64 {
	t.Helper()
	spec, _ := zoo.Lookup("mlp")
	_, err := budget.Fit(context.Background(), budget.Problem{
		Build:        func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss },
		Example:      spec.Example,
		Batch:        8,
		Budget:       1,
		NewOptimizer: func() (optim.Optimizer, error) { return newOptimizer("adam", 1e-3, -1) },
	})
	var small *budget.TooSmallError
	if !errors.As(err, &small) {
		t.Fatalf("budget of 1 byte: %v", err)
	}
	return small.Minimum
}

// A budget that holds the step but not the deepest prefetch lowers the
// depth; one that holds neither at depth 1 says the least budget that
// does, and that budget works.
func TestBudgetLowersPrefetch(t *testing.T) {
	table := writeTable(t, t.TempDir(), 24)
	spec, _ := zoo.Lookup("mlp")
	md, _ := openData(table, spec)
	cost := func(d int) int64 {
		lp, err := planLoader(md.src, dataset.Config{BatchSize: 8, Shuffle: true, Workers: parallel.Threads(), Depth: d})
		if err != nil {
			t.Fatal(err)
		}
		return lp.cost()
	}
	need := stepMinimum(t)
	args := func(b int64) []string {
		return []string{"--model", "mlp", "--data", table, "--batch-size", "8", "--prefetch", "4", "--budget", strconv.FormatInt(b, 10)}
	}
	// Room for the step and two staging buffers, not four.
	out, err := planArgs(t, args(need+cost(2))...)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`prefetch depth lowered from 4 to (\d)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("depth not lowered:\n%s", out)
	}
	if d, _ := strconv.Atoi(m[1]); d > 2 || !strings.Contains(out, fmt.Sprintf("(prefetch depth %d:", d)) {
		t.Errorf("depth %s at a budget for the step and depth 2:\n%s", m[1], out)
	}
	// Plenty: the depth asked for.
	if out, err := planArgs(t, args(need+cost(4)+64<<20)...); err != nil || strings.Contains(out, "lowered") || !strings.Contains(out, "(prefetch depth 4:") {
		t.Errorf("a large budget: %v\n%s", err, out)
	}
	// The least budget: the step's and the loader's at depth 1.
	least := need + cost(1)
	_, err = planArgs(t, args(least-1)...)
	var small *LoaderTooSmallError
	if !errors.As(err, &small) || !errors.Is(err, budget.ErrBudget) || small.Step+small.Loader != least {
		t.Fatalf("budget %d: %v, want the least budget %d", least-1, err, least)
	}
	if !strings.Contains(err.Error(), "the smallest budget that works is "+device.FormatBytes(least)) {
		t.Errorf("error does not state the least budget: %v", err)
	}
	if out, err := planArgs(t, args(least)...); err != nil || !strings.Contains(out, "lowered from 4 to 1") {
		t.Errorf("the least budget %d: %v\n%s", least, err, out)
	}
}

var inputBytes = regexp.MustCompile(`data loader input bytes: planned (\d+), allocator (\d+)`)

// In a real run the allocator's count of the loader's bytes (category
// input) is the plan's, for each kind of source, with and without a
// budget; under a budget the run fits the device capped at it.
func TestPlannedLoaderEqualsAllocator(t *testing.T) {
	dir := t.TempDir()
	table := writeTable(t, dir, 24)
	folder := writeImageFolder(t, dir, 2, 4, 12, 10)
	tokens := writeTokens(t, dir, 2000)
	for _, c := range []struct {
		model, data string
		extra       []string
	}{
		{"mlp", table, nil},
		{"mlp", table, []string{"--budget", "6MiB", "--prefetch", "3"}},
		{"resnet18-64", folder, []string{"--prefetch", "3"}},
		{"gpt-shakespeare-char", tokens, nil},
	} {
		t.Run(c.model+strings.Join(c.extra, ""), func(t *testing.T) {
			out := trainArgs(t, append([]string{"--model", c.model, "--data", c.data, "--steps", "2", "--batch-size", "4"}, c.extra...)...)
			m := inputBytes.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no input bytes in:\n%s", out)
			}
			if m[1] != m[2] || m[1] == "0" {
				t.Errorf("planned %s bytes of input, the allocator counts %s", m[1], m[2])
			}
			// The step's wait for data is measured and reported.
			if !regexp.MustCompile(`data wait [0-9.]+s \([0-9.]+% of the steps' time\)`).MatchString(out) {
				t.Errorf("no data wait in the epoch's line:\n%s", out)
			}
		})
	}
}
