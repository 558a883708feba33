package pipeline_test

import (
	"context"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
)

// A pipeline's weights (StateDict) and optimizer state (OptimizerState),
// gathered on rank 0 after some steps and loaded into fresh stages
// (Load, LoadOptimizerState), continue bit for bit: the losses of the
// later steps are those of the uninterrupted run. The GPT's tied token
// embedding, held by the first and last stages, has one state.
func TestOptimizerStateResume(t *testing.T) {
	var c zooCase
	for _, z := range zooCases() {
		if z.name == "gpt" {
			c = z
		}
	}
	ls, err := c.layers()
	if err != nil {
		t.Fatal(err)
	}
	data := zooBatches(c, 4, 4)
	// run trains data[lo:hi] from sd and st (nil: fresh) on 2 ranks and
	// returns the losses and, gathered on rank 0 at the end, the weights
	// and optimizer state.
	run := func(lo, hi int, sd map[string]*tensor.Tensor, st *optim.SavedState) ([]float64, map[string]*tensor.Tensor, *optim.SavedState) {
		var mu sync.Mutex
		var losses []float64
		var outSD map[string]*tensor.Tensor
		var outSt *optim.SavedState
		err := comm.Run(context.Background(), 2, func(ctx context.Context, cm comm.Comm) error {
			p, err := pipeline.NewRank(cm, ls, c.spec.Loss, c.cuts2, device.CPU(), adam, 2, 3)
			if err != nil {
				return err
			}
			defer p.Close()
			if sd != nil {
				if err := p.Load(sd); err != nil {
					return err
				}
				if err := p.LoadOptimizerState(*st); err != nil {
					return err
				}
			}
			for _, b := range data[lo:hi] {
				l, err := p.Step(ctx, b[0], b[1])
				if err != nil {
					return err
				}
				if cm.Rank() == 0 {
					mu.Lock()
					losses = append(losses, l)
					mu.Unlock()
				}
			}
			gsd, err := p.StateDict(ctx)
			if err != nil {
				return err
			}
			gst, err := p.OptimizerState(ctx)
			if err != nil {
				return err
			}
			if cm.Rank() == 0 {
				mu.Lock()
				outSD, outSt = gsd, gst
				mu.Unlock()
			} else if gsd != nil || gst != nil {
				t.Errorf("rank %d returned a gathered state", cm.Rank())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return losses, outSD, outSt
	}
	whole, _, _ := run(0, 4, nil, nil)
	first, sd, st := run(0, 2, nil, nil)
	if len(first) != 2 {
		t.Fatalf("losses %v", first)
	}
	const wte = "transformer.wte.weight"
	if st == nil || len(st.Buffers[wte]["exp_avg"]) == 0 || st.Counts[wte]["step"] != 2 {
		t.Fatalf("gathered optimizer state lacks %s: %+v", wte, st)
	}
	if sd[wte] == nil {
		t.Fatalf("gathered weights lack %s", wte)
	}
	rest, _, _ := run(2, 4, sd, st)
	if len(rest) != 2 || rest[0] != whole[2] || rest[1] != whole[3] {
		t.Errorf("resumed losses %v, uninterrupted %v", rest, whole)
	}
}
