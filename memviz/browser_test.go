package memviz_test

import (
	"context"
	"encoding/json"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
)

// The browser tests open the viewer in headless Chromium (Debian's
// chromium package; .ci/run installs it) and read the numbers off the
// rendered page. Without Chromium they fail, saying how to get it; set
// HEADROOM_SKIP_BROWSER=1 to skip them (for local runs without it), or
// HEADROOM_CHROMIUM to the browser to use.
const skipBrowserEnv = "HEADROOM_SKIP_BROWSER"

func chromium(t testing.TB) string {
	t.Helper()
	if os.Getenv(skipBrowserEnv) == "1" {
		t.Skipf("%s=1: not testing the page in a browser", skipBrowserEnv)
	}
	if p := os.Getenv("HEADROOM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("headless Chromium is needed to test the viewer's page and none was found: install it " +
		"(apt-get install -y --no-install-recommends chromium), set HEADROOM_CHROMIUM to a Chromium or Chrome binary, " +
		"or set " + skipBrowserEnv + "=1 to skip the browser tests")
	return ""
}

// dumpDOM loads url in headless Chromium and returns the DOM once the
// page's scripts have run.
func dumpDOM(t *testing.T, url string) string {
	t.Helper()
	bin := chromium(t)
	profile, err := os.MkdirTemp("", "headroom-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(profile)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir="+profile, "--virtual-time-budget=5000", "--dump-dom", url)
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --dump-dom %s: %v\n%s", bin, url, err, stderr.String())
	}
	dom := string(out)
	if !strings.Contains(dom, `id="peak-total"`) {
		t.Fatalf("no page in Chromium's output:\n%s\n%s", dom, stderr.String())
	}
	return dom
}

// elem finds the element with the given id: its attributes and its text.
func elem(t *testing.T, dom, id string) (map[string]string, string) {
	t.Helper()
	m := regexp.MustCompile(`<(\w+)\s([^>]*\bid="` + regexp.QuoteMeta(id) + `"[^>]*)>`).FindStringSubmatchIndex(dom)
	if m == nil {
		t.Fatalf("no element #%s in the page", id)
	}
	tag := dom[m[2]:m[3]]
	attrs := attributes(dom[m[4]:m[5]])
	rest := dom[m[1]:]
	end := strings.Index(rest, "</"+tag+">")
	if end < 0 {
		end = 0
	}
	return attrs, rest[:end]
}

func attributes(s string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`([\w:-]+)="([^"]*)"`).FindAllStringSubmatch(s, -1) {
		out[m[1]] = html.UnescapeString(m[2])
	}
	return out
}

// cells returns the cells (attributes and text) of the table rows in
// body whose start tag matches rowAttr.
func rows(body, rowAttr string) [][]cell {
	var out [][]cell
	for _, r := range regexp.MustCompile(`(?s)<tr([^>]*)>(.*?)</tr>`).FindAllStringSubmatch(body, -1) {
		if !strings.Contains(r[1], rowAttr) {
			continue
		}
		var cs []cell
		for _, c := range regexp.MustCompile(`(?s)<td([^>]*)>(.*?)</td>`).FindAllStringSubmatch(r[2], -1) {
			cs = append(cs, cell{attributes(c[1]), html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(c[2], ""))})
		}
		out = append(out, append([]cell{{attributes(r[1]), ""}}, cs...))
	}
	return out
}

type cell struct {
	attr map[string]string
	text string
}

// checkBytes checks that a cell or element shows n: exactly in its
// data-bytes, and in words as device.FormatBytes writes it.
func checkBytes(t *testing.T, what string, attr map[string]string, text string, n int64) {
	t.Helper()
	if attr["data-bytes"] != strconv.FormatInt(n, 10) || strings.TrimSpace(text) != device.FormatBytes(n) {
		t.Errorf("%s shows %q (data-bytes %q), want %s (%d)", what, text, attr["data-bytes"], device.FormatBytes(n), n)
	}
}

