package gemm

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// TestPerfReport prints median/min/max GFLOPS over many timed runs, for
// comparison against other libraries on a noisy machine, by wall time and
// (where the OS reports it) by the process's CPU time. It runs only when
// HEADROOM_GEMM_PERF is set (to the number of timed runs, e.g. 30).
//
// HEADROOM_GEMM_PERF_THREADS sets the thread count (default 2) and
// HEADROOM_GEMM_PERF_SHAPE limits the run to one shape of benchShapes.
//
//	HEADROOM_GEMM_PERF=30 go test -run PerfReport -v ./cpu/internal/gemm
func TestPerfReport(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("HEADROOM_GEMM_PERF"))
	if reps <= 0 {
		t.Skip("set HEADROOM_GEMM_PERF=<runs> to measure")
	}
	threads := 2
	if s := os.Getenv("HEADROOM_GEMM_PERF_THREADS"); s != "" {
		threads, _ = strconv.Atoi(s)
	}
	defer parallel.SetThreads(parallel.SetThreads(threads))
	only := os.Getenv("HEADROOM_GEMM_PERF_SHAPE") // run only the shape with this name
	for _, s := range benchShapes {
		if only != "" && s.name != only {
			continue
		}
		m, n, k := s.m, s.n, s.k
		a := make([]float32, m*k)
		b := make([]float32, k*n)
		c := make([]float32, m*n)
		for i := range a {
			a[i] = float32(i%7) * 0.1
		}
		for i := range b {
			b[i] = float32(i%5) * 0.1
		}
		lda, ldb := k, n
		if s.tA {
			lda = m
		}
		if s.tB {
			ldb = k
		}
		run := func() { Sgemm(s.tA, s.tB, m, n, k, 1, a, lda, b, ldb, 0, c, n) }
		flop := 2 * float64(m) * float64(n) * float64(k)
		inner := max(1, int(2e8/flop)) // ~>= 3 ms per timed run
		for range 3 {
			run()
		}
		g := make([]float64, reps)
		u := make([]float64, 0, reps)
		for r := range g {
			t0, c0 := time.Now(), processCPU()
			for range inner {
				run()
			}
			g[r] = flop * float64(inner) / time.Since(t0).Seconds() / 1e9
			if c := processCPU() - c0; c > 0 {
				// By CPU time, times the threads: what the threads would
				// reach on cores of their own (a loaded machine's wall
				// time counts the time other processes ran).
				u = append(u, flop*float64(inner)*float64(threads)/c.Seconds()/1e9)
			}
		}
		slices.Sort(g)
		fmt.Printf("%-18s kernel=%s threads=%d  median %6.1f  p25 %6.1f  p75 %6.1f  min %6.1f  max %6.1f GFLOPS\n",
			s.name, Kernel(), threads, g[len(g)/2], g[len(g)/4], g[3*len(g)/4], g[0], g[len(g)-1])
		if len(u) > 0 {
			slices.Sort(u)
			fmt.Printf("%-18s by CPU time ×threads:     median %6.1f  p25 %6.1f  p75 %6.1f  min %6.1f  max %6.1f GFLOPS\n",
				"", u[len(u)/2], u[len(u)/4], u[3*len(u)/4], u[0], u[len(u)-1])
		}
	}
}
