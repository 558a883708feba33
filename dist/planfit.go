package dist

import (
	"context"
	"fmt"
	"strings"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
)

// RankBudgetError is a budget some ranks cannot meet, as every rank of the
// job reports it: the ranks, what each needs at the least, and the
// smallest budget of the job (the most any rank needs).
type RankBudgetError struct {
	Budget int64
	// Ranks cannot meet Budget; Need[i] is the least Ranks[i] needs.
	Ranks []int
	Need  []int64
	// Smallest is the least budget every rank meets.
	Smallest int64
	// Rank is the rank reporting.
	Rank int
}

func (e *RankBudgetError) Error() string {
	var b strings.Builder
	for i, r := range e.Ranks {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "rank %d needs %s", r, device.FormatBytes(e.Need[i]))
	}
	return fmt.Sprintf("dist: a budget of %s per rank cannot be met: %s at the least (over 1, 2, 4, ... passes per step down to one sample); the smallest budget every rank meets is %s (this is rank %d)", device.FormatBytes(e.Budget), b.String(), device.FormatBytes(e.Smallest), e.Rank)
}

func (e *RankBudgetError) Unwrap() error { return ErrBudget }

// FitRank is each rank's part in fitting a budget: called by every rank
// of c's group with the same job and layout, it plans this rank (as
// PlanRank: on the meta device, by the code that runs it) in the fewest
// passes per step, of 1, 2, 4, ... up to one sample each, whose
// reservation is at most budget, and the ranks agree on
// the accumulation, the most any rank needs, so that every rank runs its
// share in the same number of passes. It returns the accumulation and
// this rank's plan under it. A rank that cannot meet the budget stops
// every rank with a *RankBudgetError naming it and the smallest budget
// (the least reservation of the plans tried). ZeRO-2 runs the optimizer in the backward pass,
// which one pass per step allows only: its ranks are planned at their
// whole share.
func FitRank(ctx context.Context, c comm.Comm, j Job, l Layout, budget int64) (int, RankPlan, error) {
	rank, size := c.Rank(), c.Size()
	if l.Ranks != size {
		return 0, RankPlan{}, fmt.Errorf("%w: a layout of %d ranks on a group of %d", ErrConfig, l.Ranks, size)
	}
	lo, hi := shareOf(j.Batch, rank, size)
	share := hi - lo
	if l.Tensor > 1 {
		share = j.Batch // every rank of a tensor-parallel group runs the whole batch
	}
	least := max(j.Config.Accumulation, 1) // the fewest passes allowed
	plan := func(micro int) (RankPlan, error) {
		jm := j
		jm.Config.Accumulation = (share + micro - 1) / micro
		return PlanRank(ctx, jm, l, rank)
	}
	oneCall := l.Zero == 2 || l.Overlap // the optimizer in the backward pass
	if oneCall && least > 1 {
		return 0, RankPlan{}, fmt.Errorf("%w: %v with %d passes per step: the optimizer runs in the backward pass, which needs one", ErrConfig, l, least)
	}
	// The fewest passes that fit, trying 1, 2, 4, ... (at least the
	// accumulation asked for) up to one sample per pass: the reservation
	// is not monotonic in the micro-batch (the allocator maps segments of
	// a few sizes), so the first that fits is taken, not a bisection's.
	var ks []int
	if oneCall {
		ks = []int{1}
	} else {
		for k := least; k < share; k *= 2 {
			ks = append(ks, k)
		}
		ks = append(ks, max(share, 1))
	}
	fit, need := 0, int64(-1)
	for _, k := range ks {
		p, err := plan((share + k - 1) / k)
		if err != nil {
			// The others must not wait for this rank in the agreement.
			comm.Abort(c, err)
			return 0, RankPlan{}, err
		}
		if need < 0 || p.Reserved < need {
			need = p.Reserved
		}
		if p.Reserved <= budget {
			fit = k
			break
		}
	}
	mine := fit
	// Every rank's passes and least need, each in its own slot.
	v := make([]float64, 2*size)
	v[rank], v[size+rank] = float64(mine), float64(need)
	if err := c.AllReduce64(ctx, v, comm.Sum); err != nil {
		return 0, RankPlan{}, err
	}
	e := &RankBudgetError{Budget: budget, Rank: rank, Smallest: budget}
	accum := 0
	for r := range size {
		if v[r] == 0 {
			n := int64(v[size+r])
			e.Smallest = max(e.Smallest, n)
			e.Ranks, e.Need = append(e.Ranks, r), append(e.Need, n)
		}
		accum = max(accum, int(v[r]))
	}
	if len(e.Ranks) > 0 {
		return 0, RankPlan{}, e
	}
	jm := j
	jm.Config.Accumulation = accum
	p, err := PlanRank(ctx, jm, l, rank)
	if err == nil && p.Reserved > budget {
		err = fmt.Errorf("dist: rank %d: %d passes of %d samples reserve %s, over the budget of %s", rank, accum, p.MicroBatch, device.FormatBytes(p.Reserved), device.FormatBytes(budget))
	}
	return accum, p, err
}
