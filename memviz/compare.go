package memviz

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/headroom-ml/headroom/device"
)

// MaxCompareRows is the most rows of each table of differences.
const MaxCompareRows = 50

// Comparison sets two snapshots side by side: a plan against a recorded
// run (headroom plan --memory-snapshot, train --memory-snapshot) or two
// recorded runs, before and after a change. It works for any two files
// Decode reads: the timelines overlaid (each over its own history, from 0
// to 1, as histories of different lengths have no common clock), and what
// is live at each one's peak compared by category and by tensor.
type Comparison struct {
	A          CompareSide `json:"a"`
	B          CompareSide `json:"b"`
	PeakDiff   int64       `json:"peak_diff"` // B's peak minus A's
	Categories []Diff      `json:"categories"`
	// Tensors are the live allocations at each peak grouped by who asked
	// (category, module path and op for headroom's files, the innermost
	// frame for PyTorch's), largest difference first; at most
	// MaxCompareRows of TensorKeys.
	Tensors    []Diff `json:"tensors"`
	TensorKeys int    `json:"tensor_keys"` // keys in either snapshot
	Differing  int    `json:"differing"`   // keys whose bytes differ
}

// CompareSide is one snapshot of a comparison.
type CompareSide struct {
	File      string `json:"file"`
	Source    string `json:"source"`
	Device    string `json:"device,omitempty"` // headroom's device kind ("meta" for a plan)
	Events    int    `json:"events"`
	Peak      int64  `json:"peak"`
	PeakEvent int    `json:"peak_event"`
	// ReservedPeak is the most reserved bytes over the history.
	ReservedPeak int64 `json:"reserved_peak"`
	Steps        int   `json:"steps"`
	// At is each timeline point's place in the history, 0 to 1; Total
	// the active bytes there.
	At    []float64 `json:"at"`
	Total []int64   `json:"total"`
}

// Diff is one row of a table of differences: bytes (and allocations) in
// A and in B, and B minus A.
type Diff struct {
	Key      string `json:"key"`
	Category string `json:"category,omitempty"`
	Where    string `json:"where,omitempty"`
	A        int64  `json:"a"`
	B        int64  `json:"b"`
	Diff     int64  `json:"diff"`
	ACount   int    `json:"a_count"`
	BCount   int    `json:"b_count"`
}

// Compare compares a (before, or the plan) with b (after, or the run).
func Compare(nameA string, a *Analysis, nameB string, b *Analysis) *Comparison {
	c := &Comparison{A: a.side(nameA), B: b.side(nameB)}
	c.PeakDiff = c.B.Peak - c.A.Peak
	cats, tens := map[string]*Diff{}, map[string]*Diff{}
	add := func(an *Analysis, second bool) {
		for _, j := range an.liveAt(an.peak) {
			al := &an.allocs[j]
			cat := cmp.Or(clipText(al.category), categoryUnknown)
			where := an.where(al)
			for _, m := range []struct {
				rows map[string]*Diff
				key  string
			}{{cats, cat}, {tens, cat + "\x00" + where}} {
				d := m.rows[m.key]
				if d == nil {
					d = &Diff{Key: strings.ReplaceAll(m.key, "\x00", " "), Category: cat}
					if m.key != cat {
						d.Where = where
					}
					m.rows[m.key] = d
				}
				if second {
					d.B += al.amount
					d.BCount++
				} else {
					d.A += al.amount
					d.ACount++
				}
			}
		}
	}
	add(a, false)
	add(b, true)
	order := func(m map[string]*Diff) []Diff {
		out := make([]Diff, 0, len(m))
		for _, d := range m {
			d.Diff = d.B - d.A
			out = append(out, *d)
		}
		slices.SortFunc(out, func(x, y Diff) int {
			return cmp.Or(cmp.Compare(abs(y.Diff), abs(x.Diff)), cmp.Compare(max(y.A, y.B), max(x.A, x.B)), strings.Compare(x.Key, y.Key))
		})
		return out
	}
	c.Categories = order(cats)
	if len(c.Categories) > MaxAllocationSeries {
		c.Categories = c.Categories[:MaxAllocationSeries]
	}
	all := order(tens)
	c.TensorKeys = len(all)
	for _, d := range all {
		if d.Diff != 0 || d.ACount != d.BCount {
			c.Differing++
		}
	}
	c.Tensors = all[:min(len(all), MaxCompareRows)]
	return c
}

func abs(v int64) int64 { return max(v, -v) }

func (a *Analysis) side(name string) CompareSide {
	s := CompareSide{File: name, Source: a.snap.Source, Events: len(a.events), Peak: a.totals[a.peak], PeakEvent: a.peak, Steps: len(a.steps)}
	if h := a.snap.Headroom; h != nil {
		s.Device = clipText(h.Device)
	}
	for _, r := range a.reserved {
		s.ReservedPeak = max(s.ReservedPeak, r)
	}
	idx := a.samples()
	last := max(1, len(a.totals)-1)
	for _, i := range idx {
		s.At = append(s.At, float64(i)/float64(last))
		s.Total = append(s.Total, a.totals[i])
	}
	return s
}

// WriteText writes the comparison as text: the peaks, then the tables of
// differences (at most rows rows of tensors).
func (c *Comparison) WriteText(w io.Writer, rows int) error {
	var b strings.Builder
	fb := device.FormatBytes
	fmt.Fprintf(&b, "A: %s (%s): peak %s after event %d of %d, reserved at most %s\n", c.A.File, c.A.Source, fb(c.A.Peak), c.A.PeakEvent, c.A.Events, fb(c.A.ReservedPeak))
	fmt.Fprintf(&b, "B: %s (%s): peak %s after event %d of %d, reserved at most %s\n", c.B.File, c.B.Source, fb(c.B.Peak), c.B.PeakEvent, c.B.Events, fb(c.B.ReservedPeak))
	fmt.Fprintf(&b, "peak: B - A = %s\n\nat each peak, by category:\n", signed(c.PeakDiff))
	for _, d := range c.Categories {
		fmt.Fprintf(&b, "  %-18s %12s %12s %13s\n", d.Key, fb(d.A), fb(d.B), signed(d.Diff))
	}
	fmt.Fprintf(&b, "\nat each peak, by tensor (%d of %d differ; the largest differences):\n", c.Differing, c.TensorKeys)
	n := 0
	for _, d := range c.Tensors {
		if d.Diff == 0 && d.ACount == d.BCount {
			continue
		}
		if n == rows {
			break
		}
		n++
		fmt.Fprintf(&b, "  %-16s %-40s %12s %12s %13s\n", d.Category, d.Where, fb(d.A), fb(d.B), signed(d.Diff))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func signed(v int64) string {
	if v > 0 {
		return "+" + device.FormatBytes(v)
	}
	if v < 0 {
		return "-" + device.FormatBytes(-v)
	}
	return "0 B"
}
