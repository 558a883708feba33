package runreport

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

const sampleLog = `{"kind":"run","time":"2026-01-01T00:00:00Z","model":"mlp","parameters":100,"optimizer":"adam","lr":0.001,"lr_schedule":"constant","batch":8,"micro_batch":8,"accumulation":1,"precision":"fp32","device":"cpu","threads":2,"samples":32,"steps_per_epoch":4,"epochs":2,"planned":{"parameter":400},"planned_peak":1000,"plan_text":"memory plan <b>\n"}
{"step":1,"epoch":1,"loss":2.5,"lr":0.001,"samples":8,"samples_per_s":100,"step_s":0.08,"data_wait_s":0.01,"peak_allocated":1000,"peak_reserved":2048,"micro_batches":1,"planned_peak":1000,"peak_by_category":{"parameter":400,"activation":600}}
{"step":2,"epoch":1,"loss":2.0,"lr":0.001,"samples":8,"samples_per_s":110,"step_s":0.07,"data_wait_s":0.01,"peak_allocated":1000,"peak_reserved":2048,"micro_batches":1,"planned_peak":1000,"peak_by_category":{"parameter":400,"activation":600}}
{"step":3,"epoch":1,"loss":9.0,"lr":0.001,"samples":8,"samples_per_s":110,"step_s":0.07,"data_wait_s":0.01,"peak_allocated":1000,"peak_reserved":2048,"micro_batches":1,"planned_peak":1000}
{"kind":"run","time":"2026-01-01T00:01:00Z","model":"mlp","resumed_at":2,"planned_peak":1000}
{"step":3,"epoch":1,"loss":1.5,"lr":0.001,"samples":8,"samples_per_s":120,"step_s":0.07,"data_wait_s":0.01,"peak_allocated":990,"peak_reserved":2048,"micro_batches":1,"planned_peak":1000}
{"step":4,"epoch":1,"loss":1.2,"lr":0.001,"samples":8,"samples_per_s":120,"step_s":0.07,"data_wait_s":0.01,"peak_allocated":990,"peak_reserved":2048,"micro_batches":1,"planned_peak":1000}
{"kind":"eval","step":4,"epoch":1,"set":"val","loss":1.4,"loss_name":"loss","accuracy":0.5,"samples":8}
{"kind":"eval","step":4,"epoch":1,"set":"test","loss":1.3,"loss_name":"loss","accuracy":0.625,"samples":8}
{"step":5,"epoch":2,"loss":1.1,"lr":0.0
`

// A resumed run's repeated steps replace the killed run's; a line cut
// short is skipped and counted.
func TestParse(t *testing.T) {
	r, err := Parse("a", strings.NewReader(sampleLog))
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	var losses []float64
	for _, s := range r.Steps {
		steps, losses = append(steps, s.Step), append(losses, s.Loss)
	}
	if len(steps) != 4 || steps[2] != 3 || losses[2] != 1.5 || len(r.Headers) != 2 || len(r.Evals) != 2 || r.Skipped != 1 {
		t.Errorf("steps %v losses %v, %d headers, %d evals, %d skipped", steps, losses, len(r.Headers), len(r.Evals), r.Skipped)
	}
	if _, err := Parse("empty", strings.NewReader(`{"kind":"run"}`+"\n")); !errors.Is(err, ErrEmpty) {
		t.Errorf("a log without steps: %v", err)
	}
}

// The page is one file that loads nothing: no scripts, no external
// styles or images; its charts are inline SVG, and the run's text is
// escaped.
func TestWriteHTMLSelfContained(t *testing.T) {
	a, _ := Parse("run-a", strings.NewReader(sampleLog))
	b, _ := Parse("run-b", strings.NewReader(sampleLog))
	for _, runs := range [][]*Run{{a}, {a, b}} {
		var buf bytes.Buffer
		if err := WriteHTML(&buf, runs, Options{}); err != nil {
			t.Fatal(err)
		}
		page := buf.String()
		for _, bad := range []string{"<script", "<link", "<img", "@import", "url(", "<b>"} {
			if strings.Contains(page, bad) {
				t.Errorf("%d runs: the page contains %q", len(runs), bad)
			}
		}
		if m := regexp.MustCompile(`(src|href)=`).FindString(page); m != "" {
			t.Errorf("%d runs: the page refers to another file (%s)", len(runs), m)
		}
		// Loss, accuracy, lr, throughput, and memory per run.
		if n, want := strings.Count(page, "<svg "), 4+len(runs); n != want {
			t.Errorf("%d runs: %d charts, want %d", len(runs), n, want)
		}
		for _, want := range []string{"memory plan &lt;b&gt;", "measured 1000 B, planned 1000 B", "resumed at step 2", "accuracy 50.00% (step 4)", "accuracy 62.50% (step 4)", "planned peak", "activation"} {
			if !strings.Contains(page, want) {
				t.Errorf("%d runs: no %q in the page", len(runs), want)
			}
		}
	}
}

