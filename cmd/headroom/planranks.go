package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// wantsRanks reports whether plan's arguments ask for the plan of several
// ranks (--ranks), which planRanksMain makes.
func wantsRanks(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "ranks" {
			return true
		}
	}
	return false
}

// planRanksMain is `headroom plan --ranks N`: every rank's memory of
// data-parallel training on N ranks, planned on the meta device by the
// code each rank runs (dist.PlanRanks), for any N.
func planRanksMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ranks := fs.Int("ranks", 1, "number of ranks (processes, one device each)")
	model := fs.String("model", "cnn", "model: "+strings.Join(zoo.Names(), ", "))
	batch := fs.Int("batch-size", 0, "global batch (samples per optimizer step over all ranks; each rank takes its share); default 8 per rank")
	fs.IntVar(batch, "batch", 0, "the same as --batch-size")
	opt := fs.String("optimizer", "adam", "optimizer: adam, adamw or sgd")
	zero := fs.String("zero", "", "ZeRO stage: 0 (every rank holds all gradients and optimizer state), 1 (optimizer state sharded), 2 (gradients too), 3 (parameters too, gathered per layer); default 0, or with --budget the cheapest that fits")
	pipeline := fs.Int("pipeline", 1, "pipeline stages, one rank each (mlp and cnn; micro-batches: --accumulate); --ranks a multiple of it: replicas of the pipeline, each stage's gradients all-reduced over its replicas (--zero 0 or 1)")
	schedule := fs.String("schedule", "gpipe", "with --pipeline: the micro-batches' schedule, gpipe or 1f1b")
	tensor := fs.Int("tensor", 1, "tensor-parallel ranks per layer (GPT models: attention heads and MLP columns split; --ranks a multiple of it: data parallelism across the groups, ZeRO 0-2 across them); with --budget and neither --zero nor --tensor, the degrees the model allows are tried too")
	budgetFlag := fs.String("budget", "", "memory of each rank's device (e.g. 16GiB): choose the cheapest ZeRO stage that fits every rank, or say the smallest budget that would")
	bucket := fs.String("bucket-size", "25MiB", "the gradient bucket all-reduced at once (ZeRO 0 and 1), and the pieces ZeRO scatters and gathers")
	accum := fs.Int("accumulate", 1, "micro-batches each rank splits its share into (gradient accumulation)")
	precision := fs.String("precision", "fp32", "numeric precision of every rank: "+strings.Join(budget.Names(budget.AutoPrecisions), ", ")+", ...")
	gatherPrefetch := fs.Int("gather-prefetch", 0, gatherPrefetchUsage)
	overlap := fs.Bool("overlap", false, "ZeRO 0: all-reduce each gradient bucket as soon as the backward pass has finished it (train --overlap)")
	exact := fs.Bool("bytes", false, "print exact byte counts instead of KiB, MiB, GiB")
	clip := fs.Float64("clip-grad", 0, "gradient clipping as train will use it (ZeRO-2 cannot clip: not chosen then)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: headroom plan --ranks N [--zero 0|1|2|3] [--pipeline P] [--tensor T] [--budget B] [flags]

Prints each rank's memory of data-parallel training on N ranks (parameters,
gradients, optimizer state, activations at the peak, communication buffers,
peak), planned on the meta device by the very code each rank runs under
mpirun (dist.NewTrainer with a communicator that moves no data): nothing runs,
for any N. Ranks whose plans are equal (the same share of the batch, the same
shards) are planned once and printed as one line, "0–511".

