package train_test

import (
	"context"
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

func cnnTrainer(t *testing.T) *train.Trainer {
	t.Helper()
	spec, _ := zoo.Lookup("cnn")
	opt, _ := optim.NewAdam(optim.AdamDefaults())
	tr, err := train.Setup(device.Meta(), 0, testkit.Build(spec), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// Changing how saved activations are stored after a step was compiled
// plans the step again: the compiled step is not reused under another
// configuration (cnn, batch 32: 10.55 MB kept, 6.57 MB with bf16).
func TestCompressAfterCompileIsNotIgnored(t *testing.T) {
	spec, _ := zoo.Lookup("cnn")
	x, y := spec.Example(32)
	bf16, _ := transform.ParseCompress("bf16")

	fresh := cnnTrainer(t)
	setStorage(t, fresh, bf16)
	want, err := fresh.Plan(x, y)
	if err != nil {
		t.Fatal(err)
	}

	tr := cnnTrainer(t)
	before, err := tr.Plan(x, y)
	if err != nil {
		t.Fatal(err)
	}
	setStorage(t, tr, bf16)
	got, err := tr.Plan(x, y)
	if err != nil {
		t.Fatal(err)
	}
	if want.Activations >= before.Activations {
		t.Fatalf("bf16 storage plans %d activation bytes, not fewer than %d kept", want.Activations, before.Activations)
	}
	if got.Activations != want.Activations {
		t.Fatalf("compression set after the first compile: %d activation bytes planned, want %d (as set before; %d without)", got.Activations, want.Activations, before.Activations)
	}
}

func setStorage(t *testing.T, tr *train.Trainer, p transform.CompressPolicy) {
	t.Helper()
	cfg := tr.Config()
	var err error
	if cfg.Storage, err = train.StorageOf(p); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

// Planning is a pure function of the model, the configuration and the
// shapes: it allocates and frees nothing, and leaves the trainer's own
// configuration and plan as they were.
func TestPlanAllocatesNothing(t *testing.T) {
	spec, _ := zoo.Lookup("cnn")
	x, y := spec.Example(8)
	tr := cnnTrainer(t)
	want, err := tr.Plan(x, y)
	if err != nil {
		t.Fatal(err)
	}
	before := tr.Device.Alloc.Stats()
	bf16, _ := transform.ParseCompress("bf16")
	st, _ := train.StorageOf(bf16)
	for _, cfg := range []train.Config{
		{OptimizerInBackward: true},
		{Precision: transform.BF16Mixed, Storage: st, Recompute: train.Selective},
		{Accumulation: 4},
	} {
		mp, _, err := tr.PlanConfig(cfg, x, y)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OptimizerInBackward && mp.Gradients != 0 {
			t.Errorf("%v: %d gradient bytes planned with the optimizer in the backward pass", cfg, mp.Gradients)
		}
		after := tr.Device.Alloc.Stats()
		if after.AllocatedBytes != before.AllocatedBytes || after.ReservedBytes != before.ReservedBytes || after.Allocation != before.Allocation {
			t.Fatalf("%v: planning allocated: %+v, before %+v", cfg, after.AllocatedBytes, before.AllocatedBytes)
		}
	}
	if got, _ := tr.Plan(x, y); got != want || tr.Config() != (train.Config{}) {
		t.Fatalf("plan after planning other configurations: %+v, want %+v (config %v)", got, want, tr.Config())
	}
}

func TestRecomputeIsComparable(t *testing.T) {
	if train.RecomputeIDs(transform.Nodes{3: true, 1: true}) != train.RecomputeIDs(transform.Nodes{1: true, 3: true, 7: false}) {
		t.Error("the same node set compares unequal")
	}
	if train.RecomputeIDs(transform.Nodes{1: true}) == train.RecomputeIDs(transform.Nodes{2: true}) {
		t.Error("different node sets compare equal")
	}
	if train.MustRecompute(transform.CheapOps) != train.Selective || train.MustRecompute(nil) != train.NoRecompute {
		t.Error("CheapOps or nil is not its Recompute value")
	}
	if _, err := train.RecomputeOf(funcPolicy(nil)); err == nil {
		t.Error("a policy type whose values do not compare was accepted")
	}
	a, b := train.Config{Recompute: train.Selective}, train.Config{Recompute: train.MustRecompute(transform.Selective{Ops: map[string]bool{"relu": true}})}
	if a == b {
		t.Error("selective policies over different ops compare equal")
	}
}

type funcPolicy func(*trace.Node) bool

func (f funcPolicy) Recompute(n *trace.Node) bool { return f(n) }
func (f funcPolicy) Region(*trace.Node) int       { return 0 }

// With Config.Accumulation, Step splits the batch itself: the same weights
// as StepAccumulate over train.Split, bit for bit.
func TestStepSplitsByAccumulation(t *testing.T) {
	spec, _ := zoo.Lookup("cnn")
	build := testkit.Build(spec)
	x, y := fashionBatch(rand.New(rand.NewSource(3)), 10)
	weights := func(cfg train.Config, split int) map[string][]float32 {
		opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.5})
		tr, err := train.SetupConfig(device.CPU(), 5, build, opt, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		if split > 0 {
			micro, err := train.Split(train.Batch{X: x, Y: y}, split)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tr.StepAccumulate(context.Background(), micro)
			if err != nil {
				t.Fatal(err)
			}
		} else if _, err := tr.Step(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for _, p := range tr.Store.Trainable() {
			out[p.Name] = append([]float32(nil), p.Value.F32()...)
		}
		return out
	}
	want := weights(train.Config{}, 3)
	got := weights(train.Config{Accumulation: 3}, 0)
	whole := weights(train.Config{}, 0)
	differs := false
	for name, w := range want {
		if i, ok := sameBits(got[name], w); !ok {
			t.Errorf("%s: element %d differs from StepAccumulate over 3 micro-batches", name, i)
		}
		if _, ok := sameBits(whole[name], w); !ok {
			differs = true
		}
	}
	if !differs {
		t.Error("the whole batch in one pass gave the accumulated step's bits: the test cannot tell a split from none")
	}
}

// SetConfig installs a GradScaler for fp16-mixed unless one is set, and
// frees the gradient buffers when the optimizer runs in the backward pass
// or the gradients live in the arena.
// The default configuration holds none (gradients in the arena).
func TestSetConfig(t *testing.T) {
	if b := cnnTrainer(t).Device.Alloc.Stats().ByCategory[device.Gradient]; b != 0 {
		t.Fatalf("%d bytes of gradient buffers after construction with the default configuration", b)
	}
	spec, _ := zoo.Lookup("cnn")
	opt, _ := optim.NewAdam(optim.AdamDefaults())
	tr, err := train.SetupConfig(device.Meta(), 0, testkit.Build(spec), opt, train.Config{GradientBuffers: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	grads := func() int64 { return tr.Device.Alloc.Stats().ByCategory[device.Gradient] }
	if grads() == 0 {
		t.Fatal("no gradient buffers after construction with GradientBuffers")
	}
	if err := tr.SetConfig(train.Config{OptimizerInBackward: true}); err != nil {
		t.Fatal(err)
	}
	if grads() != 0 {
		t.Fatalf("%d gradient bytes held with the optimizer in the backward pass", grads())
	}
	if err := tr.SetConfig(train.Config{Precision: transform.FP16Mixed, OptimizerInBackward: true}); err != nil {
		t.Fatal(err)
	}
	if tr.Scaler == nil || grads() != 0 || !tr.GradientsInArena(1) {
		t.Fatalf("fp16-mixed: scaler %v, %d gradient bytes: want the arena's gradients (in-backward does not apply with a scaler)", tr.Scaler, grads())
	}
	if err := tr.SetConfig(train.Config{Precision: transform.FP16Mixed, OptimizerInBackward: true, GradientBuffers: true}); err != nil {
		t.Fatal(err)
	}
	if grads() == 0 {
		t.Fatal("fp16-mixed with GradientBuffers: no gradient buffers")
	}
	var ib *train.InBackwardError
	if err := tr.CheckOptimizerInBackward(1); !errors.As(err, &ib) || ib.Reason != train.Scaling {
		t.Fatalf("CheckOptimizerInBackward: %v", err)
	}
}

// A batch so large that a tensor's size overflows is a clear error, not
// negative shapes or a panic.
func TestHugeBatchIsAClearError(t *testing.T) {
	spec, _ := zoo.Lookup("cnn")
	tr := cnnTrainer(t)
	for _, n := range []int{1 << 50, 1 << 60, math.MaxInt} {
		x, y := spec.Example(n)
		if _, err := tr.Plan(x, y); !errors.Is(err, train.ErrSize) {
			t.Errorf("batch %d: %v, want ErrSize", n, err)
		}
		if _, err := tr.EvalProgram(x); !errors.Is(err, train.ErrSize) {
			t.Errorf("batch %d, forward only: %v, want ErrSize", n, err)
		}
	}
}
