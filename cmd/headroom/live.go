package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/internal/runreport"
	"github.com/headroom-ml/headroom/memviz"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// watchFlags are train's flags for watching a run: --live serves the
// viewer while it trains, --profile writes a trace of every executed node.
type watchFlags struct {
	live    string
	profile string
	// keep is --live-keep: serve on after training, until Ctrl-C.
	keep bool
	// snapEvery is --memory-snapshot-every: rewrite --memory-snapshot
	// (snapshot, set by check) while training, for viz --follow.
	snapEvery time.Duration
	snapshot  string
}

func (w *watchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&w.live, "live", "", "serve the memory viewer at this address (e.g. 127.0.0.1:8080, :0 for any port) while training runs, updated as steps complete with the loss, throughput and allocated and reserved memory (records the allocator's history)")
	fs.BoolVar(&w.keep, "live-keep", false, "with --live: keep serving the live view after training ends, until Ctrl-C")
	fs.DurationVar(&w.snapEvery, "memory-snapshot-every", 0, "with --memory-snapshot: also write the snapshot while training, at the end of the first step and then of a step at least this long after the last write (e.g. 10s), so that headroom viz --follow FILE shows the run as it goes (0: only at the end)")
	fs.StringVar(&w.profile, "profile", "", "write a profiler trace to this file: Chrome trace-event JSON (open it in ui.perfetto.dev or chrome://tracing) with a slice per executed node (op, module path, output bytes, allocated bytes, recompute), a slice per step and per data wait, allocated and reserved memory counters, and the whole process's (resident memory, device segments, Go heap, data loader)")
}

// check validates the flags before any work; snapshot is
// --memory-snapshot.
func (w *watchFlags) check(snapshot string) error {
	w.snapshot = snapshot
	if w.keep && w.live == "" {
		return fmt.Errorf("--live-keep applies with --live (it keeps the live view serving)")
	}
	if w.snapEvery < 0 || w.snapEvery > 0 && snapshot == "" {
		return fmt.Errorf("--memory-snapshot-every %v: a positive interval, with --memory-snapshot (the file to write)", w.snapEvery)
	}
	if w.live != "" {
		if _, _, _, err := vizAddr(w.live); err != nil {
			return fmt.Errorf("--live: %w", err)
		}
	}
	if w.profile != "" {
		if err := checkOutputPath(w.profile); err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
	}
	return nil
}

// defaultHistory is --memory-history's default: the events kept.
const defaultHistory = 100000

// liveHold, when not nil, keeps the live view serving after training
// ended until it is closed (for tests, which read the finished run).
var liveHold chan struct{}

// history says whether the flags need the allocator's history recorded.
func (w *watchFlags) history() bool { return w.live != "" }

// trainWatch is what watches a run (nil: nothing does): the live view and
// the profiler. Its methods are the training loop's hooks.
type trainWatch struct {
	ctx  context.Context
	out  io.Writer
	dev  *device.Device
	f    watchFlags
	live *memviz.Live
	url  string       // the live view's
	stop func() error // stops the live server
	prof *profiler
	proc *procProbe // the whole-process view, sampled after each step
	// wrote is when --memory-snapshot-every last wrote the snapshot.
	wrote time.Time
}

// newTrainWatch starts what f asks for on dev and tr: the live view's
// server and the profiler. Close it when training ends.
func newTrainWatch(ctx context.Context, f watchFlags, dev *device.Device, tr *train.Trainer, proc *procProbe, out io.Writer) (*trainWatch, error) {
	if f.live == "" && f.profile == "" && f.snapEvery == 0 {
		return nil, nil
	}
	w := &trainWatch{ctx: ctx, out: out, dev: dev, f: f, proc: proc}
	if f.snapEvery > 0 {
		fmt.Fprintf(out, "memory snapshot: written to %s every %v while training (follow it with: headroom viz --follow %s)\n", f.snapshot, f.snapEvery, f.snapshot)
	}
	if f.profile != "" {
		p, err := newProfiler(f.profile, "headroom train", 1, dev, proc)
		if err != nil {
			return nil, fmt.Errorf("--profile: %w", err)
		}
		w.prof = p
		opts := trainerObserving(tr, p.observe)
		tr.RunOptions = &opts
	}
	if f.live != "" {
		network, listen, hosts, err := vizAddr(f.live)
		if err != nil {
			w.close("")
			return nil, fmt.Errorf("--live: %w", err)
		}
		ln, err := net.Listen(network, listen)
		if err != nil {
			w.close("")
			return nil, fmt.Errorf("--live: %w", err)
		}
		w.live = memviz.NewLive(dev.Alloc.Snapshot)
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() { done <- memviz.Serve(sctx, ln, memviz.NewLiveServer("training (live)", w.live), hosts...) }()
		w.stop = func() error { cancel(); return <-done }
		bound := ln.Addr().(*net.TCPAddr)
		if !bound.IP.IsLoopback() {
			fmt.Fprintf(out, "warning: --live listens on %s, beyond this machine's loopback: anyone who can reach it can read the run's memory\n", bound)
		}
		w.url = fmt.Sprintf("http://%s/", bound)
		until := "while training runs"
		if f.keep {
			until = "while training runs, and after it until Ctrl-C"
		}
		fmt.Fprintf(out, "live view at %s (%s)\n", w.url, until)
	}
	return w, nil
}

