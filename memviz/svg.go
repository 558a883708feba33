package memviz

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"strconv"
	"strings"

	"github.com/headroom-ml/headroom/device"
)

// The timeline's drawing, in the page's units (viz.js draws the same).
const (
	svgW, svgH                               = 960, 320
	svgLeft, svgRight, svgTop, svgBottom     = 80, 10, 10, 30
	svgLegendRow                         int = 16
)

// WriteSVG writes the summary's timeline as a static SVG: the stacked
// bands with the points the page draws, the peak and every listed OOM
// marked, the axis, and a legend with each band's bytes at the peak. It
// draws what the summary holds, so it is as bounded as the page.
func (s *Summary) WriteSVG(w io.Writer) error {
	bw := bufio.NewWriter(w)
	t := s.Timeline
	n := len(t.Index)
	legendH := svgLegendRow * (len(t.Series) + 2)
	segH, stepH := 0, 0
	if r := s.Reserved; r != nil && len(r.Index) == n && n > 0 {
		segH = svgPanelH
	}
	if s.Steps != nil && len(s.Steps.Steps) > 0 {
		stepH = svgPanelH
	}
	allH := svgH + legendH + segH + stepH
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n",
		svgW, allH, svgW, allH)
	fmt.Fprintf(bw, "<title>%s</title>\n", esc(fmt.Sprintf("%s: active memory, peak %s after event %d", s.File, device.FormatBytes(s.Peak.Total), s.Peak.Event)))
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", svgW, allH)
	maxY := int64(1)
	for _, v := range t.Total {
		maxY = max(maxY, v)
	}
	pw, ph := float64(svgW-svgLeft-svgRight), float64(svgH-svgTop-svgBottom)
	timed := s.Axis == "time" && len(t.Time) == n && n > 1 && t.Time[n-1] > t.Time[0]
	x := func(k int) float64 {
		switch {
		case timed: // as the page: by time when the file has times
			return svgLeft + float64(t.Time[k]-t.Time[0])*pw/float64(t.Time[n-1]-t.Time[0])
		case n > 1:
			return svgLeft + float64(k)*pw/float64(n-1)
		}
		return svgLeft
	}
	y := func(v int64) float64 { return svgTop + ph - float64(v)*ph/float64(maxY) }
	xs := []float64{svgLeft, svgLeft + pw}
	if n > 1 {
		xs = make([]float64, n)
		for k := range xs {
			xs[k] = x(k)
		}
	}
	at := func(k int) int { return min(k, n-1) }
	bottom := make([]int64, n)
	top := make([]int64, n)
	fmt.Fprintln(bw, `<g id="series">`)
	for _, se := range t.Series {
		for k := range top {
			top[k] = bottom[k] + se.Values[k]
		}
		pts := make([]string, 0, 2*len(xs))
		for k, xv := range xs {
			pts = append(pts, f1(xv)+","+f1(y(top[at(k)])))
		}
		for k := len(xs) - 1; k >= 0; k-- {
			pts = append(pts, f1(xs[k])+","+f1(y(bottom[at(k)])))
		}
		fmt.Fprintf(bw, `<polygon data-key="%s" fill="%s" points="%s"><title>%s</title></polygon>`+"\n",
			esc(se.Key), esc(se.Color), strings.Join(pts, " "), esc(se.Label))
		copy(bottom, top)
	}
	fmt.Fprintln(bw, `</g>`)
	fmt.Fprintln(bw, `<g class="axis" fill="#555" stroke="#888">`)
	for v, step := int64(0), niceStep(maxY); v <= maxY; v += step {
		fmt.Fprintf(bw, `<line x1="%d" x2="%d" y1="%s" y2="%s"/><text x="%d" y="%s" text-anchor="end" stroke="none">%s</text>`+"\n",
			svgLeft-4, svgLeft, f1(y(v)), f1(y(v)), svgLeft-6, f1(y(v)+4), device.FormatBytes(v))
	}
	fmt.Fprintf(bw, `<line x1="%d" x2="%d" y1="%d" y2="%s"/><line x1="%d" x2="%d" y1="%s" y2="%s"/>`+"\n",
		svgLeft, svgLeft, svgTop, f1(svgTop+ph), svgLeft, svgW-svgRight, f1(svgTop+ph), f1(svgTop+ph))
	last := 0
	if n > 0 {
		last = t.Index[n-1]
	}
	first, end, what := "event 0", fmt.Sprintf("event %d", last), "x-axis: events"
	if timed {
		first, end, what = "+0 µs", "+"+formatDuration(t.Time[n-1]-t.Time[0]), "x-axis: time since the first event"
	} else if s.Axis != "time" {
		what = "x-axis: events (the file has no times, or not in order)"
	}
	fmt.Fprintf(bw, `<text x="%d" y="%d" stroke="none">%s</text><text x="%s" y="%d" text-anchor="middle" stroke="none">%s</text><text x="%d" y="%d" text-anchor="end" stroke="none">%s</text>`+"\n",
		svgLeft, svgH-8, esc(first), f1(svgLeft+pw/2), svgH-8, esc(what), svgW-svgRight, svgH-8, esc(end))
	fmt.Fprintln(bw, `</g>`)
	point := func(ev int) int {
		for k, i := range t.Index {
			if i >= ev {
				return k
			}
		}
		return max(n-1, 0)
	}
	fmt.Fprintln(bw, `<g id="oom-marks">`)
	for _, o := range s.OOMs {
		ox := f1(x(point(o.Event)))
		fmt.Fprintf(bw, `<line class="oomline" data-event="%d" x1="%s" x2="%s" y1="%d" y2="%s" stroke="#b00" stroke-width="2"><title>%s</title></line>`+"\n",
			o.Event, ox, ox, svgTop, f1(svgTop+ph), esc(fmt.Sprintf("out of memory at event %d: %s requested", o.Event, device.FormatBytes(o.Requested))))
	}
	fmt.Fprintln(bw, `</g>`)
	px := f1(x(point(s.Peak.Event)))
	fmt.Fprintf(bw, `<line id="peak-line" x1="%s" x2="%s" y1="%d" y2="%s" stroke="#d62728" stroke-dasharray="4 3"/>`+"\n", px, px, svgTop, f1(svgTop+ph))
	fmt.Fprintf(bw, `<text x="%s" y="%d" fill="#555">peak %s</text>`+"\n", f1(x(point(s.Peak.Event))+4), svgTop+12, device.FormatBytes(s.Peak.Total))

	// legend: what the page's tables say first
	ly := svgH + svgLegendRow
	head := fmt.Sprintf("%s: peak %s after event %d of %d (%d in the file)", s.File, device.FormatBytes(s.Peak.Total), s.Peak.Event, s.Events, s.FileEvents)
	if s.OOMCount > 0 {
		head += fmt.Sprintf("; %d out-of-memory events", s.OOMCount)
	}
	fmt.Fprintf(bw, `<text id="legend-head" x="%d" y="%d" font-weight="bold">%s</text>`+"\n", svgLeft, ly, esc(head))
	for i, v := range s.Peak.Series {
		yy := ly + svgLegendRow*(i+1)
		fmt.Fprintf(bw, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" data-key="%s" data-bytes="%d">%s: %s at the peak</text>`+"\n",
			svgLeft, yy-9, esc(v.Color), svgLeft+16, yy, esc(v.Key), v.Bytes, esc(v.Label), device.FormatBytes(v.Bytes))
	}
	if segH > 0 {
		s.writeReservedSVG(bw, svgH+legendH, x)
	}
	if stepH > 0 {
		s.writeStepsSVG(bw, svgH+legendH+segH)
	}
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// svgPanelH is the height of the SVG's panels below the legend.
const svgPanelH = 200

