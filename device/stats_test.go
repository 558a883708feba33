package device

import (
	"sort"
	"strings"
	"testing"
)

// summarySequence: a parameter and a gradient from the small pool, optimizer
// state from the large pool, then the gradient freed.
func summarySequence(t *testing.T) *Allocator {
	a := Meta().Alloc
	mustAlloc(t, a, 1000, Tag{Category: Parameter, Module: "fc", Op: "fc.weight"})
	g := mustAlloc(t, a, 5000, Tag{Category: Gradient, Module: "fc", Op: "fc.weight"})
	mustAlloc(t, a, 3*mib, Tag{Category: OptimizerState, Module: "fc", Op: "exp_avg"})
	a.Free(g)
	return a
}

func TestMemoryStatsNames(t *testing.T) {
	a := summarySequence(t)
	m := a.MemoryStats()
	var want []string
	for _, n := range []string{"allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"} {
		for _, p := range []string{"all", "small_pool", "large_pool"} {
			for _, f := range []string{"current", "peak", "allocated", "freed"} {
				want = append(want, n+"."+p+"."+f)
			}
		}
	}
	for _, n := range []string{"oversize_allocations", "oversize_segments"} {
		for _, f := range []string{"current", "peak", "allocated", "freed"} {
			want = append(want, n+"."+f)
		}
	}
	want = append(want, "num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free", "max_split_size")
	var got []string
	for k := range m {
		got = append(got, k)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("keys\n got %v\nwant %v", got, want)
	}
	for _, c := range []struct {
		key  string
		want int64
	}{
		{"allocated_bytes.all.current", 1024 + 3*mib},
		{"allocated_bytes.all.peak", 1024 + 5120 + 3*mib},
		{"allocated_bytes.all.allocated", 1024 + 5120 + 3*mib},
		{"allocated_bytes.all.freed", 5120},
		{"allocated_bytes.small_pool.current", 1024},
		{"allocated_bytes.small_pool.peak", 6144},
		{"allocated_bytes.large_pool.current", 3 * mib},
		{"active_bytes.all.current", 1024 + 3*mib},
		{"requested_bytes.all.current", 1000 + 3*mib},
		{"requested_bytes.all.peak", 6000 + 3*mib},
		{"reserved_bytes.all.current", 22 * mib},
		{"reserved_bytes.small_pool.current", 2 * mib},
		{"reserved_bytes.large_pool.current", 20 * mib},
		{"segment.all.current", 2},
		{"allocation.all.current", 2},
		{"allocation.all.peak", 3},
		{"allocation.all.freed", 1},
		{"active.small_pool.current", 1},
		{"inactive_split.all.current", 2},
		{"inactive_split_bytes.small_pool.current", 2*mib - 1024},
		{"inactive_split_bytes.small_pool.allocated", 2*mib - 1024 + 5120},
		{"inactive_split_bytes.small_pool.freed", 5120},
		{"inactive_split_bytes.large_pool.current", 17 * mib},
		{"num_alloc_retries", 0},
		{"num_ooms", 0},
		{"num_device_alloc", 2},
		{"max_split_size", -1},
	} {
		if m[c.key] != c.want {
			t.Errorf("%s = %d, want %d", c.key, m[c.key], c.want)
		}
	}
	if a.MemoryAllocated() != 1024+3*mib || a.MaxMemoryAllocated() != 6144+3*mib || a.MemoryReserved() != 22*mib || a.MaxMemoryReserved() != 22*mib {
		t.Fatal("accessors disagree with the statistics")
	}
	a.ResetPeak()
	if m := a.MemoryStats(); m["allocated_bytes.all.peak"] != 1024+3*mib || m["allocation.all.peak"] != 2 {
		t.Fatalf("after ResetPeak: %d", m["allocated_bytes.all.peak"])
	}
	if s := a.Stats(); s.ByCategoryAtPeak != s.ByCategory {
		t.Fatal("ResetPeak kept the old category breakdown")
	}
	a.ResetAccumulated()
	if m := a.MemoryStats(); m["allocated_bytes.all.allocated"] != 1024+3*mib || m["allocated_bytes.all.freed"] != 0 || m["num_device_alloc"] != 0 {
		t.Fatalf("after ResetAccumulated: %v", m)
	}
}

