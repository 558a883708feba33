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
}

func (w *watchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&w.live, "live", "", "serve the memory viewer at this address (e.g. 127.0.0.1:8080, :0 for any port) while training runs, updated as steps complete with the loss, throughput and allocated and reserved memory (records the allocator's history)")
	fs.StringVar(&w.profile, "profile", "", "write a profiler trace to this file: Chrome trace-event JSON (open it in ui.perfetto.dev or chrome://tracing) with a slice per executed node (op, module path, output bytes, allocated bytes, recompute), a slice per step and per data wait, and allocated and reserved memory counters")
}

// check validates the flags before any work.
func (w *watchFlags) check() error {
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
	live *memviz.Live
	stop func() error // stops the live server
	prof *profiler
	proc *procProbe // the whole-process view, sampled after each step
}

// newTrainWatch starts what f asks for on dev and tr: the live view's
// server and the profiler. Close it when training ends.
func newTrainWatch(ctx context.Context, f watchFlags, dev *device.Device, tr *train.Trainer, proc *procProbe, out io.Writer) (*trainWatch, error) {
	if f.live == "" && f.profile == "" {
		return nil, nil
	}
	w := &trainWatch{proc: proc}
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
		fmt.Fprintf(out, "live view at http://%s/ (while training runs)\n", bound)
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
