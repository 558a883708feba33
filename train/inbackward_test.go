package train_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/plan"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// ibModel is a model for the optimizer-in-backward tests: how to build it
// and a batch generator.
type ibModel struct {
	name  string
	build func(*nn.Store) (train.Model, train.LossFunc)
	batch func(r *rand.Rand) train.Batch
	remat train.Recompute
}

// randBatch is testkit.Batch as the train.Batch these tests pass around.
func randBatch(r *rand.Rand, x, y trace.Meta, bound int) train.Batch {
	xt, yt := testkit.Batch(r, x, y, bound)
	return train.Batch{X: xt, Y: yt}
}

// checkpointed is an MLP whose hidden layers run in checkpoint regions,
// with one weight used twice (first and last hidden layer), so that a
// recomputation re-reads a weight whose gradient is not yet final.
type checkpointed struct {
	in, tied, mid, out *nn.Linear
}

func (m *checkpointed) Forward(x *trace.Tensor) *trace.Tensor {
	h := m.in.Forward(x)
	h = nn.CheckpointSequential(h, 3,
		func(h *trace.Tensor) *trace.Tensor { return op.GELU(m.tied.Forward(h), "none") },
		func(h *trace.Tensor) *trace.Tensor { return op.GELU(m.mid.Forward(h), "none") },
		func(h *trace.Tensor) *trace.Tensor { return op.GELU(m.tied.Forward(h), "none") },
	)
	return m.out.Forward(h)
}

// weightFirst multiplies by its last weight from the left (W @ h^T): the
// matrix product's backward makes W's gradient before the input gradient,
// which reads W, so W's gradient is final before W's last read.
type weightFirst struct {
	in *nn.Linear
	w  *nn.Param
}

func (m *weightFirst) Forward(x *trace.Tensor) *trace.Tensor {
	h := op.ReLU(m.in.Forward(x))
	return op.MatMulT(m.w.T(x.Graph()), h, false, true)
}

func ibModels() []ibModel {
	spec := func(name string) zoo.Spec { s, _ := zoo.Lookup(name); return s }
	mlp, cnn := spec("mlp"), spec("cnn")
	tinyGPT := func(dropout float64) func(*nn.Store) (train.Model, train.LossFunc) {
		return func(s *nn.Store) (train.Model, train.LossFunc) {
			return zoo.NewGPT(s.Root(), zoo.GPTConfig{NLayer: 2, NHead: 2, NEmbd: 32, BlockSize: 16, VocabSize: 65, Dropout: dropout}), zoo.GPTLoss
		}
	}
	tokens := trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{3, 16}}
	gptBatch := func(r *rand.Rand) train.Batch { return randBatch(r, tokens, tokens, 65) }
	mx, my := mlp.Example(8)
	cx, cy := cnn.Example(4)
	return []ibModel{
		{name: "mlp", build: testkit.Build(mlp), batch: func(r *rand.Rand) train.Batch { return randBatch(r, mx, my, 10) }},
		{name: "cnn", build: testkit.Build(cnn), batch: func(r *rand.Rand) train.Batch { return randBatch(r, cx, cy, 10) }},
		{name: "cnn-selective", build: testkit.Build(cnn), batch: func(r *rand.Rand) train.Batch { return randBatch(r, cx, cy, 10) }, remat: train.Selective},
		{name: "gpt", build: tinyGPT(0), batch: gptBatch},
		{name: "gpt-dropout", build: tinyGPT(0.2), batch: gptBatch},
		{name: "gpt-selective", build: tinyGPT(0), batch: gptBatch, remat: train.Selective},
		{name: "weight-first", build: func(s *nn.Store) (train.Model, train.LossFunc) {
			b := s.Root()
			w := b.Param("w", tensor.Shape{5, 16}, func(r *rand.Rand, t *tensor.Tensor) {
				for i := range t.F32() {
					t.F32()[i] = float32(r.NormFloat64()) / 4
				}
			})
			return &weightFirst{in: nn.NewLinear(b.Sub("in"), 8, 16, true), w: w}, sse
		}, batch: func(r *rand.Rand) train.Batch {
			return randBatch(r, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{6, 8}}, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{5, 6}}, 0)
		}},
		{name: "checkpointed-tied", build: func(s *nn.Store) (train.Model, train.LossFunc) {
			b := s.Root()
			return &checkpointed{in: nn.NewLinear(b.Sub("in"), 8, 16, true), tied: nn.NewLinear(b.Sub("tied"), 16, 16, true),
				mid: nn.NewLinear(b.Sub("mid"), 16, 16, false), out: nn.NewLinear(b.Sub("out"), 16, 5, true)}, zoo.CrossEntropyLoss
		}, batch: func(r *rand.Rand) train.Batch {
			return randBatch(r, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{6, 8}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{6}}, 5)
		}, remat: train.Regions},
	}
}

