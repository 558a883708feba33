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

	hookWoken func() // for tests: the crew's hookWoken, set before the first loop

	// Counters for tests and reports.
	loops   atomic.Int64 // loops split across more than one thread
	inline  atomic.Int64 // loops run inline because the pool was busy
	started atomic.Int64 // worker goroutines started
	alone   atomic.Int64 // split loops whose every chunk the caller ran
	// blocked is the crew's count of waits for a loop that blocked (the
	// worker had spun for spinFor); the crew holds it, not the Pool, so
	// that workers keep no reference to the Pool.
	blocked atomic.Pointer[atomic.Int64]
}

// crew is a pool's workers and the job they run. It is allocated apart
// from the Pool, and workers reference only it, so that a dropped Pool is
// collected and its cleanup stops them.
//
// A loop does not wait for workers that have not started on it: state
// holds the loop's generation (high 32 bits), how many workers may join it
// (the first of them: bits 16 to 31), a closed bit and the number of
// workers that joined it. A worker joins (one compare-and-swap) only
// while the loop is open; the caller, once every chunk is handed out,
// closes it and waits for the joined workers alone. On a shared machine a
// woken worker may not run for milliseconds (the OS runs something else
// on its core); the caller then does the whole loop itself and goes on,
// rather than idling until the worker is scheduled only to find nothing
// left to do.
type crew struct {
	wake  []chan struct{} // one a worker: a token when a loop starts
	done  chan struct{}   // the last joined worker of a closed loop leaves
	state atomic.Uint64
	gen   uint64 // the current loop's generation (the caller's copy)
	job

	// hookWoken, for tests, is called by a worker that has seen a new
	// loop, before it tries to join it.
	hookWoken func()

	blocked *atomic.Int64 // waits that blocked (the Pool's blocked)
}

const (
	closedBit = 1 << 15
	countMask = closedBit - 1
	maxShift  = 16
)

// open reports whether state s is generation gen's loop, open, and has
// room for worker idx.
func open(s, gen uint64, idx int) bool {
	return s>>32 == gen && s&closedBit == 0 && uint64(idx) < s>>maxShift&0xffff
}

func (c *crew) stop() {
	for _, ch := range c.wake {
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
// concurrent callers), and worker goroutines started. Alone counts the
// split loops that no worker joined in time (the caller ran every chunk:
// the workers were not scheduled, or the loop was short), and Blocked the
// times a worker, idle for longer than it spins, blocked until woken; on
// a machine with a core a thread these stay near 0 in a run of back to
// back loops, and they tell a worker that did not run from a slow one.
type Stats struct {
	Loops, Inline, Workers int64
	Alone, Blocked         int64
}

// Stats reports p's counters.
func (p *Pool) Stats() Stats {
	p = p.orDefault()
	s := Stats{Loops: p.loops.Load(), Inline: p.inline.Load(), Workers: p.started.Load(), Alone: p.alone.Load()}
	if b := p.blocked.Load(); b != nil {
		s.Blocked = b.Load()
	}
	return s
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

// run takes chunks until none are left, and reports how many it took.
func (j *job) run() (took int64) {
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
			return took
		}
		took++
		lo := int(c) * j.chunk
		j.fn(lo, min(lo+j.chunk, j.n))
	}
}

func worker(c *crew, idx int, wake chan struct{}) {
	var last uint64 // generation of the last loop seen
	start, i := time.Now(), 0
	for {
		s := c.state.Load()
		if s>>32 == last {
			// No new loop: poll for a while, then block until woken.
			if i++; spinFor > 0 && spinning(start, i) {
				continue
			}
			c.blocked.Add(1)
			if _, ok := <-wake; !ok {
				return
			}
			// The token may be stale (sent while this worker was polling):
			// block again at once if no loop is new.
			for c.state.Load()>>32 == last {
				if _, ok := <-wake; !ok {
					return
				}
			}
			continue
		}
		last = s >> 32
		if c.hookWoken != nil {
			c.hookWoken()
		}
		for open(s, last, idx) && !c.state.CompareAndSwap(s, s+1) {
			s = c.state.Load()
		}
		if open(s, last, idx) {
			c.run()
			if ns := c.state.Add(^uint64(0)); ns&closedBit != 0 && ns&countMask == 0 {
				c.done <- struct{}{}
			}
		}
		start, i = time.Now(), 0
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
	t = min(t, countMask) // the most workers state can count, plus the caller
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
		c = &crew{done: make(chan struct{}, 1), hookWoken: p.hookWoken, blocked: p.blocked.Load()}
		if c.blocked == nil {
			c.blocked = new(atomic.Int64)
			p.blocked.Store(c.blocked)
		}
		p.c = c
		if p != defaultPool {
			p.cleanup = runtime.AddCleanup(p, (*crew).stop, c)
		}
	}
	for len(c.wake) < nw {
		ch := make(chan struct{}, 1)
		c.wake = append(c.wake, ch)
		p.started.Add(1)
		go worker(c, len(c.wake)-1, ch)
	}

	c.fn, c.n, c.chunk, c.nchunks, c.panicV = fn, n, chunk, int64(nchunks), nil
	c.next.Store(0)
	c.gen = (c.gen + 1) & (1<<32 - 1)
	c.state.Store(c.gen<<32 | uint64(nw)<<maxShift) // publishes the job: open, no worker joined
	for _, ch := range c.wake[:nw] {
		select {
		case ch <- struct{}{}:
		default: // a token is already waiting
		}
	}
	if c.run() == int64(nchunks) {
		p.alone.Add(1)
	}
	// Every chunk is handed out: close the loop to workers not yet in it,
	// and wait for those that are.
	s := c.state.Load()
	for !c.state.CompareAndSwap(s, s|closedBit) {
		s = c.state.Load()
	}
	if s&countMask != 0 {
		start := time.Now()
		got := false
		for i := 1; !got && spinFor > 0 && spinning(start, i); i++ {
			select {
			case <-c.done:
				got = true
			default:
			}
		}
		if !got {
			<-c.done
		}
	}
	c.fn = nil
	if p := c.panicV; p != nil {
		c.panicV = nil
		panic(p)
	}
}
