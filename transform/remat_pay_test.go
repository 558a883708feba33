package transform_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// dense is ESRGAN's dense block in small: convolutions whose LeakyReLU
// outputs feed wider and wider concatenations, a scaled residual.
type dense struct {
	convs []*nn.Conv2d
	head  *nn.Linear
}

func (m *dense) Forward(x *trace.Tensor) *trace.Tensor {
	feats := []*trace.Tensor{x}
	for i, c := range m.convs {
		in := x
		if len(feats) > 1 {
			in = op.Cat(1, feats...)
		}
		h := c.Forward(in)
		if i == len(m.convs)-1 {
			x = op.Add(op.Scale(h, 0.2), x)
			break
		}
		feats = append(feats, op.LeakyReLU(h, 0.2))
	}
	return m.head.Forward(op.Flatten(x, 1, -1))
}

// basic is a ResNet basic block: conv, batch norm, ReLU, conv, batch norm,
// the residual addition and a ReLU.
type basic struct {
	c1, c2 *nn.Conv2d
	b1, b2 *nn.BatchNorm
	head   *nn.Linear
}

func (m *basic) Forward(x *trace.Tensor) *trace.Tensor {
	h := op.ReLU(m.b1.Forward(m.c1.Forward(x)))
	h = op.ReLU(op.Add(m.b2.Forward(m.c2.Forward(h)), x))
	return m.head.Forward(op.Flatten(h, 1, -1))
}

const payC, payHW = 8, 16

func newDense(s *nn.Store) train.Model {
	m := &dense{head: nn.NewLinear(s.Root().Sub("head"), payC*payHW*payHW, 3, true)}
	pad := op.ConvOpts{Padding: [2]int{1, 1}}
	for i, gc := range []int{4, 4, payC} {
		m.convs = append(m.convs, nn.NewConv2d(s.Root().Sub("conv").Sub(string(rune('1'+i))), payC+4*i, gc, 3, pad, true))
	}
	return m
}

func newBasic(s *nn.Store) train.Model {
	pad := op.ConvOpts{Padding: [2]int{1, 1}}
	return &basic{
		c1: nn.NewConv2d(s.Root().Sub("c1"), payC, payC, 3, pad, false), b1: nn.NewBatchNorm2d(s.Root().Sub("b1"), payC),
		c2: nn.NewConv2d(s.Root().Sub("c2"), payC, payC, 3, pad, false), b2: nn.NewBatchNorm2d(s.Root().Sub("b2"), payC),
		head: nn.NewLinear(s.Root().Sub("head"), payC*payHW*payHW, 3, true),
	}
}

// planned returns the planned training memory (everything but the
// parameters) of one step of model under cfg, after checking that the
// step's measured peak is the plan's.
func planned(t *testing.T, model func(*nn.Store) train.Model, cfg train.Config) int64 {
	t.Helper()
	s := nn.NewStore()
	m := model(s)
	dev := device.CPU()
	if err := s.Materialize(dev, 5); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	tr, err := train.New(dev, s, m, ce, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	x, y := testkit.Classification(rand.New(rand.NewSource(2)), tensor.Shape{8, payC, payHW, payHW}, 3)
	mp, err := tr.Plan(trace.Meta{DType: x.DType, Shape: x.Shape}, trace.Meta{DType: y.DType, Shape: y.Shape})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(context.Background(), x, y); err != nil {
		t.Fatal(err)
	}
	if got := dev.Alloc.MaxMemoryAllocated(); got != mp.Total() {
		t.Errorf("measured peak %d, planned %d", got, mp.Total())
	}
	return mp.Total() - mp.Parameters
}

// Selective recomputation never plans more than recomputing nothing: a
// LeakyReLU whose output the backward reads back from a saved
// concatenation (or as a 1-bit mask) is not recomputed, since that would
// keep its convolution's 32-bit output alive instead; a ResNet block's
// batch norm and ReLU still are, and lower the plan.
func TestSelectiveRecomputationPays(t *testing.T) {
	for _, c := range []struct {
		name  string
		model func(*nn.Store) train.Model
		store transform.Compression
		lower bool // selective must plan strictly less
	}{
		{"dense", newDense, transform.Compression{}, false},
		{"dense-masks", newDense, transform.Compression{Masks: true}, false},
		{"basic", newBasic, transform.Compression{}, true},
		{"basic-masks", newBasic, transform.Compression{Masks: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			none := planned(t, c.model, train.Config{Storage: c.store, GradientBuffers: true})
			sel := planned(t, c.model, train.Config{Storage: c.store, Recompute: train.Selective, GradientBuffers: true})
			t.Logf("planned %d bytes with nothing recomputed, %d selective", none, sel)
			if sel > none || c.lower && sel == none {
				t.Fatalf("selective recomputation plans %d bytes, nothing recomputed %d", sel, none)
			}
		})
	}
}
