package runreport

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Series is one line (or, with Markers, points) of a chart.
type Series struct {
	Name    string
	Color   string
	Dash    string // SVG stroke-dasharray, "" for solid
	Width   float64
	Opacity float64 // 0: 1
	Markers bool
	X, Y    []float64
}

// Area is one band of a stacked area chart: Y is its own height, drawn on
// top of the bands before it.
type Area struct {
	Name  string
	Color string
	Y     []float64
}

// Chart is a line chart with an optional stacked area under the lines.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	AreaX                 []float64
	Areas                 []Area
	// YFormat formats tick labels (nil: a short number).
	YFormat func(float64) string
	// YZero puts 0 on the y axis; YBytes places ticks at round numbers
	// of a binary unit.
	YZero, YBytes bool
}

const (
	chartW, chartH = 760, 300
	padL, padR     = 78, 16
	padB           = 40
	maxPoints      = 1500
)

// SVG renders the chart as a standalone <svg> element; a chart with no
// data says so.
func (c Chart) SVG() string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="11">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`, chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13" font-weight="bold">%s</text>`, padL, esc(c.Title))
	// The legend, in rows under the title, wrapped at the chart's width;
	// the plot starts below it.
	type item struct{ name, color, dash string }
	var all []item
	for _, a := range c.Areas {
		all = append(all, item{a.Name, a.Color, "area"})
	}
	for _, s := range c.Series {
		if s.Name != "" {
			all = append(all, item{s.Name, s.Color, s.Dash})
		}
	}
	lx, ly := float64(padL), 34.0
	for _, it := range all {
		w := 6.5*float64(len([]rune(it.name))) + 34
		if lx+w > chartW-padR && lx > padL {
			lx, ly = padL, ly+15
		}
		if it.dash == "area" {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="16" height="9" fill="%s" fill-opacity="0.55"/>`, lx, ly-8, it.color)
		} else {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5" stroke-dasharray="%s"/>`, lx, lx+16, ly-4, ly-4, it.color, it.dash)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#333">%s</text>`, lx+20, ly, esc(it.name))
		lx += w
	}
	padT := int(ly) + 10
	if len(all) == 0 {
		padT = 30
	}
	x0, x1, y0, y1, ok := c.bounds()
	if !ok {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#777">no data</text></svg>`, chartW/2-25, chartH/2)
		return b.String()
	}
	xt := ticks(x0, x1, 8)
	yt := ticks(y0, y1, 5)
	if c.YBytes {
		// Round numbers of the unit the values are in (MiB, not 10^6).
		unit := 1.0
		for unit*1024 <= math.Max(math.Abs(y0), math.Abs(y1)) {
			unit *= 1024
		}
		yt = ticks(y0/unit, y1/unit, 5)
		for i := range yt {
			yt[i] *= unit
		}
	}
	x0, x1 = math.Min(x0, xt[0]), math.Max(x1, xt[len(xt)-1])
	y0, y1 = math.Min(y0, yt[0]), math.Max(y1, yt[len(yt)-1])
	pw, ph := float64(chartW-padL-padR), float64(chartH-padT-padB)
	px := func(x float64) float64 { return padL + (x-x0)/(x1-x0)*pw }
	py := func(y float64) float64 { return float64(padT) + ph - (y-y0)/(y1-y0)*ph }
	yf := c.YFormat
	if yf == nil {
		yf = shortNum
	}
	for _, t := range yt {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, padL, chartW-padR, py(t), py(t))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`, padL-6, py(t)+4, esc(yf(t)))
	}
	for _, t := range xt {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#f0f0f0"/>`, px(t), px(t), padT, chartH-padB)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`, px(t), chartH-padB+15, esc(shortNum(t)))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`, padL, padT, pw, ph)
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle" fill="#333">%s</text>`, padL+pw/2, chartH-6, esc(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(14 %.0f) rotate(-90)" text-anchor="middle" fill="#333">%s</text>`, float64(padT)+ph/2, esc(c.YLabel))
	// Stacked areas, bottom band first.
	if len(c.Areas) > 0 {
		base := make([]float64, len(c.AreaX))
		for _, a := range c.Areas {
			top := make([]float64, len(base))
			for i := range base {
				top[i] = base[i] + a.Y[i]
			}
			xs, ts := thin(c.AreaX, top)
			_, bs := thin(c.AreaX, base)
			var pts []string
			for i := range xs {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(xs[i]), py(ts[i])))
			}
			for i := len(xs) - 1; i >= 0; i-- {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(xs[i]), py(bs[i])))
			}
			fmt.Fprintf(&b, `<polygon points="%s" fill="%s" fill-opacity="0.55" stroke="none"><title>%s</title></polygon>`, strings.Join(pts, " "), a.Color, esc(a.Name))
			base = top
		}
	}
	for _, s := range c.Series {
		xs, ys := thin(s.X, s.Y)
		op := s.Opacity
		if op == 0 {
			op = 1
		}
		w := s.Width
		if w == 0 {
			w = 1.5
		}
		if s.Markers {
			for i := range xs {
				if finite(ys[i]) {
					fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s" fill-opacity="%.2f"><title>%s: %s at %s</title></circle>`, px(xs[i]), py(ys[i]), s.Color, op, esc(s.Name), shortNum(ys[i]), shortNum(xs[i]))
				}
			}
		}
		// A path with a move at each gap (a non-finite value).
		var d strings.Builder
		move := true
		n := 0
		for i := range xs {
			if !finite(ys[i]) {
				move = true
				continue
			}
			cmd := "L"
			if move {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f", cmd, px(xs[i]), py(ys[i]))
			move = false
			n++
		}
		if n > 1 || !s.Markers {
			dash := ""
			if s.Dash != "" {
				dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.Dash)
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="%.1f" stroke-opacity="%.2f"%s><title>%s</title></path>`, d.String(), s.Color, w, op, dash, esc(s.Name))
		}
	}
	b.WriteString("</svg>")
	return b.String()
}

// bounds is the range of every finite point.
func (c Chart) bounds() (x0, x1, y0, y1 float64, ok bool) {
	x0, y0 = math.Inf(1), math.Inf(1)
	x1, y1 = math.Inf(-1), math.Inf(-1)
	add := func(x, y float64) {
		if finite(x) && finite(y) {
			x0, x1, y0, y1 = math.Min(x0, x), math.Max(x1, x), math.Min(y0, y), math.Max(y1, y)
			ok = true
		}
	}
	for _, s := range c.Series {
		for i := range s.X {
			add(s.X[i], s.Y[i])
		}
	}
	if len(c.Areas) > 0 {
		for i, x := range c.AreaX {
			var sum float64
			for _, a := range c.Areas {
				sum += a.Y[i]
			}
			add(x, sum)
			add(x, 0)
		}
	}
	if c.YZero && ok {
		y0 = math.Min(y0, 0)
	}
	if ok && x0 == x1 {
		x0, x1 = x0-1, x1+1
	}
	if ok && y0 == y1 {
		d := math.Max(math.Abs(y0)*0.1, 1e-9)
		y0, y1 = y0-d, y1+d
	}
	return
}

// thin keeps at most maxPoints points, averaging buckets of neighbours
// (a chart has fewer pixels than a long run has steps).
func thin(xs, ys []float64) ([]float64, []float64) {
	if len(xs) <= maxPoints {
		return xs, ys
	}
	k := (len(xs) + maxPoints - 1) / maxPoints
	var ox, oy []float64
	for i := 0; i < len(xs); i += k {
		j := min(i+k, len(xs))
		var sx, sy float64
		n := 0
		for _, y := range ys[i:j] {
			if finite(y) {
				sy += y
				n++
			}
		}
		for _, x := range xs[i:j] {
			sx += x
		}
		ox = append(ox, sx/float64(j-i))
		if n == 0 {
			oy = append(oy, math.NaN())
		} else {
			oy = append(oy, sy/float64(n))
		}
	}
	return ox, oy
}

// ticks returns about n round values spanning [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	span := hi - lo
	step := math.Pow(10, math.Floor(math.Log10(span/float64(n))))
	for _, m := range []float64{1, 2, 5, 10} {
		if span/(step*m) <= float64(n) {
			step *= m
			break
		}
	}
	var out []float64
	for t := math.Floor(lo/step) * step; t <= hi+step*1e-9; t += step {
		out = append(out, math.Round(t/step)*step)
	}
	if out[len(out)-1] < hi {
		out = append(out, out[len(out)-1]+step)
	}
	return out
}

func shortNum(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1e6 || a < 1e-3:
		return strings.Replace(fmt.Sprintf("%.3g", v), "e+0", "e", 1)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", v), "0"), ".")
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func esc(s string) string { return html.EscapeString(s) }
