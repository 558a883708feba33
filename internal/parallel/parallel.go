// Package parallel provides a fixed pool of persistent worker goroutines that
// CPU kernels share to split loops across threads.
//
// The pool has Threads() workers in total: the goroutine calling For takes part
// in the work, so at most Threads()-1 pool goroutines are woken. Goroutines are
// started once (lazily, on first use or when SetThreads grows the pool) and are
// reused by every later call; no goroutine is created per call.
//
// The default thread count is runtime.GOMAXPROCS(0), overridden by the
// environment variable HEADROOM_NUM_THREADS (a positive integer) at start-up,
// and by SetThreads at any time.
package parallel

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/headroom-ml/headroom/internal/env"
)

// EnvThreads is the environment variable read at start-up for the default
// number of threads.
const EnvThreads = env.NumThreads

var (
	threads atomic.Int64 // configured thread count, >= 1

	// poolMu is held by the one For call that currently owns the workers. A
	// For that cannot take it (a nested call from inside a worker, or a
	// concurrent call from another goroutine) runs its loop inline on the
	// calling goroutine instead of waiting, so nesting never deadlocks.
	poolMu  sync.Mutex
	workers []chan *job // guarded by poolMu
	cur     job         // the job being run; guarded by poolMu
)

// envErr says why $HEADROOM_NUM_THREADS was not used at start-up.
var envErr error

func init() {
	n := runtime.GOMAXPROCS(0)
	if s, ok := env.Lookup(EnvThreads); ok {
		v, err := ParseThreads(s)
		if err != nil {
			envErr = fmt.Errorf("$%s: %w", EnvThreads, err)
		} else {
			n = v
		}
	}
	threads.Store(int64(n))
}

// ErrThreads is matched by errors.Is for every thread count refused.
var ErrThreads = errors.New("invalid thread count")

// ParseThreads reads a thread count written as text, as in
// $HEADROOM_NUM_THREADS: a positive integer.
func ParseThreads(s string) (int, error) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%w %q (want a positive integer)", ErrThreads, s)
	}
	return v, nil
}

// EnvErr reports why $HEADROOM_NUM_THREADS was set but not used at
// start-up (it is not a positive integer), or nil. The package cannot
// refuse it itself (it is read before main runs); commands report it.
func EnvErr() error { return envErr }

// SetThreads sets the number of threads loops are split across (the caller
// plus n-1 pool workers). n < 1 restores the default, runtime.GOMAXPROCS(0).
// It returns the previous setting.
func SetThreads(n int) int {
	if n < 1 {
		n = runtime.GOMAXPROCS(0)
	}
	return int(threads.Swap(int64(n)))
}

// Threads reports the number of threads loops are split across.
func Threads() int { return int(threads.Load()) }

type job struct {
	fn      func(lo, hi int)
	n       int
	chunk   int
	nchunks int64
	next    atomic.Int64
	pending atomic.Int32 // workers still running this job
	wg      sync.WaitGroup
	pmu     sync.Mutex
	panicV  any
}

// spinFor is how long an idle worker keeps polling for the next job, and
// the caller for the workers to finish, before they block. Kernels run
// many short parallel loops back to back: blocking between them costs a
// wake-up through the OS each time (tens of microseconds, much more when
// the machine is busy), which is what OpenMP's spin-waiting avoids too.
var spinFor = 200 * time.Microsecond

// spinning reports whether a poll loop started at start with i polls done
// should go on.
func spinning(start time.Time, i int) bool {
	return i%64 != 0 || time.Since(start) < spinFor
}

// run takes chunks until none are left.
func (j *job) run() {
	defer func() {
		if r := recover(); r != nil {
			j.pmu.Lock()
			if j.panicV == nil {
				j.panicV = r
			}
			j.pmu.Unlock()
			j.next.Store(j.nchunks) // stop handing out work
		}
	}()
	for {
		c := j.next.Add(1) - 1
		if c >= j.nchunks {
			return
		}
		lo := int(c) * j.chunk
		j.fn(lo, min(lo+j.chunk, j.n))
	}
}

func worker(ch chan *job) {
	for {
		var j *job
		start := time.Now()
	poll:
		for i := 1; spinFor > 0 && spinning(start, i); i++ {
			select {
			case j = <-ch:
				break poll
			default:
			}
		}
		if j == nil {
			var ok bool
			if j, ok = <-ch; !ok {
				return
			}
		}
		j.run()
		j.pending.Add(-1)
		j.wg.Done()
	}
}

// For calls fn over disjoint ranges [lo, hi) that together cover [0, n), in
// parallel on the worker pool, and returns when all calls have returned.
// Ranges hold at least grain indices (except possibly the last); ranges are
// handed out dynamically, so uneven work balances. fn must be safe to call
// concurrently on different ranges. A For called while the pool is busy
// (from inside fn, or from another goroutine) runs serially on the calling
// goroutine. A panic in fn is re-raised in the caller after all workers have
// stopped.
func For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	t := Threads()
	if t <= 1 || n <= grain || !poolMu.TryLock() {
		fn(0, n)
		return
	}
	defer poolMu.Unlock()

	// At most 8 ranges per thread for large n: enough to balance, few enough
	// that handing them out costs nothing.
	chunk := max(grain, (n+8*t-1)/(8*t))
	nchunks := (n + chunk - 1) / chunk
	nw := min(t-1, nchunks-1)
	for len(workers) < nw {
		ch := make(chan *job, 1)
		workers = append(workers, ch)
		go worker(ch)
	}

	j := &cur
	j.fn, j.n, j.chunk, j.nchunks, j.panicV = fn, n, chunk, int64(nchunks), nil
	j.next.Store(0)
	j.pending.Store(int32(nw))
	j.wg.Add(nw)
	for i := 0; i < nw; i++ {
		workers[i] <- j
	}
	j.run()
	start := time.Now()
	for i := 1; j.pending.Load() != 0 && spinFor > 0 && spinning(start, i); i++ {
	}
	j.wg.Wait()
	j.fn = nil
	if p := j.panicV; p != nil {
		j.panicV = nil
		panic(p)
	}
}