var ibOptimizers = []struct {
	name string
	make func() optim.Optimizer
}{
	{"sgd-momentum", func() optim.Optimizer {
		o, _ := optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3})
		return o
	}},
	{"sgd-nesterov", func() optim.Optimizer {
		o, _ := optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true})
		return o
	}},
	{"adam", func() optim.Optimizer {
		c := optim.AdamDefaults()
		c.WeightDecay = 1e-2
		o, _ := optim.NewAdam(c)
		return o
	}},
	{"adamw", func() optim.Optimizer { o, _ := optim.NewAdamW(optim.AdamWDefaults()); return o }},
	{"adamw-amsgrad", func() optim.Optimizer {
		c := optim.AdamWDefaults()
		c.AMSGrad = true
		o, _ := optim.NewAdamW(c)
		return o
	}},
}

// trainSteps trains a fresh model steps steps and returns the trainer
// (closed by the test's cleanup) and the losses.
func trainSteps(t *testing.T, m ibModel, opt optim.Optimizer, inBackward bool, steps int, sched optim.Scheduler) (*train.Trainer, []float64) {
	return trainStepsConfig(t, m, opt, train.Config{OptimizerInBackward: inBackward}, steps, sched)
}

// trainStepsConfig is trainSteps under cfg (with the model's recomputation).
func trainStepsConfig(t *testing.T, m ibModel, opt optim.Optimizer, cfg train.Config, steps int, sched optim.Scheduler) (*train.Trainer, []float64) {
	t.Helper()
	cfg.Recompute = m.remat
	tr, err := train.SetupConfig(device.CPU(), 3, m.build, opt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	r := rand.New(rand.NewSource(11))
	var losses []float64
	for i := 0; i < steps; i++ {
		b := m.batch(r)
		l, err := tr.Step(context.Background(), b.X, b.Y)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		losses = append(losses, l)
		if sched != nil {
			sched.Step()
		}
	}
	return tr, losses
}

// sameBits reports the first element where a and b differ in their bits.
func sameBits(a, b []float32) (int, bool) {
	if len(a) != len(b) {
		return -1, false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return 0, true
}

// With the optimizer in the backward pass, parameters, optimizer state and
// losses after several steps are bit for bit those of the usual step: the
// same update code on the same gradients, each update after every read of
// the old value (a layer's input gradient, a tied weight's second use, a
// recomputation), for SGD with momentum and Adam/AdamW, with batch norm,
// tied weights, dropout and rematerialization.
func TestOptimizerInBackwardMatchesUsualStep(t *testing.T) {
	const steps = 3
	for _, m := range ibModels() {
		for _, o := range ibOptimizers {
			if testing.Short() && m.name != "gpt" && m.name != "mlp" {
				continue
			}
			t.Run(m.name+"/"+o.name, func(t *testing.T) {
				usual, lu := trainSteps(t, m, o.make(), false, steps, nil)
				fused, lf := trainSteps(t, m, o.make(), true, steps, nil)
				sameInBackward(t, usual, fused, lu, lf)
			})
		}
	}
}

// Under bf16-mixed and bf16-true too: the update reads each gradient
// rounded as the usual step rounds it into its gradient buffer.
func TestOptimizerInBackwardLowPrecision(t *testing.T) {
	const steps = 3
	for _, p := range []transform.Precision{transform.BF16Mixed, transform.BF16True} {
		for _, m := range ibModels() {
			if testing.Short() && m.name != "gpt" && m.name != "mlp" && m.name != "cnn" {
				continue
			}
			t.Run(p.String()+"/"+m.name, func(t *testing.T) {
				o := ibOptimizers[len(ibOptimizers)-2] // adamw
				usual, lu := trainStepsConfig(t, m, o.make(), train.Config{Precision: p, GradientBuffers: true}, steps, nil)
				fused, lf := trainStepsConfig(t, m, o.make(), train.Config{Precision: p, OptimizerInBackward: true}, steps, nil)
				sameInBackward(t, usual, fused, lu, lf)
			})
		}
	}
}

// sameInBackward checks that the trainer that ran the optimizer in the
// backward pass (losses lf) matches the usual one (lu) bit for bit and
// holds no gradient buffer.
func sameInBackward(t *testing.T, usual, fused *train.Trainer, lu, lf []float64) {
	t.Helper()
	if fused.Splits != 0 || fused.CheckOptimizerInBackward(1) != nil {
		t.Fatalf("the in-backward step did not apply: %v", fused.CheckOptimizerInBackward(1))
	}
	sameTraining(t, "in backward", usual, fused, lu, lf)
	for _, p := range fused.Store.Trainable() {
		if p.Grad != nil {
			t.Errorf("%s: a gradient buffer is held in backward mode", p.Name)
		}
	}
}

// sameTraining checks that trainer b (losses lb, trained the way what
// says) matches the usual trainer a (la) bit for bit: losses, parameters,
// optimizer state and loss scale.
func sameTraining(t *testing.T, what string, a, b *train.Trainer, la, lb []float64) {
	t.Helper()
	for i := range la {
		if la[i] != lb[i] {
			t.Errorf("step %d: loss %v %s, %v usual", i, lb[i], what, la[i])
		}
	}
	for i, p := range a.Store.Trainable() {
		q := b.Store.Trainable()[i]
		if k, ok := sameBits(q.Value.F32(), p.Value.F32()); !ok {
			t.Errorf("%s differs at %d: %v %s, %v usual", p.Name, k, q.Value.F32()[k], what, p.Value.F32()[k])
		}
	}
	sa, sb := a.Opt.State(), b.Opt.State()
	if len(sa) != len(sb) || len(sa) == 0 {
		t.Fatalf("optimizer state for %d parameters %s, %d usual", len(sb), what, len(sa))
	}
	for name, bufs := range sa {
		for k, v := range bufs {
			if i, ok := sameBits(sb[name][k], v); !ok {
				t.Errorf("%s %s differs at %d", name, k, i)
			}
		}
	}
	if (a.Scaler == nil) != (b.Scaler == nil) || a.Scaler != nil && b.Scaler.Scale != a.Scaler.Scale {
		t.Errorf("loss scaler %v %s, %v usual", b.Scaler, what, a.Scaler)
	}
}

// A learning-rate schedule stepped between steps acts on the updates inside
// the next step exactly as on the usual step.
func TestOptimizerInBackwardFollowsLRSchedule(t *testing.T) {
	m := ibModels()[0]
	run := func(inBackward bool) *train.Trainer {
		opt, _ := optim.NewAdam(optim.AdamDefaults())
		sched, err := optim.NewStepLR(opt, 1, 0.5)
		if err != nil {
			t.Fatal(err)
		}
		tr, _ := trainSteps(t, m, opt, inBackward, 3, sched)
		return tr
	}
	usual, fused := run(false), run(true)
	if usual.Opt.LR() != fused.Opt.LR() || usual.Opt.LR() >= optim.AdamDefaults().LR {
		t.Fatalf("learning rate %v in backward, %v usual", fused.Opt.LR(), usual.Opt.LR())
	}
	for i, p := range usual.Store.Trainable() {
		if k, ok := sameBits(fused.Store.Trainable()[i].Value.F32(), p.Value.F32()); !ok {
			t.Errorf("%s differs at %d", p.Name, k)
		}
	}
}

// The planned peak with the optimizer in the backward pass is lower than
// the usual step's by at least the gradients' bytes less those of the
// largest gradient (which may be in flight at the peak), the persistent
// gradients are gone from the plan, and the transient ones are reported.
func TestOptimizerInBackwardLowersPlannedPeak(t *testing.T) {
	for _, name := range []string{"mlp", "gpt-shakespeare-char", "cnn", "resnet18-64"} {
		t.Run(name, func(t *testing.T) {
			spec, _ := zoo.Lookup(name)
			planFor := func(inBackward bool) (train.MemoryPlan, *train.Trainer) {
				opt, _ := optim.NewAdamW(optim.AdamWDefaults())
				tr, err := train.SetupConfig(device.Meta(), 1, testkit.Build(spec), opt, train.Config{OptimizerInBackward: inBackward, GradientBuffers: !inBackward})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(tr.Close)
				xm, ym := spec.Example(4)
				mp, err := tr.Plan(xm, ym)
				if err != nil {
					t.Fatal(err)
				}
				return mp, tr
			}
			usual, tr := planFor(false)
			fused, ftr := planFor(true)
			_, grads := tr.Store.ParamBytes()
			var largest int64
			for _, p := range tr.Store.Trainable() {
				largest = max(largest, device.RoundSize(p.Bytes()))
			}
			// The allocator may hand out more than the rounded size (a
			// large block whole), so it is the reference for the usual step.
			if usual.Gradients < grads || fused.Gradients != 0 || usual.TransientGradients != 0 {
				t.Errorf("gradients: usual %d (want at least %d), in backward %d (want 0), usual transient %d", usual.Gradients, grads, fused.Gradients, usual.TransientGradients)
			}
			// Gradients at the peak may be none (the peak can fall between
			// two updates), but the plan has one in the arena per parameter.
			if fused.TransientGradients < 0 || fused.TransientGradients > fused.Activations {
				t.Errorf("transient gradients %d of %d at the peak", fused.TransientGradients, fused.Activations)
			}
			p, err := ftr.InBackwardProgram(spec.Example(4))
			if err != nil {
				t.Fatal(err)
			}
			var inArena int64
			for _, b := range p.Plan.Buffers {
				if b.Category == plan.Gradient {
					inArena += b.Size
				}
			}
			if inArena < grads*9/10 {
				t.Errorf("gradient buffers in the arena: %d bytes, gradients %d", inArena, grads)
			}
			saved := usual.Total() - fused.Total()
			if name == "mlp" || name == "gpt-shakespeare-char" {
				if saved < grads-largest {
					t.Errorf("peak %d in backward, %d usual: saved %d, want at least %d (gradients %d, largest %d)", fused.Total(), usual.Total(), saved, grads-largest, grads, largest)
				}
			} else if saved <= 0 {
				t.Errorf("peak %d in backward, %d usual", fused.Total(), usual.Total())
			}
			var sb strings.Builder
			fused.Print(&sb)
			if fused.TransientGradients > 0 && !strings.Contains(sb.String(), "gradients (transient)") {
				t.Errorf("the printed plan does not show the transient gradients:\n%s", sb.String())
			}
			t.Logf("%s batch 4: peak %s -> %s (gradients %s, transient at peak %s)", name, device.FormatBytes(usual.Total()), device.FormatBytes(fused.Total()),
				device.FormatBytes(grads), device.FormatBytes(fused.TransientGradients))
		})
	}
}

// customOpt is an optimizer that cannot step one parameter at a time.
type customOpt struct{ optim.Optimizer }

// Where updating inside the step would not be exactly the usual step, the
// mode does not apply, the reason says why, and the step takes the usual
// path with the usual result (gradient buffers included).
func TestOptimizerInBackwardFallsBack(t *testing.T) {
	m := ibModels()[0]
	sgd := func() optim.Optimizer {
		o, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1, Momentum: 0.9})
		return o
	}
	cases := []struct {
		name  string
		micro int
		setup func(tr *train.Trainer)
		want  string
	}{
		{"two micro-batches", 2, nil, "micro-batches"},
		{"clip norm", 1, func(tr *train.Trainer) { tr.ClipNorm = 0.5 }, "clipping"},
		{"fp16-mixed", 1, func(tr *train.Trainer) { setPrecision(t, tr, transform.FP16Mixed) }, "GradScaler"},
		{"check finite", 1, func(tr *train.Trainer) { tr.RunOptions = &exec.Options{CheckFinite: true} }, "CheckFinite"},
		{"custom optimizer", 1, func(tr *train.Trainer) { tr.Opt = customOpt{tr.Opt} }, "one parameter at a time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := func(inBackward bool) (*train.Trainer, float64) {
				tr, err := train.SetupConfig(device.CPU(), 3, m.build, sgd(), train.Config{OptimizerInBackward: inBackward})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(tr.Close)
				if c.setup != nil {
					c.setup(tr)
				}
				b := m.batch(rand.New(rand.NewSource(4)))
				micro, err := train.Split(b, c.micro)
				if err != nil {
					t.Fatal(err)
				}
				l, err := tr.StepAccumulate(context.Background(), micro)
				if err != nil {
					t.Fatal(err)
				}
				return tr, l
			}
			usual, lu := run(false)
			fused, lf := run(true)
			err := fused.CheckOptimizerInBackward(c.micro)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("CheckOptimizerInBackward: %v, want an error about %q", err, c.want)
			}
			if lu != lf {
				t.Errorf("loss %v, usual %v", lf, lu)
			}
			for i, p := range usual.Store.Trainable() {
				q := fused.Store.Trainable()[i]
				if q.Grad == nil {
					t.Fatalf("%s: no gradient buffer: the step did not take the usual path", p.Name)
				}
				if k, ok := sameBits(q.Value.F32(), p.Value.F32()); !ok {
					t.Errorf("%s differs at %d", p.Name, k)
				}
			}
		})
	}
}

