package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
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
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
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

// trainArgs runs headroom train in this process with args.
func trainArgs(t *testing.T, args ...string) string {
	t.Helper()
	var f trainFlags
	fs := trainFlagSet(&f)
	if err := parseFlags(fs, args); err != nil {
		t.Fatal(err)
	}
	f.given = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	var out, log bytes.Buffer
	if err := trainFashion(context.Background(), f, &out, &log); err != nil {
		t.Fatalf("train %v: %v\n%s%s", args, err, out.String(), log.String())
	}
	return out.String()
}

// A run stopped after k steps and resumed from its checkpoint ends with
// the weights of an uninterrupted run, byte for byte, across an epoch
// boundary, with Adam and with SGD's momentum.
func TestTrainResumeEqualsStraight(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	for _, opt := range []string{"adam", "sgd"} {
		t.Run(opt, func(t *testing.T) {
			dir := t.TempDir()
			common := []string{"--model", "mlp", "--optimizer", opt, "--limit", "64", "--batch-size", "8", "--epochs", "2", "--lr", "0.01"}
			straight := filepath.Join(dir, "straight.safetensors")
			trainArgs(t, append(common, "--save", straight)...)

			ck := filepath.Join(dir, "ck")
			out := trainArgs(t, append(common, "--steps", "11", "--checkpoint-dir", ck, "--save-every", "4", "--keep", "2")...)
			if !strings.Contains(out, "step-000000011") {
				t.Fatalf("no checkpoint at step 11:\n%s", out)
			}
			cks, _ := train.Checkpoints(ck)
			if len(cks) != 2 {
				t.Errorf("%d checkpoints kept, want 2 (--keep 2)", len(cks))
			}
			resumed := filepath.Join(dir, "resumed.safetensors")
			out = trainArgs(t, append(common, "--resume", ck, "--save", resumed)...)
			if !strings.Contains(out, "resumed from "+filepath.Join(ck, "step-000000011")+": step 11, epoch 2, batch 3") {
				t.Errorf("resume message:\n%s", out)
			}
			a, err := os.ReadFile(straight)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(resumed)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Error("the resumed run's weights differ from the uninterrupted run's")
			}
		})
	}
}

// A checkpoint of another configuration is refused by name.
func TestTrainResumeMismatch(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	ck := filepath.Join(t.TempDir(), "ck")
	trainArgs(t, "--model", "mlp", "--limit", "32", "--batch-size", "8", "--steps", "2", "--checkpoint-dir", ck)
	var f trainFlags
	fs := trainFlagSet(&f)
	parseFlags(fs, []string{"--model", "mlp", "--limit", "32", "--batch-size", "4", "--resume", ck})
	var out, log bytes.Buffer
	err := trainFashion(context.Background(), f, &out, &log)
	if err == nil || !strings.Contains(err.Error(), "batch 8, this run has 4") {
		t.Errorf("got %v, want a refusal naming the batch", err)
	}
}

// Every model of the zoo trains from the command line on generated data
// (the small ones under -short), and its loss is finite.
func TestTrainEveryModel(t *testing.T) {
	for _, name := range zoo.Names() {
		if isFashion(name) {
			continue
		}
		small := name == "resnet18-64" || name == "gpt-shakespeare-char"
		if testing.Short() && !small {
			continue
		}
		t.Run(name, func(t *testing.T) {
			args := []string{"--model", name, "--steps", "2", "--batch-size", "2", "--limit", "8"}
			if !small {
				args = append(args, "--batch-size", "1", "--limit", "2", "--steps", "1")
			}
			out := trainArgs(t, args...)
			m := regexp.MustCompile(`train loss ([0-9.]+)`).FindStringSubmatch(out)
			if m == nil || !strings.Contains(out, "test ") {
				t.Fatalf("no training report:\n%s", out)
			}
		})
	}
}

