package cpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// TestConvPwPerfReport times ResNet-152's mixed pointwise convolutions
// (bf16 operands) on the pointwise path against what runs without it
// (the default native/widened choice), interleaved (each path once in
// turn, reps rounds) so that a shared machine's load falls on both
// alike: medians of wall time and of the process's CPU time. It runs
// only where HEADROOM_CONV_PERF is set (to the rounds); the threads are
// the package's default ($HEADROOM_THREADS or the CPUs).
//
//	HEADROOM_CONV_PERF=9 go test -run ConvPwPerfReport -v ./cpu
func TestConvPwPerfReport(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("HEADROOM_CONV_PERF"))
	if reps <= 0 {
		t.Skip("set HEADROOM_CONV_PERF=<rounds> to measure")
	}
	defer func(on int) { convPwBF16On = on }(convPwBF16On)
	for _, s := range convShapes {
		if !strings.HasPrefix(s.name, "r152_") || !strings.Contains(s.name, "_1x1") || s.s != 1 {
			continue
		}
		opts := op.ConvOpts{}
		x, w, y := bf16m(s.n, s.c, s.h, s.w), bf16m(s.k, s.c, 1, 1), bf16m(s.n, s.k, s.h, s.w)
		flops := 2 * float64(s.n*s.k*s.h*s.w) * float64(s.c)
		for _, c := range []struct {
			name string
			o    trace.Op
			in   []trace.Meta
		}{
			{"fwd", &prim.Conv2dOp{Opts: opts, Mixed: true}, []trace.Meta{x, w}},
			{"bwd_input", &prim.Conv2dBackwardInput{Opts: opts, InputShape: x.Shape, Mixed: true}, []trace.Meta{y, w}},
			{"bwd_weight", &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape, Mixed: true}, []trace.Meta{y, x}},
		} {
			k := newKernelCase(t, c.o, c.in...)
			r := rand.New(rand.NewPCG(3, 4))
			for _, in := range k.in {
				copy(in.U16(), randBF16Vals(r, len(in.U16())))
			}
			inner := max(1, int(3e9/flops))
			var wall, cpu [2][]float64
			for rep := -1; rep < reps; rep++ {
				for pi, on := range []int{0, convBF16Fwd | convBF16Bwi | convBF16Bww} {
					convPwBF16On = on
					t0, c0 := time.Now(), cpuTime()
					for range inner {
						k.run(t)
					}
					if rep < 0 {
						continue
					}
					wall[pi] = append(wall[pi], time.Since(t0).Seconds()*1e3/float64(inner))
					cpu[pi] = append(cpu[pi], (cpuTime()-c0).Seconds()*1e3/float64(inner))
				}
			}
			med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
			w0, w1, c0, c1 := med(wall[0]), med(wall[1]), med(cpu[0]), med(cpu[1])
			fmt.Printf("%-14s %-10s before wall %6.3f ms (%5.1f GFLOP/s) cpu %6.3f ms | pointwise wall %6.3f ms (%5.1f GFLOP/s) cpu %6.3f ms | x%.2f wall x%.2f cpu\n",
				s.name, c.name, w0, flops/w0/1e6, c0, w1, flops/w1/1e6, c1, w0/w1, c0/c1)
		}
	}
}
