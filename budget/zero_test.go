package budget_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// A cost model with a rate left at 0 by omission (every plan's time
// infinite, every plan ranked equal) is refused, as is a Problem missing
// a function it calls (which panicked). The zero CostModel is still
// DefaultCost.
func TestProblemZeroValueTraps(t *testing.T) {
	spec, err := zoo.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	base := budget.Problem{
		Build:        func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss },
		Example:      spec.Example,
		Batch:        8,
		Budget:       1 << 30,
		NewOptimizer: func() (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.1}) },
		Policies:     []budget.Policy{budget.RecomputeNone},
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		edit func(p *budget.Problem)
		want error
	}{
		{"zero cost model is the default", func(p *budget.Problem) {}, nil},
		{"bandwidth omitted", func(p *budget.Problem) { p.Cost = budget.CostModel{FLOPS: 1e11} }, budget.ErrCost},
		{"flops omitted", func(p *budget.Problem) { p.Cost = budget.CostModel{Bandwidth: 1e10} }, budget.ErrCost},
		{"negative overhead", func(p *budget.Problem) { c := budget.DefaultCost; c.Overhead = -1; p.Cost = c }, budget.ErrCost},
		{"NaN convert", func(p *budget.Problem) { c := budget.DefaultCost; c.Convert = math.NaN(); p.Cost = c }, budget.ErrCost},
		{"measured rates", func(p *budget.Problem) { c := budget.DefaultCost; c.FLOPS = 1e11; c.Convert = 0; p.Cost = c }, nil},
		{"no Example", func(p *budget.Problem) { p.Example = nil }, budget.ErrProblem},
		{"no Build", func(p *budget.Problem) { p.Build = nil }, budget.ErrProblem},
		{"no NewOptimizer", func(p *budget.Problem) { p.NewOptimizer = nil }, budget.ErrProblem},
	} {
		p := base
		c.edit(&p)
		_, err := budget.Fit(ctx, p)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: Fit: %v, want %v", c.name, err, c.want)
		}
		if c.want != nil {
			if _, err := budget.MaxBatch(ctx, p, budget.RecomputeNone); !errors.Is(err, c.want) {
				t.Errorf("%s: MaxBatch: %v, want %v", c.name, err, c.want)
			}
		}
	}
}
