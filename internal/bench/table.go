package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/headroom-ml/headroom/device"
)

// Measurement is one engine's results for one workload, merged over the
// rounds of a run: step times pooled, memory the largest of the rounds.
type Measurement struct {
	Engine string
	Rounds int
	Steps  []float64
	// RoundMedians is each successful round's median step, in round order:
	// a shared host's slow phases last about as long as a round, so they
	// move whole rounds (see BestRoundRatio).
	RoundMedians []float64
	Work         float64
	Unit         string
	RSSDelta     int64
	PeakReset    bool
	Planned      int64
	Allocated    int64
	Flops        float64 // per step
	Err          string
}

// Merge combines the results of one engine on one workload.
func Merge(rs []Result) Measurement {
	var m Measurement
	m.PeakReset = true
	for _, r := range rs {
		m.Engine = r.Engine
		m.Rounds++
		if r.Error != "" {
			m.Err = r.Error
			continue
		}
		m.Steps = append(m.Steps, r.Steps...)
		m.RoundMedians = append(m.RoundMedians, Summarize(r.Steps).Median)
		m.Work, m.Unit = r.Work, r.Unit
		m.RSSDelta = max(m.RSSDelta, r.RSSDelta())
		m.PeakReset = m.PeakReset && r.PeakReset
		m.Planned = max(m.Planned, r.Planned)
		m.Allocated = max(m.Allocated, r.Allocated)
		m.Flops = max(m.Flops, r.Flops)
	}
	return m
}

// Ok reports whether there are step times to show.
func (m Measurement) Ok() bool { return m.Rounds > 0 && len(m.Steps) > 0 }

// Summary summarizes the pooled step times.
func (m Measurement) Summary() Summary { return Summarize(m.Steps) }

// Throughput is Work per second at the median step time.
func (m Measurement) Throughput() float64 {
	s := m.Summary()
	if s.Median <= 0 {
		return 0
	}
	return m.Work / s.Median
}

// FormatThroughput prints a throughput with its unit.
func FormatThroughput(v float64, unit string) string {
	if v <= 0 {
		return "-"
	}
	if unit == "flop" {
		return fmt.Sprintf("%.1f GFLOP/s", v/1e9)
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f/s", v)
	}
	return fmt.Sprintf("%.2f/s", v)
}

// Comparison is one row of the results table.
type Comparison struct {
	Workload Workload
	Headroom Measurement
	PyTorch  Measurement // Rounds 0 when PyTorch did not run
}

// TimeRatio is headroom's median step time over PyTorch's (0 if unknown).
func (c Comparison) TimeRatio() float64 {
	if !c.Headroom.Ok() || !c.PyTorch.Ok() {
		return 0
	}
	return c.Headroom.Summary().Median / c.PyTorch.Summary().Median
}

// BestRoundRatio is headroom's fastest round over PyTorch's fastest round
// (medians of each round's steps; 0 unless both engines ran at least two
// rounds). On a host whose neighbours slow everything down in phases, the
// pooled medians of TimeRatio move with whichever engine's rounds a slow
// phase hit; each engine's fastest round is its least disturbed one, so
// when the two ratios differ the host was noisy and this one is the
// like-for-like figure.
func (c Comparison) BestRoundRatio() float64 {
	h, p := c.Headroom.RoundMedians, c.PyTorch.RoundMedians
	if len(h) < 2 || len(p) < 2 {
		return 0
	}
	bh, bp := slices.Min(h), slices.Min(p)
	if bh <= 0 || bp <= 0 {
		return 0
	}
	return bh / bp
}

// ratioCell is the time ratio of the pooled medians and, in brackets,
// of the fastest rounds when there are several.
func (c Comparison) ratioCell() string {
	s := ratio(c.TimeRatio())
	if b := c.BestRoundRatio(); b > 0 && s != "-" {
		s += " [" + ratio(b) + "]"
	}
	return s
}

// PeakFraction is the fraction of the machine's arithmetic peak (FLOPS)
// that engine measurement m reached at its median step, counting the step's
// flops as headroom's compiled step declares them (the same model in both
// engines); 0 when unknown.
func (c Comparison) PeakFraction(m Measurement, peak float64) float64 {
	flops := max(c.Headroom.Flops, m.Flops)
	if !m.Ok() || peak <= 0 || flops <= 0 {
		return 0
	}
	return flops / m.Summary().Median / peak
}

