//go:build unix

package main

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/dataset"
)

// --data naming a FIFO (a token file, a table, IDX files) is refused at
// once, naming it: opening a FIFO waits for a writer and cannot be
// interrupted, so the run would not hear Ctrl-C while it waits. (Shards
// and image folders take regular files only: dataset's tests.)
func TestDataRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		return p
	}
	labels := filepath.Join(dir, "odd-labels-idx1-ubyte")
	if err := os.WriteFile(labels, []byte{0, 0, 8, 1, 0, 0, 0, 0}, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model, data string
		val         bool
	}{
		{"gpt-shakespeare-char", mk("train.bin"), false},
		{"mlp", mk("t.csv"), false},
		{"resnet18-64", mk("odd-images-idx3-ubyte"), false},
		{"mlp", filepath.Join(dir, "t.csv"), true},
	} {
		args := []string{"--model", c.model, "--data", c.data, "--steps", "1"}
		if c.val {
			args = []string{"--model", c.model, "--data", writeSmallCSV(t, dir), "--val", c.data, "--steps", "1"}
		}
		done := make(chan error, 1)
		go func() { done <- trainErr(t, args...) }()
		select {
		case err := <-done:
			if !errors.Is(err, dataset.ErrNotRegular) {
				t.Errorf("%v: %v, want ErrNotRegular", args, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%v: still blocked after a minute", args)
		}
	}
}

// writeSmallCSV writes a small table an mlp trains on.
func writeSmallCSV(t *testing.T, dir string) string {
	t.Helper()
	row := "1"
	for range 784 {
		row += ",0.5"
	}
	p := filepath.Join(dir, "ok.csv")
	if err := os.WriteFile(p, []byte(row+"\n"+row+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
