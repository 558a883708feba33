package device

import (
	"fmt"
	"strings"
)

// Width of the summary table inside its border; PyTorch's is 75, headroom's
// metric names ("Device reserved segments") need three more columns.
const (
	summaryWidth = 78
	nameWidth    = 24
)

// formatSize is memory_summary's _format_size: sz in the unit that suits
// pref (the "all" row's value, so sub-rows share its unit), truncated.
func formatSize(sz, pref int64) string {
	prefixes := []string{"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"}
	prefix := prefixes[0]
	p := float64(pref)
	for _, np := range prefixes[1:] {
		if p < 768*1024 {
			break
		}
		prefix = np
		sz /= 1024
		p /= 1024
	}
	return fmt.Sprintf("%6d %s", sz, prefix)
}

// formatCount is memory_summary's _format_count.
func formatCount(cnt, pref int64) string {
	prefixes := []string{" ", "K", "M"}
	prefix := prefixes[0]
	p := float64(pref)
	for _, np := range prefixes[1:] {
		if p < 750*1000 {
			break
		}
		prefix = np
		cnt /= 1000
		p /= 1000
	}
	return fmt.Sprintf("%7d %s ", cnt, prefix)
}

func center(s string, w int) string {
	if len(s) >= w {
		return s
	}
	left := (w - len(s)) / 2
	return strings.Repeat(" ", left) + s + strings.Repeat(" ", w-len(s)-left)
}

// Summary is torch.cuda.memory_summary(): a table of the statistics with
// its rows (each metric for all pools, then from the large and the small
// pool) and columns (current, peak, total allocated, total freed), followed
// by the allocated bytes by category now and at the peak.
func (a *Allocator) Summary() string {
	a.mu.Lock()
	s := a.stats
	kind, capacity, limit := a.src.Name(), a.capacity, a.limitLocked()
	a.mu.Unlock()

	var lines []string
	rule := func(c string) { lines = append(lines, strings.Repeat(c, summaryWidth)) }
	dev := kind
	if capacity > 0 {
		dev = fmt.Sprintf("%s, capacity %s", kind, FormatBytes(capacity))
	}
	if limit > 0 && limit != capacity {
		dev += fmt.Sprintf(", limit %s", FormatBytes(limit))
	}
	rule("=")
	lines = append(lines, center("headroom memory summary, device "+dev, summaryWidth))
	rule("-")
	lines = append(lines, center(fmt.Sprintf("OOMs: %-12d", s.NumOOMs), 38)+"|"+center(fmt.Sprintf("alloc retries: %-8d", s.NumAllocRetries), summaryWidth-39))
	rule("=")
	lines = append(lines, fmt.Sprintf(" %-*s | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ", nameWidth, "       Metric"))

	row := func(name string, st, pref Stat, f func(int64, int64) string) string {
		return fmt.Sprintf(" %-*s | %s | %s | %s | %s ", nameWidth, name,
			f(st.Current, pref.Current), f(st.Peak, pref.Peak), f(st.Allocated, pref.Allocated), f(st.Freed, pref.Freed))
	}
	metrics := []struct {
		name string
		st   PoolStat
		f    func(int64, int64) string
	}{
		{"Allocated memory", s.AllocatedBytes, formatSize},
		{"Active memory", s.ActiveBytes, formatSize},
		{"Requested memory", s.RequestedBytes, formatSize},
		{"Device reserved memory", s.ReservedBytes, formatSize},
		{"Non-releasable memory", s.InactiveSplitBytes, formatSize},
		{"Allocations", s.Allocation, formatCount},
		{"Active allocs", s.Active, formatCount},
		{"Device reserved segments", s.Segment, formatCount},
		{"Non-releasable allocs", s.InactiveSplit, formatCount},
	}
	for _, m := range metrics {
		rule("-")
		lines = append(lines,
			row(m.name, m.st.Stat, m.st.Stat, m.f),
			row("      from large pool", m.st.Large, m.st.Stat, m.f),
			row("      from small pool", m.st.Small, m.st.Stat, m.f))
	}
	for _, m := range []struct {
		name string
		st   Stat
	}{{"Oversize allocations", s.OversizeAllocations}, {"Oversize segments", s.OversizeSegments}} {
		rule("-")
		lines = append(lines, row(m.name, m.st, m.st, formatCount))
	}
	rule("=")

	// The category breakdown.
	lines = append(lines, fmt.Sprintf(" %-*s | Cur Usage  | Cur Share  | At Peak    | Peak Share ", nameWidth, "Category (allocated)"))
	rule("-")
	cur, peak := s.AllocatedBytes.Current, s.AllocatedBytes.Peak
	var sumNow, sumPeak int64
	share := func(v, total int64) string {
		if total == 0 {
			return fmt.Sprintf("%8s %%", "-")
		}
		return fmt.Sprintf("%8.1f %%", 100*float64(v)/float64(total))
	}
	for c := range numCategories {
		n, p := s.ByCategory[c], s.ByCategoryAtPeak[c]
		sumNow += n
		sumPeak += p
		lines = append(lines, fmt.Sprintf(" %-*s | %s | %s | %s | %s ", nameWidth, c.String(),
			formatSize(n, cur), share(n, cur), formatSize(p, peak), share(p, peak)))
	}
	rule("-")
	lines = append(lines, fmt.Sprintf(" %-*s | %s | %s | %s | %s ", nameWidth, "total",
		formatSize(sumNow, cur), share(sumNow, cur), formatSize(sumPeak, peak), share(sumPeak, peak)))
	rule("=")
	return "|" + strings.Join(lines, "|\n|") + "|\n"
}
