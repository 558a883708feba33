package train_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// A GradScaler literal that leaves fields at 0 by omission is refused
// before the step, not run: its first overflow would set the scale to 0
// (backoff 0) and every later step would be skipped without a word.
// NewGradScaler's, and a static scale (factors 1), run.
func TestGradScalerZeroFieldsRefused(t *testing.T) {
	build := func(s *nn.Store) (train.Model, train.LossFunc) {
		return NewNet(s.Root()), func(out, y *trace.Tensor) *trace.Tensor { return op.CrossEntropy(out, y, op.CrossEntropyOpts{}) }
	}
	x := tensor.FromFloat32(tensor.Shape{2, 4}, []float32{1, 0, 0, 1, 0, 1, 1, 0})
	y := tensor.FromInt64(tensor.Shape{2}, []int64{0, 2})
	for _, c := range []struct {
		name string
		s    *train.GradScaler
		ok   bool
	}{
		{"zero", &train.GradScaler{}, false},
		{"scale only", &train.GradScaler{Scale: 1024}, false},
		{"no backoff", &train.GradScaler{Scale: 1024, GrowthFactor: 2, GrowthInterval: 100}, false},
		{"no interval", &train.GradScaler{Scale: 1024, GrowthFactor: 2, BackoffFactor: 0.5}, false},
		{"NaN scale", &train.GradScaler{Scale: math.NaN(), GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 1}, false},
		{"growth below 1", &train.GradScaler{Scale: 8, GrowthFactor: 0.5, BackoffFactor: 0.5, GrowthInterval: 1}, false},
		{"defaults", train.NewGradScaler(), true},
		{"static", &train.GradScaler{Scale: 8, GrowthFactor: 1, BackoffFactor: 1, GrowthInterval: 1}, true},
	} {
		opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1})
		tr, err := train.Setup(device.CPU(), 1, build, opt)
		if err != nil {
			t.Fatal(err)
		}
		tr.Scaler = c.s
		_, err = tr.Step(context.Background(), x, y)
		if c.ok && err != nil || !c.ok && !errors.Is(err, train.ErrScaler) {
			t.Errorf("%s: %v", c.name, err)
		}
		tr.Close()
	}
}
