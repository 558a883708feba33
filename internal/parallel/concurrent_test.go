package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// needsTwo is a loop body over [0, 2) that succeeds only when its two
// indices run at the same time on different goroutines: each waits for the
// other to start. A loop run inline (one goroutine, both indices in turn)
// waits in vain; the timeout only stops a failing test from hanging.
func needsTwo(fail chan<- string) func(lo, hi int) {
	var started sync.WaitGroup
	started.Add(2)
	var once [2]sync.Once
	done := make(chan struct{})
	go func() { started.Wait(); close(done) }()
	return func(lo, hi int) {
		for i := lo; i < hi; i++ {
			once[i].Do(started.Done)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				fail <- "a loop never ran its two ranges at once"
				return
			}
		}
	}
}

// Two goroutines, each with a pool of its own, both get two threads at
// once. On the one process-wide pool the second caller ran inline, on one
// thread (this test, on the package-level For, failed before pools).
func TestConcurrentPoolsEachGetThreads(t *testing.T) {
	var wg sync.WaitGroup
	fail := make(chan string, 2)
	pools := []*Pool{NewPool(2), NewPool(2)}
	for _, p := range pools {
		defer p.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.For(2, 1, needsTwo(fail))
		}()
	}
	wg.Wait()
	close(fail)
	for m := range fail {
		t.Fatal(m)
	}
	for i, p := range pools {
		if s := p.Stats(); s.Loops != 1 || s.Inline != 0 || s.Workers != 1 {
			t.Errorf("pool %d: %+v, want one parallel loop on one worker", i, s)
		}
	}
}

func TestPoolThreads(t *testing.T) {
	defer SetThreads(SetThreads(3))
	p := NewPool(5)
	defer p.Close()
	if p.Threads() != 5 {
		t.Fatalf("NewPool(5).Threads() = %d", p.Threads())
	}
	if old := p.SetThreads(0); old != 5 || p.Threads() != 3 {
		t.Fatalf("SetThreads(0) returned %d, then Threads() = %d; want 5 and the default 3", old, p.Threads())
	}
	if q := NewPool(0); q.Threads() != 3 {
		t.Fatalf("NewPool(0).Threads() = %d, want the default 3", q.Threads())
	}
	var nilPool *Pool
	if nilPool.Threads() != Threads() {
		t.Fatalf("a nil pool has %d threads, the default %d", nilPool.Threads(), Threads())
	}
	// Loops on p start at most Threads()-1 workers.
	p.SetThreads(4)
	for range 3 {
		p.For(1000, 1, func(lo, hi int) {})
	}
	if s := p.Stats(); s.Workers != 3 || s.Loops != 3 {
		t.Fatalf("stats %+v, want 3 loops on 3 workers", s)
	}
}

// A closed pool still runs loops (inline), and closing twice is harmless.
func TestPoolClose(t *testing.T) {
	p := NewPool(3)
	p.For(100, 1, func(lo, hi int) {})
	p.Close()
	p.Close()
	n := 0
	p.For(100, 1, func(lo, hi int) { n += hi - lo })
	if n != 100 {
		t.Fatalf("covered %d of 100 after Close", n)
	}
}

// A pool dropped without Close stops its workers once collected.
func TestPoolDroppedStopsWorkers(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		p := NewPool(4)
		p.For(1000, 1, func(lo, hi int) {})
		if s := p.Stats(); s.Workers != 3 {
			t.Fatalf("%d workers started, want 3", s.Workers)
		}
	}()
	for range 100 {
		runtime.GC()
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d goroutines, %d before the pool: its workers outlived it", runtime.NumGoroutine(), before)
}

// A loop returns once its chunks are done, without waiting for a woken
// worker that has not started on it (as when the OS has not yet run the
// worker's thread); the worker, when it runs, finds the loop closed and
// does not join it, and the pool runs the next loops as usual.
func TestForDoesNotWaitForLateWorker(t *testing.T) {
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	first := true
	p := NewPool(2)
	defer p.Close()
	p.hookWoken = func() {
		if first {
			first = false
			held <- struct{}{}
			<-hold
		}
	}
	var caller int64
	var others atomic.Int64
	body := func(lo, hi int) {
		if testGoid() != caller {
			others.Add(int64(hi - lo))
		}
	}
	done := make(chan struct{})
	go func() {
		caller = testGoid()
		p.For(1000, 1, body)
		close(done)
	}()
	<-held // the worker has seen the loop and is stalled before joining
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		close(hold)
		<-done
		t.Fatal("the loop waited for a worker that never started on it")
	}
	if others.Load() != 0 {
		t.Fatalf("%d indices ran off the caller", others.Load())
	}
	if s := p.Stats(); s.Loops != 1 || s.Alone != 1 {
		t.Errorf("after a loop the worker missed: %+v, want 1 loop, run alone", s)
	}
	close(hold)
	// The next loops still use the worker.
	fail := make(chan string, 1)
	p.For(2, 1, needsTwo(fail))
	select {
	case m := <-fail:
		t.Fatal(m)
	default:
	}
	if s := p.Stats(); s.Loops != 2 || s.Alone != 1 {
		t.Errorf("after a loop on both threads: %+v, want 2 loops, 1 run alone", s)
	}
}

// A worker idle for longer than it spins blocks, and Stats counts it.
func TestStatsCountBlockedWaits(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	if s := p.Stats(); s.Blocked != 0 {
		t.Fatalf("a pool that never ran a loop: %+v", s)
	}
	fail := make(chan string, 1)
	p.For(2, 1, needsTwo(fail)) // starts the worker, which then idles
	select {
	case m := <-fail:
		t.Fatal(m)
	default:
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Blocked == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no blocked wait counted after %v idle: %+v", 5*time.Second, p.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}
