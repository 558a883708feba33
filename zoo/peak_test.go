package zoo_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// For every model of the zoo, the planner's predicted peak of allocated
// bytes equals the allocator's measured peak, on the meta device for all
// models and on the cpu for the small ones, for two batch sizes.
func TestPlannedPeakEqualsMeasuredForZoo(t *testing.T) {
	// On the cpu every model at the sizes its own tests use; the
	// 224x224 ResNets and the 124M-parameter GPT-2 only on meta (the
	// allocator and plan are the same code, the kernels are what is slow).
	cpuModels := map[string]bool{"mlp": true, "cnn": true, "gpt-shakespeare-char": true,
		"resnet18-64": true, "resnet152-128": true, "rrdbnet": true}
	quick := map[string]bool{"mlp": true, "cnn": true, "gpt-shakespeare-char": true}
	for _, spec := range zoo.Specs() {
		for _, kind := range []string{"meta", "cpu"} {
			if kind == "cpu" && !cpuModels[spec.Name] || testing.Short() && !quick[spec.Name] {
				continue
			}
			t.Run(spec.Name+"/"+kind, func(t *testing.T) {
				dev, _ := device.New(kind)
				opt, _ := optim.NewAdam(optim.AdamDefaults())
				tr, err := train.Setup(dev, 1, testkit.Build(spec), opt)
				if err != nil {
					t.Fatal(err)
				}
				defer tr.Close()
				r := rand.New(rand.NewSource(1))
				sizes := []int{3, 2} // the second is a shorter last batch
				if !quick[spec.Name] {
					sizes = []int{2, 1}
				}
				for _, n := range sizes {
					xm, ym := spec.Example(n)
					mp, err := tr.Plan(xm, ym)
					if err != nil {
						t.Fatal(err)
					}
					x, y := testkit.Batch(r, xm, ym, 10)
					dev.Alloc.ResetPeak()
					if _, err := tr.Step(context.Background(), x, y); err != nil {
						t.Fatal(err)
					}
					if got := dev.Alloc.MaxMemoryAllocated(); got != mp.Total() {
						t.Errorf("batch %d: measured peak %d, planned %d (difference %d)", n, got, mp.Total(), got-mp.Total())
					}
				}
			})
		}
	}
}

// With the optimizer in the backward pass (gradients in the step's arena,
// freed by their update), the planned peak still equals the measured one,
// and is below the usual step's.
func TestPlannedPeakEqualsMeasuredInBackward(t *testing.T) {
	for _, name := range []string{"mlp", "cnn", "gpt-shakespeare-char", "resnet18-64"} {
		for _, kind := range []string{"meta", "cpu"} {
			if testing.Short() && name == "resnet18-64" && kind == "cpu" {
				continue
			}
			t.Run(name+"/"+kind, func(t *testing.T) {
				spec, _ := zoo.Lookup(name)
				dev, _ := device.New(kind)
				opt, _ := optim.NewAdamW(optim.AdamWDefaults())
				tr, err := train.Setup(dev, 1, testkit.Build(spec), opt)
				if err != nil {
					t.Fatal(err)
				}
				defer tr.Close()
				r := rand.New(rand.NewSource(1))
				for _, n := range []int{3, 2} {
					xm, ym := spec.Example(n)
					if err := tr.SetConfig(train.Config{GradientBuffers: true}); err != nil {
						t.Fatal(err)
					}
					usual, err := tr.Plan(xm, ym)
					if err != nil {
						t.Fatal(err)
					}
					if err := tr.SetConfig(train.Config{OptimizerInBackward: true}); err != nil {
						t.Fatal(err)
					}
					mp, err := tr.Plan(xm, ym)
					if err != nil {
						t.Fatal(err)
					}
					if mp.Total() >= usual.Total() || mp.Gradients != 0 || mp.TransientGradients < 0 {
						t.Errorf("batch %d: planned %d in backward (gradients %d, transient %d), %d usual", n, mp.Total(), mp.Gradients, mp.TransientGradients, usual.Total())
					}
					x, y := testkit.Batch(r, xm, ym, 10)
					dev.Alloc.ResetPeak()
					if _, err := tr.Step(context.Background(), x, y); err != nil {
						t.Fatal(err)
					}
					if got := dev.Alloc.MaxMemoryAllocated(); got != mp.Total() {
						t.Errorf("batch %d: measured peak %d, planned %d (difference %d)", n, got, mp.Total(), got-mp.Total())
					}
				}
			})
		}
	}
}
