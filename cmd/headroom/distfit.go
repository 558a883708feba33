package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// rankFit is what train --budget chose on several ranks.
type rankFit struct {
	accum    int
	prec     transform.Precision
	compress transform.CompressPolicy // nil: kept as produced
	remat    transform.Policy
	policy   string // the recomputation's name
}

// fitRanks is --budget with several ranks: each rank plans itself under
// the budget (dist.FitRank: on the meta device, by the code it runs) in
// the fewest passes per step, the ranks agree on the most any needs, and
// the device is capped at the budget. With --recompute auto (none or
// selective), or several precisions or compressions (a list or auto),
// every combination is fitted so, in that order (precision, then
// compression, then recomputation, the given orders), and the one with
// the fewest passes wins, the first on a tie: every rank decides alike,
// from the agreed results. A budget no combination meets stops every
// rank, naming the ranks and the smallest budget (of the combination that
// needs least).
func (f *trainFlags) fitRanks(ctx context.Context, spec zoo.Spec, precs []transform.Precision, comps []transform.Compression, accum int, out io.Writer) (rankFit, error) {
	b, err := device.ParseBytes(f.budget)
	if err != nil {
		return rankFit{}, fmt.Errorf("train: --budget: %w", err)
	}
	var bucket int64
	if f.dist.bucket != "" {
		bucket, _ = device.ParseBytes(f.dist.bucket)
	}
	c := f.dist.c
	recs := []string{f.recompute}
	if f.recompute == "auto" {
		recs = []string{"none", "selective"}
	}
	var cands []rankFit
	for _, p := range precs {
		if p == transform.FP16Mixed && f.dist.sharded() && len(precs) > 1 {
			continue // loss scaling needs every gradient whole: refused under ZeRO 3 and --tensor
		}
		for _, cp := range comps {
			for _, r := range recs {
				cf := rankFit{prec: p, remat: policyByName(r), policy: r}
				if cp != (transform.Compression{}) {
					cf.compress = cp
				}
				cands = append(cands, cf)
			}
		}
	}
	least := max(accum, 1)
	best, bestPlan := -1, dist.RankPlan{}
	var short *dist.RankBudgetError
	for i := range cands {
		st, err := train.StorageOf(cands[i].compress)
		if err != nil {
			return rankFit{}, err
		}
		job := dist.Job{
			Build:        func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss },
			Example:      spec.Example,
			NewOptimizer: func() (optim.Optimizer, error) { return newOptimizer(f.optimizer, f.lr, f.weightDecay) },
			Batch:        f.batch,
			Config:       train.Config{Accumulation: accum, Precision: cands[i].prec, Recompute: train.MustRecompute(cands[i].remat), Storage: st},
		}
		k, p, err := dist.FitRank(ctx, c, job, f.dist.layout(c.Size(), bucket), b)
		var be *dist.RankBudgetError
		switch {
		case errors.As(err, &be):
			if short == nil || be.Smallest < short.Smallest {
				short = be
			}
			continue
		case err != nil:
			return rankFit{}, fmt.Errorf("train: --budget %s: %w", f.budget, err)
		}
		cands[i].accum = k
		if best < 0 || k < cands[best].accum {
			best, bestPlan = i, p
		}
		if k <= least {
			break // no combination runs fewer passes
		}
	}
	if best < 0 && short == nil {
		return rankFit{}, fmt.Errorf("train: --budget %s: no precision to try", f.budget)
	}
	if best < 0 {
		return rankFit{}, fmt.Errorf("train: --budget %s: %w", f.budget, short)
	}
	fit := cands[best]
	if len(cands) > 1 {
		storage := "kept"
		if fit.compress != nil {
			storage = fmt.Sprint(fit.compress)
		}
		fmt.Fprintf(out, "budget %s per rank: of %d combinations of precision, saved activations and recomputation, chose precision %s, saved activations %s, recompute %s (the fewest passes)\n",
			device.FormatBytes(b), len(cands), fit.prec, storage, fit.policy)
	}
	fmt.Fprintf(out, "budget %s per rank: every rank runs its share in %d pass(es) per step; rank %d plans %s allocated, %s reserved\n",
		device.FormatBytes(b), fit.accum, c.Rank(), device.FormatBytes(bestPlan.Memory.Total()), device.FormatBytes(bestPlan.Reserved))
	if !strings.Contains(f.device, "mem=") {
		f.device = fmt.Sprintf("%s:mem=%d", f.device, b)
	}
	return fit, nil
}
