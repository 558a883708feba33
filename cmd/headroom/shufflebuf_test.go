package main

import (
	"errors"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/zoo"
)

// writeShards writes 15 images of 3 classes as shards (headroom prepare
// --images), as TestTrainOnShards does.
func writeShards(t *testing.T, dir string) string {
	t.Helper()
	root := writeImageFolder(t, dir, 3, 5, 12, 10)
	shards := filepath.Join(dir, "shards")
	if msg, err := prepareArgs(t.Context(), "--images", root, "--out", shards, "--shard-size", "4KiB", "--seed", "7"); err != nil {
		t.Fatalf("%v\n%s", err, msg)
	}
	return shards
}

// shuffleCost is the cost of the mlp's loader over shards at batch 8, a
// prefetch depth and a shuffle buffer of records, as plan --data plans it.
func shuffleCost(t *testing.T, shards string) (cost func(depth, records int) loaderPlan, maxRecord int64) {
	t.Helper()
	spec, _ := zoo.Lookup("mlp")
	md, err := openData(shards, spec)
	if err != nil {
		t.Fatal(err)
	}
	return func(depth, records int) loaderPlan {
		md.shuffle = optInt{records, true}
		lp, err := md.plan(md.len(), dataset.Config{BatchSize: 8, Shuffle: true, Workers: parallel.Threads(), Depth: depth, Transforms: md.transforms})
		if err != nil {
			t.Fatal(err)
		}
		return lp
	}, int64(md.maxRecord)
}