// A NaN loss stops training before any parameter or optimizer state has
// changed, with the same error (naming the first bad tensor) as the usual
// step.
func TestOptimizerInBackwardNonFiniteLoss(t *testing.T) {
	for _, o := range ibOptimizers {
		t.Run(o.name, func(t *testing.T) {
			x := tensor.FromFloat32(tensor.Shape{2, 4}, []float32{1, -2, 3, -4, 5, -6, 7, -8})
			y := tensor.New(tensor.Float32, tensor.Shape{2, 2})
			var before [][]float32
			var tr *train.Trainer
			var errs [2]error
			for i, inBackward := range []bool{false, true} {
				var err error
				tr, err = train.SetupConfig(device.CPU(), 1, func(s *nn.Store) (train.Model, train.LossFunc) {
					m := &logNet{fc1: nn.NewLinear(s.Root().Sub("fc1"), 4, 4, true), fc2: nn.NewLinear(s.Root().Sub("fc2"), 4, 2, true)}
					return m, sse
				}, o.make(), train.Config{OptimizerInBackward: inBackward})
				if err != nil {
					t.Fatal(err)
				}
				defer tr.Close()
				before = nil
				for _, p := range tr.Store.Trainable() {
					before = append(before, append([]float32(nil), p.Value.F32()...))
				}
				_, errs[i] = tr.Step(context.Background(), x, y)
			}
			var nf *train.NonFiniteError
			if err := errs[1]; !errors.As(err, &nf) || nf.First == nil || nf.Step != 0 || !math.IsNaN(nf.Loss) {
				t.Fatalf("want a NonFiniteError naming the tensor, got %v", err)
			}
			if errs[1].Error() != errs[0].Error() {
				t.Fatalf("in backward: %v\nusual: %v", errs[1], errs[0])
			}
			for i, p := range tr.Store.Trainable() {
				if k, ok := sameBits(p.Value.F32(), before[i]); !ok {
					t.Fatalf("%s changed at %d in a step with a non-finite loss", p.Name, k)
				}
			}
			for name, bufs := range tr.Opt.State() {
				for k, v := range bufs {
					for _, e := range v {
						if e != 0 {
							t.Fatalf("optimizer state %s of %s changed", k, name)
						}
					}
				}
			}
		})
	}
}