// The page of a snapshot whose numbers are known shows them: the peak,
// each category at the peak (and the allocator's own record of it), the
// largest allocation with its module path, a timeline of one stacked band
// per category with a point per event, and the allocator's state at the
// peak. Read from headroom's JSON and from its pickle.
func TestBrowserKnownSnapshot(t *testing.T) {
	s, _ := knownSnapshot(t)
	dir := t.TempDir()
	for _, name := range []string{"known.json", "known.pickle"} {
		t.Run(name, func(t *testing.T) {
			chromium(t)
			path := filepath.Join(dir, name)
			var data []byte
			var err error
			if strings.HasSuffix(name, ".pickle") {
				data, err = memviz.Pickle(s)
			} else {
				data, err = jsonMarshal(s)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			snap, err := memviz.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			dom := dumpDOM(t, serve(t, name, snap))
			checkKnownPage(t, dom, name)
		})
	}
}

func checkKnownPage(t *testing.T, dom, name string) {
	if _, text := elem(t, dom, "meta"); strings.Contains(text, "Error") || !strings.Contains(text, "stacked by category") {
		t.Fatalf("page says %q", text)
	}
	if _, text := elem(t, dom, "file"); text != name {
		t.Errorf("file %q", text)
	}
	attr, text := elem(t, dom, "peak-total")
	checkBytes(t, "the peak", attr, text, known.peak)
	if _, text := elem(t, dom, "peak-event"); text != strconv.Itoa(known.peakEvent) {
		t.Errorf("peak after event %q, want %d", text, known.peakEvent)
	}
	attr, _ = elem(t, dom, "allocator-peak")
	if attr["data-bytes"] != strconv.FormatInt(known.peak, 10) {
		t.Errorf("allocator's peak %q", attr["data-bytes"])
	}

	// the peak by category
	_, body := elem(t, dom, "peak-table")
	want := []struct {
		key   string
		bytes int64
	}{{"parameter", known.param}, {"gradient", known.grad}, {"activation", known.act}}
	got := rows(body, "data-key")
	if len(got) != len(want) {
		t.Fatalf("%d rows at the peak, want %d:\n%s", len(got), len(want), body)
	}
	for i, w := range want {
		r := got[i]
		if r[0].attr["data-key"] != w.key || r[2].text != w.key {
			t.Errorf("row %d: %q %q, want %s", i, r[0].attr["data-key"], r[2].text, w.key)
			continue
		}
		checkBytes(t, w.key+" at the peak", r[3].attr, r[3].text, w.bytes)
		checkBytes(t, w.key+" in the allocator's record", r[5].attr, r[5].text, w.bytes)
	}

	// the largest allocation
	_, body = elem(t, dom, "largest-table")
	largest := rows(body, "data-rank")
	if len(largest) != 5 {
		t.Fatalf("%d allocations live at the peak, want 5", len(largest))
	}
	r := largest[0]
	checkBytes(t, "the largest allocation", r[2].attr, r[2].text, known.largest)
	if r[4].text != "activation" || r[5].text != known.largestModule || r[6].text != known.largestOp {
		t.Errorf("largest allocation: %q %q %q, want activation %s %s", r[4].text, r[5].text, r[6].text, known.largestModule, known.largestOp)
	}

	// the timeline: one band per category, bottom first, each a polygon
	// of a top and a bottom edge over every event; the top band reaches
	// the top of the plot at the peak
	_, body = elem(t, dom, "series")
	polys := regexp.MustCompile(`<polygon([^>]*)>`).FindAllStringSubmatch(body, -1)
	if len(polys) != len(want) {
		t.Fatalf("%d bands in the timeline, want %d", len(polys), len(want))
	}
	pair := regexp.MustCompile(`^-?[0-9.]+,-?[0-9.]+$`)
	for i, p := range polys {
		a := attributes(p[1])
		if a["data-key"] != want[i].key {
			t.Errorf("band %d is %q, want %s", i, a["data-key"], want[i].key)
		}
		pts := strings.Fields(a["points"])
		if len(pts) != 2*known.events {
			t.Errorf("band %s has %d points, want %d (a top and a bottom edge over %d events)", want[i].key, len(pts), 2*known.events, known.events)
		}
		for _, q := range pts {
			if !pair.MatchString(q) {
				t.Fatalf("band %s: point %q", want[i].key, q)
			}
		}
		if i == len(polys)-1 {
			// 80 + 6/12 of 870 across, 10 (the plot's top) down
			if pts[known.peakEvent] != "515.0,10.0" {
				t.Errorf("the top band at the peak is at %s, want 515.0,10.0", pts[known.peakEvent])
			}
		}
	}

	// the state at the peak (selected when the page opens)
	attr, text = elem(t, dom, "state-active")
	checkBytes(t, "active at the peak", attr, text, known.peak)
	attr, text = elem(t, dom, "state-reserved")
	checkBytes(t, "reserved at the peak", attr, text, known.reservedAtPeak)
	if _, text := elem(t, dom, "event-desc"); !strings.HasPrefix(text, "event 6: alloc 100.00 KiB") || !strings.Contains(text, "gradient") {
		t.Errorf("event description %q", text)
	}
	attr, _ = elem(t, dom, "event-slider")
	if attr["max"] != strconv.Itoa(known.events-1) {
		t.Errorf("slider max %q", attr["max"])
	}
	_, body = elem(t, dom, "blocks-table")
	var active int64
	for _, r := range rows(body, `data-state="active_allocated"`) {
		n, _ := strconv.ParseInt(r[2].attr["data-bytes"], 10, 64)
		active += n
	}
	if active != known.peak {
		t.Errorf("the blocks table's active blocks add up to %d, want %d", active, known.peak)
	}
	if n := strings.Count(dom, `<g class="segment"`); n != 2 {
		t.Errorf("%d segments drawn, want 2", n)
	}
	if n := strings.Count(dom, `data-state="active_allocated"`); n != 2*5 {
		t.Errorf("%d active blocks drawn and listed, want 5 of each", n)
	}
}

// PyTorch's snapshot: stacked by allocation, its peak and its largest
// allocation's frame as the reference's facts say.
func TestBrowserPyTorchSnapshot(t *testing.T) {
	chromium(t)
	var f torchFacts
	readFacts(t, "testdata/torch_2x.facts.json", &f)
	s, err := memviz.ReadFile("testdata/torch_2x.pickle")
	if err != nil {
		t.Fatal(err)
	}
	dom := dumpDOM(t, serve(t, "torch_2x.pickle", s))
	if _, text := elem(t, dom, "meta"); !strings.Contains(text, "PyTorch's snapshot, 23 events in the file (4 free_requested and free_completed pairs shown as one free each: 19 events shown), timeline stacked by allocation") {
		t.Errorf("page says %q", text)
	}
	attr, text := elem(t, dom, "peak-total")
	checkBytes(t, "the peak", attr, text, f.PeakTotal)
	_, body := elem(t, dom, "largest-table")
	r := rows(body, "data-rank")[0]
	checkBytes(t, "the largest allocation", r[2].attr, r[2].text, f.Largest[0].Requested)
	if got := r[5].text + " " + r[6].text; got != f.Largest[0].Where {
		t.Errorf("largest allocation at %q, want %q", got, f.Largest[0].Where)
	}
	if _, body := elem(t, dom, "series"); strings.Count(body, "<polygon") != 11 {
		t.Errorf("%d bands, want one per allocation (11)", strings.Count(body, "<polygon"))
	}
	attr, _ = elem(t, dom, "device-label")
	if _, hidden := attr["hidden"]; hidden {
		t.Error("two devices, but no device selector")
	}
}

func jsonMarshal(s *device.Snapshot) ([]byte, error) { return json.Marshal(s) }

// A snapshot of fifty thousand blocks in 1500 segments is drawn with a
// bounded number of rectangles: the page draws what the state sends.
func TestBrowserManyBlocks(t *testing.T) {
	chromium(t)
	dom := dumpDOM(t, serve(t, "many.pickle", manyBlocks(50_000, 1500, "")))
	_, svg := elem(t, dom, "segments")
	n := strings.Count(svg, "<rect")
	if max := memviz.MaxStateBlocks + 2*memviz.MaxStateSegments; n > max {
		t.Errorf("the page draws %d rectangles for the segments, want at most %d", n, max)
	}
	if n < memviz.MaxStateSegments {
		t.Errorf("the page draws only %d rectangles", n)
	}
	if _, text := elem(t, dom, "state-segments"); text != "1500" {
		t.Errorf("page counts %q segments, want 1500", text)
	}
	if _, text := elem(t, dom, "state-note"); !strings.Contains(text, "Too many blocks to draw") {
		t.Errorf("note says %q", text)
	}
}
