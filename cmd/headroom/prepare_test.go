package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
)

func prepareArgs(ctx context.Context, args ...string) (string, error) {
	var out, log bytes.Buffer
	err := prepareMain(ctx, args, &out, &log)
	return out.String(), err
}

// decodeTokens reads a prepared token file back to text through its
// vocabulary.
func decodeTokens(t *testing.T, bin, vocab string) string {
	t.Helper()
	js, err := os.ReadFile(vocab)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Itos  []string `json:"itos"`
		Width int      `json:"token_bytes"`
	}
	if err := json.Unmarshal(js, &meta); err != nil {
		t.Fatal(err)
	}
	f, err := dataset.OpenTokens(bin, dataset.TokenOptions{Context: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Width != meta.Width {
		t.Errorf("%s: %d-byte tokens, the vocabulary says %d", bin, f.Width, meta.Width)
	}
	var b strings.Builder
	for k := range f.NumTokens() {
		b.WriteString(meta.Itos[f.Token(k)])
	}
	return b.String()
}

// prepare --text writes character tokens that decode back to the text
// (split into train and validation), with uint16 tokens or, past 65536
// characters, uint32 ones under llm.c's header; characters cut by a read
// chunk survive.
func TestPrepareText(t *testing.T) {
	var wide strings.Builder
	for r := rune(0x10000); r < 0x10000+70000; r++ {
		wide.WriteRune(r)
	}
	for _, c := range []struct {
		name, text string
		val        float64
		width      int
	}{
		{"ascii with validation", strings.Repeat("First Citizen:\nBefore we proceed any further, hear me speak.\n", 50), 0.1, 2},
		// An odd offset puts the chunk boundary inside a two-byte é.
		{"utf-8 across chunks", "a" + strings.Repeat("é", prepareChunk/2+1000) + "z", 0, 2},
		{"wide vocabulary", wide.String(), 0, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "input.txt")
			if err := os.WriteFile(in, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "train.bin")
			args := []string{"--text", in, "--out", out}
			if c.val > 0 {
				args = append(args, "--val-fraction", strconv.FormatFloat(c.val, 'g', -1, 64))
			}
			if msg, err := prepareArgs(t.Context(), args...); err != nil {
				t.Fatalf("%v\n%s", err, msg)
			}
			vocab := filepath.Join(dir, "train.vocab.json")
			got := decodeTokens(t, out, vocab)
			runes := []rune(c.text)
			nVal := int(float64(len(runes)) * c.val)
			if want := string(runes[:len(runes)-nVal]); got != want {
				t.Errorf("train.bin decodes to %d characters, want the first %d of the text", len([]rune(got)), len(runes)-nVal)
			}
			if c.val > 0 {
				if got := decodeTokens(t, filepath.Join(dir, "val.bin"), vocab); got != string(runes[len(runes)-nVal:]) {
					t.Errorf("val.bin decodes to %q, want the last %d characters", got, nVal)
				}
			}
			if f, err := dataset.OpenTokens(out, dataset.TokenOptions{Context: 1}); err != nil || f.Width != c.width {
				t.Errorf("token width %v, %v; want %d", f, err, c.width)
			}
		})
	}
}

// Mistakes are named and leave nothing behind: text that is not UTF-8
// (at its byte offset), a cancelled run, a directory as --text.
func TestPrepareTextErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("abc\xffdef"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.txt")
	if err := os.WriteFile(good, []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	out := filepath.Join(dir, "out", "train.bin")
	if err := os.Mkdir(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ctx  context.Context
		args []string
		want string
	}{
		{t.Context(), []string{"--text", bad, "--out", out}, "bad.txt: byte 3: not UTF-8"},
		{cancelled, []string{"--text", good, "--out", out}, context.Canceled.Error()},
		{t.Context(), []string{"--text", dir, "--out", out}, "not a regular file"},
		{t.Context(), []string{"--text", good}, "--out is needed"},
		{t.Context(), []string{"--text", good, "--images", dir, "--out", out}, "give one of --text and --images"},
		{t.Context(), []string{"--text", good, "--out", out, "--val-fraction", "1"}, "--val-fraction 1"},
	} {
		if _, err := prepareArgs(c.ctx, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	if left, _ := os.ReadDir(filepath.Dir(out)); len(left) != 0 {
		t.Errorf("failed runs left %v", left)
	}
}

// prepare --images writes shards the stream source reads back: every
// image once, in the shuffled order, decoding to what the folder gives,
// with its class; a shard stays under --shard-size.
func TestPrepareImages(t *testing.T) {
	dir := t.TempDir()
	root := writeImageFolder(t, dir, 3, 5, 12, 10)
	out := filepath.Join(dir, "shards")
	msg, err := prepareArgs(t.Context(), "--images", root, "--out", out, "--shard-size", "4KiB", "--seed", "7")
	if err != nil {
		t.Fatalf("%v\n%s", err, msg)
	}
	paths, _ := filepath.Glob(filepath.Join(out, "shard-*.tar"))
	if len(paths) < 2 {
		t.Fatalf("%d shards for 15 images at 4 KiB each: %s", len(paths), msg)
	}
	for _, p := range paths {
		if fi, _ := os.Stat(p); fi.Size() > 4<<10+1024+512*6 {
			t.Errorf("%s is %d bytes", p, fi.Size())
		}
	}
	folder, err := dataset.OpenImageFolder(root, 3)
	if err != nil {
		t.Fatal(err)
	}
	order := dataset.Sampler{N: folder.Len(), BatchSize: 1, Shuffle: true, Seed: 7}.Order(0)
	src := &dataset.Shards{Paths: paths}
	st, err := src.Open(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var r dataset.Record
	var got, want dataset.Example
	k := 0
	for ; ; k++ {
		err := st.Next(t.Context(), &r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Decode(&r, &got); err != nil {
			t.Fatal(err)
		}
		if err := folder.Get(order[k], &want); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.X, want.X) || !slices.Equal(got.Y, want.Y) {
			t.Errorf("record %d (%s) differs from %s", k, r.Key, folder.Paths[order[k]])
		}
	}
	if k != folder.Len() {
		t.Errorf("%d records, want %d", k, folder.Len())
	}
	if cl, _ := os.ReadFile(filepath.Join(out, "classes.txt")); string(cl) != "class0\nclass1\nclass2\n" {
		t.Errorf("classes.txt: %q", cl)
	}

	// A file that is no image is named, and no shard is left.
	if err := os.WriteFile(filepath.Join(root, "class1", "junk.png"), []byte("not a png"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if _, err := prepareArgs(t.Context(), "--images", root, "--out", bad); err == nil || !strings.Contains(err.Error(), "junk.png: not a PNG or JPEG") {
		t.Errorf("junk image: %v", err)
	}
	if left, _ := os.ReadDir(bad); len(left) != 0 {
		t.Errorf("a failed run left %v", left)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := prepareArgs(cancelled, "--images", root, "--out", bad); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// prepare's progress written to a log (not a terminal) is plain lines, as
// train's is: it was one line rewritten with carriage returns.
func TestPrepareProgressInALog(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "input.txt")
	if err := os.WriteFile(in, []byte(strings.Repeat("hello world\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	if err := prepareMain(t.Context(), []string{"--text", in, "--out", filepath.Join(dir, "train.bin")}, &out, &log); err != nil {
		t.Fatal(err)
	}
	if got, want := log.String(), "prepare: vocabulary: 1.17 KiB of 1.17 KiB read\nprepare: tokens: 1.17 KiB of 1.17 KiB read, 1200 tokens written\n"; got != want {
		t.Errorf("progress in a log:\n got %q\nwant %q", got, want)
	}
}
