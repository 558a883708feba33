package transform_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/cpuid"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// mode is one way of training compared with fp32.
type mode struct {
	name string
	s    setup
}

var (
	int8Compress = transform.Compression{To: transform.Int8, MinBytes: transform.DefaultMinBytes, Masks: true}
	bf16Compress = transform.Compression{To: transform.BF16, MinBytes: transform.DefaultMinBytes, Masks: true}
	modes        = []mode{
		{"fp32", setup{}},
		{"bf16-mixed", setup{precision: transform.BF16Mixed}},
		{"fp16-mixed", setup{precision: transform.FP16Mixed}},
		{"bf16-true", setup{precision: transform.BF16True}},
		{"fp32 + bf16 saved", setup{compress: bf16Compress}},
		{"fp32 + int8 saved", setup{compress: int8Compress}},
	}
)

// task is a small training problem: batches, a loss on held-out data.
type task struct {
	name  string
	spec  zoo.Spec
	batch func(step int) (x, y *tensor.Tensor)
	// eval returns the per-example (or per-token) losses and the accuracy
	// on held-out data.
	eval func(tr *train.Trainer) (losses []float64, acc float64)
	lr   float64
}

// trainRun is the record of one training run.
type trainRun struct {
	curve    []float64 // mean training loss over each window of steps
	losses   []float64 // held-out per-example losses
	testLoss float64
	acc      float64
	plan     train.MemoryPlan
	perStep  time.Duration
	skipped  int // steps the GradScaler skipped
}

