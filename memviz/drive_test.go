package memviz_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/memviz"
)

// page is a page in headless Chromium driven over the DevTools protocol
// (--remote-debugging-pipe: messages are JSON ended by a NUL byte), so a
// test can press keys, click and drag as a user does and read the page.
type page struct {
	t       testing.TB
	in      *os.File // Chromium reads it (fd 3)
	out     *bufio.Reader
	id      int
	session string
}

func openPage(t testing.TB, url string) *page {
	t.Helper()
	bin := chromium(t)
	profile := t.TempDir()
	toChrome, chromeIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	chromeOut, fromChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--window-size=1200,1000", "--user-data-dir="+profile, "--remote-debugging-pipe", url)
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	toChrome.Close()
	fromChrome.Close()
	p := &page{t: t, in: chromeIn, out: bufio.NewReader(chromeOut)}
	t.Cleanup(func() {
		p.send("Browser.close", nil, false)
		chromeIn.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		cancel()
		chromeOut.Close()
	})
	var targets struct {
		TargetInfos []struct{ TargetID, Type string } `json:"targetInfos"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		p.call("Target.getTargets", nil, false, &targets)
		found := ""
		for _, ti := range targets.TargetInfos {
			if ti.Type == "page" {
				found = ti.TargetID
			}
		}
		if found != "" {
			var att struct{ SessionID string }
			p.call("Target.attachToTarget", map[string]any{"targetId": found, "flatten": true}, false, &att)
			p.session = att.SessionID
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Chromium opened no page")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p
}

func (p *page) send(method string, params any, inPage bool) int {
	p.id++
	m := map[string]any{"id": p.id, "method": method}
	if params != nil {
		m["params"] = params
	}
	if inPage {
		m["sessionId"] = p.session
	}
	data, _ := json.Marshal(m)
	p.in.Write(append(data, 0))
	return p.id
}

// call sends a command and decodes its result, skipping events.
func (p *page) call(method string, params any, inPage bool, result any) {
	p.t.Helper()
	id := p.send(method, params, inPage)
	for {
		msg, err := p.out.ReadBytes(0)
		if err != nil {
			p.t.Fatalf("%s: reading Chromium's reply: %v", method, err)
		}
		var r struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct{ Message string }
		}
		if err := json.Unmarshal(msg[:len(msg)-1], &r); err != nil {
			p.t.Fatalf("%s: %v", method, err)
		}
		if r.ID != id {
			continue
		}
		if r.Error != nil {
			p.t.Fatalf("%s: %s", method, r.Error.Message)
		}
		if result != nil {
			if err := json.Unmarshal(r.Result, result); err != nil {
				p.t.Fatalf("%s: %v", method, err)
			}
		}
		return
	}
}

// eval returns the value of a JavaScript expression in the page, as JSON.
func (p *page) eval(expr string) string {
	p.t.Helper()
	var r struct {
		Result           struct{ Value any }
		ExceptionDetails any
	}
	p.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, true, &r)
	if r.ExceptionDetails != nil {
		p.t.Fatalf("%s: %v", expr, r.ExceptionDetails)
	}
	data, _ := json.Marshal(r.Result.Value)
	return string(data)
}

// wait polls expr until it is want (as JSON), failing after 20 s.
func (p *page) wait(expr, want string) {
	p.t.Helper()
	got := ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = p.eval(expr); got == want {
			return
		}
	}
	p.t.Fatalf("%s is %s, want %s", expr, got, want)
}

// center is the middle of the element that selector finds, in CSS pixels
// of the viewport (scrolled into view first).
func (p *page) center(selector string) (float64, float64) {
	p.t.Helper()
	var xy []float64
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()`, selector)
	if err := json.Unmarshal([]byte(p.eval(js)), &xy); err != nil || len(xy) != 2 {
		p.t.Fatalf("%s: no element (%v)", selector, err)
	}
	return xy[0], xy[1]
}

func (p *page) mouse(typ string, x, y float64) {
	p.call("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": x, "y": y, "button": "left", "buttons": 1, "clickCount": 1}, true, nil)
}

func (p *page) click(selector string) {
	x, y := p.center(selector)
	p.mouse("mousePressed", x, y)
	p.mouse("mouseReleased", x, y)
}

func (p *page) key(key string, code int) {
	for _, typ := range []string{"rawKeyDown", "keyUp"} {
		p.call("Input.dispatchKeyEvent", map[string]any{"type": typ, "key": key, "code": key, "windowsVirtualKeyCode": code}, true, nil)
	}
}

func text(id string) string {
	return fmt.Sprintf(`document.getElementById(%q).textContent`, id)
}

