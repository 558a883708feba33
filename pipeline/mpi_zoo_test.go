//go:build mpi

package pipeline_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/mpitest"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/train"
)

// Over `mpirun -np 2`, the GPT (its tied token embedding summed between
// the two processes), a ResNet and RRDBNet (its skip sent with the
// activation) run one stage per process under GPipe and 1F1B: losses
// and the weights' changes are one device's within float tolerance, the
// tied copies are equal bit for bit, and each rank's measured peak
// equals its plan.
func TestMPIZooPipeline(t *testing.T) {
	if mpitest.Mode() != "" {
		c := mpitest.Join(t)
		defer comm.Close(c)
		for _, zc := range zooCases() {
			if zc.name == "bottleneck" {
				continue
			}
			const micro = 4
			data := zooBatches(zc, 1, 8)
			init, want, wantLoss := zooOneDevice(t, zc, micro, data)
			ls, err := zc.layers()
			if err != nil {
				t.Fatal(err)
			}
			for _, sched := range []pipeline.Schedule{pipeline.GPipe, pipeline.OneFOneB} {
				ctx := context.Background()
				dev := device.CPU()
				p, err := pipeline.NewRank(c, ls, zc.spec.Loss, zc.cuts2, dev, sgd, micro, 9)
				if err != nil {
					comm.Abort(c, err)
				}
				p.Schedule = sched
				if err := p.Load(init); err != nil {
					t.Fatal(err)
				}
				for i, b := range data {
					sp, err := p.Plan(train.MetaOf(b[0]), train.MetaOf(b[1]))
					if err != nil {
						comm.Abort(c, err)
					}
					dev.Alloc.ResetPeak()
					l, err := p.Step(ctx, b[0], b[1])
					if err != nil {
						comm.Abort(c, err)
					}
					if math.Abs(l-wantLoss[i]) > 1e-5*math.Abs(wantLoss[i]) {
						t.Errorf("%s, rank %d, %v, step %d: loss %v, one device %v", zc.name, c.Rank(), sched, i, l, wantLoss[i])
					}
					if got := dev.Alloc.MaxMemoryAllocated(); got != sp[0].Peak {
						t.Errorf("%s, rank %d, %v, step %d: measured peak %d, planned %d (%v)", zc.name, c.Rank(), sched, i, got, sp[0].Peak, sp[0])
					}
				}
				w := map[string][]float32{}
				for _, q := range p.Stages[0].Store.Trainable() {
					w[q.Name] = q.Value.F32()
				}
				// The tied copies' equality: each changed as one device's.
				checkWeights(t, []map[string][]float32{w}, init, want, 1e-4, false)
				p.Close()
			}
		}
		return
	}
	out, err := mpitest.TestWithin(t, 4*time.Minute, 2, "TestMPIZooPipeline", "1", "-test.v")
	if err != nil {
		t.Fatalf("mpirun -np 2: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