func (tk task) train(t testing.TB, s setup, steps, window int, seed int64) trainRun {
	t.Helper()
	store := nn.NewStore()
	m := tk.spec.New(store.Root())
	dev := device.CPU()
	if err := store.Materialize(dev, seed); err != nil {
		t.Fatal(err)
	}
	defer store.Release()
	cfg := optim.AdamDefaults()
	cfg.LR = tk.lr
	opt, _ := optim.NewAdam(cfg)
	tr, err := train.New(dev, store, m, tk.spec.Loss, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	s.apply(tr)
	var r trainRun
	var sum float64
	start := time.Now()
	for i := 0; i < steps; i++ {
		x, y := tk.batch(i)
		if i == 0 {
			if r.plan, err = tr.Plan(trace.Meta{DType: x.DType, Shape: x.Shape}, trace.Meta{DType: y.DType, Shape: y.Shape}); err != nil {
				t.Fatal(err)
			}
		}
		l, err := tr.Step(context.Background(), x, y)
		if err != nil {
			t.Fatal(err)
		}
		sum += l
		if (i+1)%window == 0 {
			r.curve = append(r.curve, sum/float64(window))
			sum = 0
		}
	}
	r.perStep = time.Since(start) / time.Duration(steps)
	if tr.Scaler != nil {
		r.skipped = tr.Scaler.Skipped
	}
	r.losses, r.acc = tk.eval(tr)
	r.testLoss = mean(r.losses)
	return r
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// stderr is the standard error of the mean of v.
func stderr(v []float64) float64 {
	m := mean(v)
	var s float64
	for _, x := range v {
		s += (x - m) * (x - m)
	}
	return math.Sqrt(s / float64(len(v)-1) / float64(len(v)))
}

// crossEntropies returns -log softmax(logits)[y] per row, in float64.
func crossEntropies(logits *tensor.Tensor, y []int64) (losses []float64, correct int) {
	c := logits.Shape[len(logits.Shape)-1]
	l := logits.F32()
	for i, yi := range y {
		row := l[i*c : (i+1)*c]
		mx, arg := math.Inf(-1), 0
		for j, v := range row {
			if float64(v) > mx {
				mx, arg = float64(v), j
			}
		}
		var z float64
		for _, v := range row {
			z += math.Exp(float64(v) - mx)
		}
		losses = append(losses, math.Log(z)+mx-float64(row[yi]))
		if int64(arg) == yi {
			correct++
		}
	}
	return losses, correct
}

// fashionTask trains a zoo model on Fashion-MNIST: shuffled batches of
// batchSize, evaluated on the first evalN test examples.
func fashionTask(t testing.TB, model string, trainSet, testSet *dataset.Dataset, batchSize, evalN int, lr float64) task {
	sampler := dataset.Sampler{N: trainSet.Len(), BatchSize: batchSize, Shuffle: true, Seed: 1, DropLast: true}
	per := sampler.NumBatches()
	var order []int
	epoch := -1
	return task{
		name: model, spec: mustSpec(t, model), lr: lr,
		batch: func(step int) (*tensor.Tensor, *tensor.Tensor) {
			if e := step / per; e != epoch {
				epoch, order = e, sampler.Order(e)
			}
			k := step % per
			x, y, err := trainSet.Tensors(order[k*batchSize:(k+1)*batchSize], dataset.TrainMean, dataset.TrainStd)
			if err != nil {
				t.Fatal(err)
			}
			return x, y
		},
		eval: func(tr *train.Trainer) ([]float64, float64) {
			var losses []float64
			correct := 0
			for lo := 0; lo < evalN; lo += 250 {
				idx := make([]int, 0, 250)
				for i := lo; i < min(lo+250, evalN); i++ {
					idx = append(idx, i)
				}
				x, y, err := testSet.Tensors(idx, dataset.TrainMean, dataset.TrainStd)
				if err != nil {
					t.Fatal(err)
				}
				out, err := tr.Predict(context.Background(), x)
				if err != nil {
					t.Fatal(err)
				}
				l, c := crossEntropies(out, y.I64())
				losses = append(losses, l...)
				correct += c
			}
			return losses, float64(correct) / float64(evalN)
		},
	}
}

// Addition text: lines "a+b=c" with a, b uniform in [0, 1000), a
// reproducible, unbounded character corpus with structure a small GPT
// learns (the sum digits are predictable, the operands are not).
const additionVocab = "0123456789+=\n"

func additionText(r *rand.Rand, n int) []int64 {
	var b strings.Builder
	for b.Len() < n {
		a, c := r.Intn(1000), r.Intn(1000)
		fmt.Fprintf(&b, "%d+%d=%d\n", a, c, a+c)
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(strings.IndexByte(additionVocab, b.String()[i]))
	}
	return out
}

var tinyGPT = zoo.GPTConfig{NLayer: 2, NHead: 4, NEmbd: 64, BlockSize: 32, VocabSize: 16}

func gptTask(batchSize int, lr float64) task {
	spec := zoo.Spec{Name: "gpt-tiny", Loss: zoo.GPTLoss,
		New: func(b nn.Builder) train.Model { return zoo.NewGPT(b, tinyGPT) }}
	T := tinyGPT.BlockSize
	windows := func(r *rand.Rand, n int) (x, y *tensor.Tensor) {
		text := additionText(r, n*(T+1))
		x = tensor.New(tensor.Int64, tensor.Shape{n, T})
		y = tensor.New(tensor.Int64, tensor.Shape{n, T})
		for i := 0; i < n; i++ {
			copy(x.I64()[i*T:(i+1)*T], text[i*(T+1):i*(T+1)+T])
			copy(y.I64()[i*T:(i+1)*T], text[i*(T+1)+1:(i+1)*(T+1)])
		}
		return x, y
	}
	return task{
		name: "gpt-tiny", spec: spec, lr: lr,
		batch: func(step int) (*tensor.Tensor, *tensor.Tensor) {
			return windows(rand.New(rand.NewSource(int64(step)+1)), batchSize)
		},
		eval: func(tr *train.Trainer) ([]float64, float64) {
			x, y := windows(rand.New(rand.NewSource(-1)), 32)
			out, err := tr.Predict(context.Background(), x)
			if err != nil {
				panic(err)
			}
			l, c := crossEntropies(out, y.I64())
			return l, float64(c) / float64(len(l))
		},
	}
}

// A short Fashion-MNIST run (MLP, the embedded subset, 300 Adam steps of
// 32) under bf16-mixed and under int8 activation compression ends with a
// test loss close to fp32's: within two standard errors of fp32's test
// loss, the noise of measuring a loss on 500 test images. The threshold
// comes from the fp32 run alone; the runs are deterministic.
func TestShortTrainingMatchesFP32(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a few seconds")
	}
	trainSet, err := dataset.Load(dataset.Subset(), dataset.Embedded, dataset.Train)
	if err != nil {
		t.Fatal(err)
	}
	testSet, err := dataset.Load(dataset.Subset(), dataset.Embedded, dataset.Test)
	if err != nil {
		t.Fatal(err)
	}
	tk := fashionTask(t, "mlp", trainSet, testSet, 32, testSet.Len(), 1e-3)
	const steps = 300
	base := tk.train(t, setup{}, steps, 50, 1)
	tol := 2 * stderr(base.losses)
	t.Logf("fp32: test loss %.4f ± %.4f (2 SE), accuracy %.3f, training loss by 50 steps %.3f", base.testLoss, tol, base.acc, base.curve)
	if base.testLoss > 0.7 || base.curve[len(base.curve)-1] > 0.6*base.curve[0] {
		t.Fatalf("fp32 did not learn: test loss %.3f, training loss %.3f", base.testLoss, base.curve)
	}
	for _, m := range []mode{{"bf16-mixed", setup{precision: transform.BF16Mixed}}, {"int8", setup{compress: int8Compress}}} {
		r := tk.train(t, m.s, steps, 50, 1)
		t.Logf("%s: test loss %.4f (%+.4f), accuracy %.3f, training loss %.3f", m.name, r.testLoss, r.testLoss-base.testLoss, r.acc, r.curve)
		if d := math.Abs(r.testLoss - base.testLoss); d > tol {
			t.Errorf("%s: test loss %.4f differs from fp32's %.4f by %.4f, more than 2 standard errors (%.4f)", m.name, r.testLoss, base.testLoss, d, tol)
		}
	}
}

// TestPrecisionCurves writes docs/precision.md: loss curves of every mode
// on Fashion-MNIST (the CNN) and on a tiny GPT. It takes several minutes
// and runs only when HEADROOM_PRECISION_DOC names the file to write:
//
//	HEADROOM_PRECISION_DOC=$PWD/docs/precision.md go test ./transform -run TestPrecisionCurves -timeout 2h -v
func TestPrecisionCurves(t *testing.T) {
	out := os.Getenv("HEADROOM_PRECISION_DOC")
	if out == "" {
		t.Skip("set HEADROOM_PRECISION_DOC to write the loss-curve report")
	}
	trainSet, testSet, source, err := dataset.Open()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	report := func(tk task, steps, window int, what string) {
		fmt.Fprintf(&b, "### %s\n\n%s\n\n", tk.name, what)
		fmt.Fprintf(&b, "| mode |")
		for i := 1; i <= steps/window; i++ {
			fmt.Fprintf(&b, " %d |", i*window)
		}
		fmt.Fprintf(&b, " held-out loss | accuracy | activations at peak | time/step |\n|---|")
		for i := 0; i < steps/window+4; i++ {
			fmt.Fprintf(&b, "---:|")
		}
		b.WriteString("\n")
		var base trainRun
		row := func(name string, r trainRun) {
			fmt.Fprintf(&b, "| %s |", name)
			for _, l := range r.curve {
				fmt.Fprintf(&b, " %.3f |", l)
			}
			note := ""
			if r.skipped > 0 {
				note = fmt.Sprintf(" (%d steps skipped by the scaler)", r.skipped)
			}
			fmt.Fprintf(&b, " %.4f (%+.4f) | %.3f | %.1f MiB (%+.0f%%) | %.0f ms%s |\n", r.testLoss, r.testLoss-base.testLoss, r.acc,
				mib(r.plan.Activations), 100*(float64(r.plan.Activations)/float64(base.plan.Activations)-1), float64(r.perStep.Microseconds())/1000, note)
			t.Logf("%s %s done", tk.name, name)
		}
		for i, m := range modes {
			r := tk.train(t, m.s, steps, window, 1)
			if i == 0 {
				base = r
			}
			row(m.name, r)
		}
		// The spread between two fp32 runs that differ only in their
		// initialization is the yardstick for the differences above.
		row("fp32, another initialization", tk.train(t, setup{}, steps, window, 2))
		fmt.Fprintf(&b, "\nTwo standard errors of the fp32 held-out loss: %.4f.\n\n", 2*stderr(base.losses))
	}
	report(fashionTask(t, "cnn", trainSet, testSet, 64, 2000, 1e-3), 600, 100,
		fmt.Sprintf("zoo `cnn`, Adam (lr 1e-3), batch 64, 600 steps over shuffled training images (%s, %d images); held-out loss and accuracy on the first 2000 test images. Columns 100..600: mean training loss over the preceding 100 steps.", source, trainSet.Len()))
	report(gptTask(32, 3e-3), 2000, 250,
		fmt.Sprintf("zoo.NewGPT(%+v), Adam (lr 3e-3), batch 32 windows of %d characters of synthetic addition text (lines `a+b=c`, a and b uniform in [0, 1000), a fresh seed per step); held-out loss and next-character accuracy on 32 windows of unseen text. Columns: mean training loss over the preceding 250 steps.", tinyGPT, tinyGPT.BlockSize))
	// One step on a fixed random batch: gradient error against fp32.
	var ge strings.Builder
	ge.WriteString("| model | mode | loss (fp32) | gradient relative error, all parameters | worst parameter |\n|---|---|---|---:|---|\n")
	gptSpec := gptTask(4, 0).spec
	gptSpec.Example = func(n int) (trace.Meta, trace.Meta) {
		m := trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n, tinyGPT.BlockSize}}
		return m, m
	}
	for _, sp := range []struct {
		spec  zoo.Spec
		batch int
	}{{mustSpec(t, "cnn"), 32}, {mustSpec(t, "mlp"), 32}, {gptSpec, 8}} {
		base := step(t, sp.spec, sp.batch, setup{})
		for _, m := range modes[1:] {
			got := step(t, sp.spec, sp.batch, m.s)
			total, worst, name := relErr(got, base)
			fmt.Fprintf(&ge, "| %s | %s | %.5f (%.5f) | %.2g | %.2g (%s) |\n", sp.spec.Name, m.name, got.loss, base.loss, total, worst, name)
		}
	}
	// Planned activation memory of larger models (meta device).
	me := memoryTable(t)
	doc := `# Mixed precision and saved-activation compression: effect on training

Produced by

    HEADROOM_PRECISION_DOC=$PWD/docs/precision.md go test ./transform -run TestPrecisionCurves -timeout 2h -v

on the cpu device with ` + fmt.Sprint(parallel.Threads()) + ` threads. Every run starts from the same initialization (seed 1) and
sees the same batches; only the numerics differ, except the last row of each table, an fp32 run
from another initialization: the spread a change of seed causes, the yardstick for the others.
"activations at peak" is the planned activation memory of one step (train.Trainer.Plan), which
equals the measured peak. "fp32 + X saved" is fp32 training with saved activations stored as X (size threshold 4 KiB,
ReLU masks as bits). fp16-mixed runs with the GradScaler (initial scale 2^16). Times include the
low precision's rounding passes (and, on a CPU without AVX512-BF16, its float32 emulation);
they were taken on a shared machine and are indicative only (headroom bench --precision measures speed).
The same comparison plotted from two command-line runs (headroom train --log, rendered by
headroom report) is in [precision-runs.md](precision-runs.md).

` + b.String() + `
## Gradients of one step

One step on a fixed random batch from the same weights (learning rate 0), every parameter's
gradient compared with fp32's: ||g - g_fp32|| / ||g_fp32||. Compression of saved activations
changes only the backward pass (the loss is fp32's exactly); ReLU masks are exact (bits). Under
the low-precision modes, rounding also moves pre-activations across ReLU's kink and changes
max-pool winners, discrete changes that dominate the first layers' gradient error (fp16's 3 extra
bits make them rarer).

` + ge.String() + `
## Memory

Planned activation memory at the step's peak, kept current by TestPrecisionDocMemoryTable (the
training tables above are from the engine of their run; later changes such as fusion and
leaky ReLU's backward reading its output lowered some plans; train.Trainer.Plan on the meta device, and the cpu
runs measure the same). Under the low-precision modes matmuls, bf16 attention and bf16 conv weight
gradients read their 16-bit operands in place (transform.ReadLow: the kernel converts them as it
packs them); the emulation still holds transient float32 copies of the rounded operands of forward
and input-gradient convolutions and of 16-bit values that
elementwise ops read (a native bf16 kernel reads 2-byte copies), which the plan counts; saved
activations are stored in 16 bits.

` + me + `
## What each mode computes

The cpu kernels compute in float32. A value "in bf16" is a float32 tensor holding bfloat16
numbers, made by rounding (cast to bfloat16 and back, round-to-nearest-even). One exception:
on CPUs with AVX512-BF16 a matmul of two bfloat16 operands runs on a native VDPBF16PS kernel
(float32 accumulation, each pair of products added in the instruction's order, denormal inputs
as zero), which differs from the float32 product in the last bits; HEADROOM_BF16_NATIVE=0 turns
it off. The tables above were computed without it.

- fp32: the identity (transform.Autocast returns the graph it is given).
- bf16-mixed, fp16-mixed (PyTorch autocast): matmul, linear (with its bias, as one addmm),
  conv2d and attention round their operands and their outputs, computing in float32 between:
  what a low-precision kernel with float32 accumulation computes, up to summation order.
  Under the bf16 modes attention's products are bf16 products too: it rounds its probabilities
  (and in the backward the score gradients) to bf16 before multiplying, as PyTorch's autocast
  of the unfused attention (att @ v) and bf16 FlashAttention kernels do, and reads its
  operands in 16 bits.
  Softmax, log-softmax, layer and group norm, losses, exp/log/pow and forward reductions run in
  float32; batch norm returns its input's type; other ops run in their inputs' type (float32 if
  any floating input is float32). Parameters stay float32 (master weights) and are rounded where
  a low-precision op reads them. In the backward pass, gradients of low-precision values are
  rounded where a low-precision or float32 op reads them and where they reach a parameter's
  gradient, which is therefore a bf16 (fp16) number, as the upcast of a bf16 .grad would be;
  elementwise ops in between are not rounded after each step (at most a double rounding apart
  from PyTorch). fp16-mixed needs the GradScaler; Trainer.SetConfig installs one.
- bf16-true: every floating output rounded (normalization statistics and logsumexps, which bf16
  kernels keep in float32, excepted), inputs rounded, parameters and buffers rounded in place at
  the start of each step (so the optimizer's update is rounded as a bf16 parameter's would be).
  Adam's moments stay float32 and parameters and gradients still take 4 bytes in the store.
- Saved-activation storage (transform.Compress): bf16 (relative error <= 2^-9), fp16 (<= 2^-11 in
  its normal range, flush below 6e-8, overflow above 65504), int8 per channel (axis 1 of NCHW, the
  last axis otherwise; absolute error <= max|x_c|/254), bits for ReLU masks (exact), offload to a
  host pool (exact). In the mixed modes the saved low-precision values are stored in 16 bits
  losslessly.
`
	if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