// A step that does not fit in memory fails while the arena is reserved,
// before any update, and is retried on the usual path, which splits it:
// the result is that of the whole batch.
func TestOptimizerInBackwardOutOfMemoryIsSplit(t *testing.T) {
	spec, _ := zoo.Lookup("cnn")
	prob := budget.Problem{
		Build:           testkit.Build(spec),
		Example:         spec.Example,
		Batch:           64,
		NewOptimizer:    func() (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.1, Momentum: 0.9}) },
		GradientBuffers: true,
	}
	// A capacity that holds the usual step of 8 to 32 samples: far from
	// the 64 of the in-backward step, whose arena is then too large too.
	var capacity int64
	for b := int64(16 << 20); b < 256<<20; b += 1 << 20 {
		prob.Budget = b
		n, err := budget.MaxBatch(context.Background(), prob, budget.RecomputeNone)
		if err == nil && n >= 8 && n <= 32 {
			capacity = b
			break
		}
	}
	if capacity == 0 {
		t.Fatal("no capacity found that fits a batch of 8 to 32")
	}
	b := randBatch(rand.New(rand.NewSource(2)), trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{64, 1, 28, 28}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{64}}, 10)
	step := func(devSpec string) *train.Trainer {
		dev, err := device.New(devSpec)
		if err != nil {
			t.Fatal(err)
		}
		opt, _ := prob.NewOptimizer()
		tr, err := train.SetupConfig(dev, 3, prob.Build, opt, train.Config{OptimizerInBackward: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tr.Close)
		if _, err := tr.Step(context.Background(), b.X, b.Y); err != nil {
			t.Fatalf("%s: %v", devSpec, err)
		}
		return tr
	}
	capped := step(fmt.Sprintf("cpu:mem=%d", capacity))
	free := step("cpu")
	if capped.Splits == 0 || free.Splits != 0 {
		t.Fatalf("splits: %d capped, %d free", capped.Splits, free.Splits)
	}
	for i, p := range capped.Store.Trainable() {
		if e := relErr(p.Value.F32(), free.Store.Trainable()[i].Value.F32()); e > 1e-5 {
			t.Errorf("%s: relative error %.3g", p.Name, e)
		}
	}
	if peak := capped.Device.Alloc.Stats().ReservedBytes.Peak; peak > capacity {
		t.Fatalf("reserved %d beyond the capacity %d", peak, capacity)
	}
}

