package pipeline_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// wideLayers is an MLP whose activations between stages are several MiB
// (micro-batches of 304 rows of 4096 floats: 4.75 MiB), past the allocator's
// small pool: large blocks are carved from 20 MiB segments and handed out
// whole when the rest is not worth splitting.
func wideLayers() []pipeline.Layer {
	widths := []int{32, 4096, 64, 4096, 10}
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

// Plans stay exact when the stages' inputs and received gradients are
// MiB-sized: each device's measured peak equals its plan at every step
// (the allocator's cache carries over from step to step), for GPipe and
// 1F1B, 2 and 3 stages.
func TestPlanExactLargeActivations(t *testing.T) {
	// 4.75 MiB a micro-batch: four fill a 20 MiB segment but 1 MiB,
	// which the fourth gets whole.
	data := wideBatches(3, 4*304)
	for _, tc := range []struct {
		cuts  []int
		sched pipeline.Schedule
	}{{[]int{0, 1, 4}, pipeline.GPipe}, {[]int{0, 1, 3, 4}, pipeline.GPipe}, {[]int{0, 1, 4}, pipeline.OneFOneB}, {[]int{0, 1, 3, 4}, pipeline.OneFOneB}} {
		t.Run(fmt.Sprint(tc.cuts, tc.sched), func(t *testing.T) {
			devs := make([]*device.Device, len(tc.cuts)-1)
			for i := range devs {
				devs[i] = device.CPU()
			}
			p, err := pipeline.New(wideLayers(), zoo.CrossEntropyLoss, tc.cuts, devs, adam, 4, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			p.Schedule = tc.sched
			for i, b := range data {
				plans, err := p.Plan(train.MetaOf(b[0]), train.MetaOf(b[1]))
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range devs {
					d.Alloc.ResetPeak()
				}
				if _, err := p.Step(context.Background(), b[0], b[1]); err != nil {
					t.Fatal(err)
				}
				for s, d := range devs {
					if got := d.Alloc.MaxMemoryAllocated(); got != plans[s].Peak {
						t.Errorf("step %d, stage %d: measured peak %d, planned %d (%v)", i, s, got, plans[s].Peak, plans[s])
					}
				}
			}
		})
	}
}

// wideBatches are k batches of n samples for wideLayers.
func wideBatches(k, n int) [][2]*tensor.Tensor {
	r := rand.New(rand.NewSource(5))
	var data [][2]*tensor.Tensor
	for range k {
		x, y := testkit.Batch(r, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 32}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}, 10)
		data = append(data, [2]*tensor.Tensor{x, y})
	}
	return data
}

// A plan made after steps run unplanned (the shadow allocators rebuilt
// from the steps' shapes), or made twice for other shapes before a step,
// still equals the measured peak.
func TestPlanAfterUnplannedSteps(t *testing.T) {
	data := wideBatches(3, 4*304)
	devs := []*device.Device{device.CPU(), device.CPU()}
	p, err := pipeline.New(wideLayers(), zoo.CrossEntropyLoss, []int{0, 1, 4}, devs, adam, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, b := range data[:2] {
		if _, err := p.Step(context.Background(), b[0], b[1]); err != nil {
			t.Fatal(err)
		}
	}
	b := data[2]
	half := wideBatches(1, 2*304)[0]
	if _, err := p.Plan(train.MetaOf(half[0]), train.MetaOf(half[1])); err != nil {
		t.Fatal(err)
	}
	plans, err := p.Plan(train.MetaOf(b[0]), train.MetaOf(b[1]))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		d.Alloc.ResetPeak()
	}
	if _, err := p.Step(context.Background(), b[0], b[1]); err != nil {
		t.Fatal(err)
	}
	for s, d := range devs {
		if got := d.Alloc.MaxMemoryAllocated(); got != plans[s].Peak {
			t.Errorf("stage %d: measured peak %d, planned %d", s, got, plans[s].Peak)
		}
	}
}