func TestCategoryBreakdown(t *testing.T) {
	a := summarySequence(t)
	now, peak := a.Stats().CategoryBytes()
	if len(now) != 2 || now["parameter"] != 1024 || now["optimizer state"] != 3*mib {
		t.Fatalf("now %v", now)
	}
	if len(peak) != 3 || peak["gradient"] != 5120 || peak["parameter"] != 1024 || peak["optimizer state"] != 3*mib {
		t.Fatalf("at peak %v", peak)
	}
}

func TestSummary(t *testing.T) {
	got := summarySequence(t).Summary()
	want := []string{
		"|==============================================================================|",
		"|                     headroom memory summary, device meta                     |",
		"|------------------------------------------------------------------------------|",
		"|          OOMs: 0                     |        alloc retries: 0               |",
		"|==============================================================================|",
		"|        Metric            | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |",
		"|------------------------------------------------------------------------------|",
		"| Allocated memory         |   3073 KiB |   3078 KiB |   3078 KiB |   5120 B   |",
		"|       from large pool    |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |",
		"|       from small pool    |      1 KiB |      6 KiB |      6 KiB |   5120 B   |",
		"|------------------------------------------------------------------------------|",
		"| Active memory            |   3073 KiB |   3078 KiB |   3078 KiB |   5120 B   |",
		"| Requested memory         |   3072 KiB |   3077 KiB |   3077 KiB |   5000 B   |",
		"|       from small pool    |      0 KiB |      5 KiB |      5 KiB |   5000 B   |",
		"| Device reserved memory   |  22528 KiB |  22528 KiB |  22528 KiB |      0 B   |",
		"|       from large pool    |  20480 KiB |  20480 KiB |  20480 KiB |      0 B   |",
		"|       from small pool    |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |",
		"| Non-releasable memory    |  19455 KiB |  19455 KiB |  19460 KiB |   5120 B   |",
		"|       from small pool    |   2047 KiB |   2047 KiB |   2052 KiB |   5120 B   |",
		"| Allocations              |       2    |       3    |       3    |       1    |",
		"|       from large pool    |       1    |       1    |       1    |       0    |",
		"|       from small pool    |       1    |       2    |       2    |       1    |",
		"| Device reserved segments |       2    |       2    |       2    |       0    |",
		"| Non-releasable allocs    |       2    |       2    |       2    |       0    |",
		"| Oversize allocations     |       0    |       0    |       0    |       0    |",
		"| Oversize segments        |       0    |       0    |       0    |       0    |",
		"| Category (allocated)     | Cur Usage  | Cur Share  | At Peak    | Peak Share |",
		"| parameter                |      1 KiB |      0.0 % |      1 KiB |      0.0 % |",
		"| gradient                 |      0 KiB |      0.0 % |      5 KiB |      0.2 % |",
		"| optimizer state          |   3072 KiB |    100.0 % |   3072 KiB |     99.8 % |",
		"| activation               |      0 KiB |      0.0 % |      0 KiB |      0.0 % |",
		"| total                    |   3073 KiB |    100.0 % |   3078 KiB |    100.0 % |",
	}
	lines := strings.Split(got, "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || l == w
		}
		if !found {
			t.Errorf("summary lacks line\n%s\nin\n%s", w, got)
			break
		}
	}
	for i, l := range lines[:len(lines)-1] {
		if len(l) != summaryWidth+2 {
			t.Errorf("line %d is %d wide, not %d: %q", i, len(l), summaryWidth+2, l)
		}
	}
}
