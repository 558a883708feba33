package bench

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Summary describes a sample of step times (seconds).
type Summary struct {
	N      int
	Median float64
	Min    float64
	Max    float64
	Q1, Q3 float64 // first and third quartiles (linear interpolation)
	Mean   float64
}

// Summarize returns the summary of xs (which it does not modify). An empty
// sample gives a zero Summary with N 0.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	return Summary{
		N:      len(s),
		Median: quantile(s, 0.5),
		Min:    s[0],
		Max:    s[len(s)-1],
		Q1:     quantile(s, 0.25),
		Q3:     quantile(s, 0.75),
		Mean:   sum / float64(len(s)),
	}
}

// quantile is the q-quantile of sorted s by linear interpolation between
// order statistics (numpy's default, "linear").
func quantile(s []float64, q float64) float64 {
	if len(s) == 1 {
		return s[0]
	}
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	f := pos - float64(lo)
	return s[lo] + f*(s[hi]-s[lo])
}

// Spread is the relative half-range of the interquartile range around the
// median, e.g. 0.03 for ±3%.
func (s Summary) Spread() float64 {
	if s.Median == 0 {
		return 0
	}
	return (s.Q3 - s.Q1) / 2 / s.Median
}

// FormatSeconds prints a duration given in seconds with three significant
// digits and a unit suited to its size: "812µs", "12.3ms", "1.52s".
func FormatSeconds(sec float64) string {
	if sec <= 0 || math.IsNaN(sec) {
		return "-"
	}
	d := time.Duration(sec * float64(time.Second))
	var v float64
	var unit string
	switch {
	case d < time.Millisecond:
		v, unit = sec*1e6, "µs"
	case d < time.Second:
		v, unit = sec*1e3, "ms"
	default:
		v, unit = sec, "s"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f%s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f%s", v, unit)
	default:
		return fmt.Sprintf("%.2f%s", v, unit)
	}
}

// FormatRange prints a summary as "median [min–max]".
func FormatRange(s Summary) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%s [%s–%s]", FormatSeconds(s.Median), FormatSeconds(s.Min), FormatSeconds(s.Max))
}
