package train_test

import (
	"context"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// Trainers on devices of their own step concurrently with the results
// of stepping one after the other (the package's concurrency contract).
func TestTrainersStepConcurrently(t *testing.T) {
	build := func(s *nn.Store) (train.Model, train.LossFunc) {
		return NewNet(s.Root()), func(out, y *trace.Tensor) *trace.Tensor { return op.CrossEntropy(out, y, op.CrossEntropyOpts{}) }
	}
	x := tensor.FromFloat32(tensor.Shape{4, 4}, []float32{1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1})
	y := tensor.FromInt64(tensor.Shape{4}, []int64{0, 2, 1, 0})
	run := func() ([]float64, error) {
		opt, _ := optim.NewAdamW(optim.AdamWDefaults())
		tr, err := train.Setup(device.CPU(), 7, build, opt)
		if err != nil {
			return nil, err
		}
		defer tr.Close()
		var losses []float64
		for range 20 {
			l, err := tr.Step(context.Background(), x, y)
			if err != nil {
				return nil, err
			}
			losses = append(losses, l)
		}
		return losses, nil
	}
	want, err := run()
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	got := make([][]float64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], errs[i] = run() }()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("trainer %d: %v", i, errs[i])
		}
		for s := range want {
			if got[i][s] != want[s] {
				t.Fatalf("trainer %d, step %d: loss %v, want %v", i, s, got[i][s], want[s])
			}
		}
	}
}
