package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
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

// writeShardFile writes samples as a WebDataset shard at path: for each
// key a png member (good is a real image, else bytes that are not one) and
// a cls member. cut > 0 cuts the file to that many bytes.
func writeShardFile(t *testing.T, path string, keys []string, good []bool, cut int) {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, 6, 5))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, img); err != nil {
		t.Fatal(err)
	}
	fields := make([][]dataset.Part, len(keys))
	for i := range keys {
		data := pngBuf.Bytes()
		if !good[i] {
			// A PNG cut after its header: DecodeConfig reads it, the
			// decoder fails.
			data = data[:40]
		}
		fields[i] = []dataset.Part{{Ext: "png", Data: data}, {Ext: "cls", Data: []byte(fmt.Sprint(i % 2))}}
	}
	var buf bytes.Buffer
	if err := dataset.WriteShard(&buf, keys, fields); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if cut > 0 {
		b = b[:cut]
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A corrupt member or a shard cut in the middle stops training with an
// error naming the shard and the member; under --skip-bad the sample (the
// rest of the cut shard) is skipped, counted in the epoch's line, and the
// epochs go on (the stream then ends before the scan's count of batches).
func TestTrainShardsSkipBad(t *testing.T) {
	dir := t.TempDir()
	keys := []string{"a0", "a1", "a2", "a3", "a4"}
	good := []bool{true, true, false, true, true}
	corrupt := filepath.Join(dir, "corrupt", "shard-0.tar")
	cutDir := filepath.Join(dir, "cut")
	for _, d := range []string{filepath.Dir(corrupt), cutDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeShardFile(t, corrupt, keys, good, 0)
	writeShardFile(t, filepath.Join(cutDir, "shard-0.tar"), keys, []bool{true, true, true, true, true}, 0)
	// Cut in the middle, after member b1.cls: each member is a header
	// block and a data block, so 7 blocks and some padding are left.
	writeShardFile(t, filepath.Join(cutDir, "shard-1.tar"), []string{"b0", "b1", "b2", "b3", "b4"}, []bool{true, true, true, true, true}, 7*512+100)

	// An image folder and a table skip the same way (a PNG cut after its
	// header; a row with a cell that is not a number, dropped as the table
	// is read and counted in the data line).
	folder := writeImageFolder(t, dir, 2, 3, 6, 5)
	bad := filepath.Join(folder, "class1", "1.png")
	if b, err := os.ReadFile(bad); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bad, b[:40], 0o644); err != nil {
		t.Fatal(err)
	}
	table := filepath.Join(dir, "t.csv")
	var rows strings.Builder
	for i := range 9 {
		cell := fmt.Sprint(i)
		if i == 4 {
			cell = "x"
		}
		fmt.Fprintf(&rows, "%d%s\n", i%2, strings.Repeat(","+cell, 784))
	}
	if err := os.WriteFile(table, []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := trainErr(t, "--model", "mlp", "--data", table, "--steps", "1"); err == nil || !strings.Contains(err.Error(), "row 5") {
		t.Errorf("a bad cell: %v, want an error naming row 5", err)
	}
	if out := trainArgs(t, "--model", "mlp", "--data", table, "--steps", "1", "--skip-bad"); !strings.Contains(out, "8 rows") || !strings.Contains(out, "1 bad row(s) skipped") {
		t.Errorf("--skip-bad on a table: want 8 rows and 1 skipped in:\n%s", out)
	}

	for _, c := range []struct {
		name, data string
		want       []string
	}{
		{"image folder", folder, []string{bad}},
		{"corrupt member", filepath.Dir(corrupt), []string{"shard-0.tar", "member a2.png"}},
		{"cut shard", cutDir, []string{"shard-1.tar", "member b1.cls", "truncated"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"--model", "mlp", "--data", c.data, "--epochs", "2", "--batch-size", "2"}
			err := trainErr(t, args...)
			if err == nil {
				t.Fatal("a bad sample did not stop training")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			out := trainArgs(t, append(args, "--skip-bad")...)
			skipped := regexp.MustCompile(`epoch (\d): train loss [0-9.]+, skipped (\d+) bad sample\(s\) \(--skip-bad; (\d+) in all, the first: ([^)]*)`).FindAllStringSubmatch(out, -1)
			if len(skipped) != 2 || skipped[0][2] != "1" || skipped[1][3] != "2" {
				t.Fatalf("want each of the two epochs to skip one sample:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(skipped[0][4], w) {
					t.Errorf("the skipped sample's error %q does not name %q", skipped[0][4], w)
				}
			}
		})
	}
}
