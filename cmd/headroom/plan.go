package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

func cmdPlan(ctx context.Context, args []string) error {
	return planMain(ctx, args, os.Stdout, os.Stderr)
}

// precisionHelp and compressHelp are the --precision and --compress texts
// of plan and train: what auto lets the planner consider.
var (
	precisionHelp = "numeric precision: " + strings.Join(transform.Precisions, ", ") +
		", a comma-separated list of them for the planner to choose from, or auto (with --budget: the planner chooses among " +
		strings.Join(budget.Names(budget.AutoPrecisions), " and ") + "; fp16-mixed and bf16-true only when named). " +
		"bf16 products run on the CPU's bfloat16 dot products (AVX512-BF16, float32 accumulation) where it has them, which saves time as well as memory; elsewhere, and for fp16, low precision is emulated (operands and outputs rounded, float32 arithmetic) and saves memory, not time. The planner's cost model knows which this CPU does"
	compressHelp = "how saved activations are stored until the backward pass: " + strings.Join(transform.Compressions, ", ") +
		", a comma-separated list of them for the planner to choose from, or auto (with --budget: the planner chooses among " +
		strings.Join(budget.Names(budget.AutoCompress), ", ") + "; masks stores ReLU masks as bits, exactly, and bf16 and int8 do too and compress " +
		"only the largest tensors the budget needs; fp16 and offload only when named)"
)

func planMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if wantsRanks(args) {
		return planRanksMain(ctx, args, stdout, stderr) // planranks.go
	}
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "cnn", "model: "+strings.Join(zoo.Names(), ", "))
	batch := fs.Int("batch-size", 32, "effective batch size (samples per optimizer step)")
	fs.IntVar(batch, "batch", 32, "the same as --batch-size")
	opt := fs.String("optimizer", "adam", "optimizer: adam, adamw or sgd")
	budgetFlag := fs.String("budget", "", "memory budget (e.g. 2GiB): choose micro-batching, recomputation, precision and compression to fit it")
	policy := fs.String("recompute", "", "restrict recomputation to one policy: none, selective or auto (default: try all)")
	fs.StringVar(policy, "policy", "", "the same as --recompute")
	precision := fs.String("precision", "fp32", precisionHelp)
	compress := fs.String("compress", "none", compressHelp)
	maxBatch := fs.Bool("max-batch", false, "with --budget: also print the largest batch, up to --batch-size, that fits in one pass (no accumulation) for each recomputation policy, found from plans (no trial steps, no out-of-memory)")
	passes := fs.Bool("passes", false, "also print what each compile pass did to the step (autodiff, recompute, autocast, compress, slicecat, readlow, fuse, schedule, arena): nodes before and after, and bytes where the pass knows them")
	snapshot := fs.String("memory-snapshot", "", "also write the planned allocation timeline of one step as a memory snapshot (.json, or .pickle for PyTorch's memory_viz), the format train --memory-snapshot records, for headroom viz")
	data := planDataFlags(fs)
	gradBufs := fs.Bool("gradient-buffers", false, gradBuffersHelp)
	inBack := fs.Bool("optimizer-in-backward", false, "update each parameter in the backward pass as soon as its gradient is final and free the gradient (no gradient buffers; same results); only with one micro-batch and no loss scaling (not fp16-mixed): with --budget the planner uses it wherever that holds and it peaks lower than gradients in the arena")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: headroom plan [flags]

Prints the memory plan of one training step, computed on the meta device
(shapes only: nothing runs, nothing is allocated). With --budget it chooses the
fastest way to fit: micro-batch size and gradient accumulation steps, which
activations to recompute, and, among those --precision and --compress allow
(auto: fp32 or bf16-mixed; none, ReLU masks as bits, bf16 or int8), the
precision and how saved activations are stored, and with --optimizer-in-backward
whether to update parameters in the backward pass; it prints the byte breakdown
at the peak and the estimated slowdown. When nothing fits it says the smallest
budget that would.

With --ranks N: each rank's memory of data-parallel training on N ranks
(headroom plan --ranks N -h for its flags).

