package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/internal/modsummary"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

func cmdSummary(ctx context.Context, args []string) error {
	return summaryMain(ctx, args, os.Stdout, os.Stderr)
}

func summaryMain(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("summary", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "cnn", "model: "+strings.Join(zoo.Names(), ", "))
	batch := fs.Int("batch-size", 1, "samples in the input (output shapes and bytes scale with it)")
	fs.IntVar(batch, "batch", 1, "the same as --batch-size")
	opt := fs.String("optimizer", "adam", "optimizer of the planned training step: adam, adamw or sgd")
	precision := fs.String("precision", "fp32", precisionHelp)
	depth := fs.Int("depth", 3, "show modules down to this depth (0: all)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: headroom summary [flags]

Prints a model of the zoo module by module, as torchinfo's summary: each
module's parameters (a tied weight counted once, where PyTorch's
named_parameters lists it), the shape of its output, the bytes its forward
pass produces, and the bytes its values hold at the planned peak of a
training step; then the totals and the step's plan. Computed on the meta
device: nothing runs and nothing is allocated.

Flags:
`)
		printFlags(fs.Output(), fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("summary: unexpected argument %q", fs.Arg(0))
	}
	spec, err := zoo.Lookup(*model)
	if err != nil {
		return fmt.Errorf("summary: --model: %w", err)
	}
	if *batch < 1 {
		return fmt.Errorf("summary: --batch-size %d: must be at least 1", *batch)
	}
	if err := budget.CheckBatch(budget.Problem{Example: spec.Example, Batch: *batch}); err != nil {
		return fmt.Errorf("summary: --batch-size: %w", err)
	}
	if *depth < 0 {
		return fmt.Errorf("summary: --depth %d: must be at least 0 (0: all)", *depth)
	}
	newOpt := func() (optim.Optimizer, error) { return newOptimizer(*opt, 1e-3, -1) }
	if _, err := newOpt(); err != nil {
		return fmt.Errorf("summary: --optimizer: %w", err)
	}
	precs, _, err := parseNumerics(*precision, "none", false)
	if err != nil {
		return fmt.Errorf("summary: --precision: %w", err)
	}
	s, err := modsummary.Of(spec, *batch, newOpt, train.Config{Precision: precs[0]})
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	s.Print(stdout, *depth)
	return nil
}
