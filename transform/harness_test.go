package transform_test

import (
	"context"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// setup configures a trainer before its first step.
type setup struct {
	precision transform.Precision
	compress  transform.CompressPolicy
	remat     transform.Policy
	host      *transform.HostPool // where offloads go: bound at run time
}

// apply sets s on tr, with gradient buffers: the passes' effects on the
// activations are compared with the gradients held apart, as before the
// arena became the default.
func (s setup) apply(tr *train.Trainer) {
	st, err := train.StorageOf(s.compress)
	if err != nil {
		panic(err)
	}
	if err := tr.SetConfig(train.Config{Recompute: train.MustRecompute(s.remat), Storage: st, Precision: s.precision, GradientBuffers: true}); err != nil {
		panic(err)
	}
	if s.host != nil {
		tr.RunOptions = &exec.Options{Host: s.host}
	}
}

// outcome of one step of a zoo model on a fixed random batch.
type outcome struct {
	loss  float64
	grads map[string][]float32
	names []string
	plan  train.MemoryPlan
	prog  *trace.Graph
}

// step runs one training step (SGD with lr 0, so weights stay put) of a
// zoo model under s on the cpu device, checks that the measured peak equals
// the planned one, and returns the loss, the (unscaled) gradients, the plan
// and the compiled graph.
func step(t testing.TB, spec zoo.Spec, batch int, s setup) outcome {
	t.Helper()
	store := nn.NewStore()
	m := spec.New(store.Root())
	dev := device.CPU()
	if err := store.Materialize(dev, 11); err != nil {
		t.Fatal(err)
	}
	defer store.Release()
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0})
	tr, err := train.New(dev, store, m, spec.Loss, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	s.apply(tr)
	x, y := testkit.SpecBatch(spec, batch, 5)
	xm, ym := trace.Meta{DType: x.DType, Shape: x.Shape}, trace.Meta{DType: y.DType, Shape: y.Shape}
	mp, err := tr.Plan(xm, ym)
	if err != nil {
		t.Fatal(err)
	}
	loss, err := tr.Step(context.Background(), x, y)
	if err != nil {
		t.Fatal(err)
	}
	if got := dev.Alloc.MaxMemoryAllocated(); got != mp.Total() {
		t.Errorf("measured peak %d, planned %d", got, mp.Total())
	}
	o := outcome{loss: loss, grads: map[string][]float32{}, plan: mp}
	for _, p := range store.Trainable() {
		o.names = append(o.names, p.Name)
		o.grads[p.Name] = append([]float32(nil), p.Grad.F32()...)
	}
	prog, err := tr.TrainProgram(xm, ym)
	if err != nil {
		t.Fatal(err)
	}
	o.prog = prog.Graph
	return o
}

// planOnly plans a step of spec on the meta device under s.
func planOnly(t testing.TB, spec zoo.Spec, batch int, s setup) train.MemoryPlan {
	t.Helper()
	store := nn.NewStore()
	m := spec.New(store.Root())
	dev := device.Meta()
	if err := store.Materialize(dev, 0); err != nil {
		t.Fatal(err)
	}
	defer store.Release()
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	tr, err := train.New(dev, store, m, spec.Loss, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	s.apply(tr)
	mp, err := tr.Plan(spec.Example(batch))
	if err != nil {
		t.Fatal(err)
	}
	return mp
}

// relErr is ||a-b|| / ||b|| over all gradients together, and the largest
// per-parameter value.
func relErr(a, b outcome) (total, worst float64, worstName string) {
	var num, den float64
	for _, name := range b.names {
		var n, d float64
		for i, v := range b.grads[name] {
			e := float64(a.grads[name][i]) - float64(v)
			n += e * e
			d += float64(v) * float64(v)
		}
		num += n
		den += d
		if d > 0 {
			if r := math.Sqrt(n / d); r > worst {
				worst, worstName = r, name
			}
		}
	}
	return math.Sqrt(num / den), worst, worstName
}

func mustSpec(t testing.TB, name string) zoo.Spec {
	t.Helper()
	s, err := zoo.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
