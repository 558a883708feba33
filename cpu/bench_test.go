package cpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/internal/cputime"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// kernelCase is one node ready to run: its op applied to inputs of the
// given metas, with random float data, output buffers and workspace.
type kernelCase struct {
	n       *trace.Node
	in, out []*tensor.Tensor
	ws      []byte
}

func newKernelCase(tb testing.TB, o trace.Op, metas ...trace.Meta) *kernelCase {
	tb.Helper()
	g := trace.New()
	var y *trace.Tensor
	err := trace.Capture(func() {
		var xs []*trace.Tensor
		for i, m := range metas {
			xs = append(xs, g.Input(fmt.Sprintf("x%d", i), m.DType, m.Shape))
		}
		y = g.Apply(o, xs...)[0]
	})
	if err != nil {
		tb.Fatal(err)
	}
	k := &kernelCase{n: y.Node}
	r := rand.New(rand.NewPCG(1, 2))
	for _, m := range metas {
		t := tensor.New(m.DType, m.Shape)
		switch m.DType {
		case tensor.Float32:
			for i := range t.F32() {
				t.F32()[i] = float32(r.NormFloat64())
			}
		case tensor.Float64:
			for i := range t.F64() {
				t.F64()[i] = r.NormFloat64()
			}
		}
		k.in = append(k.in, t)
	}
	for _, t := range k.n.Outputs {
		k.out = append(k.out, tensor.New(t.DType(), t.Shape()))
	}
	k.ws = make([]byte, Workspace(k.n))
	return k
}

func (k *kernelCase) run(tb testing.TB) {
	if err := Run(k.n, k.in, k.out, k.ws); err != nil {
		tb.Fatal(err)
	}
}

// cpuTime is the CPU time this process has used (all threads). On a
// machine shared with other work it measures a kernel's cost more steadily
// than wall time.
func cpuTime() time.Duration { return cputime.Process() }

// benchKernel runs k b.N times and reports GFLOPS (wall time) and the CPU
// time per run.
func benchKernel(b *testing.B, k *kernelCase, flops float64) {
	k.run(b)
	b.ResetTimer()
	c0 := cpuTime()
	for range b.N {
		k.run(b)
	}
	cpu := cpuTime() - c0
	if flops > 0 {
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
	}
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(len(k.ws))/(1<<20), "ws_MiB")
}

func f32(shape ...int) trace.Meta {
	return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape(shape)}
}

// convShapes are convolutions of the standard workloads (internal/bench).
var convShapes = []struct {
	name                 string
	n, c, h, w, k, ks, s int
}{
	{"r18_conv1", 32, 3, 64, 64, 64, 7, 2},
	{"r18_l1", 32, 64, 16, 16, 64, 3, 1},
	{"r18_l2_s2", 32, 64, 16, 16, 128, 3, 2},
	{"r18_l2", 32, 128, 8, 8, 128, 3, 1},
	{"r18_l3_s2", 32, 128, 8, 8, 256, 3, 2},
	{"r18_l3", 32, 256, 4, 4, 256, 3, 1},
	{"r18_l4_s2", 32, 256, 4, 4, 512, 3, 2},
	{"r18_ds2_1x1", 32, 64, 16, 16, 128, 1, 2},
	{"r18_l4", 32, 512, 2, 2, 512, 3, 1},
	{"r152_l1_1x1", 8, 256, 32, 32, 64, 1, 1},
	{"r152_l1_3x3", 8, 64, 32, 32, 64, 3, 1},
	{"r152_l3_1x1", 8, 1024, 8, 8, 256, 1, 1},
	{"r152_l3_3x3", 8, 256, 8, 8, 256, 3, 1},
	{"r152_l4_1x1", 8, 512, 4, 4, 2048, 1, 1},
	{"r152_l3_1x1up", 8, 256, 8, 8, 1024, 1, 1},
	{"r152_l1_1x1up", 8, 64, 32, 32, 256, 1, 1},
	{"r152_l1_1x1sq", 8, 64, 32, 32, 64, 1, 1},
	{"r152_l2_1x1", 8, 512, 16, 16, 128, 1, 1},
	{"r152_l2_1x1up", 8, 128, 16, 16, 512, 1, 1},
	{"r152_l2_3x3", 8, 128, 16, 16, 128, 3, 1},
	{"r152_l4_1x1dn", 8, 2048, 4, 4, 512, 1, 1},
	{"r152_l4_3x3", 8, 512, 4, 4, 512, 3, 1},
	{"r152_conv1", 8, 3, 128, 128, 64, 7, 2},
	{"r152_l2_3x3s2", 8, 128, 32, 32, 128, 3, 2},
	{"r152_l3_3x3s2", 8, 256, 16, 16, 256, 3, 2},
	{"r152_l4_3x3s2", 8, 512, 8, 8, 512, 3, 2},
	{"r152_l2_ds", 8, 256, 32, 32, 512, 1, 2},
	{"r152_l3_ds", 8, 512, 16, 16, 1024, 1, 2},
	{"r152_l4_ds", 8, 1024, 8, 8, 2048, 1, 2},
	{"rrdb_c1", 4, 64, 32, 32, 32, 3, 1},
	{"rrdb_c5", 4, 192, 32, 32, 64, 3, 1},
	{"rrdb_hr", 4, 64, 128, 128, 64, 3, 1},
}

