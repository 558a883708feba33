//go:build unix

package memviz_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headroom-ml/headroom/memviz"
)

// A FIFO (whose open blocks until a writer comes, past Ctrl-C) and a
// directory are refused by type (so is a device such as /dev/zero, read
// until memory runs out, not tried here for that reason),
// before they are opened or read.
func TestReadFileRefusesNonRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "snapshot.pickle")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	for _, path := range []string{fifo, t.TempDir()} {
		done := make(chan error, 1)
		go func() {
			_, err := memviz.ReadFile(path)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, memviz.ErrFormat) {
				t.Errorf("%s: %v, want ErrFormat", path, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: ReadFile still reading after 10 s", path)
		}
	}
}

// A file larger than MaxFileBytes is refused by its size, before it is
// read (a sparse file costs no disk).
func TestReadFileRefusesHuge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.pickle")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(memviz.MaxFileBytes + 1); err != nil {
		t.Skip(err)
	}
	f.Close()
	if _, err := memviz.ReadFile(path); !errors.Is(err, memviz.ErrFormat) {
		t.Errorf("%v, want ErrFormat", err)
	}
}