Flags:
`)
		printFlags(fs.Output(), fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("plan: unexpected argument %q", fs.Arg(0))
	}
	// Every flag is checked before any work.
	var pol budget.Policy
	if *policy != "" {
		policyFlag := "--recompute" // or its alias, as given
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "policy" {
				policyFlag = "--policy"
			}
		})
		if *budgetFlag == "" {
			return fmt.Errorf("plan: %s %s: restricting the planner's recomputation needs --budget (without it nothing is recomputed)", policyFlag, *policy)
		}
		var err error
		if pol, err = budget.ParsePolicy(*policy); err != nil {
			return fmt.Errorf("plan: %s: %w", policyFlag, err)
		}
	}
	var b int64
	if *budgetFlag != "" {
		var err error
		if b, err = device.ParseBytes(*budgetFlag); err != nil {
			return fmt.Errorf("plan: --budget: %w", err)
		}
	}
	spec, err := zoo.Lookup(*model)
	if err != nil {
		return err
	}
	if _, err := newOptimizer(*opt, 1e-3, -1); err != nil {
		return err
	}
	if *batch < 1 {
		return fmt.Errorf("plan: --batch-size must be positive")
	}
	precs, comps, err := parseNumerics(*precision, *compress, *budgetFlag != "")
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	build := func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss }
	newOpt := func() (optim.Optimizer, error) { return newOptimizer(*opt, 1e-3, -1) }
	if err := budget.CheckBatch(budget.Problem{Example: spec.Example, Batch: *batch}); err != nil {
		return fmt.Errorf("plan: --batch-size: %w", err)
	}
	if *maxBatch && *budgetFlag == "" {
		return fmt.Errorf("plan: --max-batch needs --budget (the largest batch that fits it)")
	}
	if *snapshot != "" {
		if err := checkOutputPath(*snapshot); err != nil {
			return fmt.Errorf("plan: --memory-snapshot: %w", err)
		}
	}
	if err := data.check(); err != nil {
		return err
	}
	loader, err := data.open(spec, *batch)
	if err != nil {
		return err
	}
	if *budgetFlag == "" {
		err := printPlan(stdout, stderr, spec, build, newOpt, *batch, train.Config{Precision: precs[0], Storage: comps[0], OptimizerInBackward: *inBack, GradientBuffers: *gradBufs}, *passes, func(w io.Writer) error {
			if loader == nil {
				return nil
			}
			lp, err := loader(data.prefetch)
			if err == nil {
				lp.row(w)
			}
			return err
		})
		if err != nil || *snapshot == "" {
			return err
		}
		return writePlanSnapshot(ctx, *snapshot, spec, newOpt, train.Config{Precision: precs[0], Storage: comps[0], OptimizerInBackward: *inBack, GradientBuffers: *gradBufs}, *batch, 1, stdout)
	}
	prob := budget.Problem{Build: build, Example: spec.Example, Batch: *batch, Budget: b, NewOptimizer: newOpt, Precisions: precs, Compress: comps,
		OptimizerInBackward: *inBack, GradientBuffers: *gradBufs}
	if *policy != "" {
		prob.Policies = []budget.Policy{pol}
	}
	res, err := data.fit(ctx, stdout, fmt.Sprintf("model %s, batch %d, optimizer %s\n", spec.Name, *batch, *opt), prob, loader)
	if err != nil {
		return err
	}
	if *maxBatch {
		pols := budget.Policies
		if *policy != "" {
			pols = []budget.Policy{pol}
		}
		fmt.Fprintf(stdout, "largest batch in one pass within %s (up to %d):\n", device.FormatBytes(b), *batch)
		for _, p := range pols {
			n, err := budget.MaxBatch(ctx, prob, p)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "  recompute %-10s %d\n", p, n)
		}
	}
	if *snapshot != "" {
		if err := writePlanSnapshot(ctx, *snapshot, spec, newOpt, res.Best.Config(), *batch, res.Best.Accumulation, stdout); err != nil {
			return err
		}
	}
	if *passes {
		o, err := newOpt()
		if err != nil {
			return err
		}
		tr, err := train.Setup(device.Meta(), 1, build, o)
		if err != nil {
			return err
		}
		defer tr.Close()
		x, y := spec.Example(res.Best.MicroBatch)
		return printPasses(stdout, tr, res.Best.Config(), x, y)
	}
	return nil
}

// printPasses writes what each compile pass did to the step under cfg.
func printPasses(w io.Writer, tr *train.Trainer, cfg train.Config, x, y trace.Meta) error {
	_, c, err := tr.PlanConfig(cfg, x, y)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "compile passes (nodes before -> after):")
	for _, r := range c.Passes {
		if r.Skipped {
			fmt.Fprintf(w, "  %-10s skipped\n", r.Name)
			continue
		}
		line := fmt.Sprintf("  %-10s %6d -> %-6d %s", r.Name, r.NodesBefore, r.NodesAfter, r.Detail)
		if r.BytesSaved != 0 {
			line += fmt.Sprintf("; %s saved", device.FormatBytes(r.BytesSaved))
		}
		fmt.Fprintln(w, line)
	}
	return nil
}

// parseNumerics reads --precision and --compress: a choice for the planner
// (auto or a list) needs a budget to choose by.
func parseNumerics(precision, compress string, haveBudget bool) (precs []transform.Precision, comps []transform.Compression, err error) {
	if precs, err = budget.ParsePrecisions(precision); err != nil {
		return nil, nil, err
	}
	if comps, err = budget.ParseCompressions(compress); err != nil {
		return nil, nil, err
	}
	if !haveBudget && (len(precs) > 1 || len(comps) > 1) {
		return nil, nil, fmt.Errorf("--precision %s --compress %s: a choice between several must be made with --budget (the planner chooses what fits it fastest)", precision, compress)
	}
	return precs, comps, nil
}

func printPlan(w, log io.Writer, spec zoo.Spec, build func(*nn.Store) (train.Model, train.LossFunc), newOpt func() (optim.Optimizer, error), batch int, cfg train.Config, passes bool, rows func(io.Writer) error) error {
	prec, storage, inBack := cfg.Precision, cfg.Storage, cfg.OptimizerInBackward
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
	tr, err := train.NewConfig(dev, store, m, loss, o, cfg)
	if err != nil {
		return err
	}
	defer tr.Close()
	optimizer := ""
	if inBack {
		if err := tr.CheckOptimizerInBackward(1); err != nil {
			fmt.Fprintf(log, "headroom: --optimizer-in-backward does not apply, planning with gradient buffers: %v\n", err)
		} else {
			optimizer = ", optimizer in the backward pass"
		}
	}
	x, y := spec.Example(batch)
	mp, err := tr.Plan(x, y)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "model %s (%s), %d parameters, batch %d, precision %s, saved activations %s%s\n", spec.Name, spec.Description, store.NumParams(), batch, prec, storage, optimizer)
	printGradients(w, tr, 1, cfg.GradientBuffers)
	mp.Print(w)
	if err := rows(w); err != nil {
		return err
	}
	if passes {
		return printPasses(w, tr, tr.Config(), x, y)
	}
	return nil
}
