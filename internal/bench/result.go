package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Engines.
const (
	Headroom = "headroom"
	PyTorch  = "pytorch"
)

// ResultPrefix starts the one line of standard output on which a child
// process (headroom's or scripts/bench/pytorch_bench.py) reports its Result
// as JSON. Everything else a child prints is passed through.
const ResultPrefix = "@@headroom-bench "

// Result is one engine's measurement of one workload in one process. The
// JSON form is shared with scripts/bench/pytorch_bench.py.
type Result struct {
	Workload string `json:"workload"`
	Engine   string `json:"engine"`
	Version  string `json:"version,omitempty"`
	Threads  int    `json:"threads"`
	Batch    int    `json:"batch"`
	// Work is what one step does: samples (training workloads) or floating
	// point operations (sgemm), per Unit.
	Work float64 `json:"work"`
	Unit string  `json:"unit"`
	// Flops is the arithmetic of one step (multiply-adds count as 2), for
	// the fraction of the machine's peak; headroom counts it from its
	// compiled step (the PyTorch script leaves it 0: the model is the same).
	Flops float64 `json:"flops,omitempty"`
	// Precision is the step's precision ("" or "fp32", "bf16-mixed", "bf16-true").
	Precision string `json:"precision,omitempty"`
	// InBackward: headroom updated parameters in the backward pass (no
	// gradient buffers; bench --optimizer-in-backward).
	InBackward bool `json:"optimizer_in_backward,omitempty"`
	// ArenaGradients: headroom's gradients were values of the step's
	// arena (train.Config.GradientBuffers unset: bench's default, off with
	// --gradient-buffers), not buffers held for the whole step.
	ArenaGradients bool `json:"arena_gradients,omitempty"`
	// Recompute is headroom's recomputation policy ("" for none; bench
	// --recompute).
	Recompute string `json:"recompute,omitempty"`
	// Warmup steps ran untimed before Steps, the timed step times (s).
	Warmup int       `json:"warmup"`
	Steps  []float64 `json:"step_seconds"`
	// CPU is the process CPU time (user+system, all threads) of each timed
	// step: steadier than wall time on a shared machine, for comparing two
	// builds of one engine (not engines: PyTorch's threads spin while idle).
	CPU []float64 `json:"cpu_seconds,omitempty"`
	// Resident memory (bytes) just before the first step, and the peak
	// during the steps; PeakReset says whether the peak could be reset to
	// the resident memory at that point (else it is the process's peak).
	RSSBefore int64 `json:"rss_before"`
	RSSPeak   int64 `json:"rss_peak"`
	PeakReset bool  `json:"peak_reset"`
	// Planned is headroom's predicted training memory (gradients, optimizer
	// state and activations at the peak of the plan), Allocated the peak of
	// the same bytes the allocator measured. Zero for PyTorch.
	Planned   int64 `json:"planned_bytes,omitempty"`
	Allocated int64 `json:"allocated_bytes,omitempty"`
	// Loss is the loss of the last step (a sanity check).
	Loss  float64 `json:"loss"`
	Error string  `json:"error,omitempty"`
}

// RSSDelta is the training memory: peak resident memory minus resident
// memory just before the first step.
func (r Result) RSSDelta() int64 { return max(0, r.RSSPeak-r.RSSBefore) }

// Summary summarizes the timed steps.
func (r Result) Summary() Summary { return Summarize(r.Steps) }

// Throughput is Work per second at the median step time.
func (r Result) Throughput() float64 {
	s := r.Summary()
	if s.Median <= 0 {
		return 0
	}
	return r.Work / s.Median
}

// WriteResult writes r as its result line.
func WriteResult(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s%s\n", ResultPrefix, b)
	return err
}

// ParseResultLine decodes a result line (with its prefix).
func ParseResultLine(line string) (Result, error) {
	rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), ResultPrefix)
	if !ok {
		return Result{}, fmt.Errorf("bench: not a result line: %q", line)
	}
	var r Result
	if err := json.Unmarshal([]byte(rest), &r); err != nil {
		return Result{}, fmt.Errorf("bench: bad result line: %w", err)
	}
	if r.Workload == "" || r.Engine == "" {
		return Result{}, fmt.Errorf("bench: result line without workload or engine: %q", line)
	}
	return r, nil
}

// ScanResults copies every line of r that is not a result line to pass
// (which may be nil) and returns the results found.
func ScanResults(r io.Reader, pass io.Writer) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, ResultPrefix) {
			res, err := ParseResultLine(line)
			if err != nil {
				return out, err
			}
			out = append(out, res)
			continue
		}
		if pass != nil {
			fmt.Fprintln(pass, line)
		}
	}
	return out, sc.Err()
}
