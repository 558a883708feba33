// Package parallel provides pools of persistent worker goroutines that CPU
// kernels split loops across.
//
// A Pool has Threads() workers in total: the goroutine calling For takes
// part in the work, so at most Threads()-1 pool goroutines are woken.
// Goroutines are started once (lazily, on first use or when the thread
// count grows) and are reused by every later call; no goroutine is created
// per call.
//
// One pool runs one loop at a time: a For that finds its pool busy (a
// nested call from inside a worker, or a concurrent call from another
// goroutine) runs inline on its caller. So that concurrent users (two
// trainers in one process) each get their threads, each gets a Pool of its
// own (NewPool); the package-level For, Threads and SetThreads use the
// process-wide default pool.
//
// The default pool's thread count is runtime.GOMAXPROCS(0), overridden by
// the environment variable HEADROOM_NUM_THREADS (a positive integer) at
// start-up, and by SetThreads at any time. A NewPool(0) follows the
// default's count.
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

// Pool is a set of worker goroutines that loops are split across. The
// zero Pool is not usable; a nil *Pool stands for the default pool.
type Pool struct {
	threads atomic.Int64 // configured thread count; 0: follow the default

	// mu is held by the one For call that currently owns the workers. A
	// For that cannot take it (a nested call from inside a worker, or a
	// concurrent call from another goroutine) runs its loop inline on the
	// calling goroutine instead of waiting, so nesting never deadlocks.
	mu      sync.Mutex
	c       *crew           // guarded by mu; nil until the first parallel loop
	cleanup runtime.Cleanup // stops c's workers if p is dropped without Close
	closed  bool            // guarded by mu

	// Counters for tests and reports.
	loops   atomic.Int64 // loops split across more than one thread
	inline  atomic.Int64 // loops run inline because the pool was busy
	started atomic.Int64 // worker goroutines started
}

// crew is a pool's workers and the job they run. It is allocated apart
// from the Pool, and workers reference only it, so that a dropped Pool is
// collected and its cleanup stops them.
type crew struct {
	workers []chan *job
	cur     job
}

func (c *crew) stop() {
	for _, ch := range c.workers {
		close(ch)
	}
}

// defaultPool serves the package-level functions.
var defaultPool = &Pool{}

// NewPool returns a pool of threads threads (the caller of For plus
// threads-1 workers, started on first use); threads < 1 follows the
// default pool's count. Close stops its workers; a pool that becomes
// unreachable without Close stops them too (a cleanup closes their
// channels).
func NewPool(threads int) *Pool {
	p := &Pool{}
	if threads > 0 {
		p.threads.Store(int64(threads))
	}
	return p
}

func (p *Pool) orDefault() *Pool {
	if p == nil {
		return defaultPool
	}
	return p
}

// Threads reports the number of threads p's loops are split across.
func (p *Pool) Threads() int {
	p = p.orDefault()
	if n := p.threads.Load(); n > 0 {
		return int(n)
	}
	return int(defaultPool.threads.Load())
}

// SetThreads sets the number of threads p's loops are split across; n < 1
// makes it follow the default pool (for the default pool itself:
// runtime.GOMAXPROCS(0)). It returns the previous count.
func (p *Pool) SetThreads(n int) int {
	p = p.orDefault()
	old := p.Threads()
	if n < 1 && p == defaultPool {
		n = runtime.GOMAXPROCS(0)
	}
	p.threads.Store(int64(max(n, 0)))
	return old
}

// Stats counts what a pool has done: loops split across threads, loops
// run inline on their caller because the pool was busy (nested or
// concurrent callers), and worker goroutines started.
type Stats struct {
	Loops, Inline, Workers int64
}

// Stats reports p's counters.
func (p *Pool) Stats() Stats {
	p = p.orDefault()
	return Stats{Loops: p.loops.Load(), Inline: p.inline.Load(), Workers: p.started.Load()}
}

// Close stops p's workers; a For after Close runs inline. Closing the
// default pool (nil) does nothing.
func (p *Pool) Close() {
	if p == nil || p == defaultPool {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		if p.c != nil {
			p.cleanup.Stop()
			p.c.stop()
			p.c = nil
		}
	}
}

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
	defaultPool.threads.Store(int64(n))
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

// SetThreads sets the number of threads the default pool's loops are split
// across (the caller plus n-1 pool workers). n < 1 restores the default,
// runtime.GOMAXPROCS(0). It returns the previous setting.
func SetThreads(n int) int { return defaultPool.SetThreads(n) }

// Threads reports the number of threads the default pool's loops are split
// across.
func Threads() int { return defaultPool.Threads() }

// For is (*Pool)(nil).For: the loop on the default pool.
func For(n, grain int, fn func(lo, hi int)) { defaultPool.For(n, grain, fn) }

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
// parallel on p's workers (nil p: the default pool), and returns when all
// calls have returned. Ranges hold at least grain indices (except possibly
// the last); ranges are handed out dynamically, so uneven work balances. fn
// must be safe to call concurrently on different ranges. A For called while
// the pool is busy (from inside fn, or from another goroutine) runs
// serially on the calling goroutine. A panic in fn is re-raised in the
// caller after all workers have stopped.
func (p *Pool) For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	p = p.orDefault()
	t := p.Threads()
	if t <= 1 || n <= grain {
		fn(0, n)
		return
	}
	if !p.mu.TryLock() {
		p.inline.Add(1)
		fn(0, n)
		return
	}
	defer p.mu.Unlock()
	if p.closed {
		fn(0, n)
		return
	}
	p.loops.Add(1)

	// At most 8 ranges per thread for large n: enough to balance, few enough
	// that handing them out costs nothing.
	chunk := max(grain, (n+8*t-1)/(8*t))
	nchunks := (n + chunk - 1) / chunk
	nw := min(t-1, nchunks-1)
	c := p.c
	if c == nil {
		c = &crew{}
		p.c = c
		if p != defaultPool {
			p.cleanup = runtime.AddCleanup(p, (*crew).stop, c)
		}
	}
	for len(c.workers) < nw {
		ch := make(chan *job, 1)
		c.workers = append(c.workers, ch)
		p.started.Add(1)
		go worker(ch)
	}

	j := &c.cur
	j.fn, j.n, j.chunk, j.nchunks, j.panicV = fn, n, chunk, int64(nchunks), nil
	j.next.Store(0)
	j.pending.Store(int32(nw))
	j.wg.Add(nw)
	for i := 0; i < nw; i++ {
		c.workers[i] <- j
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
