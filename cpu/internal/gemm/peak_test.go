package gemm

import (
	"testing"
	"time"
)

// FMAPeak runs the widest FMA loop the kernels use (no timing is checked:
// only that it ran and reports what it ran).
func TestFMAPeakRuns(t *testing.T) {
	p := FMAPeak(2, 20*time.Millisecond)
	if p.FLOPS <= 0 || p.Threads != 2 {
		t.Fatalf("FMAPeak = %+v", p)
	}
	if p.Tries != 2 || p.Median <= 0 || p.Median > p.FLOPS {
		t.Errorf("FMAPeak = %+v: want the median of 2 tries, at most the best", p)
	}
	want := "go"
	if ls := peakLoops(); len(ls) > 0 {
		want = ls[0].isa
	}
	if p.ISA != want {
		t.Errorf("ISA %q, want %q", p.ISA, want)
	}
	// The loop the peak uses is the family of the sgemm kernel chosen
	// (unless the kernel was forced by the environment).
	if k := Kernel(); k != "go" && k == want {
		t.Logf("peak and kernel: %s", k)
	}
	if s := KernelSummary(); s == "" {
		t.Error("empty KernelSummary")
	}
}