// setPrecision changes tr's precision through its one setter.
func setPrecision(t *testing.T, tr *train.Trainer, p transform.Precision) {
	t.Helper()
	cfg := tr.Config()
	cfg.Precision = p
	if err := tr.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

// Under bf16-mixed the update in the backward pass frees each gradient as
// the fp32 one does: the rounding the update reads runs where the gradient
// is made, not after the backward pass, so the planned peak holds no more
// activations than the step with gradient buffers and saves nearly all
// the gradients' bytes.
func TestOptimizerInBackwardLowPrecisionFreesGradients(t *testing.T) {
	spec, _ := zoo.Lookup("resnet18-64")
	opt, _ := optim.NewAdam(optim.AdamDefaults())
	tr, err := train.SetupConfig(device.Meta(), 1, testkit.Build(spec), opt, train.Config{Precision: transform.BF16Mixed, GradientBuffers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	x, y := spec.Example(8)
	buf, _, err := tr.PlanConfig(train.Config{Precision: transform.BF16Mixed, GradientBuffers: true}, x, y)
	if err != nil {
		t.Fatal(err)
	}
	ib, _, err := tr.PlanConfig(train.Config{Precision: transform.BF16Mixed, OptimizerInBackward: true}, x, y)
	if err != nil {
		t.Fatal(err)
	}
	_, grads := tr.Store.ParamBytes()
	t.Logf("activations %d with the update in the backward pass, %d with gradient buffers (%d of gradients); totals %d, %d", ib.Activations, buf.Activations, grads, ib.Total(), buf.Total())
	if ib.Activations > buf.Activations || float64(buf.Total()-ib.Total()) < 0.9*float64(grads) {
		t.Errorf("in backward: activations %d (buffers' step %d), total %d against %d: saves %d of %d gradient bytes",
			ib.Activations, buf.Activations, ib.Total(), buf.Total(), buf.Total()-ib.Total(), grads)
	}
}
