package pipeline_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// rankRun trains data on a pipeline of len(cuts)-1 ranks (comm.Run, one
// goroutine and one device each) from init and returns the losses rank
// 0 saw, every stage's final weights, and each rank's plan of every step
// with its measured peak.
func rankRun(t *testing.T, ls []pipeline.Layer, cuts []int, sched pipeline.Schedule, micro int, init map[string]*tensor.Tensor, data [][2]*tensor.Tensor) (losses []float64, final map[string][]float32, plans [][]pipeline.StagePlan, peaks [][]int64) {
	t.Helper()
	losses, stages, plans, peaks := pipelineRanks(t, ls, zoo.CrossEntropyLoss, adam, cuts, sched, micro, init, data)
	final = map[string][]float32{}
	for _, w := range stages {
		maps.Copy(final, w)
	}
	return losses, final, plans, peaks
}

// pipelineRanks trains data on a pipeline of ls on len(cuts)-1 ranks
// (comm.Run, one goroutine and one device each; optimizers from newOpt)
// from init, and returns the losses rank 0 saw, each rank's stage's final
// weights, and each rank's plan of every step with its measured peak.
func pipelineRanks(t *testing.T, ls []pipeline.Layer, loss train.LossFunc, newOpt func() (optim.Optimizer, error), cuts []int, sched pipeline.Schedule, micro int, init map[string]*tensor.Tensor, data [][2]*tensor.Tensor) (losses []float64, final []map[string][]float32, plans [][]pipeline.StagePlan, peaks [][]int64) {
	t.Helper()
	R := len(cuts) - 1
	final = make([]map[string][]float32, R)
	plans, peaks = make([][]pipeline.StagePlan, R), make([][]int64, R)
	var mu sync.Mutex
	err := comm.Run(context.Background(), R, func(ctx context.Context, c comm.Comm) error {
		r := c.Rank()
		dev := device.CPU()
		p, err := pipeline.NewRank(c, ls, loss, cuts, dev, newOpt, micro, 9)
		if err != nil {
			return err
		}
		defer p.Close()
		p.Schedule = sched
		if init != nil {
			if err := p.Load(init); err != nil {
				return err
			}
		}
		for _, b := range data {
			sp, err := p.Plan(train.MetaOf(b[0]), train.MetaOf(b[1]))
			if err != nil {
				return err
			}
			dev.Alloc.ResetPeak()
			l, err := p.Step(ctx, b[0], b[1])
			if err != nil {
				return err
			}
			mu.Lock()
			if r == 0 {
				losses = append(losses, l)
			}
			plans[r] = append(plans[r], sp[0])
			peaks[r] = append(peaks[r], dev.Alloc.MaxMemoryAllocated())
			mu.Unlock()
		}
		w := map[string][]float32{}
		for _, q := range p.Stages[0].Store.Trainable() {
			w[q.Name] = append([]float32(nil), q.Value.F32()...)
		}
		mu.Lock()
		final[r] = w
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return losses, final, plans, peaks
}

// Stages on ranks (2 and 3, in-process goroutines with comm.Run), GPipe
// and 1F1B, train as one device does: the same losses (on every rank)
// and weights within float tolerance; each rank's measured peak equals
// its plan at every step.
func TestRanksMatchOneDevice(t *testing.T) {
	data := batches(3, 12)
	init, want, wantLoss := oneDevice(t, data)
	for _, tc := range []struct {
		cuts  []int
		sched pipeline.Schedule
	}{{[]int{0, 2, 5}, pipeline.GPipe}, {[]int{0, 1, 3, 5}, pipeline.GPipe}, {[]int{0, 2, 5}, pipeline.OneFOneB}, {[]int{0, 1, 3, 5}, pipeline.OneFOneB}} {
		t.Run(fmt.Sprint(tc.cuts, tc.sched), func(t *testing.T) {
			losses, final, plans, peaks := rankRun(t, layers(), tc.cuts, tc.sched, 4, init, data)
			for i, l := range losses {
				if math.Abs(l-wantLoss[i]) > 1e-6*math.Abs(wantLoss[i]) {
					t.Errorf("step %d: loss %v, one device %v", i, l, wantLoss[i])
				}
			}
			worst := 0.0
			for name, w := range want {
				got, ok := final[name]
				if !ok {
					t.Fatalf("no rank holds %s", name)
				}
				worst = max(worst, relDiff(got, w.F32()))
			}
			t.Logf("weights within %.3g of one device's", worst)
			if worst > 1e-5 {
				t.Fatalf("weights differ from one device's by %.3g relative", worst)
			}
			checkPeaks(t, plans, peaks)
		})
	}
}

func checkPeaks(t *testing.T, plans [][]pipeline.StagePlan, peaks [][]int64) {
	t.Helper()
	for r := range plans {
		for i := range plans[r] {
			if peaks[r][i] != plans[r][i].Peak {
				t.Errorf("rank %d, step %d: measured peak %d, planned %d (%v)", r, i, peaks[r][i], plans[r][i].Peak, plans[r][i])
			}
		}
	}
}

// On 3 ranks with 8 micro-batches, 1F1B holds fewer inputs than GPipe and
// peaks lower on every rank (GPipe's last rank receives the inputs in
// the order they are sent and runs them last first: it holds them all); with MiB-sized activations (large blocks
// the allocator hands out whole) each rank's peak still equals its plan.
func TestRanksOneFOneBBelowGPipe(t *testing.T) {
	for _, tc := range []struct {
		name string
		ls   []pipeline.Layer
		cuts []int
		data [][2]*tensor.Tensor
	}{{"mlp", layers(), []int{0, 1, 3, 5}, batches(1, 24)}, {"wide", wideLayers(), []int{0, 1, 3, 4}, wideBatches(2, 8*152)}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "wide" && testing.Short() {
				t.Skip("MiB-sized activations: seconds of compute")
			}
			got := map[pipeline.Schedule][][]pipeline.StagePlan{}
			for _, sched := range []pipeline.Schedule{pipeline.GPipe, pipeline.OneFOneB} {
				_, _, plans, peaks := rankRun(t, tc.ls, tc.cuts, sched, 8, nil, tc.data)
				checkPeaks(t, plans, peaks)
				got[sched] = plans
				for r := range plans {
					t.Logf("%v rank %d: %v", sched, r, plans[r][0])
				}
			}
			for r := range 3 {
				g, o := got[pipeline.GPipe][r][0], got[pipeline.OneFOneB][r][0]
				if !(o.Inputs < g.Inputs && o.Peak < g.Peak) {
					t.Errorf("rank %d: 1F1B inputs %d peak %d, GPipe inputs %d peak %d", r, o.Inputs, o.Peak, g.Inputs, g.Peak)
				}
			}
		})
	}
}
