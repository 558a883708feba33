// Command fitreport measures what automatic activation checkpointing buys
// on the reference workloads: planned activation memory with and without it
// (exact, from the plans) and the step time of both on the cpu device,
// measured side by side (A B A B ...), median and spread.
//
//	go run ./cmd/fitreport [-models resnet152-128,rrdbnet] [-steps 5]
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

type config struct {
	model string
	batch int
}

func main() {
	models := flag.String("models", "resnet152-128:8,rrdbnet:4", "model:batch list")
	steps := flag.Int("steps", 5, "timed steps per variant (after one warm-up step each)")
	target := flag.Float64("target", 0.4, "activation budget as a fraction of the baseline's")
	threads := flag.Int("threads", 2, "kernel threads")
	mixed := flag.String("mixed", "", "instead of the step times, measure on the cpu the peak allocated memory of one step of the fp32 baseline and of automatic checkpointing with this precision (e.g. bf16-mixed)")
	profile := flag.Bool("profile", false, "also print, per model, the measured time of the recomputed nodes by op against the cost model's estimate")
	flag.Parse()
	profileRecompute = *profile
	parallel.SetThreads(*threads)
	if *mixed != "" {
		if err := mixedReport(*models, *mixed, *target); err != nil {
			fmt.Fprintln(os.Stderr, "fitreport:", err)
			os.Exit(1)
		}
		return
	}
	fmt.Printf("| model | batch | activations, no recomputation | automatic checkpointing | reduction | recomputed nodes | step time (median, min–max), none | step time, automatic | cost |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, mb := range strings.Split(*models, ",") {
		var c config
		name, n, _ := strings.Cut(mb, ":")
		c.model = name
		fmt.Sscan(n, &c.batch)
		if err := report(c, *steps, *target); err != nil {
			fmt.Fprintln(os.Stderr, "fitreport:", err)
			os.Exit(1)
		}
	}
}

// autoRemat asks the planner for the cheapest automatic checkpointing that
// keeps the activations within target times the baseline's, the whole
// batch in one pass; it returns the fp32 baseline's plan and the policy.
func autoRemat(c config, target float64) (*zoo.Spec, train.MemoryPlan, *budget.Result, error) {
	spec, err := zoo.Lookup(c.model)
	if err != nil {
		return nil, train.MemoryPlan{}, nil, err
	}
	build := testkit.Build(spec)
	newOpt := func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }
	o, _ := newOpt()
	tr, err := train.Setup(device.Meta(), 0, build, o)
	if err != nil {
		return nil, train.MemoryPlan{}, nil, err
	}
	defer tr.Close()
	base, err := tr.Plan(spec.Example(c.batch))
	if err != nil {
		return nil, train.MemoryPlan{}, nil, err
	}
	fixed := base.Parameters + base.Gradients + base.OptimizerState
	limit := int64(target * float64(base.Activations))
	// The budget also covers the allocator's segment rounding: the
	// largest slack whose plan keeps the activations within the target.
	var res *budget.Result
	for slack := int64(64 << 20); ; slack -= 4 << 20 {
		res, err = budget.Fit(context.Background(), budget.Problem{
			Build: build, Example: spec.Example, Batch: c.batch, NewOptimizer: newOpt,
			Budget:   fixed + limit + slack,
			Policies: []budget.Policy{budget.RecomputeAuto},
		})
		if err == nil && res.Best.Memory.Activations > limit && slack > 0 {
			continue
		}
		break
	}
	if err != nil {
		return nil, train.MemoryPlan{}, nil, err
	}
	if res.Best.Accumulation != 1 {
		return nil, train.MemoryPlan{}, nil, fmt.Errorf("%s: the planner split the batch (%d x %d); raise -target", c.model, res.Best.MicroBatch, res.Best.Accumulation)
	}
	return &spec, base, res, nil
}

// mixedReport runs one step on the cpu of the fp32 baseline and of
// automatic checkpointing under precision prec, and prints the peak of
// allocated bytes each one's allocator measured, next to the plans.
func mixedReport(models, prec string, target float64) error {
	p, err := transform.ParsePrecision(prec)
	if err != nil {
		return err
	}
	fmt.Printf("| model | batch | fp32 peak allocated (planned) | automatic checkpointing + %s (planned) | ratio |\n|---|---|---|---|---|\n", prec)
	for _, mb := range strings.Split(models, ",") {
		var c config
		name, n, _ := strings.Cut(mb, ":")
		c.model = name
		fmt.Sscan(n, &c.batch)
		spec, _, res, err := autoRemat(c, target)
		if err != nil {
			return err
		}
		build := testkit.Build(*spec)
		r := rand.New(rand.NewSource(1))
		xm, ym := spec.Example(c.batch)
		x, y := testkit.Batch(r, xm, ym, 10)
		measure := func(remat transform.Policy, prec transform.Precision) (peak, planned int64, err error) {
			o, _ := optim.NewAdam(optim.AdamDefaults())
			tr, err := train.SetupConfig(device.CPU(), 1, build, o, train.Config{Recompute: train.MustRecompute(remat), Precision: prec})
			if err != nil {
				return 0, 0, err
			}
			defer tr.Close()
			plan, err := tr.Plan(xm, ym)
			if err != nil {
				return 0, 0, err
			}
			if _, err := tr.Step(context.Background(), x, y); err != nil {
				return 0, 0, err
			}
			return tr.Device.Alloc.Stats().AllocatedBytes.Peak, plan.Total(), nil
		}
		bPeak, bPlan, err := measure(nil, transform.FP32)
		if err != nil {
			return err
		}
		mPeak, mPlan, err := measure(res.Best.Remat, p)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %d | %s (%s) | %s (%s) | %.0f%% |\n", c.model, c.batch,
			device.FormatBytes(bPeak), device.FormatBytes(bPlan), device.FormatBytes(mPeak), device.FormatBytes(mPlan), 100*float64(mPeak)/float64(bPeak))
	}
	return nil
}

