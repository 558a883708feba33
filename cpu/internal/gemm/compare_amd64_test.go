//go:build amd64 && !purego

package gemm

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// TestKernelCompare times the assembly kernels (narrowed by
// HEADROOM_GEMM_TEST_KERNELS) against each other in one process, paired and
// interleaved (A B A B ... a round each), which a shared machine's load
// skews far less than runs one after the other. It prints per kernel and
// shape the median and best GFLOP/s by CPU time (times the threads: what
// the threads would reach on cores of their own) and by wall time. It runs
// only when HEADROOM_GEMM_COMPARE is set (to the rounds, e.g. 10);
// HEADROOM_GEMM_COMPARE_THREADS sets the threads (default 1) and
// HEADROOM_GEMM_COMPARE_SHAPES the shapes, "m,n,k,tA,tB;..." (tA and tB 0
// or 1; default 1024³).
//
//	HEADROOM_GEMM_COMPARE=10 go test -run KernelCompare -v ./cpu/internal/gemm
func TestKernelCompare(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("HEADROOM_GEMM_COMPARE"))
	if reps <= 0 {
		t.Skip("set HEADROOM_GEMM_COMPARE=<rounds> to measure")
	}
	threads := 1
	if s := os.Getenv("HEADROOM_GEMM_COMPARE_THREADS"); s != "" {
		threads, _ = strconv.Atoi(s)
	}
	defer parallel.SetThreads(parallel.SetThreads(threads))
	ks := slices.DeleteFunc(kernels32(), func(k *kernel[float32]) bool { return k.name == "go" })
	shapes := os.Getenv("HEADROOM_GEMM_COMPARE_SHAPES")
	if shapes == "" {
		shapes = "1024,1024,1024,0,0"
	}
	for _, sh := range strings.Split(shapes, ";") {
		var m, n, k, ta, tb int
		if _, err := fmt.Sscanf(sh, "%d,%d,%d,%d,%d", &m, &n, &k, &ta, &tb); err != nil {
			t.Fatalf("shape %q: %v", sh, err)
		}
		tA, tB := ta != 0, tb != 0
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
		if tA {
			lda = m
		}
		if tB {
			ldb = k
		}
		flop := 2 * float64(m) * float64(n) * float64(k)
		inner := max(1, int(2e8/flop)) // >= ~2 ms a timed run
		cpu := make([][]float64, len(ks))
		wall := make([][]float64, len(ks))
		for r := range reps + 1 { // round 0 warms up
			for i, kern := range ks {
				withKernel(kern, func() {
					t0, c0 := time.Now(), processCPU()
					for range inner {
						Sgemm(tA, tB, m, n, k, 1, a, lda, b, ldb, 0, c, n)
					}
					el, cel := time.Since(t0), processCPU()-c0
					if r > 0 && cel > 0 {
						wall[i] = append(wall[i], flop*float64(inner)/el.Seconds()/1e9)
						cpu[i] = append(cpu[i], flop*float64(inner)*float64(threads)/cel.Seconds()/1e9)
					}
				})
			}
		}
		for i, kern := range ks {
			if len(cpu[i]) == 0 {
				continue
			}
			slices.Sort(cpu[i])
			slices.Sort(wall[i])
			fmt.Printf("%-20s threads=%d %-7s by CPU time median %6.1f best %6.1f  by wall median %6.1f best %6.1f GFLOP/s\n",
				sh, threads, kern.name, cpu[i][len(cpu[i])/2], cpu[i][len(cpu[i])-1], wall[i][len(wall[i])/2], wall[i][len(wall[i])-1])
		}
	}
}
