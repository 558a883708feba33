// Command fitreport measures what automatic activation checkpointing buys
// on the reference workloads: planned activation memory with and without it
// (exact, from the plans) and the step time of both on the cpu device,
// measured side by side (A B A B ...), median and spread.
//
//	go run ./internal/fitreport [-models resnet152-128,rrdbnet] [-steps 5]
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
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/nn"
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

func random(r *rand.Rand, m trace.Meta, bound int) *tensor.Tensor {
	t := tensor.New(m.DType, m.Shape)
	switch m.DType {
	case tensor.Int64:
		for i := range t.I64() {
			t.I64()[i] = int64(r.Intn(bound))
		}
	default:
		for i := range t.F32() {
			t.F32()[i] = float32(r.NormFloat64())
		}
	}
	return t
}

func main() {
	models := flag.String("models", "resnet152-128:8,rrdbnet:4", "model:batch list")
	steps := flag.Int("steps", 5, "timed steps per variant (after one warm-up step each)")
	target := flag.Float64("target", 0.4, "activation budget as a fraction of the baseline's")
	threads := flag.Int("threads", 2, "kernel threads")
	flag.Parse()
	parallel.SetThreads(*threads)
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

func report(c config, steps int, target float64) error {
	spec, err := zoo.Lookup(c.model)
	if err != nil {
		return err
	}
	build := func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss }
	newOpt := func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }
	plan := func(p transform.Policy) (train.MemoryPlan, error) {
		o, _ := newOpt()
		tr, err := train.Setup(device.Meta(), 0, build, o)
		if err != nil {
			return train.MemoryPlan{}, err
		}
		defer tr.Close()
		tr.Remat = p
		x, y := spec.Example(c.batch)
		return tr.Plan(x, y)
	}
	base, err := plan(nil)
	if err != nil {
		return err
	}
	// Ask the planner for the whole batch in one pass with the activation
	// budget: it picks the cheapest recomputation that fits.
	fixed := base.Parameters + base.Gradients + base.OptimizerState
	res, err := budget.Fit(context.Background(), budget.Problem{
		Build: build, Example: spec.Example, Batch: c.batch, NewOptimizer: newOpt,
		Budget:   fixed + int64(target*float64(base.Activations)) + 64<<20, // segment slack
		Policies: []string{"auto"},
	})
	if err != nil {
		return err
	}
	if res.Best.Accumulation != 1 {
		return fmt.Errorf("%s: the planner split the batch (%d x %d); raise -target", c.model, res.Best.MicroBatch, res.Best.Accumulation)
	}
	auto, err := plan(res.Best.Remat)
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
	x, y := random(r, xm, 10), random(r, ym, 10)
	mk := func(p transform.Policy) (*train.Trainer, error) {
		o, _ := newOpt()
		tr, err := train.Setup(device.CPU(), 1, build, o)
		if err != nil {
			return nil, err
		}
		tr.Remat = p
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
	ma, mb := median(ta), median(tb)
	fmt.Printf("| %s | %d | %s | %s | %.0f%% | %d | %.2f s (%.2f–%.2f) | %.2f s (%.2f–%.2f) | %+.0f%% |\n",
		c.model, c.batch, device.FormatBytes(base.Activations), device.FormatBytes(auto.Activations),
		100*(1-float64(auto.Activations)/float64(base.Activations)), res.Best.Recomputed,
		ma, minOf(ta), maxOf(ta), mb, minOf(tb), maxOf(tb), 100*(mb/ma-1))
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
