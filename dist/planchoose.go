package dist

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// FitCheapest plans every layout of ls and returns, of those whose every
// rank's reservation is at most budget, the one whose ranks send the
// fewest bytes per step (Choice.Moved, the most any rank sends), the
// earlier of ls on a tie, with all the choices tried. Unlike Fit it
// cannot stop at the first that fits: bytes moved are known only from a
// layout's plan (ZeRO-3's gathers, tensor parallelism's all-reduces of
// activations), so ls need not be ordered. When none fits the error is
// a *BudgetError naming the smallest budget.
func FitCheapest(ctx context.Context, j Job, budget int64, ls []Layout) (Choice, []Choice, error) {
	var tried []Choice
	best, smallest := -1, -1
	for _, l := range ls {
		c := Choice{Layout: l}
		c.Groups, c.Err = PlanRanks(ctx, j, l)
		if c.Err != nil {
			if ctx.Err() != nil {
				return Choice{}, tried, ctx.Err()
			}
			tried = append(tried, c)
			continue
		}
		c.Peak, _ = Peak(c.Groups)
		c.Reserved, c.ReservedRank = MaxReserved(c.Groups)
		c.Moved = slices.MaxFunc(c.Groups, func(a, b RankPlan) int { return int(a.Moved - b.Moved) }).Moved
		c.Fits = c.Reserved <= budget
		tried = append(tried, c)
		i := len(tried) - 1
		if c.Fits && (best < 0 || c.Moved < tried[best].Moved) {
			best = i
		}
		if smallest < 0 || c.Reserved < tried[smallest].Reserved {
			smallest = i
		}
	}
	switch {
	case best >= 0:
		return tried[best], tried, nil
	case smallest >= 0:
		b := tried[smallest]
		return Choice{}, tried, &BudgetError{Budget: budget, Smallest: b.Reserved, Rank: b.ReservedRank, Layout: b.Layout}
	}
	var errs []error
	for _, c := range tried {
		errs = append(errs, fmt.Errorf("%v: %w", c.Layout, c.Err))
	}
	return Choice{}, tried, errors.Join(errs...)
}