// --shuffle-buffer is validated, and refused where there is no stream.
func TestShuffleBufferRefused(t *testing.T) {
	dir := t.TempDir()
	table := writeTable(t, dir, 24)
	shards := writeShards(t, dir)
	var f trainFlags
	fs := trainFlagSet(&f)
	fs.SetOutput(io.Discard)
	if err := parseFlags(fs, []string{"--shuffle-buffer", "many"}); err == nil || !strings.Contains(err.Error(), "whole number") {
		t.Errorf("--shuffle-buffer many: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data", shards, "--shuffle-buffer", "-1"}, "must be 0"},
		{[]string{"--data", table, "--shuffle-buffer", "8"}, "only WebDataset shards"},
		{[]string{"--shuffle-buffer", "8"}, "only WebDataset shards"}, // generated data
	} {
		err := trainErr(t, append([]string{"--model", "mlp", "--steps", "1", "--batch-size", "4"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("train %v: %v, want an error naming %q", c.args, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data", shards, "--shuffle-buffer", "-3"}, "must be 0"},
		{[]string{"--data", table, "--shuffle-buffer", "8"}, "only WebDataset shards"},
		{[]string{"--shuffle-buffer", "8"}, "needs --data"},
	} {
		if out, err := planArgs(t, append([]string{"--model", "mlp", "--batch-size", "8"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("plan %v: %v, want an error naming %q\n%s", c.args, err, c.want, out)
		}
	}
}

// shuffleRow is the shuffle bytes of the memory plan's loader row and of
// the loader's line at run time.
var (
	shuffleRow = regexp.MustCompile(`data loader \(input\).*; shuffle ([0-9.]+ [KMG]?i?B),`)
	shuffleRun = regexp.MustCompile(`data loader: .* staging .* shuffle ([0-9.]+ [KMG]?i?B),`)
)

// An explicit --shuffle-buffer is what the loader holds, in the plan and
// at run time (its pool: the buffer and the batches in flight, each at the
// largest record), 0 included, and the budget does not lower it.
func TestShuffleBufferGiven(t *testing.T) {
	shards := writeShards(t, t.TempDir())
	cost, maxRecord := shuffleCost(t, shards)
	for _, records := range []int{0, 5, 64} {
		want := device.FormatBytes(int64(records+3*8) * maxRecord) // depth 2: 3 batches besides the buffer
		out := trainArgs(t, "--model", "mlp", "--data", shards, "--steps", "2", "--batch-size", "8", "--shuffle-buffer", strconv.Itoa(records))
		row, run := shuffleRow.FindStringSubmatch(out), shuffleRun.FindStringSubmatch(out)
		if row == nil || run == nil || row[1] != want || run[1] != want {
			t.Errorf("--shuffle-buffer %d: want shuffle %s planned and held:\n%s", records, want, out)
		}
		if m := inputBytes.FindStringSubmatch(out); m == nil || m[1] != m[2] {
			t.Errorf("--shuffle-buffer %d: planned input bytes are not the allocator's:\n%s", records, out)
		}
	}
	// A budget that would hold a smaller buffer keeps the one given, and
	// the least budget it states counts that buffer.
	need := stepMinimum(t)
	_, err := planArgs(t, "--model", "mlp", "--data", shards, "--batch-size", "8", "--shuffle-buffer", "64", "--budget", strconv.FormatInt(need+cost(1, 8).cost(), 10))
	var small *LoaderTooSmallError
	if !errors.As(err, &small) || small.Shuffle != 64 || small.Step+small.Loader != need+cost(1, 64).cost() || !strings.Contains(err.Error(), "shuffle buffer of 64 records") {
		t.Errorf("--shuffle-buffer 64 under a budget for 8: %v", err)
	}
}

// Under --budget a stream's default shuffle buffer (8 batches) is halved
// until the loader and the step fit, down to one batch; the least budget
// is the step's and the loader's at depth 1 with one batch of buffer. A
// budget for 2 batches of buffer failed before the buffer was lowered.
func TestBudgetLowersShuffleBuffer(t *testing.T) {
	shards := writeShards(t, t.TempDir())
	cost, _ := shuffleCost(t, shards)
	need := stepMinimum(t)
	args := func(b int64, extra ...string) []string {
		return append([]string{"--model", "mlp", "--data", shards, "--batch-size", "8", "--budget", strconv.FormatInt(b, 10)}, extra...)
	}
	mid := need + cost(1, 16).cost()
	out, err := planArgs(t, args(mid)...)
	if err != nil || !strings.Contains(out, "shuffle buffer lowered from 64 to 16 records to fit the budget") {
		t.Errorf("budget %d (the step and 16 records at depth 1): %v\n%s", mid, err, out)
	}
	// Plenty: the default buffer, not lowered.
	if out, err := planArgs(t, args(need+cost(2, 64).cost()+64<<20)...); err != nil || strings.Contains(out, "lowered") {
		t.Errorf("a large budget: %v\n%s", err, out)
	}
	least := need + cost(1, 8).cost()
	_, err = planArgs(t, args(least-1)...)
	var small *LoaderTooSmallError
	if !errors.As(err, &small) || !errors.Is(err, budget.ErrBudget) || small.Step+small.Loader != least || small.Shuffle != 8 {
		t.Fatalf("budget %d: %v, want the least budget %d at 8 records", least-1, err, least)
	}
	if !strings.Contains(err.Error(), "shuffle buffer of 8 records") || !strings.Contains(err.Error(), "the smallest budget that works is "+device.FormatBytes(least)) {
		t.Errorf("error does not state the least buffer and budget: %v", err)
	}
	if out, err := planArgs(t, args(least)...); err != nil || !strings.Contains(out, "lowered from 64 to 8 records") {
		t.Errorf("the least budget %d: %v\n%s", least, err, out)
	}
	// Training at the middle budget runs with the lowered buffer: the
	// plan's input bytes are the allocator's, its shuffle bytes the
	// loader's.
	out = trainArgs(t, args(mid, "--steps", "2")...)
	want := device.FormatBytes(cost(1, 16).mem.Shuffle)
	row, run := shuffleRow.FindStringSubmatch(out), shuffleRun.FindStringSubmatch(out)
	if !strings.Contains(out, "lowered from 64 to 16 records") || row == nil || run == nil || row[1] != want || run[1] != want {
		t.Errorf("train at budget %d: want the buffer lowered to 16 records, shuffle %s planned and held:\n%s", mid, want, out)
	}
	if m := inputBytes.FindStringSubmatch(out); m == nil || m[1] != m[2] {
		t.Errorf("train at budget %d: planned input bytes are not the allocator's:\n%s", mid, out)
	}
}

// Stopped mid-epoch and resumed with a shuffle buffer of its own, the
// stream is replayed through that buffer: the second epoch's loss is the
// uninterrupted run's.
func TestResumeShuffleBuffer(t *testing.T) {
	dir := t.TempDir()
	shards := writeShards(t, dir)
	for _, records := range []string{"0", "5"} {
		base := []string{"--model", "mlp", "--data", shards, "--epochs", "2", "--batch-size", "4", "--shuffle-buffer", records}
		whole := epochLoss.FindAllStringSubmatch(trainArgs(t, base...), -1)
		ck := filepath.Join(dir, "ck"+records)
		trainArgs(t, append(base, "--steps", "2", "--checkpoint-dir", ck)...)
		resumed := epochLoss.FindAllStringSubmatch(trainArgs(t, append(base, "--resume", ck)...), -1)
		if len(whole) != 2 || len(resumed) == 0 || resumed[len(resumed)-1][0] != whole[1][0] {
			t.Errorf("--shuffle-buffer %s resumed mid-epoch: %v, uninterrupted: %v", records, resumed, whole)
		}
	}
}