With --budget and no --zero, the ZeRO stages are tried cheapest first, by
bytes each rank sends per step (ring collectives), then by fewer collectives:
0 (all-reduce of the gradients, 2(N-1)/N of their bytes), 2 (reduce-scatter
of the gradients and all-gather of the parameters, as many bytes up to
padding, but a pair of collectives per parameter), 1 (the all-reduce of 0
plus the all-gather: 3(N-1)/N); the first whose every rank fits is chosen.
When none fits, it says the smallest budget that would. ZeRO 3 (parameters
sharded and gathered per layer in the step) and, for GPT models, tensor
parallelism over all N ranks (when N divides the heads) and over groups of
T ranks with data parallelism across them (T dividing N and the heads;
ZeRO 0 and 2 across the groups) are tried as well;
of the layouts whose every rank fits, the one whose ranks send the fewest
bytes per step is chosen (as planned from each step's collectives), the
earlier of the order above on a tie. With --pipeline P and --tensor T
(GPT models) each stage's blocks are split across T ranks (Megatron's
tensor × pipeline layout, N = D×P×T); with --pipeline, --budget and no
--tensor, the tensor degrees that divide N/P and the heads are tried too.

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
	if *ranks < 1 {
		return fmt.Errorf("plan: --ranks %d: at least 1", *ranks)
	}
	if *pipeline < 1 || *tensor < 1 {
		return fmt.Errorf("plan: --pipeline %d --tensor %d: at least 1 each", *pipeline, *tensor)
	}
	if *ranks%(*pipeline**tensor) != 0 {
		return fmt.Errorf("plan: --ranks %d is not a multiple of --pipeline %d × --tensor %d", *ranks, *pipeline, *tensor)
	}
	var stages []int
	switch *zero {
	case "":
	default:
		z, err := strconv.Atoi(*zero)
		if err != nil || z < 0 || z > 3 {
			return fmt.Errorf("plan: --zero %q: 0, 1, 2 or 3", *zero)
		}
		stages = []int{z}
	}
	var b int64
	if *budgetFlag != "" {
		var err error
		if b, err = device.ParseBytes(*budgetFlag); err != nil {
			return fmt.Errorf("plan: --budget: %w", err)
		}
	}
	bucketBytes, err := device.ParseBytes(*bucket)
	if err != nil {
		return fmt.Errorf("plan: --bucket-size: %w", err)
	}
	spec, err := zoo.Lookup(*model)
	if err != nil {
		return err
	}
	o, err := newOptimizer(*opt, 1e-3, -1)
	if err != nil {
		return err
	}
	if *accum < 1 {
		return fmt.Errorf("plan: --accumulate %d: at least 1", *accum)
	}
	precs, comps, err := parseNumerics(*precision, "none", false)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	dataRanks := *ranks / (*pipeline * *tensor)
	if *batch == 0 {
		*batch = 8 * dataRanks
	}
	if *batch < dataRanks {
		return fmt.Errorf("plan: --batch-size %d: fewer samples than the %d data-parallel ranks (each needs one)", *batch, dataRanks)
	}
	if stages == nil {
		stages = []int{0}
		if b > 0 {
			stages = dist.Stages(o, *clip > 0)
		}
	}
	job := dist.Job{
		Build:        func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss },
		Example:      spec.Example,
		NewOptimizer: func() (optim.Optimizer, error) { return newOptimizer(*opt, 1e-3, -1) },
		Batch:        *batch,
		Config:       train.Config{Accumulation: *accum, Precision: precs[0], Storage: comps[0]},
	}
	if job.Pipeline, err = pipelineJob(*model, *pipeline, *accum, *schedule, b); err != nil {
		return fmt.Errorf("plan: %w", notAvailable(err))
	}
	if job.Pipeline != nil && *zero == "" {
		stages = []int{0}
	}
	var layouts []dist.Layout
	for _, z := range stages {
		layouts = append(layouts, dist.Layout{Ranks: *ranks, Zero: z, Pipeline: *pipeline, Tensor: *tensor, BucketBytes: bucketBytes, Overlap: *overlap && z == 0})
	}
	if b > 0 && *zero == "" && !flagSet(fs, "tensor") && *pipeline == 1 {
		layouts = append(layouts, moreLayouts(job, *ranks, bucketBytes, *clip > 0)...)
	}
	if b > 0 && *zero == "" && !flagSet(fs, "tensor") && *pipeline > 1 {
		layouts = append(layouts, pipeTensorLayouts(job, *ranks, *pipeline, bucketBytes)...) // plan_tp3d.go
	}
	if layouts, err = withGatherPrefetch(layouts, *gatherPrefetch, *zero); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	s := nn.NewStore()
	spec.New(s.Root())
	fmt.Fprintf(stdout, "model %s (%s), %d parameters, optimizer %s, precision %s, global batch %d on %d ranks\n",
		spec.Name, spec.Description, s.NumParams(), *opt, precs[0], *batch, *ranks)
	if b == 0 {
		groups, err := dist.PlanRanks(ctx, job, layouts[0])
		if err != nil {
			return fmt.Errorf("plan: %w", notAvailable(err))
		}
		printRankPlans(stdout, layouts[0], groups, *exact)
		return nil
	}
	best, tried, err := dist.FitCheapest(ctx, job, b, layouts)
	fmt.Fprintf(stdout, "layouts tried against %s per rank (of those that fit, the one sending the fewest bytes per step is chosen):\n", device.FormatBytes(b))
	for _, c := range tried {
		switch {
		case c.Err != nil:
			fmt.Fprintf(stdout, "  %-28v %v\n", c.Layout, notAvailable(c.Err))
		default:
			verdict := "does not fit"
			if c.Fits {
				verdict = "fits"
			}
			fmt.Fprintf(stdout, "  %-22v largest peak %10s, reserved %10s (rank %d); sends %10s per step per rank: %s\n", c.Layout, device.FormatBytes(c.Peak), device.FormatBytes(c.Reserved), c.ReservedRank, device.FormatBytes(c.Moved), verdict)
		}
	}
	if err != nil {
		return fmt.Errorf("plan: %w", notAvailable(err))
	}
	fmt.Fprintf(stdout, "chosen: %v\n", best.Layout)
	printRankPlans(stdout, best.Layout, best.Groups, *exact)
	return nil
}

