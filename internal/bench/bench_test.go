package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/zoo"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		in                       []float64
		median, min, max, q1, q3 float64
	}{
		{[]float64{3}, 3, 3, 3, 3, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4, 1.75, 3.25},
		{[]float64{5, 1, 4, 2, 3}, 3, 1, 5, 2, 4},
		{[]float64{10, 10, 10, 100, 10, 10, 10}, 10, 10, 100, 10, 10},
	} {
		in := append([]float64(nil), tc.in...)
		s := Summarize(tc.in)
		if s.N != len(tc.in) || !near(s.Median, tc.median) || s.Min != tc.min || s.Max != tc.max || !near(s.Q1, tc.q1) || !near(s.Q3, tc.q3) {
			t.Errorf("Summarize(%v) = %+v", tc.in, s)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Fatalf("Summarize modified its input: %v", tc.in)
			}
		}
	}
	if s := Summarize(nil); s.N != 0 || s.Median != 0 {
		t.Errorf("Summarize(nil) = %+v", s)
	}
	if sp := Summarize([]float64{0.9, 1, 1.1}).Spread(); !near(sp, 0.05) {
		t.Errorf("Spread = %v, want 0.05", sp)
	}
}

func TestFormatSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "-"},
		{math.NaN(), "-"},
		{12.5e-6, "12.5µs"},
		{0.0008123, "812µs"},
		{0.01234, "12.3ms"},
		{0.0021, "2.10ms"},
		{1.523, "1.52s"},
		{123.4, "123s"},
	} {
		if got := FormatSeconds(tc.in); got != tc.want {
			t.Errorf("FormatSeconds(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := FormatRange(Summarize([]float64{0.012, 0.010, 0.011})); got != "11.0ms [10.0ms–12.0ms]" {
		t.Errorf("FormatRange = %q", got)
	}
}

func TestParseStatus(t *testing.T) {
	status := "Name:\theadroom\nVmPeak:\t  999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nThreads:\t3\n"
	m, err := ParseStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 1024*1024 || m.Peak != 2048*1024 {
		t.Errorf("ParseStatus = %+v", m)
	}
	for _, bad := range []string{
		"VmRSS:\t1024 kB\n",                  // no VmHWM
		"VmRSS:\t1024 MB\nVmHWM:\t1 kB\n",    // unit
		"VmRSS:\tlots kB\nVmHWM:\t1 kB\n",    // number
		"VmRSS:\t-1 kB\nVmHWM:\t1 kB\n",      // sign
		"VmRSS:\t1 kB extra\nVmHWM:\t1 kB\n", // fields
	} {
		if _, err := ParseStatus(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseStatus(%q) succeeded", bad)
		}
	}
	// The real thing, on Linux.
	if m, err := ReadMemory(); err == nil && (m.RSS <= 0 || m.Peak < m.RSS) {
		t.Errorf("ReadMemory = %+v", m)
	}
}

func TestParseWorkloads(t *testing.T) {
	all, err := ParseWorkloads("all")
	if err != nil || len(all) != len(Standard()) {
		t.Fatalf("all: %d workloads, %v", len(all), err)
	}
	if def, _ := ParseWorkloads(""); len(def) != len(all) {
		t.Errorf("empty list gives %d workloads", len(def))
	}
	ws, err := ParseWorkloads(" gpt, mlp,gpt ,")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	if strings.Join(names, ",") != "gpt,mlp" {
		t.Errorf("names %v, want gpt,mlp", names)
	}
	for _, bad := range []string{"mlp,resnet9000", "all,mlp", ",", "MLP"} {
		if _, err := ParseWorkloads(bad); err == nil {
			t.Errorf("ParseWorkloads(%q) succeeded", bad)
		}
	}
	want := []string{"sgemm", "mlp", "resnet18", "gpt", "rrdbnet", "resnet152"}
	if got := strings.Join(Names(), ","); got != strings.Join(want, ",") {
		t.Errorf("Names() = %s", got)
	}
	for _, w := range Standard() {
		if (w.Model == nil) != (w.Name == "sgemm") || w.Model != nil && (w.Loss == nil || w.Inputs == nil) || w.Batch <= 0 {
			t.Errorf("workload %s is incomplete", w.Name)
		}
		// Every training workload is a zoo model, its batch shaped by the
		// zoo's Example.
		if w.Model != nil {
			spec, err := zoo.Lookup(w.ZooModel)
			if err != nil {
				t.Errorf("workload %s: %v", w.Name, err)
				continue
			}
			x, y := spec.Example(w.Batch)
			if !x.Shape.Equal(w.X.Shape) || !y.Shape.Equal(w.Y.Shape) || x.DType != w.X.DType || y.DType != w.Y.DType {
				t.Errorf("workload %s: batch %v %v, zoo says %v %v", w.Name, w.X, w.Y, x, y)
			}
		}
	}
}

func TestResultLines(t *testing.T) {
	r := Result{Workload: "mlp", Engine: Headroom, Threads: 2, Batch: 128, Work: 128, Unit: "samples",
		Steps: []float64{0.02, 0.01, 0.03}, RSSBefore: 100 << 20, RSSPeak: 150 << 20, PeakReset: true, Planned: 40 << 20}
	var buf bytes.Buffer
	buf.WriteString("some progress\n")
	if err := WriteResult(&buf, r); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("more progress\n")
	var pass bytes.Buffer
	rs, err := ScanResults(&buf, &pass)
	if err != nil || len(rs) != 1 {
		t.Fatalf("ScanResults: %v, %d results", err, len(rs))
	}
	got := rs[0]
	if got.Workload != "mlp" || got.Engine != Headroom || len(got.Steps) != 3 || got.RSSDelta() != 50<<20 || got.Planned != 40<<20 {
		t.Errorf("round trip: %+v", got)
	}
	if pass.String() != "some progress\nmore progress\n" {
		t.Errorf("passed through %q", pass.String())
	}
	if tp := got.Throughput(); !near(tp, 128/0.02) {
		t.Errorf("throughput %v", tp)
	}
	// PyTorch's line, as scripts/bench/pytorch_bench.py writes it.
	py := ResultPrefix + `{"workload": "gpt", "engine": "pytorch", "version": "1.13.0a0", "threads": 2, "warmup": 2, "step_seconds": [1.5, 1.25], "loss": 5.6, "batch": 8, "work": 8.0, "unit": "samples", "rss_before": 1000, "peak_reset": true, "rss_peak": 3000}`
	p, err := ParseResultLine(py)
	if err != nil || p.Engine != PyTorch || p.RSSDelta() != 2000 || p.Summary().Median != 1.375 {
		t.Errorf("ParseResultLine(pytorch) = %+v, %v", p, err)
	}
	for _, bad := range []string{"no prefix", ResultPrefix + "{", ResultPrefix + `{"engine": "x"}`} {
		if _, err := ParseResultLine(bad); err == nil {
			t.Errorf("ParseResultLine(%q) succeeded", bad)
		}
	}
	if (Result{RSSBefore: 10, RSSPeak: 5}).RSSDelta() != 0 {
		t.Error("negative delta not clamped")
	}
}

func TestMergeAndTable(t *testing.T) {
	mlp, _ := Lookup("mlp")
	sg, _ := Lookup("sgemm")
	hr := []Result{
		{Workload: "mlp", Engine: Headroom, Work: 128, Unit: "samples", Steps: []float64{0.010, 0.012}, RSSBefore: 0, RSSPeak: 30 << 20, PeakReset: true, Planned: 28 << 20},
		{Workload: "mlp", Engine: Headroom, Work: 128, Unit: "samples", Steps: []float64{0.011}, RSSBefore: 0, RSSPeak: 32 << 20, PeakReset: true, Planned: 28 << 20},
	}
	pt := []Result{{Workload: "mlp", Engine: PyTorch, Work: 128, Unit: "samples", Steps: []float64{0.020, 0.022, 0.024}, RSSBefore: 0, RSSPeak: 64 << 20, PeakReset: false}}
	m := Merge(hr)
	if m.Rounds != 2 || len(m.Steps) != 3 || m.RSSDelta != 32<<20 || !m.PeakReset || m.Summary().Median != 0.011 {
		t.Fatalf("Merge = %+v", m)
	}
	rows := []Comparison{
		{Workload: sg, Headroom: Merge([]Result{{Workload: "sgemm", Engine: Headroom, Work: 2e9, Unit: "flop", Steps: []float64{0.02}}}),
			PyTorch: Merge([]Result{{Workload: "sgemm", Engine: PyTorch, Work: 2e9, Unit: "flop", Steps: []float64{0.018}}})},
		{Workload: mlp, Headroom: m, PyTorch: Merge(pt)},
		{Workload: mlp, Headroom: Merge([]Result{{Workload: "mlp", Engine: Headroom, Error: "boom"}}), PyTorch: Merge(pt)},
	}
	if r := rows[1].TimeRatio(); !near(r, 0.5) {
		t.Errorf("time ratio %v, want 0.5", r)
	}
	if r := rows[1].MemRatio(); !near(r, 0.5) {
		t.Errorf("memory ratio %v, want 0.5", r)
	}
	if r := rows[0].MemRatio(); r != 0 {
		t.Errorf("sgemm memory ratio %v, want none", r)
	}
	var text, md bytes.Buffer
	if err := WriteTable(&text, rows, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteTable(&md, rows, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PyTorch step", "11.0ms [10.0ms–12.0ms]", "22.0ms [20.0ms–24.0ms]", "0.50×", "1.11×", "100.0 GFLOP/s", "32.00 MiB", "64.00 MiB*", "28.00 MiB", "error"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text table lacks %q:\n%s", want, text.String())
		}
	}
	lines := strings.Split(strings.TrimSpace(md.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[1], "|---|") {
		t.Fatalf("markdown table:\n%s", md.String())
	}
	cols := strings.Count(lines[0], "|")
	for _, l := range lines {
		if strings.Count(l, "|") != cols {
			t.Errorf("ragged markdown row %q", l)
		}
	}
	// Without PyTorch: fewer columns, no ratios.
	var solo bytes.Buffer
	if err := WriteTable(&solo, []Comparison{{Workload: mlp, Headroom: m}}, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(solo.String(), "PyTorch") || !strings.Contains(solo.String(), "11636/s") {
		t.Errorf("headroom-only table:\n%s", solo.String())
	}
}

// A slow phase of the host that hits one engine's round moves the pooled
// medians; the fastest rounds' ratio stays where the quiet rounds put it.
func TestBestRoundRatio(t *testing.T) {
	mlp, _ := Lookup("mlp")
	res := func(e string, steps ...float64) Result {
		return Result{Workload: "mlp", Engine: e, Work: 128, Unit: "samples", Steps: steps}
	}
	cases := []struct {
		name       string
		hr, pt     []Result
		pooled     float64
		best       float64
		wantInCell string
	}{
		{"slow phase on headroom's second round",
			[]Result{res(Headroom, 0.010, 0.011, 0.012), res(Headroom, 0.030, 0.031, 0.029)},
			[]Result{res(PyTorch, 0.020, 0.021, 0.022), res(PyTorch, 0.020, 0.020, 0.021)},
			0.0205 / 0.0205, 0.011 / 0.0200, "1.00× [0.55×]"},
		{"one round each: no bracket", []Result{res(Headroom, 0.010)}, []Result{res(PyTorch, 0.020)}, 0.5, 0, "0.50×"},
		{"failed round ignored",
			[]Result{res(Headroom, 0.010), {Workload: "mlp", Engine: Headroom, Error: "boom"}, res(Headroom, 0.012)},
			[]Result{res(PyTorch, 0.040), res(PyTorch, 0.020)},
			0.011 / 0.030, 0.010 / 0.020, "0.37× [0.50×]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			row := Comparison{Workload: mlp, Headroom: Merge(c.hr), PyTorch: Merge(c.pt)}
			if r := row.TimeRatio(); !near(r, c.pooled) {
				t.Errorf("TimeRatio = %v, want %v", r, c.pooled)
			}
			if r := row.BestRoundRatio(); !near(r, c.best) {
				t.Errorf("BestRoundRatio = %v, want %v", r, c.best)
			}
			var b bytes.Buffer
			if err := WriteTable(&b, []Comparison{row}, true); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), "| "+c.wantInCell+" |") {
				t.Errorf("table has no %q cell:\n%s", c.wantInCell, b.String())
			}
		})
	}
}
