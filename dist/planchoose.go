package dist

import (
	"context"
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
	best := -1
	for _, l := range ls {
		c, err := planChoice(ctx, j, budget, l)
		if err != nil {
			return Choice{}, tried, err
		}
		tried = append(tried, c)
		if c.Fits && (best < 0 || c.Moved < tried[best].Moved) {
			best = len(tried) - 1
		}
	}
	if best >= 0 {
		return tried[best], tried, nil
	}
	return Choice{}, tried, noFit(budget, tried)
}
