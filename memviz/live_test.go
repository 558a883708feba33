package memviz_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
)

func serveLive(t *testing.T, l *memviz.Live) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- memviz.Serve(ctx, ln, memviz.NewLiveServer("run", l)) }()
	t.Cleanup(func() {
		l.Finish("test over") // ends open streams
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not stop")
		}
	})
	return "http://" + ln.Addr().String() + "/"
}

// liveStep runs a "step" that keeps leak bytes, marked in the history,
// and publishes it.
func liveStep(t *testing.T, a *device.Allocator, l *memviz.Live, n int64, leak int64) {
	t.Helper()
	end := a.MarkStep()
	if _, err := a.Allocate(leak, device.Tag{Category: device.Activation, Module: "leaky", Op: "kept"}); err != nil {
		t.Fatal(err)
	}
	end()
	st := a.Stats()
	l.Publish(memviz.LiveStep{Step: n, Epoch: 1, Loss: memviz.FiniteLoss(3 / float64(n)), Samples: 32, SamplesPerSec: 100,
		Allocated: st.AllocatedBytes.Current, Reserved: st.ReservedBytes.Current, PeakAllocated: st.AllocatedBytes.Peak, PeakReserved: st.ReservedBytes.Peak,
		Process: &memviz.ProcessMemory{Resident: 100<<20 + n, ResidentPeak: 200 << 20, Segments: st.ReservedBytes.Current, GoHeap: 7 << 20, GCCycles: n}})
}

// The poll API pages through the steps kept (the latest MaxLiveSteps) and
// says when the run is done; a loss that is not finite is null.
func TestLivePoll(t *testing.T) {
	a := device.Meta().Alloc
	a.RecordHistory(1000)
	l := memviz.NewLive(a.Snapshot)
	url := serveLive(t, l)
	for n := int64(1); n <= memviz.MaxLiveSteps+5; n++ {
		l.Publish(memviz.LiveStep{Step: n, Loss: memviz.FiniteLoss(float64(n))})
	}
	l.Publish(memviz.LiveStep{Step: memviz.MaxLiveSteps + 6, Loss: memviz.FiniteLoss(math.NaN())})
	var p memviz.LivePage
	get := func(q string) {
		resp, err := http.Get(url + "api/live?poll=1" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		p = memviz.LivePage{}
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
	}
	get("")
	if p.From != 6 || p.Next != memviz.MaxLiveSteps+6 || len(p.Steps) != memviz.MaxLiveSteps || p.Steps[0].Step != 7 || p.Done {
		t.Fatalf("from %d next %d, %d steps from %d, done %v", p.From, p.Next, len(p.Steps), p.Steps[0].Step, p.Done)
	}
	if last := p.Steps[len(p.Steps)-1]; last.Loss != nil {
		t.Errorf("a NaN loss reads %v, want null", *last.Loss)
	}
	l.Finish("training finished")
	get("&from=" + strconv.Itoa(memviz.MaxLiveSteps+5))
	if len(p.Steps) != 1 || !p.Done || p.Msg != "training finished" {
		t.Errorf("last page %+v", p)
	}
}

// The page of a run while it trains: each published step updates the live
// status at once (server-sent events), and the snapshot shown follows the
// run (the step peaks, a bar per step, rising by what each step kept);
// when the run ends the page says so.
func TestBrowserLive(t *testing.T) {
	chromium(t)
	a := device.Meta().Alloc
	a.RecordHistory(1000)
	l := memviz.NewLive(a.Snapshot)
	url := serveLive(t, l)
	liveStep(t, a, l, 1, 1<<20)
	p := openPage(t, url)
	p.wait(`(document.getElementById('live-status') || {dataset: {}}).dataset.step || ''`, `"1"`)
	p.wait(`document.getElementById('steps-section').dataset.count`, `"1"`)
	for n := int64(2); n <= 3; n++ {
		liveStep(t, a, l, n, 1<<20)
		p.wait(`document.getElementById('live-status').dataset.step`, strconv.Quote(strconv.FormatInt(n, 10)))
		if got := p.eval(`document.getElementById('live-status').dataset.allocated`); got != strconv.Quote(strconv.FormatInt(n<<20, 10)) {
			t.Errorf("step %d: allocated %s", n, got)
		}
		p.wait(`document.getElementById('steps-section').dataset.count`, strconv.Quote(strconv.FormatInt(n, 10)))
	}
	p.wait(`[...document.querySelectorAll('#step-bars rect')].map(r => r.dataset.peak).join(' ')`, strconv.Quote("1048576 2097152 3145728"))
	p.wait(`document.querySelectorAll('#live-loss').length`, "1")
	// the whole process beside the allocator, as the last step sampled it
	p.wait(`document.getElementById('live-process').dataset.resident`, strconv.Quote(strconv.FormatInt(100<<20+3, 10)))
	if got := p.eval(`[...['segments', 'goHeap', 'gcCycles']].map(k => document.getElementById('live-process').dataset[k]).join(' ') + ' ' + document.getElementById('live-process').hidden`); got != strconv.Quote(fmt.Sprintf("%d %d 3 false", a.Stats().ReservedBytes.Current, 7<<20)) {
		t.Errorf("process line: %s (%s)", got, p.eval(`document.getElementById('live-process').textContent`))
	}
	l.Finish("training finished")
	p.wait(`document.getElementById('live-status').dataset.done || ''`, `"true"`)
}

// A followed file (viz --follow): each snapshot set is announced to the
// page, which says so and shows the new snapshot's peak.
func TestBrowserFollow(t *testing.T) {
	chromium(t)
	a := device.Meta().Alloc
	a.RecordHistory(1000)
	grow := func(mib int64) *memviz.Snapshot {
		t.Helper()
		if _, err := a.Allocate(mib<<20, device.Tag{Category: device.Activation, Module: "m", Op: "op"}); err != nil {
			t.Fatal(err)
		}
		return memviz.FromDevice(a.Snapshot())
	}
	l := memviz.NewLiveFollow(grow(1))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- memviz.Serve(ctx, ln, memviz.NewLiveServer("run.json (following)", l)) }()
	defer func() {
		cancel()
		<-done
	}()
	p := openPage(t, "http://"+ln.Addr().String()+"/")
	p.wait(`(document.getElementById('peak-total') || {dataset: {}}).dataset.bytes || ''`, strconv.Quote(strconv.Itoa(1<<20)))
	p.wait(`document.getElementById('live').hidden`, "false")
	l.SetSnapshot(grow(2))
	p.wait(`document.getElementById('live-status').dataset.snapshots || ''`, `"2"`)
	p.wait(`(document.getElementById('peak-total') || {dataset: {}}).dataset.bytes || ''`, strconv.Quote(strconv.Itoa(3<<20)))
	if got := p.eval(`document.getElementById('live-status').textContent`); !strings.Contains(got, "Following the file: snapshot 2") {
		t.Errorf("status %s", got)
	}
}
