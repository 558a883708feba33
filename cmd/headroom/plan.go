package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

func cmdPlan(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	model := fs.String("model", "cnn", "model: "+strings.Join(zoo.Names(), ", "))
	batch := fs.Int("batch", 32, "effective batch size (samples per optimizer step)")
	opt := fs.String("optimizer", "adam", "optimizer: adam, adamw or sgd")
	budgetFlag := fs.String("budget", "", "memory budget (e.g. 2GiB): choose micro-batching and recomputation to fit it")
	policy := fs.String("policy", "", "restrict recomputation to one policy: none, selective or auto (default: try all)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: headroom plan [flags]

Prints the memory plan of one training step, computed on the meta device
(shapes only: nothing runs, nothing is allocated). With --budget it chooses the
fastest way to fit: micro-batch size and gradient accumulation steps, and which
activations to recompute, and prints the byte breakdown at the peak and the
estimated slowdown; when nothing fits it says the smallest budget that would.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	spec, err := zoo.Lookup(*model)
	if err != nil {
		return err
	}
	if _, err := newOptimizer(*opt, 1e-3); err != nil {
		return err
	}
	if *batch < 1 {
		return fmt.Errorf("plan: --batch must be positive")
	}
	build := func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss }
	newOpt := func() (optim.Optimizer, error) { return newOptimizer(*opt, 1e-3) }
	if *budgetFlag == "" {
		return printPlan(spec, build, newOpt, *batch)
	}
	b, err := device.ParseBytes(*budgetFlag)
	if err != nil {
		return fmt.Errorf("plan: --budget: %w", err)
	}
	prob := budget.Problem{Build: build, Example: spec.Example, Batch: *batch, Budget: b, NewOptimizer: newOpt}
	if *policy != "" {
		if _, err := budget.ParsePolicy(*policy); err != nil {
			return err
		}
		prob.Policies = []string{*policy}
	}
	res, err := budget.Fit(ctx, prob)
	if err != nil {
		return err
	}
	fmt.Printf("model %s, batch %d, optimizer %s\n", spec.Name, *batch, *opt)
	res.Print(os.Stdout, b)
	return nil
}

func printPlan(spec zoo.Spec, build func(*nn.Store) (train.Model, train.LossFunc), newOpt func() (optim.Optimizer, error), batch int) error {
	dev := device.Meta()
	store := nn.NewStore()
	m, loss := build(store)
	if err := store.Materialize(dev, 1); err != nil {
		return err
	}
	o, err := newOpt()
	if err != nil {
		return err
	}
	tr, err := train.New(dev, store, m, loss, o)
	if err != nil {
		return err
	}
	defer tr.Close()
	x, y := spec.Example(batch)
	mp, err := tr.Plan(x, y)
	if err != nil {
		return err
	}
	fmt.Printf("model %s (%s), %d parameters, batch %d\n", spec.Name, spec.Description, store.NumParams(), batch)
	mp.Print(os.Stdout)
	return nil
}
