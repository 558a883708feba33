package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/idx"
	"github.com/headroom-ml/headroom/internal/parallel"
)

// The test binary doubles as the headroom command (and as a bare signal
// handler) in a child process, selected by environment variables, so that
// signals and start-up environment are tested on the real process.
const (
	envChildArgs = "HEADROOM_TEST_CHILD_ARGS" // the command's arguments, separated by \x1f
	envChildMode = "HEADROOM_TEST_CHILD_MODE" // "signal": signalContext alone
)

func TestMain(m *testing.M) {
	if args := os.Getenv(envChildArgs); args != "" {
		os.Exit(mainExit(strings.Split(args, "\x1f"), os.Stderr))
	}
	if os.Getenv(envChildMode) == "signal" {
		ctx, stop := signalContext(os.Stderr)
		defer stop()
		fmt.Println("ready")
		<-ctx.Done()
		fmt.Println("cancelled:", ctx.Err())
		time.Sleep(time.Hour) // work that never looks at ctx again
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// childCommand returns the command that runs headroom args in a child.
func childCommand(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), envChildArgs+"="+strings.Join(args, "\x1f")), env...)
	return cmd
}

// Every flag is checked before any work: with a dataset directory that does
// not exist, a bad flag is the error, not the missing dataset. Each error
// names the flag (--flag) and the run does nothing else.
func TestTrainFlagsCheckedBeforeData(t *testing.T) {
	defer parallel.SetThreads(parallel.Threads())
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-dataset")
	weights := filepath.Join(dir, "w.safetensors")
	if err := os.WriteFile(weights, []byte("old weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		flag string // named in the error
	}{
		{[]string{"--lr", "NaN"}, "--lr"},
		{[]string{"--lr", "-1"}, "--lr"},
		{[]string{"--lr", "0"}, "--lr"},
		{[]string{"--lr", "+Inf"}, "--lr"},
		{[]string{"--weight-decay", "NaN"}, "--weight-decay"},
		{[]string{"--weight-decay", "-0.5"}, "--weight-decay"},
		{[]string{"--weight-decay", "Inf"}, "--weight-decay"},
		{[]string{"--clip-grad", "-1"}, "--clip-grad"},
		{[]string{"--clip-grad", "NaN"}, "--clip-grad"},
		{[]string{"--model", "transformer-xl"}, "--model"},
		{[]string{"--optimizer", "lamb"}, "--optimizer"},
		{[]string{"--recompute", "most"}, "--recompute"},
		{[]string{"--budget", "1e99"}, "--budget"},
		{[]string{"--budget", "NaN"}, "--budget"},
		{[]string{"--budget", "Inf"}, "--budget"},
		{[]string{"--budget", "9223372036854775808"}, "--budget"},
		{[]string{"--budget", "-1MiB"}, "--budget"},
		{[]string{"--budget", "0"}, "--budget"},
		{[]string{"--budget", ""}, "--budget"},
		{[]string{"--device", "cpu:mem=1e99"}, "--device"},
		{[]string{"--device", "cpu:mem=NaN"}, "--device"},
		{[]string{"--device", "cpu:mem=0"}, "--device"},
		{[]string{"--device", "tpu"}, "--device"},
		{[]string{"--budget", "12MiB", "--device", "cpu:mem=64GiB"}, "--budget"},
		{[]string{"--threads", "0"}, "--threads"},
		{[]string{"--threads", "-3"}, "--threads"},
		{[]string{"--limit", "-5"}, "--limit"},
		{[]string{"--memory-history", "0"}, "--memory-history"},
		{[]string{"--memory-snapshot", filepath.Join(dir, "s.json"), "--memory-history", "-5"}, "--memory-history"},
		{[]string{"--memory-snapshot", filepath.Join(dir, "nodir", "s.json")}, "--memory-snapshot"},
		{[]string{"--save", "/nonexistent/dir/x.safetensors"}, "--save"},
		{[]string{"--save", dir}, "--save"}, // a directory
		{[]string{"--load", filepath.Join(dir, "nope.safetensors")}, "--load"},
		{[]string{"--load", dir}, "--load"},
		{[]string{"--device", "meta", "--save", weights}, "--save"},
		{[]string{"--device", "meta", "--load", weights}, "--load"},
		{[]string{"--batch-size", "1152921504606846976"}, "--batch-size"},
		{[]string{"--batch-size", "0"}, "--batch-size"},
		{[]string{"--accumulate", "0"}, "--accumulate"},
		{[]string{"--accumulate", "64"}, "--accumulate"},
		{[]string{"--epochs", "-1"}, "--epochs"},
		{[]string{"--precision", "fp8"}, "--precision"},
		{[]string{"--compress", "int4"}, "--compress"},
		{[]string{"--precision", "auto"}, "--budget"}, // a choice needs a budget
		{[]string{"--recompute", "auto"}, "--budget"},
	} {
		args := append([]string{"train", "--data", missing}, c.args...)
		err := run(context.Background(), args)
		if err == nil {
			t.Errorf("%v: accepted", c.args)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.flag) || strings.Contains(msg, "dataset") {
			t.Errorf("%v: error %q does not name %s, or comes from reading the dataset", c.args, msg, c.flag)
		}
	}
	if b, err := os.ReadFile(weights); err != nil || string(b) != "old weights" {
		t.Errorf("the weights file was touched: %q, %v", b, err)
	}
}

// $HEADROOM_NUM_THREADS that is not a positive integer is an error of the
// command (it is read at start-up, so the command runs in a child process).
func TestTrainRefusesBadEnvThreads(t *testing.T) {
	for _, bad := range []string{"abc", "-4"} {
		out, code := runChild(t, []string{parallel.EnvThreads + "=" + bad}, "train", "--data", "/nonexistent", "--model", "mlp")
		if code != 1 || !strings.Contains(out, "$"+parallel.EnvThreads) || strings.Contains(out, "dataset") {
			t.Errorf("%s=%s: exit %d, output %q", parallel.EnvThreads, bad, code, out)
		}
	}
}

// runChild runs this test binary as the headroom command with args and the
// extra environment, returning its combined output and exit status.
func runChild(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := childCommand(env, args...)
	out, err := cmd.CombinedOutput()
	var ee interface{ ExitCode() int }
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// The meta device plans and runs nothing: no dataset is read, no step,
// loss or accuracy is printed.
func TestTrainMetaRunsNothing(t *testing.T) {
	var out, log bytes.Buffer
	f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "meta", seed: 1, data: "/nonexistent"}
	if err := trainFashion(context.Background(), f, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	s := out.String() + log.String()
	if !strings.Contains(s, "total peak") || !strings.Contains(s, "nothing runs") {
		t.Errorf("no plan, or no word that nothing runs:\n%s", s)
	}
	for _, fake := range []string{"train loss", "test accuracy", "NaN", "saved weights", "loaded weights", "data:", "epoch"} {
		if strings.Contains(s, fake) {
			t.Errorf("output has %q:\n%s", fake, s)
		}
	}
}

// writeIDX writes an uncompressed ubyte IDX file.
func writeIDX(t *testing.T, path string, dims []int, data []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := idx.Write(&buf, &idx.File{Type: idx.Uint8, Dims: dims, Data: data}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fashionDir writes a Fashion-MNIST directory with n training and n test
// images (all zero, label 3).
func fashionDir(t *testing.T, n int) string {
	dir := t.TempDir()
	for _, p := range []string{"train", "t10k"} {
		writeIDX(t, filepath.Join(dir, p+"-images-idx3-ubyte"), []int{n, dataset.Rows, dataset.Cols}, make([]byte, n*dataset.Pixels))
		writeIDX(t, filepath.Join(dir, p+"-labels-idx1-ubyte"), []int{n}, bytes.Repeat([]byte{3}, n))
	}
	return dir
}

// A dataset of 0 images is refused, naming the file, instead of training
// on nothing and reporting NaN% accuracy.
func TestTrainRefusesEmptyDataset(t *testing.T) {
	dir := fashionDir(t, 0)
	var out, log bytes.Buffer
	f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, data: dir}
	err := trainFashion(context.Background(), f, &out, &log)
	if !errors.Is(err, dataset.ErrEmpty) || !strings.Contains(err.Error(), filepath.Join(dir, "train-images-idx3-ubyte")) {
		t.Fatalf("got %v, want an error naming the empty file\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "accuracy") {
		t.Errorf("reported results:\n%s", out.String())
	}
}

// A batch larger than the training set is lowered to it, with a message:
// the plan is for the batches that run.
func TestTrainBatchLargerThanData(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	var out, log bytes.Buffer
	f := trainFlags{model: "mlp", epochs: 1, batch: 1000000000, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 64}
	if err := trainFashion(context.Background(), f, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "--batch-size 1000000000 is more than the 64 training images") || !strings.Contains(out.String(), "; batch 64;") {
		t.Errorf("no message, or the plan is not for batch 64:\n%s\n%s", log.String(), out.String())
	}
}

// More threads than CPUs are lowered to the number of CPUs, with a message.
func TestTrainThreadsClamped(t *testing.T) {
	defer parallel.SetThreads(parallel.Threads())
	var out, log bytes.Buffer
	f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "meta", seed: 1, threads: 1000000, given: map[string]bool{"threads": true}}
	if err := trainFashion(context.Background(), f, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	cpus := runtime.NumCPU()
	if !strings.Contains(log.String(), "--threads 1000000 is more than") || !strings.Contains(out.String(), fmt.Sprintf("; %d threads", cpus)) {
		t.Errorf("no message, or not %d threads:\n%s\n%s", cpus, log.String(), out.String())
	}
}

// removeOnProgress is a log that removes dir when training reports
// progress, so that saving at the end fails.
type removeOnProgress struct {
	dir  string
	once sync.Once
	bytes.Buffer
}

func (r *removeOnProgress) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("step")) {
		r.once.Do(func() { os.RemoveAll(r.dir) })
	}
	return r.Buffer.Write(p)
}

// A save that fails at the end of training is the run's error (a non-zero
// exit), not a line on the log.
func TestTrainFailedSaveIsAnError(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	dir := filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	log := &removeOnProgress{dir: dir}
	f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 64, save: filepath.Join(dir, "w.safetensors")}
	err := trainFashion(context.Background(), f, &out, log)
	if err == nil || !strings.Contains(err.Error(), "--save") {
		t.Fatalf("got %v, want the failed save\n%s%s", err, out.String(), log.String())
	}
}

// A flag that does not parse is reported once, in --flag form, without
// the whole usage; -h still prints the usage and exits 0.
func TestFlagParseErrorsPrintedOnce(t *testing.T) {
	for _, args := range [][]string{
		{"train", "--batch-size", "abc"},
		{"train", "--batch-size", "99999999999999999999"},
		{"train", "--bogus"},
		{"train", "--lr"},
		{"bench", "--steps", "x"},
	} {
		out, code := runChild(t, nil, args...)
		if code != 1 || strings.Count(out, "headroom:") != 1 || strings.Contains(out, "Usage") || !strings.Contains(out, " --") || strings.Contains(out, " -"+args[1][2:3]) {
			t.Errorf("%v: exit %d, output:\n%s", args, code, out)
		}
	}
	if out, code := runChild(t, nil, "train", "-h"); code != 0 || !strings.Contains(out, "Usage: headroom train") {
		t.Errorf("train -h: exit %d, output:\n%s", code, out)
	}
}

// bench checks where it will write its profile before measuring anything.
func TestBenchChecksProfilePathFirst(t *testing.T) {
	err := run(context.Background(), []string{"bench", "--workloads", "mlp", "--cpuprofile", "/nonexistent/dir/cpu.pprof"})
	if err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Fatalf("got %v, want an error naming --cpuprofile", err)
	}
}
