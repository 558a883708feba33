package cputime

import "testing"

// Busy work shows up as CPU time on the platforms that report it.
func TestProcessAdvances(t *testing.T) {
	t0 := Process()
	x := 0.0
	for i := range 20_000_000 {
		x += float64(i % 7)
	}
	if x < 0 {
		t.Log(x)
	}
	if t1 := Process(); t1 <= t0 {
		t.Errorf("CPU time did not advance: %v then %v", t0, t1)
	}
}
