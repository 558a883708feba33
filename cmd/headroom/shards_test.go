package main

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// trainErr is trainArgs for a run that must fail: its error.
func trainErr(t *testing.T, args ...string) error {
	t.Helper()
	var f trainFlags
	fs := trainFlagSet(&f)
	if err := parseFlags(fs, args); err != nil {
		t.Fatal(err)
	}
	f.given = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	var out, log bytes.Buffer
	return trainFashion(context.Background(), f, &out, &log)
}

var epochLoss = regexp.MustCompile(`epoch (\d+): train loss ([0-9]+\.[0-9]+),`)

// The shards headroom prepare --images writes train a classifier through
// the stream loader, end to end: two epochs (each re-opening the stream)
// with finite losses, the loader's input bytes as planned, under a budget
// too; given as their directory or as a glob.
func TestTrainOnShards(t *testing.T) {
	dir := t.TempDir()
	root := writeImageFolder(t, dir, 3, 5, 12, 10)
	shards := filepath.Join(dir, "shards")
	if msg, err := prepareArgs(t.Context(), "--images", root, "--out", shards, "--shard-size", "4KiB", "--seed", "7"); err != nil {
		t.Fatalf("%v\n%s", err, msg)
	}
	for _, c := range []struct {
		name, data string
		extra      []string
	}{
		{"dir", shards, nil},
		{"glob", filepath.Join(shards, "shard-*.tar"), []string{"--prefetch", "3"}},
		{"budget", shards, []string{"--budget", "6MiB", "--prefetch", "3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := trainArgs(t, append([]string{"--model", "mlp", "--data", c.data, "--epochs", "2", "--batch-size", "4"}, c.extra...)...)
			if !strings.Contains(out, "WebDataset shards") || !strings.Contains(out, "15 samples") || !strings.Contains(out, "3 classes") {
				t.Errorf("the data line does not name the shards, 15 samples and 3 classes:\n%s", out)
			}
			m := inputBytes.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no input bytes in:\n%s", out)
			}
			if m[1] != m[2] || m[1] == "0" {
				t.Errorf("planned %s bytes of input, the allocator counts %s", m[1], m[2])
			}
			if l := epochLoss.FindAllStringSubmatch(out, -1); len(l) != 2 || l[1][1] != "2" {
				t.Errorf("want two epochs with finite losses:\n%s", out)
			}
		})
	}

	// Stopped mid-epoch and resumed, the stream is replayed to the
	// checkpoint's batch: the second epoch's loss is the uninterrupted
	// run's.
	base := []string{"--model", "mlp", "--data", shards, "--epochs", "2", "--batch-size", "4"}
	whole := epochLoss.FindAllStringSubmatch(trainArgs(t, base...), -1)
	ck := filepath.Join(dir, "ck")
	trainArgs(t, append(base, "--steps", "2", "--checkpoint-dir", ck)...)
	resumed := epochLoss.FindAllStringSubmatch(trainArgs(t, append(base, "--resume", ck)...), -1)
	if len(whole) != 2 || len(resumed) == 0 || resumed[len(resumed)-1][0] != whole[1][0] {
		t.Errorf("resumed mid-epoch: %v, uninterrupted: %v", resumed, whole)
	}

	// What a stream cannot do is refused, naming why.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--val-split", "0.2"}, "--val-split"},
		{[]string{"--limit", "5"}, "--limit 5"},
		{[]string{"--val", shards}, "--val"},
		{[]string{"--data", filepath.Join(dir, "none-*.tar")}, "no file matches"},
	} {
		err := trainErr(t, append([]string{"--model", "mlp", "--data", shards, "--steps", "1", "--batch-size", "4"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}

	// plan --data plans the stream's loader: its shuffle buffer is
	// planned at the shards' largest record, not the 16 MiB default.
	out, err := planArgs(t, "--model", "mlp", "--data", shards, "--batch-size", "4")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	row := regexp.MustCompile(`data loader \(input\).*shuffle ([0-9.]+) (B|KiB|MiB)`).FindStringSubmatch(out)
	if row == nil || row[2] == "MiB" {
		t.Errorf("plan --data shards: no loader row with a shuffle buffer under 1 MiB:\n%s", out)
	}
}
