package nn_test

import (
	"math"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// The wrappers register PyTorch's names, dtypes and shapes, and PyTorch's
// default initial values.
func TestLayerParameters(t *testing.T) {
	s := nn.NewStore()
	r := s.Root()
	nn.NewBatchNorm2d(r.Sub("bn"), 4)
	nn.NewBatchNorm(r.Sub("bn_plain"), 3, nn.BatchNormOpts{NoAffine: true, NoTrack: true})
	nn.NewLayerNorm(r.Sub("ln"), tensor.Shape{5}, true)
	nn.NewLayerNorm(r.Sub("ln_nobias"), tensor.Shape{5}, false)
	nn.NewGroupNorm(r.Sub("gn"), 2, 6)
	nn.NewEmbedding(r.Sub("emb"), 1000, 8)
	want := []struct {
		name  string
		dt    tensor.DType
		shape tensor.Shape
		train bool
		value float64 // NaN: random
	}{
		{"bn.weight", tensor.Float32, tensor.Shape{4}, true, 1},
		{"bn.bias", tensor.Float32, tensor.Shape{4}, true, 0},
		{"bn.running_mean", tensor.Float32, tensor.Shape{4}, false, 0},
		{"bn.running_var", tensor.Float32, tensor.Shape{4}, false, 1},
		{"bn.num_batches_tracked", tensor.Int64, tensor.Shape{}, false, 0},
		{"ln.weight", tensor.Float32, tensor.Shape{5}, true, 1},
		{"ln.bias", tensor.Float32, tensor.Shape{5}, true, 0},
		{"ln_nobias.weight", tensor.Float32, tensor.Shape{5}, true, 1},
		{"gn.weight", tensor.Float32, tensor.Shape{6}, true, 1},
		{"gn.bias", tensor.Float32, tensor.Shape{6}, true, 0},
		{"emb.weight", tensor.Float32, tensor.Shape{1000, 8}, true, math.NaN()},
	}
	ps := s.Params()
	if len(ps) != len(want) {
		t.Fatalf("%d parameters and buffers, want %d", len(ps), len(want))
	}
	if err := s.Materialize(device.CPU(), 1); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	for i, w := range want {
		p := ps[i]
		if p.Name != w.name || p.DType != w.dt || !p.Shape.Equal(w.shape) || p.Trainable != w.train {
			t.Errorf("entry %d: %s %v%v trainable %v, want %s %v%v %v", i, p.Name, p.DType, p.Shape, p.Trainable, w.name, w.dt, w.shape, w.train)
			continue
		}
		v := p.Value.Float64s()
		if math.IsNaN(w.value) {
			// N(0, 1): mean and standard deviation of 8000 draws.
			var m, sq float64
			for _, x := range v {
				m += x
				sq += x * x
			}
			m /= float64(len(v))
			sd := math.Sqrt(sq/float64(len(v)) - m*m)
			if math.Abs(m) > 0.05 || math.Abs(sd-1) > 0.05 {
				t.Errorf("%s: mean %.3f, std %.3f, want N(0, 1)", p.Name, m, sd)
			}
			continue
		}
		for _, x := range v {
			if x != w.value {
				t.Errorf("%s: initial value %v, want %v", p.Name, x, w.value)
				break
			}
		}
	}
}

// Each layer traces on a plausible input and keeps its module path.
func TestLayerForward(t *testing.T) {
	s := nn.NewStore()
	r := s.Root()
	bn := nn.NewBatchNorm2d(r.Sub("bn"), 4)
	gn := nn.NewGroupNorm(r.Sub("gn"), 2, 4)
	ln := nn.NewLayerNorm(r.Sub("ln"), tensor.Shape{6}, false)
	emb := nn.NewEmbedding(r.Sub("emb"), 10, 3)
	drop := nn.NewDropout(r.Sub("drop"), 0.5)
	mp, ap, aap := nn.NewMaxPool2d(2, 0, 0), nn.NewAvgPool2d(3, 1, 1), nn.NewAdaptiveAvgPool2d(1, 1)
	for _, training := range []bool{true, false} {
		s.SetTraining(training)
		g := trace.New()
		err := trace.Capture(func() {
			x := g.Input("x", tensor.Float32, tensor.Shape{2, 4, 6, 6})
			y := aap.Forward(ap.Forward(mp.Forward(drop.Forward(ln.Forward(gn.Forward(bn.Forward(x)))))))
			if !y.Shape().Equal(tensor.Shape{2, 4, 1, 1}) {
				t.Errorf("output shape %v", y.Shape())
			}
			e := emb.Forward(g.Input("i", tensor.Int64, tensor.Shape{2, 5}))
			if !e.Shape().Equal(tensor.Shape{2, 5, 3}) {
				t.Errorf("embedding shape %v", e.Shape())
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		var increments, dropouts int
		for _, n := range g.Nodes {
			if n.Kind != trace.KindOp {
				continue
			}
			switch n.Op.Name() {
			case "increment_":
				increments++
				if n.Module != "bn" {
					t.Errorf("counter increment recorded at %q, want bn", n.Module)
				}
			case "dropout":
				dropouts++
			}
		}
		want := 0
		if training {
			want = 1
		}
		if increments != want || dropouts != want {
			t.Errorf("training %v: %d counter increments and %d dropouts, want %d", training, increments, dropouts, want)
		}
	}
}