// memoryTable is docs/precision.md's memory table, from the plans (meta
// device).
func memoryTable(t testing.TB) string {
	// As on a CPU without native bf16 convolutions, so that the table is
	// the same on every machine (CI's may lack AVX512-BF16).
	defer transform.SetConvPointwiseLow(transform.SetConvPointwiseLow("off"))
	var me strings.Builder
	me.WriteString("| model | batch | mode | activations at peak | change | total peak (parameters, gradients, Adam state, activations) |\n|---|---:|---|---:|---:|---:|\n")
	for _, c := range []struct {
		model string
		batch int
	}{{"cnn", 64}, {"resnet18", 8}, {"gpt-shakespeare-char", 8}, {"rrdbnet", 2}} {
		spec := mustSpec(t, c.model)
		base := planOnly(t, spec, c.batch, setup{})
		for _, m := range append(modes, mode{"bf16-mixed + int8 saved", setup{precision: transform.BF16Mixed, compress: int8Compress}},
			mode{"fp32 + offload saved", setup{compress: transform.Compression{To: transform.Offload, MinBytes: transform.DefaultMinBytes, Masks: true}}}) {
			got := planOnly(t, spec, c.batch, m.s)
			fmt.Fprintf(&me, "| %s | %d | %s | %.1f MiB | %+.0f%% | %.1f MiB |\n", c.model, c.batch, m.name, mib(got.Activations),
				100*(float64(got.Activations)/float64(base.Activations)-1), mib(got.Total()))
		}
	}
	return me.String()
}