// writeReservedSVG draws the cached-segment timeline at y0, its points
// where the timeline's are (x): a band per segment (paths, so that the
// timeline's polygons stay the page's), the active memory as a line over
// them.
func (s *Summary) writeReservedSVG(bw *bufio.Writer, y0 int, x func(int) float64) {
	r := s.Reserved
	n := len(r.Index)
	top, ph := float64(y0+24), float64(svgPanelH-24-30)
	maxY := int64(1)
	for _, v := range r.Total {
		maxY = max(maxY, v)
	}
	y := func(v int64) float64 { return top + ph - float64(v)*ph/float64(maxY) }
	fmt.Fprintf(bw, `<text x="%d" y="%d" font-weight="bold">reserved memory (cached segments) by segment: at most %s</text>`+"\n", svgLeft, y0+14, device.FormatBytes(maxY))
	xs := []float64{svgLeft, svgW - svgRight}
	if n > 1 {
		xs = make([]float64, n)
		for k := range xs {
			xs[k] = x(k)
		}
	}
	at := func(k int) int { return min(k, n-1) }
	bottom, up := make([]int64, n), make([]int64, n)
	fmt.Fprintln(bw, `<g id="reserved-series">`)
	for _, se := range r.Series {
		for k := range up {
			up[k] = bottom[k] + se.Values[k]
		}
		var d strings.Builder
		for k, xv := range xs {
			d.WriteString(map[bool]string{true: "M", false: " L"}[k == 0] + f1(xv) + "," + f1(y(up[at(k)])))
		}
		for k := len(xs) - 1; k >= 0; k-- {
			d.WriteString(" L" + f1(xs[k]) + "," + f1(y(bottom[at(k)])))
		}
		fmt.Fprintf(bw, `<path class="segband" data-segment="%s" fill="%s" fill-opacity="0.6" d="%sZ"><title>%s</title></path>`+"\n",
			esc(se.Key), esc(se.Color), d.String(), esc(se.Label))
		copy(bottom, up)
	}
	fmt.Fprintln(bw, `</g>`)
	pts := make([]string, len(xs))
	for k, xv := range xs {
		pts[k] = f1(xv) + "," + f1(y(s.Timeline.Total[at(k)]))
	}
	fmt.Fprintf(bw, `<polyline id="reserved-active" fill="none" stroke="#222" points="%s"><title>active memory</title></polyline>`+"\n", strings.Join(pts, " "))
	fmt.Fprintf(bw, `<g class="axis" fill="#555" stroke="#888"><line x1="%d" x2="%d" y1="%s" y2="%s"/><text x="%d" y="%s" text-anchor="end" stroke="none">%s</text><text x="%d" y="%s" text-anchor="end" stroke="none">0 B</text></g>`+"\n",
		svgLeft, svgW-svgRight, f1(top+ph), f1(top+ph), svgLeft-6, f1(top+4), device.FormatBytes(maxY), svgLeft-6, f1(top+ph))
}

