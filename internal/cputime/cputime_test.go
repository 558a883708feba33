package cputime

import (
	"testing"
	"time"
)

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

// A busy thread's run time shows up in Threads where the system reports
// it (Linux), and the parser reads schedstat's fields.
func TestThreads(t *testing.T) {
	if th, ok := parseSchedstat("1234 56 7\n"); !ok || th.Run != 1234 || th.Wait != 56 {
		t.Errorf("parseSchedstat = %+v, %v", th, ok)
	}
	if _, ok := parseSchedstat("garbage"); ok {
		t.Error("parseSchedstat accepted one field")
	}
	before := Threads()
	if before == nil {
		t.Skip("no per-thread times on this system")
	}
	x := 0.0
	for i := range 20_000_000 {
		x += float64(i % 7)
	}
	if x < 0 {
		t.Log(x)
	}
	var ran time.Duration
	after := Threads()
	for _, a := range after {
		for _, b := range before {
			if a.ID == b.ID {
				ran += a.Run - b.Run
			}
		}
	}
	if ran <= 0 {
		t.Errorf("no thread ran: %v then %v", before, after)
	}
}