// BenchmarkConv measures the three convolution kernels on the standard
// workloads' shapes (GFLOPS counts 2 flops per multiply-add).
func BenchmarkConv(b *testing.B) {
	for _, s := range convShapes {
		opts := op.ConvOpts{Stride: [2]int{s.s, s.s}, Padding: [2]int{s.ks / 2, s.ks / 2}}
		g, err := prim.ConvGeometry(tensor.Shape{s.n, s.c, s.h, s.w}, tensor.Shape{s.k, s.c, s.ks, s.ks}, opts)
		if err != nil {
			b.Fatal(err)
		}
		flops := 2 * float64(g.N*g.K*g.OH*g.OW) * float64(g.ColRows())
		x, w, y := f32(s.n, s.c, s.h, s.w), f32(s.k, s.c, s.ks, s.ks), f32(g.N, g.K, g.OH, g.OW)
		cases := []struct {
			name string
			k    func() *kernelCase
		}{
			{"fwd", func() *kernelCase { return newKernelCase(b, &prim.Conv2dOp{Opts: opts}, x, w) }},
			{"bwd_input", func() *kernelCase {
				return newKernelCase(b, &prim.Conv2dBackwardInput{Opts: opts, InputShape: x.Shape}, y, w)
			}},
			{"bwd_weight", func() *kernelCase {
				return newKernelCase(b, &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape}, y, x)
			}},
		}
		for _, c := range cases {
			b.Run(s.name+"/"+c.name, func(b *testing.B) {
				benchKernel(b, c.k(), flops)
			})
		}
	}
}

// BenchmarkConvThreads measures the convolutions of resnet152's stages 3
// and 4 (the bulk of its step) on one and two threads: cpu-ms/op is the
// cost on a shared machine, where wall time is not.
func BenchmarkConvThreads(b *testing.B) {
	for _, threads := range []int{1, 2} {
		for _, s := range convShapes {
			if !strings.HasPrefix(s.name, "r152_l3") && !strings.HasPrefix(s.name, "r152_l4") {
				continue
			}
			opts := op.ConvOpts{Stride: [2]int{s.s, s.s}, Padding: [2]int{s.ks / 2, s.ks / 2}}
			g, err := prim.ConvGeometry(tensor.Shape{s.n, s.c, s.h, s.w}, tensor.Shape{s.k, s.c, s.ks, s.ks}, opts)
			if err != nil {
				b.Fatal(err)
			}
			flops := 2 * float64(g.N*g.K*g.OH*g.OW) * float64(g.ColRows())
			x, w, y := f32(s.n, s.c, s.h, s.w), f32(s.k, s.c, s.ks, s.ks), f32(g.N, g.K, g.OH, g.OW)
			for _, c := range []struct {
				name string
				o    trace.Op
				in   []trace.Meta
			}{
				{"fwd", &prim.Conv2dOp{Opts: opts}, []trace.Meta{x, w}},
				{"bwd_input", &prim.Conv2dBackwardInput{Opts: opts, InputShape: x.Shape}, []trace.Meta{y, w}},
				{"bwd_weight", &prim.Conv2dBackwardWeight{Opts: opts, WeightShape: w.Shape}, []trace.Meta{y, x}},
			} {
				b.Run(fmt.Sprintf("t%d/%s/%s", threads, s.name, c.name), func(b *testing.B) {
					old := parallel.SetThreads(threads)
					defer parallel.SetThreads(old)
					benchKernel(b, newKernelCase(b, c.o, c.in...), flops)
				})
			}
		}
	}
}