// BestPeakFraction is PeakFraction at m's fastest step. The peak is the
// best of many short tries (FMAPeak), so on a shared machine this is the
// like-for-like figure (both measured when the cores were least taken by
// other processes); PeakFraction's median step is the cautious one.
func (c Comparison) BestPeakFraction(m Measurement, peak float64) float64 {
	flops := max(c.Headroom.Flops, m.Flops)
	if !m.Ok() || peak <= 0 || flops <= 0 || m.Summary().Min <= 0 {
		return 0
	}
	return flops / m.Summary().Min / peak
}

// peakCell is the fraction of the peak at the median step and, in
// brackets, at the fastest.
func (c Comparison) peakCell(m Measurement, peak float64) string {
	f := c.PeakFraction(m, peak)
	if f <= 0 {
		return "-"
	}
	return fmt.Sprintf("%s [%s]", percent(f), percent(c.BestPeakFraction(m, peak)))
}

// MemRatio is headroom's training memory over PyTorch's (0 if unknown).
func (c Comparison) MemRatio() float64 {
	if !c.Headroom.Ok() || !c.PyTorch.Ok() || c.PyTorch.RSSDelta <= 0 || c.Workload.Model == nil {
		return 0
	}
	return float64(c.Headroom.RSSDelta) / float64(c.PyTorch.RSSDelta)
}

func ratio(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", v)
}

func mem(m Measurement, training bool) string {
	if !m.Ok() || !training {
		return "-"
	}
	s := device.FormatBytes(m.RSSDelta)
	if !m.PeakReset {
		s += "*"
	}
	return s
}

func steps(m Measurement) string {
	if m.Rounds == 0 {
		return "-"
	}
	if !m.Ok() {
		return "error"
	}
	s := m.Summary()
	return fmt.Sprintf("%s ±%.0f%%", FormatRange(s), 100*s.Spread())
}

func percent(f float64) string {
	if f <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}

// Table prints comparison rows.
type Table struct {
	Markdown bool
	// Peak is the machine's measured arithmetic peak (FLOPS, FMAPeak);
	// when set the table has the fraction of it each engine reached at
	// its median step and, in brackets, at its fastest.
	Peak float64
}

// WriteTable writes the comparison table: as aligned text, or as a
// Markdown table when markdown is set. Step times are the median with the
// minimum and maximum in brackets; memory is peak resident memory minus
// resident memory just before the first step ("*": the peak could not be
// reset there, so it is the process's peak).
func WriteTable(w io.Writer, rows []Comparison, markdown bool) error {
	return Table{Markdown: markdown}.Write(w, rows)
}

// Write writes the table (see WriteTable); step times carry their spread,
// half the interquartile range relative to the median (±).
func (t Table) Write(w io.Writer, rows []Comparison) error {
	markdown := t.Markdown
	withPT := false
	for _, r := range rows {
		withPT = withPT || r.PyTorch.Rounds > 0
	}
	head := []string{"workload", "headroom step", "throughput", "training memory", "planned"}
	if withPT {
		head = []string{"workload", "headroom step", "PyTorch step", "time ratio", "headroom throughput", "PyTorch throughput", "headroom memory", "PyTorch memory", "memory ratio", "planned"}
	}
	var lines [][]string
	for _, r := range rows {
		training := r.Workload.Model != nil
		h, p := r.Headroom, r.PyTorch
		planned := "-"
		if training && h.Planned > 0 {
			planned = device.FormatBytes(h.Planned)
		}
		var l []string
		if withPT {
			l = []string{r.Workload.Name, steps(h), steps(p), r.ratioCell(),
				FormatThroughput(h.Throughput(), h.Unit), FormatThroughput(p.Throughput(), p.Unit),
				mem(h, training), mem(p, training), ratio(r.MemRatio()), planned}
		} else {
			l = []string{r.Workload.Name, steps(h), FormatThroughput(h.Throughput(), h.Unit), mem(h, training), planned}
		}
		if t.Peak > 0 {
			l = append(l, r.peakCell(h, t.Peak))
			if withPT {
				l = append(l, r.peakCell(p, t.Peak))
			}
		}
		lines = append(lines, l)
	}
	if t.Peak > 0 {
		head = append(head, "headroom % of peak")
		if withPT {
			head = append(head, "PyTorch % of peak")
		}
	}
	if markdown {
		var b strings.Builder
		b.WriteString("| " + strings.Join(head, " | ") + " |\n")
		b.WriteString("|" + strings.Repeat("---|", len(head)) + "\n")
		for _, l := range lines {
			b.WriteString("| " + strings.Join(l, " | ") + " |\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, l := range lines {
		fmt.Fprintln(tw, strings.Join(l, "\t"))
	}
	return tw.Flush()
}
