//go:build unix

package dataset

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"testing/fstest"
	"time"
)

// blockingFS is an fs.FS whose Open of one name blocks until release is
// closed, as open(2) of a FIFO with no writer does.
type blockingFS struct {
	fstest.MapFS
	name    string
	opening chan struct{}
	release chan struct{}
}

func (b blockingFS) Open(name string) (fs.File, error) {
	if name == b.name {
		close(b.opening)
		<-b.release
	}
	return b.MapFS.Open(name)
}

// waitLoad returns the load's error, failing the test if the load still
// blocks after a minute (a hang, not a measurement).
func waitLoad(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the load ignored the cancellation")
		return nil
	}
}

// A load blocked in opening a file returns when its context is cancelled.
func TestLoadContextAbandonsBlockedOpen(t *testing.T) {
	const img = "train-images-idx3-ubyte"
	b := blockingFS{
		MapFS: fstest.MapFS{img: {Data: ubyte(t, []int{1, Rows, Cols}, make([]byte, Pixels))}, "train-labels-idx1-ubyte": {Data: ubyte(t, []int{1}, []byte{3})}},
		name:  img, opening: make(chan struct{}), release: make(chan struct{}),
	}
	defer close(b.release)
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := LoadContext(ctx, b, "data/fm", Train)
		errc <- err
	}()
	<-b.opening
	stop := errors.New("stop")
	cancel(stop)
	if err := waitLoad(t, errc); !errors.Is(err, stop) {
		t.Fatalf("got %v, want the context's cause", err)
	}
}

// A load blocked reading a FIFO (a writer that never writes) returns when
// its context is cancelled.
func TestLoadContextAbandonsBlockedRead(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "train-images-idx3-ubyte")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "train-labels-idx1-ubyte"), ubyte(t, []int{1}, []byte{3}), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := FashionMNISTContext(ctx, dir, Train)
		errc <- err
	}()
	// A non-blocking open for writing succeeds once the loader has the FIFO
	// open for reading; holding it open (and writing nothing) leaves the
	// loader blocked in read.
	var w *os.File
	for {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			w = f
			break
		}
		if !errors.Is(err, syscall.ENXIO) {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			t.Fatalf("load ended before blocking: %v", err)
		case <-time.After(time.Millisecond): // poll for the reader
		}
	}
	defer w.Close()
	cancel()
	if err := waitLoad(t, errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
