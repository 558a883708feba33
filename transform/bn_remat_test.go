package transform_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

type convBN struct {
	conv *nn.Conv2d
	bn   *nn.BatchNorm
	head *nn.Linear
}

func (m *convBN) Forward(x *trace.Tensor) *trace.Tensor {
	h := nn.Checkpoint(x, func(x *trace.Tensor) *trace.Tensor { return op.ReLU(m.bn.Forward(m.conv.Forward(x))) })
	return m.head.Forward(op.Flatten(h, 1, -1))
}

// Recomputing a batch-norm layer in the backward pass does not update its
// running statistics a second time: they, the counter and the gradients
// are bit-identical to a run without recomputation.
func TestRecomputedBatchNormUpdatesStatisticsOnce(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	x := tensor.New(tensor.Float32, tensor.Shape{4, 3, 6, 6})
	for i := range x.F32() {
		x.F32()[i] = float32(r.NormFloat64())
	}
	y := tensor.FromInt64(tensor.Shape{4}, []int64{0, 1, 1, 0})
	run := func(p transform.Policy) map[string][]float64 {
		opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1})
		tr, err := train.Setup(device.CPU(), 2, func(s *nn.Store) (train.Model, train.LossFunc) {
			return &convBN{
				conv: nn.NewConv2d(s.Root().Sub("conv"), 3, 5, 3, op.ConvOpts{}, false),
				bn:   nn.NewBatchNorm2d(s.Root().Sub("bn"), 5),
				head: nn.NewLinear(s.Root().Sub("head"), 5*4*4, 2, true),
			}, ce
		}, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		if err := tr.SetConfig(train.Config{Recompute: train.MustRecompute(p)}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if _, err := tr.Step(context.Background(), x, y); err != nil {
				t.Fatal(err)
			}
		}
		out := map[string][]float64{}
		for name, v := range tr.Store.StateDict() {
			out[name] = v.Float64s()
		}
		return out
	}
	plain, remat := run(nil), run(transform.Regions{})
	for name, want := range plain {
		for i := range want {
			if remat[name][i] != want[i] {
				t.Fatalf("%s[%d]: %v with recomputation, %v without", name, i, remat[name][i], want[i])
			}
		}
	}
	if plain["bn.num_batches_tracked"][0] != 2 {
		t.Fatalf("num_batches_tracked %v after 2 steps", plain["bn.num_batches_tracked"])
	}
}
