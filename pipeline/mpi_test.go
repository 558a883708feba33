//go:build mpi

package pipeline_test

import (
	"context"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/mpitest"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Over `mpirun -np 2`, each process runs one stage (GPipe, then 1F1B):
// the losses and each stage's weights are one device's within float
// tolerance, and each rank's measured peak equals its plan at every
// step.
func TestMPIPipeline(t *testing.T) {
	if mpitest.Mode() != "" {
		c := mpitest.Join(t)
		defer comm.Close(c)
		data := batches(3, 12)
		init, want, wantLoss := oneDevice(t, data)
		for _, sched := range []pipeline.Schedule{pipeline.GPipe, pipeline.OneFOneB} {
			ctx := context.Background()
			dev := device.CPU()
			p, err := pipeline.NewRank(c, layers(), zoo.CrossEntropyLoss, []int{0, 2, 5}, dev, adam, 4, 9)
			if err != nil {
				t.Fatal(err)
			}
			p.Schedule = sched
			if err := p.Load(init); err != nil {
				t.Fatal(err)
			}
			for i, b := range data {
				sp, err := p.Plan(train.MetaOf(b[0]), train.MetaOf(b[1]))
				if err != nil {
					t.Fatal(err)
				}
				dev.Alloc.ResetPeak()
				l, err := p.Step(ctx, b[0], b[1])
				if err != nil {
					comm.Abort(c, err)
				}
				if math.Abs(l-wantLoss[i]) > 1e-6*math.Abs(wantLoss[i]) {
					t.Errorf("rank %d, %v, step %d: loss %v, one device %v", c.Rank(), sched, i, l, wantLoss[i])
				}
				if got := dev.Alloc.MaxMemoryAllocated(); got != sp[0].Peak {
					t.Errorf("rank %d, %v, step %d: measured peak %d, planned %d (%v)", c.Rank(), sched, i, got, sp[0].Peak, sp[0])
				}
			}
			for _, q := range p.Stages[0].Store.Trainable() {
				if d := relDiff(q.Value.F32(), want[q.Name].F32()); d > 1e-5 {
					t.Errorf("rank %d, %v: %s differs from one device's by %.3g relative", c.Rank(), sched, q.Name, d)
				}
			}
			p.Close()
		}
		return
	}
	out, err := mpitest.Test(t, 2, "TestMPIPipeline", "1")
	if err != nil {
		t.Fatalf("mpirun -np 2: %v\n%s", err, out)
	}
}
