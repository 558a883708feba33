package train_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// What Outputs, Predict and PredictInputs return stays readable after the
// trainer and its device are dropped without Close and collected, when
// the allocator's cleanup has unmapped the device memory: the tensors are
// the caller's, in Go memory, not views of the device (reading a view
// then would fault).
func TestOutputsOutliveTrainer(t *testing.T) {
	build := func(s *nn.Store) (train.Model, train.LossFunc) {
		return NewNet(s.Root()), func(out, y *trace.Tensor) *trace.Tensor { return op.CrossEntropy(out, y, op.CrossEntropyOpts{}) }
	}
	x := tensor.FromFloat32(tensor.Shape{5, 4}, []float32{1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 2, 3, 4})
	y := tensor.FromInt64(tensor.Shape{5}, []int64{0, 2, 1, 0, 1})
	for _, cfg := range []train.Config{{Outputs: true}, {Outputs: true, Accumulation: 2}} {
		var collected atomic.Bool
		var got, want []*tensor.Tensor
		func() {
			dev := device.CPU()
			runtime.AddCleanup(dev.Alloc, func(b *atomic.Bool) { b.Store(true) }, &collected)
			opt, _ := optim.NewAdamW(optim.AdamWDefaults())
			tr, err := train.SetupConfig(dev, 5, build, opt, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Step(context.Background(), x, y); err != nil {
				t.Fatal(err)
			}
			p, err := tr.Predict(context.Background(), x)
			if err != nil {
				t.Fatal(err)
			}
			got = []*tensor.Tensor{tr.Outputs(), p}
			for _, o := range got {
				want = append(want, o.Clone())
			}
			// No Close: the trainer, its store and device are dropped.
		}()
		// The deadline only stops a failing test from hanging.
		for deadline := time.Now().Add(30 * time.Second); !collected.Load(); {
			if time.Now().After(deadline) {
				t.Fatalf("%v: the device's allocator was never collected", cfg)
			}
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
		runtime.GC() // and the allocator's own cleanup, queued with ours, has run
		for i, o := range got {
			for j, v := range o.F32() {
				if v != want[i].F32()[j] {
					t.Fatalf("%v: result %d [%d] = %v after the trainer was collected, was %v", cfg, i, j, v, want[i].F32()[j])
				}
			}
		}
	}
}
