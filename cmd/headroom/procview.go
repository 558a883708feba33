package main

import (
	"fmt"
	"io"
	"runtime/metrics"
	"sync/atomic"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/bench"
	"github.com/headroom-ml/headroom/memviz"
)

// The runtime/metrics samples of the whole-process view.
const (
	metricHeapObjects = "/memory/classes/heap/objects:bytes"
	metricObjects     = "/gc/heap/objects:objects"
	metricTotal       = "/memory/classes/total:bytes"
	metricGCCycles    = "/gc/cycles/total:gc-cycles"
)

// procProbe samples the whole process's memory beside dev's allocator:
// what --profile's counters, --live's status and train's end-of-run line
// show.
type procProbe struct {
	dev *device.Device
	// loaderHeap is the data loader's Go-heap bytes (0: no loader),
	// hasLoader whether a loader stages batches on the device.
	loaderHeap atomic.Int64
	hasLoader  atomic.Bool
}

func newProcProbe(dev *device.Device) *procProbe { return &procProbe{dev: dev} }

// setLoader records the memory of the loader the run reads through.
func (p *procProbe) setLoader(m dataset.Memory) {
	if p == nil {
		return
	}
	p.loaderHeap.Store(m.Shuffle + m.ScratchPerWorker*int64(m.Workers) + m.Source)
	p.hasLoader.Store(true)
}

// sample reads the process's memory now. Reading runtime/metrics does not
// stop the world, and /proc/self/status is one small read: cheap enough
// for every step.
func (p *procProbe) sample() memviz.ProcessMemory {
	s := []metrics.Sample{{Name: metricHeapObjects}, {Name: metricObjects}, {Name: metricTotal}, {Name: metricGCCycles}}
	metrics.Read(s)
	u := func(i int) int64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0 // not in this Go release
		}
		return int64(s[i].Value.Uint64())
	}
	m := memviz.ProcessMemory{GoHeap: u(0), GoHeapObjects: u(1), GoRuntime: u(2), GCCycles: u(3), Resident: -1, ResidentPeak: -1}
	// Off Linux there is no /proc: the resident memory stays unknown
	// rather than failing the run.
	if r, err := bench.ReadMemory(); err == nil {
		m.Resident, m.ResidentPeak = r.RSS, r.Peak
	}
	if p != nil && p.dev != nil {
		st := p.dev.Alloc.Stats()
		m.Segments, m.SegmentCount, m.Allocated = st.ReservedBytes.Current, st.Segment.Current, st.AllocatedBytes.Current
		if p.hasLoader.Load() {
			// Nothing but the loader's staging keeps category input
			// between steps.
			m.LoaderStaging, m.LoaderHeap = st.ByCategory[device.Input], p.loaderHeap.Load()
		}
	}
	return m
}

// formatProcess is the whole-process view in one line.
func formatProcess(m memviz.ProcessMemory) string {
	res := "resident memory unknown on this OS"
	if m.Resident >= 0 {
		res = fmt.Sprintf("resident %s (peak %s)", device.FormatBytes(m.Resident), device.FormatBytes(m.ResidentPeak))
	}
	s := fmt.Sprintf("%s; device segments %s mapped (%d), %s allocated in them; Go heap %s in %d objects (runtime %s, %d GCs)",
		res, device.FormatBytes(m.Segments), m.SegmentCount, device.FormatBytes(m.Allocated),
		device.FormatBytes(m.GoHeap), m.GoHeapObjects, device.FormatBytes(m.GoRuntime), m.GCCycles)
	if m.LoaderStaging > 0 || m.LoaderHeap > 0 {
		s += fmt.Sprintf("; data loader %s staging on the device, %s on the heap", device.FormatBytes(m.LoaderStaging), device.FormatBytes(m.LoaderHeap))
	}
	return s
}

// printProcess writes train's end-of-run line.
func (p *procProbe) printProcess(out io.Writer) {
	fmt.Fprintf(out, "process memory: %s\n", formatProcess(p.sample()))
}