func report(c config, steps int, target float64) error {
	spec, base, res, err := autoRemat(c, target)
	if err != nil {
		return err
	}
	build := testkit.Build(*spec)
	newOpt := func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }
	o, _ := newOpt()
	mt, err := train.SetupConfig(device.Meta(), 0, build, o, train.Config{Recompute: train.MustRecompute(res.Best.Remat)})
	if err != nil {
		return err
	}
	auto, err := mt.Plan(spec.Example(c.batch))
	mt.Close()
	if err != nil {
		return err
	}
	if steps < 1 {
		fmt.Printf("| %s | %d | %s | %s | %.0f%% | %d | – | – | est. %+.0f%% |\n",
			c.model, c.batch, device.FormatBytes(base.Activations), device.FormatBytes(auto.Activations),
			100*(1-float64(auto.Activations)/float64(base.Activations)), res.Best.Recomputed, 100*(res.Slowdown()-1))
		return nil
	}
	// Step times, alternating the two variants.
	r := rand.New(rand.NewSource(1))
	xm, ym := spec.Example(c.batch)
	x, y := testkit.Batch(r, xm, ym, 10)
	mk := func(p transform.Policy) (*train.Trainer, error) {
		o, _ := newOpt()
		tr, err := train.SetupConfig(device.CPU(), 1, build, o, train.Config{Recompute: train.MustRecompute(p)})
		if err != nil {
			return nil, err
		}
		_, err = tr.Step(context.Background(), x, y) // warm-up: trace, plan, first touch
		return tr, err
	}
	a, err := mk(nil)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := mk(res.Best.Remat)
	if err != nil {
		return err
	}
	defer b.Close()
	var ta, tb []float64
	for i := 0; i < steps; i++ {
		for _, v := range []struct {
			tr  *train.Trainer
			out *[]float64
		}{{a, &ta}, {b, &tb}} {
			start := time.Now()
			if _, err := v.tr.Step(context.Background(), x, y); err != nil {
				return err
			}
			*v.out = append(*v.out, time.Since(start).Seconds())
		}
	}
	if profileRecompute {
		if err := recomputeProfile(b, x, y); err != nil {
			return err
		}
	}
	ma, mb := median(ta), median(tb)
	fmt.Printf("| %s | %d | %s | %s | %.0f%% | %d | %.2f s (%.2f–%.2f) | %.2f s (%.2f–%.2f) | %+.0f%% |\n",
		c.model, c.batch, device.FormatBytes(base.Activations), device.FormatBytes(auto.Activations),
		100*(1-float64(auto.Activations)/float64(base.Activations)), res.Best.Recomputed,
		ma, minOf(ta), maxOf(ta), mb, minOf(tb), maxOf(tb), 100*(mb/ma-1))
	return nil
}

var profileRecompute bool

// recomputeProfile runs one step of tr timing every node, and prints the
// time the recomputed nodes took by op, next to what the cost model
// estimated for them: the measured price of the recomputation, free of the
// noise of comparing two step times.
func recomputeProfile(tr *train.Trainer, x, y *tensor.Tensor) error {
	type acc struct {
		n         int
		meas, est float64
	}
	byOp := map[string]*acc{}
	var step, rec, est, estStep float64
	// Charged as budget.Fit charges them: each node at the arithmetic of
	// the cpu kernel that runs it (Winograd convolutions).
	cost := budget.DefaultCost.On(device.Meta().Backend)
	tr.RunOptions = &exec.Options{Observe: func(_ int, n *trace.Node, d time.Duration) {
		s := d.Seconds()
		step += s
		estStep += cost.Node(n)
		if !n.Recompute {
			return
		}
		a := byOp[n.Op.Name()]
		if a == nil {
			a = &acc{}
			byOp[n.Op.Name()] = a
		}
		a.n++
		a.meas += s
		a.est += cost.Node(n)
		rec += s
		est += cost.Node(n)
	}}
	defer func() { tr.RunOptions = nil }()
	if _, err := tr.Step(context.Background(), x, y); err != nil {
		return err
	}
	ops := make([]string, 0, len(byOp))
	for k := range byOp {
		ops = append(ops, k)
	}
	sort.Slice(ops, func(i, j int) bool { return byOp[ops[i]].meas > byOp[ops[j]].meas })
	fmt.Fprintf(os.Stderr, "recomputation: %.3f s of a %.3f s step (%.1f%%); the cost model: %.3f s of %.3f s (%.1f%%)\n",
		rec, step, 100*rec/step, est, estStep, 100*est/estStep)
	for _, k := range ops {
		a := byOp[k]
		fmt.Fprintf(os.Stderr, "  %-24s %4d nodes  measured %7.3f s  estimated %7.3f s  (x%.2f)\n", k, a.n, a.meas, a.est, a.meas/max(a.est, 1e-12))
	}
	return nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