// The memory table in docs/precision.md is what the plans give today (the
// rest of that file needs hours of training; this part is exact and cheap).
// HEADROOM_UPDATE_DOC=1 rewrites it.
func TestPrecisionDocMemoryTable(t *testing.T) {
	if !cpuid.X86.AVX2FMA() {
		// Plans include the kernels' workspaces, and the portable
		// kernels' differ (by 0.1 MiB on rrdbnet): the table is the
		// AVX2 and AVX-512 kernels' plans, which agree.
		t.Skip("docs/precision.md's memory table is of the plans for the AVX2 kernels; this build runs the portable ones (-tags purego, a CPU without AVX2 and FMA, or HEADROOM_MAX_ISA=none)")
	}
	const path = "../docs/precision.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, want := string(b), memoryTable(t)
	if strings.Contains(doc, want) {
		return
	}
	header := want[:strings.Index(want, "\n")+1]
	i := strings.Index(doc, header)
	if i < 0 {
		t.Fatalf("%s has no memory table", path)
	}
	j := i + strings.Index(doc[i:], "\n\n") + 1
	if os.Getenv("HEADROOM_UPDATE_DOC") != "" {
		if err := os.WriteFile(path, []byte(doc[:i]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the memory table is stale; HEADROOM_UPDATE_DOC=1 go test ./transform -run TestPrecisionDocMemoryTable rewrites it. Now:\n%s", path, want)
}