// notAvailable words dist.ErrNotAvailable for the command line.
func notAvailable(err error) error {
	if errors.Is(err, dist.ErrNotAvailable) {
		return fmt.Errorf("%w (flags --pipeline above 1, and --tensor with ZeRO 3 or with ZeRO in a single tensor group, are accepted so that plans can name them; they plan once package dist provides them)", err)
	}
	return err
}

// printRankPlans writes one line per group of ranks with equal plans.
func printRankPlans(w io.Writer, l dist.Layout, groups []dist.RankPlan, exact bool) {
	format := device.FormatBytes
	if exact {
		format = func(n int64) string { return strconv.FormatInt(n, 10) }
	}
	peak, rank := dist.Peak(groups)
	fmt.Fprintf(w, "memory of every rank, %v (planned on the meta device; ranks with equal plans on one line):\n", l)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ranks\tbatch\tparameters\tgradients\toptimizer\tactivations\tcommunication\tpeak\treserved\t")
	for _, g := range groups {
		m := g.Memory
		batch := strconv.Itoa(g.Batch)
		if g.MicroBatch != g.Batch {
			batch = fmt.Sprintf("%d (%d×%d)", g.Batch, (g.Batch+g.MicroBatch-1)/g.MicroBatch, g.MicroBatch)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", g.RanksString(), batch,
			format(m.Parameters), format(m.Gradients+m.TransientGradients), format(m.OptimizerState),
			format(m.Activations-m.TransientGradients), format(m.Communication), format(m.Total()), format(g.Reserved))
	}
	tw.Flush()
	moved, mrank, same := int64(0), 0, true
	for i, g := range groups {
		same = same && g.Moved == groups[0].Moved
		if i == 0 || g.Moved > moved {
			moved, mrank = g.Moved, g.Rank
		}
	}
	sends := fmt.Sprintf("each rank sends %s per step", format(moved))
	if !same {
		// Pipeline stages send different activations and gradients.
		sends = fmt.Sprintf("a rank sends up to %s per step (rank %d)", format(moved), mrank)
	}
	res, rrank := dist.MaxReserved(groups)
	fmt.Fprintf(w, "largest peak %s (rank %d), largest reservation %s (rank %d): the smallest device every rank fits; %s\n", format(peak), rank, format(res), rrank, sends)
}
