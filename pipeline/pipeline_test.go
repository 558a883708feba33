package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

type fn func(x *trace.Tensor) *trace.Tensor

func (f fn) Forward(x *trace.Tensor) *trace.Tensor { return f(x) }

// layers is an MLP of linear layers with ReLUs between them, one layer
// each.
func layers() []pipeline.Layer {
	widths := []int{32, 96, 96, 128, 96, 10}
	var ls []pipeline.Layer
	for i := 0; i+1 < len(widths); i++ {
		in, out, relu := widths[i], widths[i+1], i+2 < len(widths)
		ls = append(ls, func(b nn.Builder) train.Model {
			l := nn.NewLinear(b, in, out, true)
			return fn(func(x *trace.Tensor) *trace.Tensor {
				y := l.Forward(x)
				if relu {
					y = op.ReLU(y)
				}
				return y
			})
		})
	}
	return ls
}

func adam() (optim.Optimizer, error) {
	c := optim.AdamDefaults()
	c.LR = 1e-2
	return optim.NewAdam(c)
}

func batches(k, n int) [][2]*tensor.Tensor {
	r := rand.New(rand.NewSource(3))
	var out [][2]*tensor.Tensor
	for range k {
		x, y := testkit.Batch(r, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 32}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}, 10)
		out = append(out, [2]*tensor.Tensor{x, y})
	}
	return out
}

