package gan

import (
	"errors"
	"fmt"
	"sort"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// Option is one configuration the planner weighs: its memory plan and its
// estimated time per iteration (both steps, by the budget package's cost
// model: a ranking, not a promise of seconds).
type Option struct {
	Step    train.Config
	Plan    MemoryPlan
	Seconds float64
}

// Candidates are the configurations Fit considers: fp32 and bf16-mixed,
// each with nothing recomputed, the cheap ops recomputed (selective),
// checkpoint regions recomputed (the networks' Checkpoint flags: each
// RRDB block, each discriminator stage) and both.
func Candidates() []train.Config {
	var out []train.Config
	for _, p := range []transform.Precision{transform.FP32, transform.BF16Mixed} {
		for _, r := range []train.Recompute{train.NoRecompute, train.Selective, train.Regions} {
			out = append(out, train.Config{Precision: p, Recompute: r})
		}
	}
	return out
}

// ErrBudget is matched by errors.Is when no candidate fits the budget.
var ErrBudget = errors.New("gan: no configuration fits the budget")

// Fit plans every candidate on lq and gt and returns the fastest whose
// iteration fits in budgetBytes (by the plan's total, persistent memory
// included), and every option considered, fastest first. Nothing runs;
// on the meta device it allocates nothing beyond what the trainer holds.
func (t *Trainer) Fit(budgetBytes int64, lq, gt trace.Meta, cost budget.CostModel) (Option, []Option, error) {
	var opts []Option
	for _, c := range Candidates() {
		cfg := t.cfg
		cfg.Step = c
		o, err := t.option(cfg, lq, gt, cost)
		if err != nil {
			return Option{}, nil, err
		}
		opts = append(opts, o)
	}
	sort.SliceStable(opts, func(i, j int) bool { return opts[i].Seconds < opts[j].Seconds })
	for _, o := range opts {
		if o.Plan.Total() <= budgetBytes {
			return o, opts, nil
		}
	}
	least := opts[0]
	for _, o := range opts {
		if o.Plan.Total() < least.Plan.Total() {
			least = o
		}
	}
	return Option{}, opts, fmt.Errorf("%w: %s; the least memory is %s (%v, %v)", ErrBudget, device.FormatBytes(budgetBytes),
		device.FormatBytes(least.Plan.Total()), least.Step.Precision, least.Step.Recompute)
}

// Option plans configuration cfg and estimates its time.
func (t *Trainer) Option(cfg Config, lq, gt trace.Meta, cost budget.CostModel) (Option, error) {
	return t.option(cfg, lq, gt, cost)
}

func (t *Trainer) option(cfg Config, lq, gt trace.Meta, cost budget.CostModel) (Option, error) {
	m, err := t.PlanConfig(cfg, lq, gt)
	if err != nil {
		return Option{}, err
	}
	fake, err := t.fakeMeta(cfg, lq, gt)
	if err != nil {
		return Option{}, err
	}
	gp, err := t.program(cfg, false, lq, gt)
	if err != nil {
		return Option{}, err
	}
	dp, err := t.program(cfg, true, fake, gt)
	if err != nil {
		return Option{}, err
	}
	return Option{Step: cfg.Step, Plan: m, Seconds: cost.Graph(gp.Plan.Order) + cost.Graph(dp.Plan.Order)}, nil
}
