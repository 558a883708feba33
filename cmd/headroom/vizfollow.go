package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/headroom-ml/headroom/internal/runreport"
	"github.com/headroom-ml/headroom/memviz"
)

// followPoll is how often viz --follow looks at its files.
var followPoll = 500 * time.Millisecond

// vizFollow serves the live page for a snapshot file another process
// writes again and again (train --memory-snapshot with
// --memory-snapshot-every), re-read whenever it changes, and with logPath
// the steps of that run's --log as they are appended (loss, throughput,
// peaks). It serves until ctx is done.
//
// Writers that replace the file whole (headroom's do, through a rename)
// are always read complete; a file caught half written by another writer
// fails to read and is read again when it next changes.
func vizFollow(ctx context.Context, file, logPath, name, addr string, out io.Writer, ready chan<- string) error {
	network, listen, hosts, err := vizAddr(addr)
	if err != nil {
		return err
	}
	first, stamp, err := waitSnapshot(ctx, file, out)
	if err != nil {
		return err
	}
	l := memviz.NewLiveFollow(first)
	ln, url, err := listenViewer(network, listen, "the snapshot", out)
	if err != nil {
		return err
	}
	what := file
	if logPath != "" {
		what += " and the steps of " + logPath
	}
	fmt.Fprintf(out, "following %s at %s (Ctrl-C to stop)\n", what, url)
	if ready != nil {
		ready <- url
	}
	go followSnapshot(ctx, file, stamp, l, out)
	if logPath != "" {
		go followLog(ctx, logPath, l)
	}
	return memviz.Serve(ctx, ln, memviz.NewLiveServer(name+" (following)", l), hosts...)
}

// fileStamp tells a file's versions apart.
type fileStamp struct {
	size int64
	mod  time.Time
}

func stampOf(fi os.FileInfo) fileStamp { return fileStamp{fi.Size(), fi.ModTime()} }

// waitSnapshot reads file, waiting for it to exist.
func waitSnapshot(ctx context.Context, file string, out io.Writer) (*memviz.Snapshot, fileStamp, error) {
	said := false
	for {
		fi, err := os.Stat(file)
		if err == nil {
			s, err := memviz.ReadFile(file)
			return s, stampOf(fi), err
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fileStamp{}, err
		}
		if !said {
			fmt.Fprintf(out, "waiting for %s to be written\n", file)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, fileStamp{}, ctx.Err()
		case <-time.After(followPoll):
		}
	}
}

// followSnapshot reads file again whenever it changes, and sets it.
func followSnapshot(ctx context.Context, file string, last fileStamp, l *memviz.Live, out io.Writer) {
	t := time.NewTicker(followPoll)
	defer t.Stop()
	var failed fileStamp
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fi, err := os.Stat(file)
		if err != nil || stampOf(fi) == last || stampOf(fi) == failed {
			continue
		}
		s, err := memviz.ReadFile(file)
		if err != nil {
			// Half written, perhaps: tried again when it changes.
			failed = stampOf(fi)
			fmt.Fprintf(out, "viz: %v (read again when it changes)\n", err)
			continue
		}
		last = stampOf(fi)
		l.SetSnapshot(s)
	}
}

// followLog publishes the step lines appended to a --log file (from its
// start), as tail -f would read them: a line is taken once complete. A
// file that shrinks was started again: it is read from its start.
func followLog(ctx context.Context, path string, l *memviz.Live) {
	t := time.NewTicker(followPoll)
	defer t.Stop()
	var off int64
	var partial []byte
	for {
		if fi, err := os.Stat(path); err == nil {
			if fi.Size() < off {
				off, partial = 0, nil
			}
			if fi.Size() > off {
				off, partial = readLogFrom(path, off, partial, l)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readLogFrom publishes the complete lines of path after off (partial:
// the start of a line read before) and returns where it stopped.
func readLogFrom(path string, off int64, partial []byte, l *memviz.Live) (int64, []byte) {
	f, err := os.Open(path)
	if err != nil {
		return off, partial
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return off, partial
	}
	r := bufio.NewReaderSize(f, 1<<16)
	for {
		chunk, err := r.ReadBytes('\n')
		off += int64(len(chunk))
		partial = append(partial, chunk...)
		if err != nil {
			return off, partial // the rest of the line comes later
		}
		publishLogLine(partial, l)
		partial = partial[:0]
	}
}

// publishLogLine publishes a step line of --log (others are skipped).
func publishLogLine(line []byte, l *memviz.Live) {
	var kind struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(line, &kind) != nil || kind.Kind != "" {
		return
	}
	var s runreport.Step
	if json.Unmarshal(line, &s) != nil {
		return
	}
	// The log has the step's peaks, not what stayed allocated after it:
	// the page shows the peaks.
	l.Publish(memviz.LiveStep{Step: s.Step, Epoch: s.Epoch, Loss: memviz.FiniteLoss(s.Loss), Samples: s.Samples,
		SamplesPerSec: s.SamplesPerSec, StepSec: s.StepSec, PeakAllocated: s.PeakAllocated, PeakReserved: s.PeakReserved})
}