// BenchmarkElementwise measures elementwise kernels on a GPT-sized
// activation (8×256×1536 float32).
func BenchmarkElementwise(b *testing.B) {
	x := f32(8, 256, 1536)
	n := float64(x.Shape.NumElements())
	for _, c := range []struct {
		name string
		op   trace.Op
		in   []trace.Meta
	}{
		{"gelu", &prim.Unary{Kind: prim.GELUKind}, []trace.Meta{x}},
		{"gelu_backward", &prim.UnaryBackward{Kind: prim.GELUKind}, []trace.Meta{x, x}},
		{"relu", &prim.Unary{Kind: prim.ReLUKind}, []trace.Meta{x}},
		{"add", &prim.Binary{Kind: prim.AddKind}, []trace.Meta{x, x}},
		{"add_bias", &prim.Binary{Kind: prim.AddKind}, []trace.Meta{x, f32(1536)}},
		{"sum_rows", &prim.Reduce{Kind: prim.SumKind, Axes: []int{0, 1}}, []trace.Meta{x}},
	} {
		b.Run(c.name, func(b *testing.B) {
			k := newKernelCase(b, c.op, c.in...)
			benchKernel(b, k, 0)
			b.ReportMetric(n*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}

// BenchmarkNorm measures batch norm on ResNet-152's first stage (8×256×32×32)
// and layer norm on GPT's activations (2048×384).
func BenchmarkNorm(b *testing.B) {
	x, c := f32(8, 256, 32, 32), f32(256)
	ln, lc := f32(8, 256, 384), f32(384)
	rows := f32(8, 256, 1)
	for _, tc := range []struct {
		name string
		op   trace.Op
		in   []trace.Meta
	}{
		{"batch_norm", &prim.BatchNormOp{Training: true, Eps: 1e-5, HasWeight: true, HasBias: true}, []trace.Meta{x, c, c}},
		{"batch_norm_backward", &prim.BatchNormBackward{Training: true, HasWeight: true, HasBias: true}, []trace.Meta{x, x, c, c, c}},
		{"layer_norm", &prim.LayerNormOp{Dims: 1, Eps: 1e-5, HasWeight: true, HasBias: true}, []trace.Meta{ln, lc, lc}},
		{"layer_norm_backward", &prim.LayerNormBackward{Dims: 1, HasWeight: true, HasBias: true}, []trace.Meta{ln, ln, rows, rows, lc}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			k := newKernelCase(b, tc.op, tc.in...)
			if tc.name == "batch_norm_backward" || tc.name == "layer_norm_backward" {
				// invstd must be positive; the mean anything.
				for i, v := range k.in[3].F32() {
					k.in[3].F32()[i] = 1 + v*v
				}
			}
			benchKernel(b, k, 0)
		})
	}
}

// BenchmarkPool measures max pooling on resnet18's stem output
// (32×64×32×32, 3x3 stride 2, padding 1).
func BenchmarkPool(b *testing.B) {
	x := f32(32, 64, 32, 32)
	opts := prim.PoolOpts{Kernel: [2]int{3, 3}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}
	b.Run("max_pool2d", func(b *testing.B) {
		benchKernel(b, newKernelCase(b, &prim.MaxPool2dOp{Opts: opts}, x), 0)
	})
}
