// Package runreport turns the per-step log of `headroom train --log` (JSON
// lines) into one self-contained HTML page: summary tables, the memory
// plan, and inline SVG charts of loss, validation, learning rate,
// throughput and memory (planned against measured, by category). It uses
// no JavaScript and loads nothing: the file can be mailed or archived.
package runreport

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
)

// The log's lines. headroom train --log writes them (cmd/headroom,
// runlog.go) and Parse reads them: one declaration for both, so that the
// writer and the reader cannot drift apart. A line's "kind" says what it
// is: none for a step, KindRun for a run's first line (a resumed run adds
// another), KindEval for an evaluation of a set.
const (
	KindRun  = "run"
	KindEval = "eval"
)

// Step is one step line of the log (it has no "kind").
type Step struct {
	Step          int64   `json:"step"`
	Epoch         int     `json:"epoch"`
	Loss          float64 `json:"loss"`
	LR            float64 `json:"lr"`
	Samples       int     `json:"samples"`
	SamplesPerSec float64 `json:"samples_per_s"`
	StepSec       float64 `json:"step_s"`
	DataWaitSec   float64 `json:"data_wait_s"`
	PeakAllocated int64   `json:"peak_allocated"`
	PeakReserved  int64   `json:"peak_reserved"`
	MicroBatches  int     `json:"micro_batches"`
	// The planned peak of a step and the measured peak's bytes by
	// category.
	PlannedPeak    int64            `json:"planned_peak"`
	PeakByCategory map[string]int64 `json:"peak_by_category,omitempty"`
}