// oneDevice trains the whole model on one device, from its initial
// weights (returned too).
func oneDevice(t *testing.T, data [][2]*tensor.Tensor) (init, final map[string]*tensor.Tensor, losses []float64) {
	dev := device.CPU()
	s := nn.NewStore()
	m := pipeline.Sequential(s, layers())
	if err := s.Materialize(dev, 1); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	init = s.StateDict()
	opt, _ := adam()
	tr, err := train.New(dev, s, m, zoo.CrossEntropyLoss, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, b := range data {
		l, err := tr.Step(context.Background(), b[0], b[1])
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	return init, s.StateDict(), losses
}

func relDiff(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		e := float64(a[i]) - float64(b[i])
		d += e * e
		n += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d / n)
}

// A pipeline of 2 and 3 stages on devices of their own, 4 micro-batches
// (12 samples: 3 each), trains as one device does on the whole batch:
// losses and weights within float tolerance (not bit for bit: the batch's
// gradient is summed over micro-batches in another order). Each device's
// measured peak equals its stage's plan.
func TestGPipeMatchesOneDevice(t *testing.T) {
	data := batches(3, 12)
	init, want, wantLoss := oneDevice(t, data)
	for _, tc := range []struct {
		cuts  []int
		sched pipeline.Schedule
	}{{[]int{0, 2, 5}, pipeline.GPipe}, {[]int{0, 1, 3, 5}, pipeline.GPipe}, {[]int{0, 2, 5}, pipeline.OneFOneB}, {[]int{0, 1, 3, 5}, pipeline.OneFOneB}, {[]int{0, 5}, pipeline.OneFOneB}} {
		cuts := tc.cuts
		t.Run(fmt.Sprint(cuts, tc.sched), func(t *testing.T) {
			devs := make([]*device.Device, len(cuts)-1)
			for i := range devs {
				devs[i] = device.CPU()
			}
			p, err := pipeline.New(layers(), zoo.CrossEntropyLoss, cuts, devs, adam, 4, 9)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			p.Schedule = tc.sched
			if err := p.Load(init); err != nil {
				t.Fatal(err)
			}
			for i, b := range data {
				plans, err := p.Plan(train.MetaOf(b[0]), train.MetaOf(b[1]))
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range devs {
					d.Alloc.ResetPeak()
				}
				l, err := p.Step(context.Background(), b[0], b[1])
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(l-wantLoss[i]) > 1e-6*math.Abs(wantLoss[i]) {
					t.Errorf("step %d: loss %v, one device %v", i, l, wantLoss[i])
				}
				for s, d := range devs {
					if got := d.Alloc.MaxMemoryAllocated(); got != plans[s].Peak {
						t.Errorf("step %d, stage %d: measured peak %d, planned %d (%v)", i, s, got, plans[s].Peak, plans[s])
					}
				}
				if i == 0 {
					for s, sp := range plans {
						t.Logf("stage %d: %v", s, sp)
					}
				}
			}
			worst := 0.0
			for _, st := range p.Stages {
				for _, q := range st.Store.Trainable() {
					worst = max(worst, relDiff(q.Value.F32(), want[q.Name].F32()))
				}
			}
			t.Logf("weights within %.3g (relative, L2, worst parameter) of one device's", worst)
			if worst > 1e-5 {
				t.Fatalf("weights differ from one device's by %.3g relative", worst)
			}
		})
	}
}

// Cut places layers so that each stage fits its device's budget; trained
// on devices capped at those budgets, each device's peak equals its plan.
// A budget no layer fits is an error naming the layer.
func TestCutFitsBudgets(t *testing.T) {
	data := batches(2, 12)
	x, y := train.MetaOf(data[0][0]), train.MetaOf(data[0][1])
	whole, _, err := pipeline.Cut(layers(), zoo.CrossEntropyLoss, adam, []int64{1 << 40}, 4, pipeline.GPipe, x, y)
	if err != nil || len(whole) != 2 {
		t.Fatalf("one unlimited device: cuts %v, %v", whole, err)
	}
	_, plans1, _ := pipeline.Cut(layers(), zoo.CrossEntropyLoss, adam, []int64{1 << 40}, 4, pipeline.GPipe, x, y)
	budget := plans1[0].Peak * 45 / 100
	budgets := []int64{budget, budget, budget, budget}
	cuts, plans, err := pipeline.Cut(layers(), zoo.CrossEntropyLoss, adam, budgets, 4, pipeline.GPipe, x, y)
	if err != nil {
		t.Fatal(err)
	}
	if len(cuts) < 4 {
		t.Fatalf("cuts %v: 45%% of one device's %d each should need at least 3 stages", cuts, plans1[0].Peak)
	}
	devs := make([]*device.Device, len(cuts)-1)
	for i := range devs {
		if devs[i], err = device.New(fmt.Sprintf("cpu:mem=%d", budgets[i])); err != nil {
			t.Fatal(err)
		}
		if plans[i].Peak > budgets[i] {
			t.Fatalf("stage %d planned at %d over its budget %d", i, plans[i].Peak, budgets[i])
		}
	}
	p, err := pipeline.New(layers(), zoo.CrossEntropyLoss, cuts, devs, adam, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, b := range data {
		for _, d := range devs {
			d.Alloc.ResetPeak()
		}
		if _, err := p.Step(context.Background(), b[0], b[1]); err != nil {
			t.Fatal(err)
		}
		for s, d := range devs {
			if got := d.Alloc.MaxMemoryAllocated(); got != plans[s].Peak {
				t.Errorf("stage %d: measured %d, planned by Cut %d", s, got, plans[s].Peak)
			}
		}
	}
	_, _, err = pipeline.Cut(layers(), zoo.CrossEntropyLoss, adam, []int64{4096, 1 << 30}, 4, pipeline.GPipe, x, y)
	if !errors.Is(err, pipeline.ErrBudget) || !strings.Contains(err.Error(), "layer 0 alone needs") {
		t.Fatalf("a budget of 4 KiB: %v", err)
	}
	_, _, err = pipeline.Cut(layers(), zoo.CrossEntropyLoss, adam, []int64{budget}, 4, pipeline.GPipe, x, y)
	if !errors.Is(err, pipeline.ErrBudget) || !strings.Contains(err.Error(), "are left") {
		t.Fatalf("one small budget: %v", err)
	}
}

// With the same micro-batches (8 on 3 stages), 1F1B holds fewer stage
// inputs than GPipe (a number bounded by the stages, not all 8), so its
// peaks are lower; both equal their plans.
func TestOneFOneBBelowGPipe(t *testing.T) {
	data := batches(1, 24)
	b := data[0]
	peaks := map[pipeline.Schedule][]pipeline.StagePlan{}
	for _, sched := range []pipeline.Schedule{pipeline.GPipe, pipeline.OneFOneB} {
		devs := []*device.Device{device.CPU(), device.CPU(), device.CPU()}
		p, err := pipeline.New(layers(), zoo.CrossEntropyLoss, []int{0, 1, 3, 5}, devs, adam, 8, 1)
		if err != nil {
			t.Fatal(err)
		}
		p.Schedule = sched
		plans, err := p.Plan(train.MetaOf(b[0]), train.MetaOf(b[1]))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Step(context.Background(), b[0], b[1]); err != nil {
			t.Fatal(err)
		}
		for s, d := range devs {
			if got := d.Alloc.MaxMemoryAllocated(); got != plans[s].Peak {
				t.Errorf("%v, stage %d: measured %d, planned %d (%v)", sched, s, got, plans[s].Peak, plans[s])
			}
			t.Logf("%v stage %d: %v", sched, s, plans[s])
		}
		peaks[sched] = plans
		p.Close()
	}
	for s := range 3 {
		g, o := peaks[pipeline.GPipe][s], peaks[pipeline.OneFOneB][s]
		if !(o.Inputs < g.Inputs && o.Peak < g.Peak) {
			t.Errorf("stage %d: 1F1B inputs %d peak %d, GPipe inputs %d peak %d", s, o.Inputs, o.Peak, g.Inputs, g.Peak)
		}
	}
}
