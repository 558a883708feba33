package parallel

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

func TestForCoversRange(t *testing.T) {
	defer SetThreads(SetThreads(4))
	for _, n := range []int{0, 1, 2, 7, 100, 1000, 12345} {
		for _, grain := range []int{0, 1, 3, 64, 5000} {
			hits := make([]int32, n)
			For(n, grain, func(lo, hi int) {
				if lo >= hi {
					t.Errorf("empty range %d..%d", lo, hi)
				}
				for i := lo; i < hi; i++ {
					atomic.AddInt32(&hits[i], 1)
				}
			})
			for i, h := range hits {
				if h != 1 {
					t.Fatalf("n=%d grain=%d: index %d visited %d times", n, grain, i, h)
				}
			}
		}
	}
}

func TestForNested(t *testing.T) {
	defer SetThreads(SetThreads(3))
	var total atomic.Int64
	For(10, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			For(100, 1, func(lo, hi int) { total.Add(int64(hi - lo)) })
		}
	})
	if total.Load() != 1000 {
		t.Fatalf("total %d, want 1000", total.Load())
	}
}

func TestForPanic(t *testing.T) {
	defer SetThreads(SetThreads(4))
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v, want boom", r)
		}
		// The pool must still work afterwards.
		var c atomic.Int64
		For(100, 1, func(lo, hi int) { c.Add(int64(hi - lo)) })
		if c.Load() != 100 {
			t.Fatalf("pool broken after panic")
		}
	}()
	For(100, 1, func(lo, hi int) {
		if lo <= 50 && 50 < hi {
			panic("boom")
		}
	})
}

func TestSetThreads(t *testing.T) {
	old := SetThreads(5)
	defer SetThreads(old)
	if Threads() != 5 {
		t.Fatalf("Threads()=%d", Threads())
	}
	SetThreads(0)
	if Threads() < 1 {
		t.Fatalf("default threads %d", Threads())
	}
}

func BenchmarkForOverhead(b *testing.B) {
	var sink atomic.Int64
	for b.Loop() {
		For(Threads(), 1, func(lo, hi int) { sink.Add(1) })
	}
}

func TestEnvThreads(t *testing.T) {
	if os.Getenv("HEADROOM_PARALLEL_CHILD") == "1" {
		fmt.Printf("threads=%d\n", Threads())
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnvThreads$")
	cmd.Env = append(os.Environ(), "HEADROOM_PARALLEL_CHILD=1", EnvThreads+"=7")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "threads=7\n") {
		t.Fatalf("child output %q, want threads=7", out)
	}
}

func TestParseThreads(t *testing.T) {
	for s, want := range map[string]int{"1": 1, "7": 7, " 12 ": 12} {
		if n, err := ParseThreads(s); err != nil || n != want {
			t.Errorf("ParseThreads(%q) = %d, %v; want %d", s, n, err, want)
		}
	}
	for _, s := range []string{"", "abc", "0", "-4", "1.5", "99999999999999999999", "4 threads"} {
		if n, err := ParseThreads(s); !errors.Is(err, ErrThreads) {
			t.Errorf("ParseThreads(%q) = %d, %v; want ErrThreads", s, n, err)
		}
	}
}

// A $HEADROOM_NUM_THREADS that is not a positive integer is not silently
// ignored: EnvErr says so (and the default is used meanwhile).
func TestEnvThreadsInvalid(t *testing.T) {
	if v := os.Getenv("HEADROOM_PARALLEL_CHILD"); v == "2" {
		fmt.Printf("threads=%d err=%v\n", Threads(), EnvErr())
		return
	}
	for _, bad := range []string{"abc", "-4", "0", "1e3"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEnvThreadsInvalid$")
		cmd.Env = append(os.Environ(), "HEADROOM_PARALLEL_CHILD=2", EnvThreads+"="+bad)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if !strings.Contains(string(out), "err=$"+EnvThreads) || !strings.Contains(string(out), fmt.Sprintf("threads=%d ", runtime.GOMAXPROCS(0))) {
			t.Errorf("%s=%q: child says %q, want the default and an error", EnvThreads, bad, out)
		}
	}
}