func TestTicksAndThin(t *testing.T) {
	for _, tt := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 171, "[0 50 100 150 200]"},
		{0.42, 2.31, "[0 0.5 1 1.5 2 2.5]"},
		{-1, 1, "[-1 -0.5 0 0.5 1]"},
	} {
		if got := strings.Join(strings.Fields(strings.Trim(fmtFloats(ticks(tt.lo, tt.hi, 5)), "[]")), " "); "["+got+"]" != tt.want {
			t.Errorf("ticks(%v, %v) = [%s], want %s", tt.lo, tt.hi, got, tt.want)
		}
	}
	xs := make([]float64, 10000)
	for i := range xs {
		xs[i] = float64(i)
	}
	tx, ty := thin(xs, xs)
	if len(tx) > maxPoints || len(tx) != len(ty) || tx[0] != ty[0] {
		t.Errorf("thinned to %d points", len(tx))
	}
}

func fmtFloats(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, shortNum(x))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// What the writer marshals (the same types) Parse reads back unchanged,
// each line as its kind.
func TestLinesRoundTrip(t *testing.T) {
	acc := 0.75
	h := Header{Kind: KindRun, Model: "cnn", Batch: 32, Planned: map[string]int64{"parameter": 512}, PlannedPeak: 4096, PlanText: "plan\n"}
	s := Step{Step: 1, Epoch: 1, Loss: 2.25, Samples: 32, PeakAllocated: 4096, PlannedPeak: 4096, PeakByCategory: map[string]int64{"activation": 1024}}
	e := Eval{Kind: KindEval, Step: 1, Epoch: 1, Set: "test", Loss: 2, LossName: "loss", Accuracy: &acc, Samples: 8}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, v := range []any{h, s, e} {
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(strings.SplitN(buf.String(), "\n", 3)[1], `"kind"`) {
		t.Errorf("a step line has a kind: %s", buf.String())
	}
	r, err := Parse("rt", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if r.Skipped != 0 || len(r.Headers) != 1 || len(r.Steps) != 1 || len(r.Evals) != 1 ||
		!reflect.DeepEqual(r.Headers[0], h) || !reflect.DeepEqual(r.Steps[0], s) || !reflect.DeepEqual(r.Evals[0], e) {
		t.Errorf("read back %+v", r)
	}
}

// An evaluation's metrics (a super-resolution run's PSNR and its
// bicubic baseline's) get a chart with a curve per set and metric, and
// the summary names them.
func TestMetricsChart(t *testing.T) {
	log := `{"step":1,"epoch":1,"loss":0.3,"lr":0.001,"samples":8,"samples_per_s":100,"step_s":0.08,"micro_batches":1}
{"kind":"eval","step":0,"epoch":1,"set":"val","loss":0.4,"loss_name":"l1","samples":8,"metrics":{"psnr_y":10.5,"bicubic_psnr_y":30}}
{"kind":"eval","step":1,"epoch":1,"set":"val","loss":0.02,"loss_name":"l1","samples":8,"metrics":{"psnr_y":31.25,"bicubic_psnr_y":30}}
`
	r, err := Parse("sr", strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	var chart *Chart
	charts := Charts([]*Run{r})
	for i := range charts {
		if charts[i].Title == "Metrics (evaluation)" {
			chart = &charts[i]
		}
	}
	if chart == nil {
		t.Fatalf("no metrics chart among %d", len(charts))
	}
	got := map[string][]float64{}
	for _, s := range chart.Series {
		got[s.Name] = s.Y
	}
	if len(got) != 2 || len(got["val psnr_y"]) != 2 || got["val psnr_y"][1] != 31.25 || got["val bicubic_psnr_y"][0] != 30 {
		t.Errorf("metric series %v", got)
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, []*Run{r}, Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "psnr_y 31.25") {
		t.Errorf("the summary does not name the metric")
	}
	// A log without metrics has no such chart (TestWriteHTMLSelfContained
	// counts its charts).
}
