package memviz_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
)

// largeSnapshot is a recorded training run of steps steps, each
// allocating and freeing perStep activations (and a temporary for each)
// of layers' modules inside one large segment, bracketed by step markers,
// with the parameters allocated before: a history of about
// steps*(4*perStep+2) events, headroom's layout, as train --memory-snapshot
// writes for a long run. writeLargeSnapshot writes its pickle as a stream.
func largeSnapshot(steps, perStep int) *memviz.Snapshot {
	ev := make([]memviz.Event, 0, steps*(4*perStep+2)+2)
	largeEvents(steps, perStep, func(e memviz.Event) { ev = append(ev, e) })
	return &memviz.Snapshot{Source: memviz.SourceHeadroom, Segments: []memviz.Segment{largeSegment()}, Traces: [][]memviz.Event{ev},
		Headroom: &device.SnapshotInfo{Version: 1, Device: "cpu"}}
}

// The benchmark's file, written as a stream, reads back as the pickle of
// the same snapshot MarshalPickle writes.
func TestWriteLargeSnapshot(t *testing.T) {
	for _, steps := range []int{1, 7} {
		var b bytes.Buffer
		n, events, err := writeLargeSnapshot(&b, steps, 150)
		if err != nil {
			t.Fatal(err)
		}
		want, err := largeSnapshot(steps, 150).MarshalPickle()
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(b.Len()) {
			t.Errorf("%d bytes written, %d counted", b.Len(), n)
		}
		got, err := memviz.Decode("stream", b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		ws, err := memviz.Decode("marshal", want)
		if err != nil {
			t.Fatal(err)
		}
		if events != len(ws.Traces[0]) || !reflect.DeepEqual(got, ws) {
			t.Errorf("%d steps: the streamed file reads back differently (%d events, want %d)", steps, events, len(ws.Traces[0]))
		}
	}
}

// envLargeMB asks BenchmarkLargeSnapshot for a snapshot file of about that
// many megabytes (default 500).
const envLargeMB = "HEADROOM_LARGE_SNAPSHOT_MB"

// BenchmarkLargeSnapshot measures the viewer on a snapshot file of about
// 500 MB (headroom's pickle, written to a temporary directory, never
// committed): reading the file, analysing it, the server's heap, and in
// headless Chromium the time until the page shows the timeline and the
// time each interaction takes to show its result: a click in the event
// list, a zoom by dragging the minimap, the detail of a zoomed range from
// the server, a click on a step's bar. Run it alone:
//
//	go test -run '^$' -bench LargeSnapshot -benchtime 1x ./memviz
//
// It measures; it does not fail on a slow result. Memory: the file is
// written as a stream (a few megabytes whatever its size); reading it
// peaks at about 5.3 times its size in heap (2.7 GB for 500 MB: the
// Events, about 1.6 times the file, held twice while the history is
// copied out, plus the collector's headroom), and the server's heap once
// it serves is about 3.4 times the file. README's "Large snapshots" has
// the numbers.
func BenchmarkLargeSnapshot(b *testing.B) {
	mb := 500
	if v := os.Getenv(envLargeMB); v != "" {
		var err error
		if mb, err = strconv.Atoi(v); err != nil || mb < 1 {
			b.Fatalf("%s=%q: want a number of megabytes", envLargeMB, v)
		}
	}
	if os.Getenv(skipBrowserEnv) != "1" {
		chromium(b)
	}
	// About 105 bytes of pickle an event (measured): steps of 200
	// allocations (802 events each). The file is written as a stream.
	const perStep = 200
	steps := max(1, mb<<20/(802*105))
	path := filepath.Join(b.TempDir(), "large.pickle")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	size, events, err := writeLargeSnapshot(f, steps, perStep)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	b.Logf("file: %.0f MB, %d events, %d steps", float64(size)/1e6, events, steps)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		cpu0 := cpuTime()
		stop := samplePeakHeap()
		snap, err := memviz.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		read := time.Since(start)
		readCPU := cpuTime() - cpu0
		peak := stop()
		b.ReportMetric(float64(peak)/1e6, "peak-heap-read-MB")
		b.ReportMetric(readCPU.Seconds(), "read-cpu-s")
		b.ReportMetric(read.Seconds(), "read-s")
		b.Logf("read %v (%v of CPU, user+sys, GC included), peak heap %.0f MB", read, readCPU, float64(peak)/1e6)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapRead := ms.HeapAlloc
		url := serve(b, "large.pickle", snap)
		snap = nil

		// the server alone: the first summary (the analysis), a zoomed
		// range, the state at an event, a page of the event list
		timeGet := func(path string) time.Duration {
			t := time.Now()
			resp, err := http.Get(url + path)
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("%s: %s", path, resp.Status)
			}
			d := time.Since(t)
			b.Logf("GET %s: %v, %d bytes", path, d, n)
			return d
		}
		summary := timeGet("api/summary")
		zoomAPI := timeGet(fmt.Sprintf("api/timeline?from=%d&to=%d", events/2, events/2+events/100))
		stateAPI := timeGet(fmt.Sprintf("api/state?event=%d", events/2))
		timeGet(fmt.Sprintf("api/events?from=%d", events/2))
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heapServing := ms.HeapAlloc
		b.ReportMetric(summary.Seconds(), "first-summary-s")
		b.ReportMetric(float64(zoomAPI.Milliseconds()), "api-zoom-ms")
		b.ReportMetric(float64(stateAPI.Milliseconds()), "api-state-ms")
		b.ReportMetric(float64(heapServing)/1e6, "heap-serving-MB")
		b.ReportMetric(float64(ms.Sys)/1e6, "sys-MB")
		if os.Getenv(skipBrowserEnv) == "1" {
			b.Logf("read %v, first summary %v; heap %.0f MB after reading, %.0f MB serving (%.0f MB from the OS)",
				read, summary, float64(heapRead)/1e6, float64(heapServing)/1e6, float64(ms.Sys)/1e6)
			continue
		}

		p := openPage(b, url)
		t0 := time.Now()
		waitLong(b, p, `(document.getElementById('meta') || {}).textContent || ''`, func(v string) bool { return len(v) > 2 && v != `"Loading…"` }, 10*time.Minute)
		waitLong(b, p, `document.querySelectorAll('#series polygon').length > 0 && document.querySelectorAll('#event-list li').length > 0`, func(v string) bool { return v == "true" }, 10*time.Minute)
		load := time.Since(t0)
		if m := p.eval(`document.getElementById('meta').textContent`); len(m) > 8 && m[1:7] == "Error:" {
			b.Fatalf("page: %s", m)
		}
		// what the page draws does not grow with the file
		elements, _ := strconv.Atoi(p.eval(`document.getElementsByTagName('*').length`))
		b.ReportMetric(float64(elements), "page-elements")
		// a click in the event list: the side pane shows the event
		t1 := time.Now()
		ev := p.eval(`document.querySelector('#event-list li:nth-child(5)').dataset.event`)
		p.click(`#event-list li:nth-child(5)`)
		ev, _ = strconv.Unquote(ev)
		waitLong(b, p, text("side-title"), func(v string) bool { return v == strconv.Quote("Event "+ev) }, time.Minute)
		clickEvent := time.Since(t1)

		// a drag across the minimap: the timeline is redrawn zoomed, from
		// the server's points of the range
		var r []float64
		r = parseFloats(b, p.eval(`(() => { const e = document.getElementById('minimap'); e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()`))
		x := func(f float64) float64 { return r[0] + (80+f*870)*r[2]/960 }
		t2 := time.Now()
		p.mouse("mousePressed", x(0.50), r[1]+r[3]/2)
		p.mouse("mouseMoved", x(0.505), r[1]+r[3]/2)
		p.mouse("mouseReleased", x(0.51), r[1]+r[3]/2)
		waitLong(b, p, text("zoom-range"), func(v string) bool { return v != `""` }, time.Minute)
		zoom := time.Since(t2)
		zoomRange := p.eval(text("zoom-range"))

		// a click on the last step's bar: zoomed to the step, its peak
		// selected
		t3 := time.Now()
		p.click(`#step-bars rect:last-of-type`)
		waitLong(b, p, `document.getElementById('side-title').textContent.startsWith('Event ') && document.getElementById('zoom-range').textContent`, func(v string) bool { return v != zoomRange && v != "false" }, time.Minute)
		step := time.Since(t3)

		b.ReportMetric(float64(size)/1e6, "file-MB")
		b.ReportMetric(load.Seconds(), "page-load-s")
		b.ReportMetric(float64(clickEvent.Milliseconds()), "click-event-ms")
		b.ReportMetric(float64(zoom.Milliseconds()), "zoom-ms")
		b.ReportMetric(float64(step.Milliseconds()), "step-click-ms")
		b.ReportMetric(float64(heapRead)/1e6, "heap-read-MB")
		b.Logf("read %v, page %v, click %v, zoom %v (%s), step %v; heap %.0f MB after reading, %.0f MB serving",
			read, load, clickEvent, zoom, zoomRange, step, float64(heapRead)/1e6, float64(heapServing)/1e6)
	}
}

// waitLong polls expr until ok says its value (as JSON) is what is
// awaited, failing after timeout.
func waitLong(b testing.TB, p *page, expr string, ok func(string) bool, timeout time.Duration) {
	b.Helper()
	got := ""
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = p.eval(expr); ok(got) {
			return
		}
	}
	b.Fatalf("%s is %s after %v", expr, got, timeout)
}

func parseFloats(b testing.TB, s string) []float64 {
	var out []float64
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		b.Fatalf("%s: %v", s, err)
	}
	return out
}

// samplePeakHeap samples the heap every 20 ms until stop is called, which
// returns the largest HeapAlloc seen: the peak of a read, within a sample.
func samplePeakHeap() (stop func() uint64) {
	peak := new(uint64)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			*peak = max(*peak, ms.HeapAlloc)
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		return *peak
	}
}
