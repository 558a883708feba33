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

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// TestConvColPerfReport times ResNet-18's (64x64 input, batch 32) and
// rrdbnet's general convolutions on bf16 operands, mixed, on each path
// that can run them: the default choice (convBF16PathOf), the float32
// kernels on the widened values (Winograd where it has a plan), and the
// native ones (im2col, flipped, tiled), interleaved (each once in turn,
// reps rounds) so that a shared machine's load falls on all alike: min
// and median of wall time, median of the process's CPU time. It runs only
// where HEADROOM_CONV_PERF is set (to the rounds); the threads are the
// package's default. $HEADROOM_CONV_PERF_SHAPES (names, comma-separated)
// picks shapes; $HEADROOM_CONV_PERF_GROUPS (bytes, comma-separated) runs
// the im2col paths at each group size (convColGroupBytes).
//
//	HEADROOM_CONV_PERF=7 go test -run ConvColPerfReport -v ./cpu
func TestConvColPerfReport(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("HEADROOM_CONV_PERF"))
	if reps <= 0 {
		t.Skip("set HEADROOM_CONV_PERF=<rounds> to measure")
	}
	if _, ok := blas.NativeBF16Tile(); !ok {
		t.Skip("no native bf16 products on this CPU")
	}
	defer func(b int) { convColGroupBytes = b }(convColGroupBytes)
	defer func() { convPathHook = nil }()
	defGroup := convColGroupBytes
	groups := []int{defGroup}
	if v := os.Getenv("HEADROOM_CONV_PERF_GROUPS"); v != "" {
		groups = nil
		for _, f := range strings.Split(v, ",") {
			b, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			groups = append(groups, b)
		}
	}
	names := os.Getenv("HEADROOM_CONV_PERF_SHAPES")
	only := os.Getenv("HEADROOM_CONV_PERF_OPS") // fwd, bwd_input, bwd_weight
	// rrdbnet's layers also at batch 2, where the float32 Winograd
	// kernels have no plan for some.
	shapes := append(convShapes[:len(convShapes):len(convShapes)], []struct {
		name                 string
		n, c, h, w, k, ks, s int
	}{{"rrdb_c1_b2", 2, 64, 32, 32, 32, 3, 1}, {"rrdb_c5_b2", 2, 192, 32, 32, 64, 3, 1}}...)
	for _, s := range shapes {
		if names != "" && !slices.Contains(strings.Split(names, ","), s.name) {
			continue
		}
		if names == "" && !strings.HasPrefix(s.name, "r18_") && !strings.HasPrefix(s.name, "rrdb_c") {
			continue
		}
		opts := op.ConvOpts{Stride: [2]int{s.s, s.s}, Padding: [2]int{s.ks / 2, s.ks / 2}}
		xs, ws := tensor.Shape{s.n, s.c, s.h, s.w}, tensor.Shape{s.k, s.c, s.ks, s.ks}
		g, err := prim.ConvGeometry(xs, ws, opts.Normalized())
		if err != nil {
			t.Fatal(err)
		}
		x, w, y := bf16m(s.n, s.c, s.h, s.w), bf16m(s.k, s.c, s.ks, s.ks), bf16m(g.N, g.K, g.OH, g.OW)
		flops := 2 * float64(g.N*g.K*g.OH*g.OW) * float64(g.ColRows())
		for _, c := range []struct {
			name string
			o    trace.Op
			in   []trace.Meta
		}{
			{"fwd", &prim.Conv2dOp{Opts: opts, Mixed: true}, []trace.Meta{x, w}},
			{"bwd_input", &prim.Conv2dBackwardInput{Opts: opts, InputShape: xs, Mixed: true}, []trace.Meta{y, w}},
			{"bwd_weight", &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: ws, Mixed: true}, []trace.Meta{y, x}},
		} {
			if only != "" && !slices.Contains(strings.Split(only, ","), c.name) {
				continue
			}
			type variant struct {
				name  string
				path  convBF16Path
				force bool // else the default choice
				group int
				k     *kernelCase
			}
			convPathHook, convColGroupBytes = nil, defGroup
			def := convBF16PathOf(c.o, g)
			vs := []variant{{name: "default(" + convPathName(c.o, g, def) + ")", path: def}, {name: convPathName(c.o, g, convPathWiden), path: convPathWiden, force: true}}
			paths := []convBF16Path{convPathCol}
			switch c.o.(type) {
			case *prim.Conv2dBackwardInput:
				if _, flip := convInputGeom(g); flip && g.SH == 1 && g.SW == 1 {
					paths = append(paths, convPathFlip)
				}
			case *prim.Conv2dBackwardWeight:
				if convWgradTiled(g) {
					paths = append(paths, convPathTiled)
				}
			}
			for _, p := range paths {
				if p == convPathTiled {
					vs = append(vs, variant{name: "tiled", path: p, force: true})
					continue
				}
				for _, gb := range groups {
					vs = append(vs, variant{name: fmt.Sprintf("%s/%dK", convPathName(c.o, g, p), gb>>10), path: p, force: true, group: gb})
				}
			}
			use := func(v variant) {
				convPathHook, convColGroupBytes = nil, defGroup
				if v.force {
					convPathHook = func(trace.Op, prim.ConvGeom) (convBF16Path, bool) { return v.path, true }
				}
				if v.group > 0 {
					convColGroupBytes = v.group
				}
			}
			for i := range vs {
				use(vs[i])
				vs[i].k = newKernelCase(t, c.o, c.in...)
				r := rand.New(rand.NewPCG(3, 4))
				for _, in := range vs[i].k.in {
					copy(in.U16(), randBF16Vals(r, len(in.U16())))
				}
			}
			inner := max(1, int(1e9/flops))
			wall := make([][]float64, len(vs))
			cpu := make([][]float64, len(vs))
			for rep := -1; rep < reps; rep++ {
				for i, v := range vs {
					use(v)
					t0, c0 := time.Now(), cpuTime()
					for range inner {
						v.k.run(t)
					}
					if rep < 0 {
						continue
					}
					wall[i] = append(wall[i], time.Since(t0).Seconds()*1e3/float64(inner))
					cpu[i] = append(cpu[i], (cpuTime()-c0).Seconds()*1e3/float64(inner))
				}
			}
			med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
			base := med(wall[0])
			for i, v := range vs {
				wmed := med(wall[i])
				fmt.Printf("%-10s %-10s %-22s wall min %7.3f med %7.3f ms (%5.1f GFLOP/s) cpu med %7.3f ms  default/this x%.2f\n",
					s.name, c.name, v.name, wall[i][0], wmed, flops/wmed/1e6, med(cpu[i]), base/wmed)
			}
		}
	}
}

// convPathName names path p of op for g in reports; for the widened path,
// which float32 kernel runs.
func convPathName(o trace.Op, g prim.ConvGeom, p convBF16Path) string {
	switch p {
	case convPathTiled:
		return "tiled"
	case convPathFlip:
		return "flip"
	case convPathCol:
		if _, ok := o.(*prim.Conv2dBackwardInput); ok {
			return "col2im"
		}
		return "im2col"
	}
	wino := false
	switch o.(type) {
	case *prim.Conv2dOp:
		_, wino = winogradFor(g)
	case *prim.Conv2dBackwardInput:
		_, wino = winogradInputGrad(g)
	case *prim.Conv2dBackwardWeight:
		_, wino = winogradWgrad(g)
	}
	if wino {
		return "f32wino"
	}
	return "f32"
}
