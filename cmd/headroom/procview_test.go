package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
)

// statmResident is the resident memory from /proc/self/statm, a source
// other than the /proc/self/status the probe reads.
func statmResident(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	pages, err := strconv.ParseInt(strings.Fields(string(b))[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// The whole-process view against independent sources: the segments are
// the allocator's own statistics, touching a block's pages shows in the
// resident memory (which holds every touched segment byte), the Go heap
// is what runtime.ReadMemStats says, and the collections counted are the
// ones forced.
func TestProcessMemory(t *testing.T) {
	dev := device.CPU()
	probe := newProcProbe(dev)
	before := probe.sample()
	const size = 48 << 20
	b, err := dev.Alloc.Allocate(size, device.Tag{Category: device.Activation})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Alloc.Free(b)
	for i := 0; i < len(b.Data); i += 4096 {
		b.Data[i] = 1
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := probe.sample()
	st := dev.Alloc.Stats()
	if m.Segments != st.ReservedBytes.Current || m.SegmentCount != st.Segment.Current || m.Allocated != st.AllocatedBytes.Current || m.Segments < size {
		t.Errorf("segments %d (%d), allocated %d; the allocator says reserved %d in %d segments, allocated %d",
			m.Segments, m.SegmentCount, m.Allocated, st.ReservedBytes.Current, st.Segment.Current, st.AllocatedBytes.Current)
	}
	if m.GCCycles < int64(ms.NumGC) || m.GCCycles < before.GCCycles+1 {
		t.Errorf("%d GC cycles, ReadMemStats says %d (before %d)", m.GCCycles, ms.NumGC, before.GCCycles)
	}
	// right after a collection the heap is what survived it, give or take
	// what ReadMemStats and the probe allocated since
	const slack = 4 << 20
	if d := m.GoHeap - int64(ms.HeapAlloc); d < -slack || d > slack || m.GoHeapObjects <= 0 || m.GoRuntime < m.GoHeap {
		t.Errorf("Go heap %d (%d objects, runtime %d), ReadMemStats HeapAlloc %d", m.GoHeap, m.GoHeapObjects, m.GoRuntime, ms.HeapAlloc)
	}
	if m.LoaderStaging != 0 || m.LoaderHeap != 0 {
		t.Errorf("loader bytes without a loader: %+v", m)
	}
	if runtime.GOOS != "linux" {
		if m.Resident != -1 {
			t.Errorf("resident %d off Linux", m.Resident)
		}
		return
	}
	statm := statmResident(t)
	if d := m.Resident - statm; d < -slack || d > slack {
		t.Errorf("resident %d, statm says %d", m.Resident, statm)
	}
	if m.Resident < size || m.Resident-before.Resident < size-slack || m.ResidentPeak < m.Resident {
		t.Errorf("resident %d (peak %d, %d before touching %d bytes of segments)", m.Resident, m.ResidentPeak, before.Resident, size)
	}
	// a loader's staging is the allocator's input category
	in, err := dev.Alloc.Allocate(1<<20, device.Tag{Category: device.Input})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Alloc.Free(in)
	probe.setLoader(dataset.Memory{Shuffle: 800, ScratchPerWorker: 100, Workers: 2, Source: 5})
	if m := probe.sample(); m.LoaderStaging != 1<<20 || m.LoaderHeap != 1005 {
		t.Errorf("loader staging %d, heap %d", m.LoaderStaging, m.LoaderHeap)
	}
}

func TestFormatProcess(t *testing.T) {
	line := formatProcess(newProcProbe(nil).sample())
	if !strings.Contains(line, "Go heap") || strings.Contains(line, "data loader") {
		t.Errorf("%s", line)
	}
	if line := formatProcess(memviz.ProcessMemory{Resident: -1, ResidentPeak: -1}); !strings.Contains(line, "resident memory unknown") {
		t.Errorf("off Linux: %s", line)
	}
}

// train ends with the whole-process line, its segments those of the run.
func TestTrainProcessLine(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	f := trainFlags{model: "mlp", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 64, steps: 2}
	var out bytes.Buffer
	if err := trainFashion(context.Background(), f, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^process memory: .*device segments (\S+ \S+) mapped \((\d+)\).*Go heap`).FindStringSubmatch(out.String())
	if m == nil || m[2] == "0" {
		t.Errorf("no process line:\n%s", out.String())
	}
}

// Through the data loader, the process line has the loader's bytes: its
// staging is what the allocator counts as input (the line before the
// steps says so), its heap what the loader holds outside the device.
func TestTrainProcessLineLoader(t *testing.T) {
	var csv strings.Builder
	for r := range 16 {
		fmt.Fprint(&csv, r%3)
		for j := range 784 {
			fmt.Fprintf(&csv, ",%d", (r*31+j)%17)
		}
		csv.WriteString("\n")
	}
	table := filepath.Join(t.TempDir(), "t.csv")
	if err := os.WriteFile(table, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := trainArgs(t, "--model", "mlp", "--data", table, "--batch-size", "4", "--steps", "2", "--threads", "1")
	in := regexp.MustCompile(`data loader input bytes: planned \d+, allocator (\d+)`).FindStringSubmatch(out)
	line := regexp.MustCompile(`(?m)^process memory: .*; data loader (\S+ \S+) staging on the device, (\S+ \S+) on the heap$`).FindStringSubmatch(out)
	if in == nil || line == nil {
		t.Fatalf("no loader figures:\n%s", out)
	}
	n, _ := strconv.ParseInt(in[1], 10, 64)
	if line[1] != device.FormatBytes(n) || n == 0 || line[2] == "0 B" {
		t.Errorf("process line says staging %s and heap %s; the allocator's input is %d bytes", line[1], line[2], n)
	}
}

// Evaluation runs at the training batch, so the device segments mapped
// over a whole run (training and evaluation of the 500 test samples) stay
// near the training peak: before, one 500-sample forward pass mapped
// 106 MiB for a 16.5 MiB training peak.
func TestTrainEvaluationWithinTrainingPeak(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	f := trainFlags{model: "cnn", epochs: 1, batch: 32, lr: 1e-3, optimizer: "adam", device: "cpu", seed: 1, limit: 64}
	var out bytes.Buffer
	if err := trainFashion(context.Background(), f, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	peak := regexp.MustCompile(`training peak allocated (\S+ \S+)`).FindStringSubmatch(s)
	seg := regexp.MustCompile(`(?m)^process memory: .*device segments (\S+ \S+) mapped`).FindStringSubmatch(s)
	if peak == nil || seg == nil || !strings.Contains(s, "(500 samples)") {
		t.Fatalf("no peak, segments or 500-sample evaluation:\n%s", s)
	}
	p, err1 := device.ParseBytes(peak[1])
	m, err2 := device.ParseBytes(seg[1])
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if m > 2*p {
		t.Errorf("device segments %s mapped for a training peak of %s: evaluation raised the footprint\n%s", seg[1], peak[1], s)
	}
}