// Eval is one evaluation of a set at the end of an epoch.
type Eval struct {
	Kind     string   `json:"kind"` // KindEval
	Step     int64    `json:"step"`
	Epoch    int      `json:"epoch"`
	Set      string   `json:"set"` // val, test
	Loss     float64  `json:"loss"`
	LossName string   `json:"loss_name"`
	Accuracy *float64 `json:"accuracy,omitempty"`
	Samples  int      `json:"samples"`
	// Metrics are further numbers of the evaluation, by name (a
	// super-resolution run's PSNR, its baseline's): each gets a curve in
	// the metrics chart.
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// Header is a run line: what ran and what was planned.
type Header struct {
	Kind          string  `json:"kind"` // KindRun
	Time          string  `json:"time"`
	Model         string  `json:"model"`
	Parameters    int64   `json:"parameters"`
	Optimizer     string  `json:"optimizer"`
	LR            float64 `json:"lr"`
	Schedule      string  `json:"lr_schedule"`
	Batch         int     `json:"batch"`
	MicroBatch    int     `json:"micro_batch"`
	Accumulation  int     `json:"accumulation"`
	Precision     string  `json:"precision"`
	Device        string  `json:"device"`
	Budget        string  `json:"budget,omitempty"`
	Threads       int     `json:"threads"`
	Samples       int     `json:"samples"`
	StepsPerEpoch int     `json:"steps_per_epoch"`
	Epochs        int     `json:"epochs"`
	ResumedAt     int64   `json:"resumed_at,omitempty"`
	// The memory plan of a step, by category, and as printed.
	Planned     map[string]int64 `json:"planned"`
	PlannedPeak int64            `json:"planned_peak"`
	PlanText    string           `json:"plan_text"`
}

// Run is a parsed log.
type Run struct {
	Name    string
	Headers []Header // one per start (a resumed run adds one)
	Steps   []Step
	Evals   []Eval
	// Skipped counts lines that could not be read (a killed run's last
	// line may be cut short).
	Skipped int
}

// ErrEmpty is returned by Parse for a log without a single step.
var ErrEmpty = errors.New("runreport: no steps in the log")

// Parse reads a log. A run resumed from a checkpoint older than its last
// logged step ran those steps again: the later lines replace them.
func Parse(name string, r io.Reader) (*Run, error) {
	run := &Run{Name: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var kind struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(line, &kind); err != nil {
			run.Skipped++
			continue
		}
		switch kind.Kind {
		case KindRun:
			var h Header
			if err := json.Unmarshal(line, &h); err != nil {
				run.Skipped++
				continue
			}
			if len(run.Headers) > 0 {
				run.Steps = slices.DeleteFunc(run.Steps, func(s Step) bool { return s.Step > h.ResumedAt })
				run.Evals = slices.DeleteFunc(run.Evals, func(e Eval) bool { return e.Step > h.ResumedAt })
			}
			run.Headers = append(run.Headers, h)
		case KindEval:
			var e Eval
			if err := json.Unmarshal(line, &e); err != nil {
				run.Skipped++
				continue
			}
			run.Evals = append(run.Evals, e)
		case "":
			var s Step
			if err := json.Unmarshal(line, &s); err != nil {
				run.Skipped++
				continue
			}
			run.Steps = append(run.Steps, s)
		default:
			run.Skipped++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(run.Steps) == 0 {
		return nil, fmt.Errorf("%w %s", ErrEmpty, name)
	}
	return run, nil
}

// header is the run's first header (zero if the log has none).
func (r *Run) header() Header {
	if len(r.Headers) == 0 {
		return Header{}
	}
	return r.Headers[0]
}

// runColors tell the runs apart; categoryColors the kinds of memory.
var (
	runColors      = []string{"#1f77b4", "#d62728"}
	categoryOrder  = []string{"parameter", "gradient", "optimizer state", "activation", "input", "temporary", "workspace"}
	categoryColors = map[string]string{"parameter": "#4e79a7", "gradient": "#f28e2b", "optimizer state": "#76b7b2",
		"activation": "#e15759", "input": "#59a14f", "temporary": "#edc948", "workspace": "#b07aa1"}
)

// Charts returns the report's charts: loss, evaluation, learning rate,
// throughput, and one memory chart per run.
func Charts(runs []*Run) []Chart {
	loss := Chart{Title: "Loss", XLabel: "step", YLabel: "loss"}
	acc := Chart{Title: "Accuracy (evaluation)", XLabel: "step", YLabel: "accuracy", YFormat: percent}
	lr := Chart{Title: "Learning rate", XLabel: "step", YLabel: "lr", YZero: true}
	tput := Chart{Title: "Throughput", XLabel: "step", YLabel: "samples/s", YZero: true}
	metrics := Chart{Title: "Metrics (evaluation)", XLabel: "step", YLabel: "value"}
	var mem []Chart
	for i, r := range runs {
		color := runColors[i%len(runColors)]
		label := func(s string) string {
			if len(runs) == 1 {
				return s
			}
			return r.Name + ": " + s
		}
		var xs, ls, lrs, tps []float64
		for _, s := range r.Steps {
			xs = append(xs, float64(s.Step))
			ls = append(ls, s.Loss)
			lrs = append(lrs, s.LR)
			tps = append(tps, s.SamplesPerSec)
		}
		loss.Series = append(loss.Series,
			Series{Name: "", Color: color, Width: 1, Opacity: 0.25, X: xs, Y: ls},
			Series{Name: label("train (smoothed)"), Color: color, Width: 2, X: xs, Y: ema(ls, 0.9)})
		lr.Series = append(lr.Series, Series{Name: label("lr"), Color: color, X: xs, Y: lrs})
		tput.Series = append(tput.Series,
			Series{Color: color, Width: 1, Opacity: 0.25, X: xs, Y: tps},
			Series{Name: label("samples/s (smoothed)"), Color: color, Width: 2, X: xs, Y: ema(tps, 0.9)})
		sets := map[string][]Eval{}
		var names []string
		for _, e := range r.Evals {
			if sets[e.Set] == nil {
				names = append(names, e.Set)
			}
			sets[e.Set] = append(sets[e.Set], e)
		}
		for j, set := range names {
			dash := []string{"6 3", "2 3", "8 3 2 3"}[j%3]
			var ex, ey, ay []float64
			hasAcc := false
			for _, e := range sets[set] {
				ex = append(ex, float64(e.Step))
				ey = append(ey, e.Loss)
				a := math.NaN()
				if e.Accuracy != nil {
					a, hasAcc = *e.Accuracy, true
				}
				ay = append(ay, a)
			}
			loss.Series = append(loss.Series, Series{Name: label(set + " " + sets[set][0].LossName), Color: color, Dash: dash, Markers: true, X: ex, Y: ey})
			if hasAcc {
				acc.Series = append(acc.Series, Series{Name: label(set), Color: color, Dash: dash, Markers: true, X: ex, Y: ay})
			}
			metrics.Series = append(metrics.Series, metricSeries(sets[set], label, set, color)...)
		}
		mem = append(mem, memoryChart(r, label))
	}
	charts := []Chart{loss}
	if len(acc.Series) > 0 {
		charts = append(charts, acc)
	}
	if len(metrics.Series) > 0 {
		charts = append(charts, metrics)
	}
	return append(append(charts, lr, tput), mem...)
}

// metricSeries is a curve per metric name of one set's evaluations (in
// name order; an evaluation without the metric leaves a gap), each with
// its own dash so that a baseline's line differs from the model's.
func metricSeries(evals []Eval, label func(string) string, set, color string) []Series {
	var names []string
	for _, e := range evals {
		for n := range e.Metrics {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	var out []Series
	for k, n := range names {
		var xs, ys []float64
		for _, e := range evals {
			v, ok := e.Metrics[n]
			if !ok {
				v = math.NaN()
			}
			xs, ys = append(xs, float64(e.Step)), append(ys, v)
		}
		dash := []string{"", "6 3", "2 3", "8 3 2 3"}[k%4]
		out = append(out, Series{Name: label(set + " " + n), Color: color, Dash: dash, Markers: true, X: xs, Y: ys})
	}
	return out
}

// memoryChart is one run's measured peak of each step by category, with
// the planned peak and the peak reserved over it.
func memoryChart(r *Run, label func(string) string) Chart {
	c := Chart{Title: label("Memory per step: measured peak by category, planned peak"), XLabel: "step", YLabel: "bytes", YFormat: bytesLabel, YZero: true, YBytes: true}
	seen := map[string]bool{}
	for _, s := range r.Steps {
		for k := range s.PeakByCategory {
			seen[k] = true
		}
	}
	var cats []string
	for _, k := range categoryOrder {
		if seen[k] {
			cats = append(cats, k)
			delete(seen, k)
		}
	}
	var rest []string
	for k := range seen {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	cats = append(cats, rest...)
	var xs, planned, alloc, reserved []float64
	for _, s := range r.Steps {
		xs = append(xs, float64(s.Step))
		p := math.NaN()
		if s.PlannedPeak > 0 {
			p = float64(s.PlannedPeak)
		}
		planned = append(planned, p)
		alloc = append(alloc, float64(s.PeakAllocated))
		reserved = append(reserved, float64(s.PeakReserved))
	}
	c.AreaX = xs
	for _, k := range cats {
		a := Area{Name: k, Color: categoryColors[k]}
		if a.Color == "" {
			a.Color = "#999"
		}
		for _, s := range r.Steps {
			a.Y = append(a.Y, float64(s.PeakByCategory[k]))
		}
		c.Areas = append(c.Areas, a)
	}
	c.Series = []Series{
		{Name: "reserved", Color: "#555", Dash: "2 3", Width: 1.2, X: xs, Y: reserved},
		{Name: "measured peak", Color: "#000", Width: 1.2, X: xs, Y: alloc},
		{Name: "planned peak", Color: "#d62728", Dash: "7 4", Width: 2, X: xs, Y: planned},
	}
	return c
}

// ema is the exponential moving average TensorBoard's smoothing draws,
// debiased so it starts at the first value.
func ema(ys []float64, w float64) []float64 {
	out := make([]float64, len(ys))
	var acc, norm float64
	for i, y := range ys {
		if !finite(y) {
			out[i] = math.NaN()
			continue
		}
		acc = acc*w + (1-w)*y
		norm = norm*w + (1 - w)
		out[i] = acc / norm
	}
	return out
}

func percent(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }

func bytesLabel(v float64) string {
	s := formatBytes(int64(v))
	// Tick labels: 2.00 MiB reads better as 2 MiB.
	num, unit, _ := strings.Cut(s, " ")
	if strings.Contains(num, ".") {
		num = strings.TrimRight(strings.TrimRight(num, "0"), ".")
	}
	return num + " " + unit
}

// formatBytes is device.FormatBytes's style (B, KiB, MiB, GiB).
func formatBytes(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "KiB", "MiB", "GiB", "TiB"} {
		if math.Abs(f) < 1024 || u == "TiB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.2f %s", f, u)
		}
		f /= 1024
	}
	return ""
}

// summary is a run's numbers for the table.
type summary struct {
	steps                     int
	finalLoss                 float64 // mean over the last 10% of steps
	bestVal, lastTest         string
	meanTput                  float64
	maxPeak, planned, maxResv int64
	time                      float64
}

func summarize(r *Run) summary {
	var s summary
	s.steps = len(r.Steps)
	tail := max(1, s.steps/10)
	for _, st := range r.Steps[s.steps-tail:] {
		s.finalLoss += st.Loss / float64(tail)
	}
	var sum float64
	for _, st := range r.Steps {
		s.maxPeak = max(s.maxPeak, st.PeakAllocated)
		s.maxResv = max(s.maxResv, st.PeakReserved)
		s.planned = max(s.planned, st.PlannedPeak)
		s.time += st.StepSec + st.DataWaitSec
		if finite(st.SamplesPerSec) {
			sum += st.SamplesPerSec
		}
	}
	s.meanTput = sum / float64(s.steps)
	best := math.Inf(1)
	for _, e := range r.Evals {
		desc := fmt.Sprintf("%s %.4f", e.LossName, e.Loss)
		if e.Accuracy != nil {
			desc += fmt.Sprintf(", accuracy %.2f%%", 100**e.Accuracy)
		}
		names := slices.Sorted(maps.Keys(e.Metrics))
		for _, n := range names {
			desc += fmt.Sprintf(", %s %.4g", n, e.Metrics[n])
		}
		desc += fmt.Sprintf(" (step %d)", e.Step)
		if e.Set == "val" && e.Loss < best {
			best, s.bestVal = e.Loss, desc
		}
		if e.Set == "test" {
			s.lastTest = desc
		}
	}
	return s
}

// Options are the page's.
type Options struct {
	Title string
}

// WriteHTML writes the page for one run, or two compared.
func WriteHTML(w io.Writer, runs []*Run, opt Options) error {
	if len(runs) == 0 {
		return fmt.Errorf("runreport: no runs")
	}
	title := opt.Title
	if title == "" {
		var names []string
		for _, r := range runs {
			names = append(names, r.Name)
		}
		title = "headroom run report: " + strings.Join(names, " vs ")
	}
	e := html.EscapeString
	var b strings.Builder
	fmt.Fprintf(&b, `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>%s</title>
<style>
body{font-family:sans-serif;margin:24px auto;max-width:800px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f6f6}
pre{background:#f6f6f6;padding:8px;font-size:12px;overflow-x:auto}
.chart{margin:12px 0}
.note{color:#666;font-size:12px}
</style></head><body>
<h1>%s</h1>
`, e(title), e(title))
	// What ran.
	b.WriteString("<h2>Runs</h2>\n<table><tr><th></th>")
	for i, r := range runs {
		fmt.Fprintf(&b, `<th><span style="color:%s">&#9632;</span> %s</th>`, runColors[i%len(runColors)], e(r.Name))
	}
	b.WriteString("</tr>\n")
	row := func(name string, f func(r *Run) string) {
		fmt.Fprintf(&b, "<tr><th>%s</th>", e(name))
		for _, r := range runs {
			fmt.Fprintf(&b, "<td>%s</td>", e(f(r)))
		}
		b.WriteString("</tr>\n")
	}
	hdr := func(f func(h Header) string) func(r *Run) string {
		return func(r *Run) string {
			if len(r.Headers) == 0 {
				return "?"
			}
			return f(r.header())
		}
	}
	row("model", hdr(func(h Header) string { return fmt.Sprintf("%s (%d parameters)", h.Model, h.Parameters) }))
	row("optimizer", hdr(func(h Header) string { return fmt.Sprintf("%s, lr %g, schedule %s", h.Optimizer, h.LR, h.Schedule) }))
	row("batch", hdr(func(h Header) string {
		return fmt.Sprintf("%d (micro-batch %d x %d), %d samples, %d steps/epoch", h.Batch, h.MicroBatch, h.Accumulation, h.Samples, h.StepsPerEpoch)
	}))
	row("precision", hdr(func(h Header) string { return h.Precision }))
	row("device", hdr(func(h Header) string {
		s := fmt.Sprintf("%s, %d threads", h.Device, h.Threads)
		if h.Budget != "" {
			s += ", budget " + h.Budget
		}
		return s
	}))
	row("started", func(r *Run) string {
		var ts []string
		for _, h := range r.Headers {
			t := h.Time
			if h.ResumedAt > 0 {
				t += fmt.Sprintf(" (resumed at step %d)", h.ResumedAt)
			}
			ts = append(ts, t)
		}
		return strings.Join(ts, "; ")
	})
	sums := map[*Run]summary{}
	for _, r := range runs {
		sums[r] = summarize(r)
	}
	row("steps logged", func(r *Run) string {
		return fmt.Sprintf("%d (%.1fs of steps and data waits)", sums[r].steps, sums[r].time)
	})
	row("final training loss", func(r *Run) string { return fmt.Sprintf("%.4f (mean of the last 10%% of steps)", sums[r].finalLoss) })
	row("best validation", func(r *Run) string { return dash(sums[r].bestVal) })
	row("last test", func(r *Run) string { return dash(sums[r].lastTest) })
	row("mean throughput", func(r *Run) string { return fmt.Sprintf("%.0f samples/s", sums[r].meanTput) })
	row("peak allocated", func(r *Run) string {
		s := sums[r]
		out := fmt.Sprintf("measured %s, planned %s", formatBytes(s.maxPeak), formatBytes(s.planned))
		if s.planned > 0 {
			out += fmt.Sprintf(" (measured - planned: %+d B)", s.maxPeak-s.planned)
		}
		return out + fmt.Sprintf("; reserved %s", formatBytes(s.maxResv))
	})
	b.WriteString("</table>\n")
	for _, r := range runs {
		if r.Skipped > 0 {
			fmt.Fprintf(&b, "<p class=\"note\">%s: %d unreadable line(s) skipped (a run killed while writing leaves one).</p>\n", e(r.Name), r.Skipped)
		}
	}
	b.WriteString("<h2>Charts</h2>\n<p class=\"note\">Faint lines are per step, bold ones smoothed (exponential moving average, 0.9); dashed lines with points are evaluations. Memory: the measured peak of each step split by what the memory held at that peak, against the peak the plan predicted before the first step.</p>\n")
	for _, c := range Charts(runs) {
		fmt.Fprintf(&b, "<div class=\"chart\">%s</div>\n", c.SVG())
	}
	b.WriteString("<h2>Memory plan</h2>\n")
	for _, r := range runs {
		if len(r.Headers) == 0 {
			continue
		}
		fmt.Fprintf(&b, "<p>%s</p><pre>%s</pre>\n", e(r.Name), e(r.header().PlanText))
	}
	b.WriteString("<p class=\"note\">Written by headroom report from the --log of headroom train.</p>\n</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
