package memviz_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
)

// compareRun records a small run: the parameter, an activation of act
// bytes and, when extra > 0, a temporary of extra bytes, all live at the
// peak, then freed but the parameter.
func compareRun(t testing.TB, act, extra int64) *memviz.Snapshot {
	t.Helper()
	a := device.Meta().Alloc
	a.RecordHistory(1000)
	must := func(n int64, tag device.Tag) *device.Block {
		b, err := a.Allocate(n, tag)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	must(mib, device.Tag{Category: device.Parameter, Module: "fc", Op: "fc.weight"})
	x := must(act, device.Tag{Category: device.Activation, Module: "fc", Op: "linear"})
	var tmp *device.Block
	if extra > 0 {
		tmp = must(extra, device.Tag{Category: device.Temporary, Module: "fc", Op: "softmax"})
		a.Free(tmp)
	}
	a.Free(x)
	return memviz.FromDevice(a.Snapshot())
}

// Comparing a plan with a run (or two runs): the peaks' difference, and
// at each peak the bytes by category and by tensor, largest difference
// first; a snapshot compared with itself differs nowhere.
func TestCompare(t *testing.T) {
	before, after := compareRun(t, 2*mib, 0), compareRun(t, 3*mib, mib/2)
	c := memviz.Compare("plan.json", analyze(t, before), "run.json", analyze(t, after))
	if c.A.Peak != 3*mib || c.B.Peak != 4*mib+mib/2 || c.PeakDiff != mib+mib/2 {
		t.Errorf("peaks %d and %d, difference %d", c.A.Peak, c.B.Peak, c.PeakDiff)
	}
	wantCats := []memviz.Diff{
		{Key: "activation", Category: "activation", A: 2 * mib, B: 3 * mib, Diff: mib, ACount: 1, BCount: 1},
		{Key: "temporary", Category: "temporary", B: mib / 2, Diff: mib / 2, BCount: 1},
		{Key: "parameter", Category: "parameter", A: mib, B: mib, ACount: 1, BCount: 1},
	}
	if len(c.Categories) != len(wantCats) {
		t.Fatalf("categories %+v", c.Categories)
	}
	for i, w := range wantCats {
		if c.Categories[i] != w {
			t.Errorf("category row %d: %+v, want %+v", i, c.Categories[i], w)
		}
	}
	if c.TensorKeys != 3 || c.Differing != 2 || c.Tensors[0].Where != "fc linear" || c.Tensors[0].Diff != mib ||
		c.Tensors[1].Where != "fc softmax" || c.Tensors[1].A != 0 || c.Tensors[1].B != mib/2 {
		t.Errorf("tensors: %d keys, %d differ: %+v", c.TensorKeys, c.Differing, c.Tensors)
	}
	if len(c.A.At) != len(c.A.Total) || c.A.At[0] != 0 || c.A.At[len(c.A.At)-1] != 1 {
		t.Errorf("A's overlay points %v", c.A.At)
	}
	var b strings.Builder
	c.WriteText(&b, 10)
	for _, want := range []string{"peak: B - A = +1.50 MiB", "activation", "+1.00 MiB", "fc softmax", "(2 of 3 differ"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	same := memviz.Compare("a", analyze(t, after), "b", analyze(t, after))
	if same.PeakDiff != 0 || same.Differing != 0 {
		t.Errorf("a snapshot against itself: %+v", same)
	}
}

// The comparison page in Chromium shows both peaks, the difference, and
// the rows of both tables with their bytes.
func TestBrowserCompare(t *testing.T) {
	chromium(t)
	c := memviz.Compare("plan.json", analyze(t, compareRun(t, 2*mib, 0)), "run.json", analyze(t, compareRun(t, 3*mib, mib/2)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- memviz.Serve(ctx, ln, memviz.NewCompareServer(c)) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not stop")
		}
	}()
	p := openPage(t, "http://"+ln.Addr().String()+"/")
	p.wait(`!!document.getElementById('meta') && document.getElementById('meta').textContent !== 'Loading…'`, "true")
	p.wait(`document.querySelectorAll('#tensor-table tbody tr').length`, "3")
	if got := p.eval(`document.getElementById('peak-diff').dataset.bytes`); got != strconv.Quote(strconv.Itoa(int(mib+mib/2))) {
		t.Errorf("peak difference %s", got)
	}
	if got := p.eval(`[...document.querySelectorAll('#sides td.peak')].map(e => e.dataset.bytes).join(' ')`); got != strconv.Quote(strconv.Itoa(int(3*mib))+" "+strconv.Itoa(int(4*mib+mib/2))) {
		t.Errorf("peaks %s", got)
	}
	if got := p.eval(`[...document.querySelectorAll('#category-table tbody tr')].map(r => r.dataset.key + ':' + r.querySelector('td.diff').dataset.bytes).join(' ')`); got != strconv.Quote("activation:1048576 temporary:524288 parameter:0") {
		t.Errorf("categories %s", got)
	}
	if got := p.eval(`document.querySelector('#tensor-table tbody tr td.mono').textContent`); got != `"fc linear"` {
		t.Errorf("first tensor row %s", got)
	}
	if got := p.eval(`document.querySelectorAll('#overlay polyline').length`); got != "2" {
		t.Errorf("%s lines overlaid", got)
	}
}