// The page driven as a user drives it: clicking an event in the list
// selects it and fills the side pane with its stack; the arrow keys move
// through the list; clicking a band shows its allocation's stack;
// dragging across the minimap zooms the timeline to what was dragged over.
func TestBrowserDrive(t *testing.T) {
	chromium(t)
	s, err := memviz.ReadFile("testdata/torch_2x.pickle")
	if err != nil {
		t.Fatal(err)
	}
	sum := analyze(t, s).Summary("x")
	oom := sum.OOMs[0].Event
	p := openPage(t, serve(t, "torch_2x.pickle", s))
	p.wait(`document.querySelectorAll('#event-list li').length`, "19")

	p.click(fmt.Sprintf(`#event-list li[data-event="%d"]`, oom))
	p.wait(text("side-title"), strconv.Quote("Event "+strconv.Itoa(oom)))
	if st := p.eval(text("side-stack")); !strings.Contains(st, "linear.py:114:forward") {
		t.Errorf("side pane after clicking the OOM: %s", st)
	}
	p.wait(`document.querySelector('#event-list li[aria-selected=true]').dataset.event`, strconv.Quote(strconv.Itoa(oom)))

	p.eval(`document.getElementById('event-list').focus(), 0`)
	p.key("ArrowDown", 40)
	p.wait(text("side-title"), strconv.Quote("Event "+strconv.Itoa(oom+1)))
	p.key("ArrowUp", 38)
	p.key("ArrowUp", 38)
	p.wait(text("side-title"), strconv.Quote("Event "+strconv.Itoa(oom-1)))
	p.wait(`document.querySelector('#event-list li[aria-selected=true]').dataset.event`, strconv.Quote(strconv.Itoa(oom-1)))
	p.wait(`document.getElementById('event-input').value`, strconv.Quote(strconv.Itoa(oom-1)))

	// the largest allocation's band (12 MiB from conv.py), clicked at the
	// peak halfway up its own height
	var below, big int64
	key := ""
	for _, b := range sum.Timeline.Series {
		if v := b.Values[sum.Peak.Event]; v == 12582917 {
			key, big = b.Key, v
			break
		} else {
			below += v
		}
	}
	if key == "" {
		t.Fatal("no band of 12582917 bytes at the peak")
	}
	var tr []float64
	json.Unmarshal([]byte(p.eval(`(() => { const e = document.getElementById('timeline'); e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()`)), &tr)
	vx := 80 + float64(sum.Peak.Event)*870/18
	vy := 10 + 280 - float64(below+big/2)*280/float64(sum.Peak.Total)
	p.mouse("mousePressed", tr[0]+vx*tr[2]/960, tr[1]+vy*tr[3]/320)
	p.mouse("mouseReleased", tr[0]+vx*tr[2]/960, tr[1]+vy*tr[3]/320)
	p.wait(`document.getElementById('side').dataset.key`, strconv.Quote(key))
	if st := p.eval(text("side-stack")); !strings.Contains(st, "conv.py:459:_conv_forward") {
		t.Errorf("side pane after clicking the band: %s", st)
	}

	// drag across the minimap from a quarter to three quarters of its plot
	var r []float64
	json.Unmarshal([]byte(p.eval(`(() => { const e = document.getElementById('minimap'); e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()`)), &r)
	px := func(k float64) float64 { return r[0] + (80+k*870/18)*r[2]/960 } // the viewBox's x of point k of 19
	y := r[1] + r[3]/2
	p.mouse("mousePressed", px(4), y)
	p.mouse("mouseMoved", px(9), y)
	p.mouse("mouseMoved", px(14), y)
	p.mouse("mouseReleased", px(14), y)
	p.wait(text("zoom-range"), `"events 4 to 14 of 19"`)
	p.wait(`document.getElementById('brush').dataset.from + '-' + document.getElementById('brush').dataset.to`, `"4-14"`)
	p.wait(`document.querySelector('#series polygon').getAttribute('points').split(' ').length`, "22")
	p.click("#zoom-reset")
	p.wait(text("zoom-range"), `""`)

	// the detail control, typed into: 3 allocations with bands, and the
	// grey band of the other 8
	p.click("#detail")
	p.eval(`document.getElementById('detail').select(), 0`)
	p.call("Input.insertText", map[string]any{"text": "3"}, true, nil)
	p.call("Input.dispatchKeyEvent", map[string]any{"type": "keyDown", "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"}, true, nil)
	p.call("Input.dispatchKeyEvent", map[string]any{"type": "keyUp", "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}, true, nil)
	p.wait(`document.querySelectorAll('#series polygon').length`, "4")
	if l := p.eval(`document.querySelector('#series polygon[data-key=other] title').textContent`); !strings.Contains(l, "(8 over the history)") {
		t.Errorf("grey band at detail 3: %s", l)
	}
}