// --log writes one JSON object per step, with the fields the issue asks
// for; --val-split adds validation loss and accuracy to each epoch.
func TestTrainLogAndValidation(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	path := filepath.Join(t.TempDir(), "run.jsonl")
	out := trainArgs(t, "--model", "mlp", "--limit", "80", "--batch-size", "16", "--epochs", "2", "--val-split", "0.2", "--log", path)
	if n := len(regexp.MustCompile(`val loss [0-9.]+, val accuracy [0-9.]+% \(16 samples\), test loss`).FindAllString(out, -1)); n != 2 {
		t.Errorf("%d epochs with validation, want 2:\n%s", n, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string // the step lines; run and eval lines have a "kind"
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(l, `{"kind":`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 8 { // 64 training samples / 16, two epochs
		t.Fatalf("%d lines, want 8:\n%s", len(lines), data)
	}
	for i, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"step", "epoch", "loss", "lr", "samples_per_s", "data_wait_s", "peak_allocated", "peak_reserved", "micro_batches"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("line %d has no %q: %s", i, k, l)
			}
		}
		if rec["step"].(float64) != float64(i+1) || rec["peak_allocated"].(float64) <= 0 {
			t.Errorf("line %d: %s", i, l)
		}
	}
}

// --data trains through the loader: an image folder (resnet18-64), a CSV
// table (mlp) and a token file (the character GPT), with the loader's
// memory reported; a CSV run stopped and resumed ends with the weights of
// a straight one.
func TestTrainDataThroughLoader(t *testing.T) {
	dir := t.TempDir()
	// Image folder: two classes, 6 images each, 12x10 RGB.
	folder := filepath.Join(dir, "images")
	for c, name := range []string{"cats", "dogs"} {
		if err := os.MkdirAll(filepath.Join(folder, name), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			img := image.NewRGBA(image.Rect(0, 0, 12, 10))
			for p := range img.Pix {
				img.Pix[p] = uint8(p*7 + i*13 + c*100)
			}
			var buf bytes.Buffer
			if err := png.Encode(&buf, img); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(folder, name, fmt.Sprintf("%d.png", i)), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// CSV: label, then 784 features.
	var csv strings.Builder
	for r := range 24 {
		fmt.Fprint(&csv, r%3)
		for j := range 784 {
			fmt.Fprintf(&csv, ",%d", (r*31+j*(r%3+1))%17)
		}
		csv.WriteString("\n")
	}
	table := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(table, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// Tokens: uint16, a repeating pattern.
	toks := make([]byte, 2*2000)
	for i := range 2000 {
		binary.LittleEndian.PutUint16(toks[2*i:], uint16(i*7%65))
	}
	tokens := filepath.Join(dir, "train.bin")
	if err := os.WriteFile(tokens, toks, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ model, data, what string }{
		{"resnet18-64", folder, "image folder"},
		{"mlp", table, "table"},
		{"gpt-shakespeare-char", tokens, "token file"},
	} {
		t.Run(c.model, func(t *testing.T) {
			out := trainArgs(t, "--model", c.model, "--data", c.data, "--steps", "2", "--batch-size", "2", "--val-split", "0.25")
			for _, want := range []string{"data: " + c.what, "data loader: ", "from the device as input", "val loss"} {
				if !strings.Contains(out, want) {
					t.Errorf("no %q in:\n%s", want, out)
				}
			}
		})
	}
	// Under --budget the loader's staging is part of the budget.
	out := trainArgs(t, "--model", "mlp", "--data", table, "--batch-size", "8", "--budget", "5MiB", "--steps", "2")
	if !strings.Contains(out, "data loader staging 49.12 KiB of the budget") || !strings.Contains(out, "data loader: 49.12 KiB staging") {
		t.Errorf("budget with the loader:\n%s", out)
	}
	common := []string{"--model", "mlp", "--data", table, "--batch-size", "4", "--epochs", "2", "--lr", "0.01"}
	straight, resumed, ck := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors"), filepath.Join(dir, "ck")
	trainArgs(t, append(common, "--save", straight)...)
	trainArgs(t, append(common, "--steps", "8", "--checkpoint-dir", ck)...)
	trainArgs(t, append(common, "--resume", ck, "--save", resumed)...)
	a, _ := os.ReadFile(straight)
	b, _ := os.ReadFile(resumed)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Error("resumed through the loader: weights differ from a straight run")
	}
}

// --save-every takes steps or a duration; bad values are refused before
// any work, naming the flag.
func TestTrainSaveEvery(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	ck := filepath.Join(t.TempDir(), "ck")
	out := trainArgs(t, "--model", "mlp", "--limit", "32", "--batch-size", "8", "--steps", "3", "--checkpoint-dir", ck, "--save-every", "1ns", "--keep", "0")
	if n := strings.Count(out, "every 1ns)"); n != 3 {
		t.Errorf("%d time-based checkpoints, want 3:\n%s", n, out)
	}
	for _, c := range []struct{ args []string }{
		{[]string{"--save-every", "often", "--checkpoint-dir", ck}},
		{[]string{"--save-every", "-2", "--checkpoint-dir", ck}},
		{[]string{"--save-every", "5"}},
		{[]string{"--keep", "-1"}},
		{[]string{"--val-split", "1"}},
		{[]string{"--steps", "-1"}},
		{[]string{"--resume", t.TempDir()}},
	} {
		var f trainFlags
		fs := trainFlagSet(&f)
		if err := parseFlags(fs, append([]string{"--data", "/nonexistent"}, c.args...)); err != nil {
			t.Fatal(err)
		}
		var o, l bytes.Buffer
		err := trainFashion(context.Background(), f, &o, &l)
		if err == nil || !strings.Contains(err.Error(), c.args[0]) {
			t.Errorf("%v: got %v, want an error naming %s", c.args, err, c.args[0])
		}
	}
}

// --weight-decay and --clip-grad reach the optimizer and the trainer: each
// changes the trained weights, and naming a default changes nothing.
func TestTrainWeightDecayAndClip(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	dir := t.TempDir()
	weights := func(name string, extra ...string) []byte {
		path := filepath.Join(dir, name+".safetensors")
		trainArgs(t, append([]string{"--model", "mlp", "--optimizer", "adamw", "--limit", "32", "--batch-size", "8", "--steps", "3", "--lr", "0.01", "--save", path}, extra...)...)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	base := weights("base")
	if !bytes.Equal(base, weights("wd-default", "--weight-decay", "0.01")) {
		t.Error("--weight-decay 0.01 (AdamW's default) changed the weights")
	}
	if bytes.Equal(base, weights("wd", "--weight-decay", "0.5")) {
		t.Error("--weight-decay 0.5 left the weights as with the default")
	}
	if bytes.Equal(base, weights("clip", "--clip-grad", "1e-3")) {
		t.Error("--clip-grad 1e-3 left the weights as without clipping")
	}
}

// A run with a learning-rate schedule (warm-up, then cosine decay or
// StepLR) resumed from a checkpoint taken after the warm-up continues with
// the rates, losses and final weights of the run that never stopped, bit
// for bit; another schedule is refused by name.
func TestTrainResumeWithSchedule(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	for _, sched := range [][]string{
		{"--lr-schedule", "cosine", "--lr-warmup-steps", "3", "--lr-min", "1e-4"},
		{"--lr-schedule", "step", "--lr-step-size", "5", "--lr-gamma", "0.5", "--lr-warmup-steps", "2"},
	} {
		t.Run(sched[1], func(t *testing.T) {
			dir := t.TempDir()
			common := append([]string{"--model", "mlp", "--optimizer", "adamw", "--limit", "64", "--batch-size", "8", "--epochs", "2", "--lr", "0.01"}, sched...)
			straight, ck, straightLog := filepath.Join(dir, "straight.safetensors"), filepath.Join(dir, "ck"), filepath.Join(dir, "straight.jsonl")
			out := trainArgs(t, append(common, "--save", straight, "--checkpoint-dir", ck, "--save-every", "4", "--keep", "0", "--log", straightLog)...)
			if !strings.Contains(out, "lr schedule: LinearLR(start_factor=0.01") {
				t.Errorf("no schedule reported:\n%s", out)
			}
			resumed, resumedLog := filepath.Join(dir, "resumed.safetensors"), filepath.Join(dir, "resumed.jsonl")
			trainArgs(t, append(common, "--resume", filepath.Join(ck, "step-000000012"), "--checkpoint-dir", filepath.Join(dir, "ck2"), "--save", resumed, "--log", resumedLog)...)
			a, _ := os.ReadFile(straight)
			b, _ := os.ReadFile(resumed)
			if len(a) == 0 || !bytes.Equal(a, b) {
				t.Error("the resumed run's weights differ from the uninterrupted run's")
			}
			type rec struct {
				Step int64   `json:"step"`
				Loss float64 `json:"loss"`
				LR   float64 `json:"lr"`
			}
			read := func(path string) []rec {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				var rs []rec
				for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
					if strings.HasPrefix(l, `{"kind":`) {
						continue // run and eval lines
					}
					var r rec
					if err := json.Unmarshal([]byte(l), &r); err != nil {
						t.Fatal(err)
					}
					rs = append(rs, r)
				}
				return rs
			}
			s, r := read(straightLog), read(resumedLog)
			if len(s) != 16 || len(r) != 4 {
				t.Fatalf("%d and %d log lines, want 16 and 4", len(s), len(r))
			}
			if s[0].LR != 0.01*0.01 || s[15].LR == s[3].LR {
				t.Errorf("the rate did not follow the schedule: %+v", s)
			}
			for i, got := range r {
				if want := s[12+i]; got != want {
					t.Errorf("resumed step %d: %+v, straight %+v", got.Step, got, want)
				}
			}
			var f trainFlags
			fs := trainFlagSet(&f)
			parseFlags(fs, append(common[:len(common)-len(sched)], "--lr-schedule", "linear", "--resume", filepath.Join(ck, "step-000000012")))
			var o, l bytes.Buffer
			err := trainFashion(context.Background(), f, &o, &l)
			if err == nil || !strings.Contains(err.Error(), "this run has LinearLR(start_factor=1") {
				t.Errorf("another schedule: got %v, want a refusal naming it", err)
			}
		})
	}
}

// The schedule flags are checked before any work, by name.
func TestTrainScheduleFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--lr-schedule", "cosin"}, `--lr-schedule "cosin": not a schedule (valid: constant, step, cosine, linear); did you mean "cosine"?`},
		{[]string{"--lr-schedule", "step"}, "--lr-schedule step needs --lr-step-size N"},
		{[]string{"--lr-gamma", "0.5"}, "--lr-gamma applies only with --lr-schedule step"},
		{[]string{"--lr-schedule", "step", "--lr-min", "0.1"}, "--lr-min applies only with --lr-schedule cosine or linear"},
		{[]string{"--lr-warmup-decay", "0.1"}, "--lr-warmup-decay applies only with --lr-warmup-steps"},
		{[]string{"--lr-warmup-steps", "2", "--lr-warmup-decay", "0"}, "--lr-warmup-decay 0: must be above 0 and at most 1"},
		{[]string{"--lr-warmup-steps", "-1"}, "--lr-warmup-steps -1: must be at least 0"},
		{[]string{"--lr-schedule", "cosine", "--lr-min", "1"}, "--lr-min 1: must be between 0 and --lr 0.001"},
		{[]string{"--lr-schedule", "cosine", "--lr-warmup-steps", "10", "--steps", "10", "--limit", "16", "--batch", "8"}, "no steps left to decay over"},
	} {
		var f trainFlags
		fs := trainFlagSet(&f)
		if err := parseFlags(fs, append([]string{"--model", "mlp"}, tt.args...)); err != nil {
			t.Fatal(err)
		}
		f.given = map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
		var out, log bytes.Buffer
		err := trainFashion(context.Background(), f, &out, &log)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want %q", tt.args, err, tt.want)
		}
	}
}
