package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/bench"
	"github.com/headroom-ml/headroom/train"
)

// processOverhead is the resident memory of the process that no budget
// covers: the Go runtime and headroom itself (the binary's mapped code
// and data, the runtime's heap arenas, stacks and collector slack, the
// planner's and the compiled step's Go objects, an evaluation batch).
// Under --budget the process's peak resident memory (VmHWM) stays within
// the budget plus this. Measured on Linux (docs/data.md): 14 MiB for
// `headroom version`, at most about 16 MiB above the budget for training
// runs of the zoo's small models through the loader; twice that is
// stated. TestProcessPeakWithinBudget checks it on the built binary.
const processOverhead = 32 << 20

// reportPeak prints the process's peak resident memory against the
// budget plus the stated overhead (where /proc tells it).
func reportPeak(w io.Writer, budget int64) {
	m, err := bench.ReadMemory()
	if err != nil {
		return
	}
	verdict := "within"
	if m.Peak > budget+processOverhead {
		verdict = "ABOVE"
	}
	fmt.Fprintf(w, "process peak resident memory %s (VmHWM %d bytes): %s the budget %s + %s of runtime and program overhead\n",
		device.FormatBytes(m.Peak), m.Peak, verdict, device.FormatBytes(budget), device.FormatBytes(processOverhead))
}

// limitHeap caps the Go runtime's memory (a soft limit: the collector
// runs more often near it) at what the plan gives the heap, the data
// loader's planned heap bytes, plus the stated overhead. The device's
// segments are mapped outside the Go heap, so they are not under it.
// Without it the collector lets the heap grow to twice what is live
// (GOGC=100) before it collects: an image decoder allocates each decoded
// image anew, and on large photos that garbage alone took the process
// hundreds of MiB past the budget. The binary's mapped code and data are
// resident but not the runtime's (binaryResident), so the runtime gets the
// rest of the overhead. The returned function restores the previous limit
// (tests train in one process).
func limitHeap(loaderHeap int64) (restore func()) {
	old := debug.SetMemoryLimit(loaderHeap + processOverhead - binaryResident)
	return func() { debug.SetMemoryLimit(old) }
}

// binaryResident bounds the binary's resident code and data, which count
// in the process's RSS and not in the Go runtime's memory: `headroom
// version`, runtime included, peaks at 11.5 MiB.
const binaryResident = 8 << 20

// stepHeap is the Go heap that c's compiled training step keeps (its
// graphs, plan and compiled nodes), measured by compiling it on the meta
// device: live bytes after a collection, before and after.
func stepHeap(prob budget.Problem, c budget.Choice) (int64, error) {
	before := liveHeap()
	opt, err := prob.NewOptimizer()
	if err != nil {
		return 0, err
	}
	cfg := c.Config()
	tr, err := train.SetupConfig(device.Meta(), 1, prob.Build, opt, cfg)
	if err != nil {
		return 0, err
	}
	defer tr.Close()
	x, y := prob.Example(c.MicroBatch)
	if _, _, err := tr.PlanConfig(cfg, x, y); err != nil {
		return 0, err
	}
	return max(liveHeap()-before, 0), nil
}

// liveHeap is the Go heap's live bytes, after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