// writeStepsSVG draws the peak of each training step at y0: a bar per
// step (red for the steps at the end whose peak rose), and what each
// began with as a line.
func (s *Summary) writeStepsSVG(bw *bufio.Writer, y0 int) {
	st := s.Steps
	list := st.Steps
	top, ph, pw := float64(y0+24), float64(svgPanelH-24-30), float64(svgW-svgLeft-svgRight)
	maxY := int64(1)
	for _, p := range list {
		maxY = max(maxY, p.Peak)
	}
	y := func(v int64) float64 { return top + ph - float64(v)*ph/float64(maxY) }
	head := fmt.Sprintf("peak of each training step: %d steps", st.Count)
	if st.Leak() {
		head += fmt.Sprintf("; the peak rose in each of the last %d steps, by %s in all (a leak)", st.Rising, device.FormatBytes(st.RiseBytes))
	}
	fmt.Fprintf(bw, `<text id="steps-head" x="%d" y="%d" font-weight="bold" data-rising="%d">%s</text>`+"\n", svgLeft, y0+14, st.Rising, esc(head))
	bw.WriteString(`<g id="step-bars">` + "\n")
	bw2 := pw / float64(len(list))
	for k, p := range list {
		fill := "#4e79a7"
		if st.Leak() && len(list) == st.Count && k >= st.Count-st.Rising {
			fill = "#e15759"
		}
		x0 := svgLeft + float64(k)*bw2
		fmt.Fprintf(bw, `<rect class="stepbar" data-step="%d" data-peak="%d" data-start="%d" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>`+"\n",
			p.Step, p.Peak, p.Start, f1(x0), f1(y(p.Peak)), f1(max(0.5, bw2-1)), f1(top+ph-y(p.Peak)), fill,
			esc(fmt.Sprintf("step %d: peak %s, %s held when it began", p.Step, device.FormatBytes(p.Peak), device.FormatBytes(p.Start))))
		fmt.Fprintf(bw, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#222"/>`+"\n", f1(x0), f1(x0+bw2), f1(y(p.Start)), f1(y(p.Start)))
	}
	bw.WriteString("</g>\n")
	fmt.Fprintf(bw, `<g class="axis" fill="#555" stroke="#888"><line x1="%d" x2="%d" y1="%s" y2="%s"/><text x="%d" y="%s" text-anchor="end" stroke="none">%s</text><text x="%d" y="%d" stroke="none">step %d</text><text x="%d" y="%d" text-anchor="end" stroke="none">step %d</text></g>`+"\n",
		svgLeft, svgW-svgRight, f1(top+ph), f1(top+ph), svgLeft-6, f1(top+4), device.FormatBytes(maxY), svgLeft, y0+svgPanelH-8, list[0].Step, svgW-svgRight, y0+svgPanelH-8, list[len(list)-1].Last)
}

// f1 writes a coordinate as the page's toFixed(1) does.
func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func esc(s string) string { return html.EscapeString(s) }

// niceStep is the page's tick step: 1, 2 or 5 times a power of ten of
// bytes, KiB, MiB or GiB, for about four ticks.
func niceStep(maxV int64) int64 {
	raw := float64(maxV) / 4
	unit := 1.0
	for raw >= unit*1024 {
		unit *= 1024
	}
	for _, m := range []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1024} {
		if m*unit >= raw {
			return int64(m * unit)
		}
	}
	return max(int64(raw), 1)
}

// formatDuration prints microseconds as the page's fmtTime does.
func formatDuration(us int64) string {
	a := max(us, -us)
	switch {
	case a >= 1e8:
		return strconv.FormatFloat(float64(us)/1e6, 'f', 0, 64) + " s"
	case a >= 1e6:
		return strconv.FormatFloat(float64(us)/1e6, 'f', 2, 64) + " s"
	case a >= 1e3:
		return strconv.FormatFloat(float64(us)/1e3, 'f', 2, 64) + " ms"
	}
	return strconv.FormatInt(us, 10) + " µs"
}
