//go:build unix

package dataset

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A FIFO whose writer never comes does not make the loader deaf to
// cancellation: opening it blocks, and Next returns anyway.
func TestStreamLoaderFIFOWithoutWriter(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "shard.tar")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	// The loader's probe reads one shard through the FIFO; the epoch then
	// opens it again and finds no writer.
	data := shardBytes(t, 0, 2)
	written := make(chan struct{})
	go func() {
		defer close(written)
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		w.Write(data) // EPIPE once the probe has what it needs: fine
		w.Close()
	}()
	l, err := NewStreamLoader(&Shards{Paths: []string{fifo}}, Config{BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	<-written // the writer is gone before the epoch opens the FIFO
	ctx, cancel := context.WithCancel(t.Context())
	stop := time.AfterFunc(20*time.Millisecond, cancel)
	defer stop.Stop()
	if _, err := l.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next on a FIFO without a writer: %v", err)
	}
	// Let the abandoned open finish.
	if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
		w.Close()
	}
}

// A FIFO named like an image is not an image.
func TestImageFolderSkipsFIFO(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a", "1.png"), encodePNG(t, testImage(2, 2, 0)))
	if err := unix.Mkfifo(filepath.Join(root, "a", "2.png"), 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	f, err := OpenImageFolder(root, 3)
	if err != nil || f.Len() != 1 {
		t.Fatalf("image folder with a FIFO: %v, %d images", err, f.Len())
	}
}
