package gan_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// The case study's dynamic batch size (issue 15, item 4) beside headroom's.
// Its auto_batch_size starts at a batch, halves it on every out-of-memory
// error and never grows it back; headroom's batch comes from plans
// (budget.MaxBatch) before anything runs. Both are run for real on a cpu
// device capped at the budget with the mlp (steps take milliseconds).
func TestAutoBatchSizeVersusPlans(t *testing.T) {
	spec, _ := zoo.Lookup("mlp")
	prob := func(batch int, b int64) budget.Problem {
		return budget.Problem{
			Build: testkit.Build(spec), Example: spec.Example, Batch: batch, Budget: b,
			NewOptimizer: func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) },
		}
	}
	maxBatch := func(b int64, upper int) int {
		n, err := budget.MaxBatch(context.Background(), prob(upper, b), budget.RecomputeNone)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// budgetFor is the smallest budget whose largest batch is at least n,
	// so that the largest batch sits where the case needs it.
	budgetFor := func(n int) int64 {
		lo, hi := int64(1<<20), int64(64<<20)
		for lo < hi {
			mid := lo + (hi-lo)/2
			if maxBatch(mid, 1<<16) >= n {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return lo
	}
	r := rand.New(rand.NewSource(15))
	// step runs one training step of batch n on a fresh cpu device capped
	// at b (a restarted job, as after PyTorch's empty_cache) and returns
	// the out-of-memory errors the allocator raised and the peak. A step
	// that runs out is split by the trainer and completed; the case
	// study's loop treats the error as the signal to halve.
	step := func(n int, b int64) (ooms int, peak int64) {
		dev, err := device.New(fmt.Sprintf("cpu:mem=%d", b))
		if err != nil {
			t.Fatal(err)
		}
		opt, _ := optim.NewAdam(optim.AdamDefaults())
		tr, err := train.Setup(dev, 1, testkit.Build(spec), opt)
		if errors.Is(err, device.ErrOutOfMemory) {
			return 1, dev.Alloc.Stats().AllocatedBytes.Peak
		}
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		x, y := spec.Example(n)
		xt, yt := testkit.Batch(r, x, y, 10)
		if _, err := tr.Step(context.Background(), xt, yt); err != nil && !errors.Is(err, device.ErrOutOfMemory) {
			t.Fatal(err)
		}
		st := dev.Alloc.Stats()
		return int(st.NumOOMs), st.AllocatedBytes.Peak
	}
	// halving is the case study's auto_batch_size.
	halving := func(start int, b int64) (batch, ooms int) {
		for batch = start; batch > 0; batch /= 2 {
			if o, _ := step(batch, b); o == 0 {
				return batch, ooms
			}
			ooms++
		}
		return 0, ooms
	}
	for _, tc := range []struct {
		name  string
		start int
		// budget, from the largest batch wanted there (budgetFor)
		want int
		// whether halving must end at or below half of headroom's batch:
		// where the largest batch is one below a batch the halving tries
		half bool
	}{
		{"start 1030, max just below 515", 1030, 514, true},
		{"start 1024, max 700", 1024, 700, false},
		{"start 256 below the max 1000: both run 256", 256, 1000, false},
		{"start 4094, max just below 2047", 4094, 2046, true},
		{"start 2046, max just below 1023", 2046, 1022, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := budgetFor(tc.want)
			got := maxBatch(b, 1<<16)
			if got != tc.want {
				t.Fatalf("budget %d: max batch %d, want %d", b, got, tc.want)
			}
			// headroom: the batch from plans, at most the start, as
			// --max-batch does; zero OOMs, and one more sample does not fit.
			mine := maxBatch(b, tc.start)
			if o, peak := step(mine, b); o != 0 || peak > b {
				t.Fatalf("headroom's batch %d: %d OOMs, peak %d of %d", mine, o, peak, b)
			}
			if mine == got {
				if o, _ := step(mine+1, b); o == 0 {
					t.Fatalf("batch %d+1 ran within %d: %d is not the maximum", mine, b, mine)
				}
			}
			h, ooms := halving(tc.start, b)
			t.Logf("budget %s: headroom %d (0 OOMs), halving from %d: %d after %d OOMs (%.0f%%)", device.FormatBytes(b), mine, tc.start, h, ooms, 100*float64(h)/float64(mine))
			if h > mine {
				t.Fatalf("halving ran %d, more than the maximum %d", h, mine)
			}
			if tc.half && 2*h > mine {
				t.Fatalf("halving ended at %d, above half of %d", h, mine)
			}
		})
	}
}
