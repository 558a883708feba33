package memviz_test

import (
	"bytes"
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/memviz"
)

type svgElem struct {
	name  string
	attr  map[string]string
	title string // the text of its <title> child
}

// svgElems parses an SVG (failing on malformed XML) into its elements.
func svgElems(t *testing.T, data []byte) []svgElem {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(data))
	var out []svgElem
	var stack []int
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			e := svgElem{name: tk.Name.Local, attr: map[string]string{}}
			for _, a := range tk.Attr {
				e.attr[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.CharData:
			// an element's <title> is its label
			if k := len(stack); k > 1 && out[stack[k-1]].name == "title" {
				out[stack[k-2]].title += string(tk)
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	return out
}

// The known snapshot's SVG: a band per category with a point per event,
// the top band at the top of the plot at the peak (as the page draws it),
// each category's bytes at the peak in the legend, and the rich fixture's
// OOM marked.
func TestWriteSVG(t *testing.T) {
	s, _ := knownSnapshot(t)
	var buf bytes.Buffer
	if err := analyze(t, memviz.FromDevice(s)).Summary("known.json").WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	els := svgElems(t, buf.Bytes())
	var polys []svgElem
	legend := map[string]string{}
	for _, e := range els {
		switch {
		case e.name == "polygon":
			polys = append(polys, e)
		case e.name == "text" && e.attr["data-key"] != "":
			legend[e.attr["data-key"]] = e.attr["data-bytes"]
		case e.name == "line" && e.attr["class"] == "oomline":
			t.Errorf("an OOM marked in a history without one")
		}
	}
	want := []string{"parameter", "gradient", "activation"}
	if len(polys) != len(want) {
		t.Fatalf("%d bands, want %d", len(polys), len(want))
	}
	for i, p := range polys {
		if p.attr["data-key"] != want[i] || p.title != want[i] {
			t.Errorf("band %d: %q %q, want %s", i, p.attr["data-key"], p.title, want[i])
		}
		if n := len(strings.Fields(p.attr["points"])); n != 2*known.events {
			t.Errorf("band %s: %d points, want %d", want[i], n, 2*known.events)
		}
	}
	if pt := strings.Fields(polys[2].attr["points"])[known.peakEvent]; pt != "515.0,10.0" {
		t.Errorf("the top band at the peak is at %s, want 515.0,10.0", pt)
	}
	for k, b := range map[string]int64{"parameter": known.param, "gradient": known.grad, "activation": known.act} {
		if legend[k] != strconv.FormatInt(b, 10) {
			t.Errorf("legend: %s %q at the peak, want %d", k, legend[k], b)
		}
	}

	r, _ := richSnapshot(t)
	sum := analyze(t, memviz.FromDevice(r)).Summary("rich.json")
	buf.Reset()
	if err := sum.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range svgElems(t, buf.Bytes()) {
		if e.name == "line" && e.attr["class"] == "oomline" {
			n++
			if e.attr["data-event"] != strconv.Itoa(sum.OOMs[0].Event) {
				t.Errorf("OOM marked at event %q, want %d", e.attr["data-event"], sum.OOMs[0].Event)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d OOMs marked, want 1", n)
	}
}

// The SVG draws what the summary holds: however many allocations, at most
// MaxDetail+1 bands of at most 2*MaxPoints points each.
func TestWriteSVGIsBounded(t *testing.T) {
	var tr []memviz.Event
	for i := range 3000 {
		tr = append(tr, memviz.Event{Action: "alloc", Addr: int64(1<<20 + 4096*i), Size: int64(1000 + i)})
	}
	s := &memviz.Snapshot{Source: memviz.SourcePyTorch, Traces: [][]memviz.Event{tr}}
	var buf bytes.Buffer
	if err := analyze(t, s).SummaryDetail("x", 1<<30).WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	polys := 0
	for _, e := range svgElems(t, buf.Bytes()) {
		if e.name == "polygon" {
			polys++
			if n := len(strings.Fields(e.attr["points"])); n > 2*memviz.MaxPoints {
				t.Errorf("a band of %d points", n)
			}
		}
	}
	if polys != memviz.MaxDetail+1 {
		t.Errorf("%d bands, want %d", polys, memviz.MaxDetail+1)
	}
}