// trainerObserving is tr's run options with observe called for every
// executed node, before the Observe they had.
func trainerObserving(tr *train.Trainer, observe func(int, *trace.Node, time.Duration)) exec.Options {
	opts := exec.Options{}
	if tr.RunOptions != nil {
		opts = *tr.RunOptions
	}
	prev := opts.Observe
	opts.Observe = func(i int, n *trace.Node, d time.Duration) {
		observe(i, n, d)
		if prev != nil {
			prev(i, n, d)
		}
	}
	return opts
}

// stepStart is called before each step.
func (w *trainWatch) stepStart() {
	if w != nil && w.prof != nil {
		w.prof.stepStart()
	}
}

// stepDone is called after each completed step: its number, epoch (from
// 1), loss, samples, duration, wait for data before it, and the
// allocator's statistics after it (peaks over the step).
func (w *trainWatch) stepDone(step int64, epoch int, loss float64, samples int, el, wait time.Duration, stats device.Stats) {
	if w == nil {
		return
	}
	rec := runreport.Step{Step: step, Epoch: epoch, Loss: loss, Samples: samples, SamplesPerSec: float64(samples) / el.Seconds(),
		StepSec: el.Seconds(), DataWaitSec: wait.Seconds(), PeakAllocated: stats.AllocatedBytes.Peak, PeakReserved: stats.ReservedBytes.Peak}
	pm := w.proc.sample()
	if w.prof != nil {
		w.prof.stepDone(rec, pm)
	}
	if w.f.snapEvery > 0 && time.Since(w.wrote) >= w.f.snapEvery {
		// A failure is said and training goes on: the snapshot at the end
		// is the one that must not be lost, and it is tried again then.
		if err := writeSnapshot(w.f.snapshot, w.dev.Alloc.Snapshot()); err != nil {
			fmt.Fprintf(w.out, "--memory-snapshot-every: %v\n", err)
		}
		w.wrote = time.Now()
	}
	if w.live != nil {
		w.live.Publish(memviz.LiveStep{Step: rec.Step, Epoch: rec.Epoch, Loss: memviz.FiniteLoss(rec.Loss), Samples: rec.Samples,
			SamplesPerSec: rec.SamplesPerSec, StepSec: rec.StepSec, Allocated: stats.AllocatedBytes.Current, Reserved: stats.ReservedBytes.Current,
			PeakAllocated: rec.PeakAllocated, PeakReserved: rec.PeakReserved, TimeUS: time.Now().UnixMicro(), Process: &pm})
	}
}

// end closes w after training ended with err.
func (w *trainWatch) end(err error) error {
	how := "training finished"
	if err != nil {
		how = "training stopped: " + err.Error()
	}
	return w.close(how)
}

// close ends the live view (saying how the run ended) and writes the
// profile.
func (w *trainWatch) close(how string) error {
	if w == nil {
		return nil
	}
	var errs []error
	if w.live != nil {
		w.live.Finish(how)
		if w.f.keep && w.ctx.Err() == nil {
			fmt.Fprintf(w.out, "%s; the live view stays at %s until Ctrl-C\n", how, w.url)
			<-w.ctx.Done()
		}
		if liveHold != nil {
			<-liveHold
		}
		// Give open pages a moment to read the end of their stream.
		time.Sleep(100 * time.Millisecond)
		errs = append(errs, w.stop())
	}
	if w.prof != nil {
		if err := w.prof.close(); err != nil {
			errs = append(errs, fmt.Errorf("--profile: %w", err))
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
