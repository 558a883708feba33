package gemm

import (
	"runtime"
	"slices"
	"sync"
	"time"
)

type peakLoop struct {
	isa   string
	flops float64 // per iteration
	run   func(n int)
}

// goLoop is the portable stand-in: scalar multiply-adds the compiler may
// fuse (arm64) or not; it measures what portable Go code can reach.
var goSink float32

func goLoop(n int) {
	var a0, a1, a2, a3, a4, a5, a6, a7 float32
	x, y := float32(0.999), float32(1e-7)
	for range n {
		a0 = a0*x + y
		a1 = a1*x + y
		a2 = a2*x + y
		a3 = a3*x + y
		a4 = a4*x + y
		a5 = a5*x + y
		a6 = a6*x + y
		a7 = a7*x + y
	}
	goSink = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7
}

// Peak is a measured arithmetic peak.
type Peak struct {
	ISA     string  // "avx512", "avx2" or "go": the widest FMA loop the CPU runs
	Threads int     // threads that ran it at once
	FLOPS   float64 // all threads together, multiply-adds counted as 2
	// Median is the median try's rate, FLOPS the best one's: on a shared
	// machine the gap between them is what other processes took.
	Median float64
	Tries  int
}

// FMAPeak measures the machine's peak float32 FMA rate: threads goroutines,
// each on its own OS thread, run independent chains of the widest FMA
// instruction Sgemm's kernels use, for about d in all (best of a few
// tries, so that a neighbour's burst on a shared machine costs less). It
// is what a compute-bound kernel can reach at most, to report GEMM and
// training throughput as a fraction of.
func FMAPeak(threads int, d time.Duration) Peak {
	threads = max(1, threads)
	l := peakLoop{"go", 8 * 2, goLoop}
	if ls := peakLoops(); len(ls) > 0 {
		l = ls[0]
	}
	// Calibrate: iterations for about 10 ms on one thread.
	n := 1 << 14
	for {
		start := time.Now()
		l.run(n)
		if el := time.Since(start); el > 5*time.Millisecond || n > 1<<30 {
			n = int(float64(n) * float64(10*time.Millisecond) / float64(max(el, time.Microsecond)))
			break
		}
		n *= 4
	}
	n = max(n, 1)
	tries := max(1, int(d/(10*time.Millisecond)))
	rates := make([]float64, 0, tries)
	for range tries {
		var wg sync.WaitGroup
		start := time.Now()
		for range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				l.run(n)
			}()
		}
		wg.Wait()
		if el := time.Since(start).Seconds(); el > 0 {
			rates = append(rates, float64(threads)*float64(n)*l.flops/el)
		}
	}
	p := Peak{ISA: l.isa, Threads: threads, Tries: len(rates)}
	if len(rates) > 0 {
		slices.Sort(rates)
		p.FLOPS, p.Median = rates[len(rates)-1], rates[len(rates)/2]
	}
	return p
}
