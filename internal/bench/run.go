package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/internal/cputime"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/internal/safefile"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// MaxInputBytes bounds the input batches RunHeadroom makes before it
// measures (a fresh one for every step).
const MaxInputBytes = 2 << 30

// Options configure one measurement.
type Options struct {
	Warmup  int // untimed steps first (the first compiles the step)
	Steps   int // timed steps
	Threads int // 0: parallel's current setting
	Seed    uint64
	// CPUProfile, if set, is a file for a pprof CPU profile of the timed
	// steps.
	CPUProfile string
	// OpProfile, if set, receives a table of time per op over the timed
	// steps (exec.Options.Observe).
	OpProfile io.Writer
	// OpShapes, with OpProfile, lists under each op the input shapes of
	// its calls, this many at most (0: none).
	OpShapes int
	// Progress, if set, receives a line per step.
	Progress io.Writer
	// Precision of the training step (zero value: fp32).
	Precision transform.Precision
	// InBackward updates each parameter in the backward pass and frees
	// its gradient (train.Config.OptimizerInBackward) where the step
	// allows it; the result says whether it did.
	InBackward bool
	// GradientBuffers keeps every gradient in a buffer of its own for the
	// whole step. By default gradients are values of the step's arena
	// (train.Config.GradientBuffers unset) where the step allows it, alive from
	// the backward pass until the optimizer read them: what PyTorch's
	// zero_grad(set_to_none=True), which the PyTorch script calls, does.
	GradientBuffers bool
	// Recompute is headroom's recomputation policy (zero value: none).
	Recompute train.Recompute
	// Watch, if set, is told of every step, warm-up ones included
	// (headroom bench --profile); not for sgemm, which has no trainer.
	Watch Watcher
}

// Watcher follows a measurement's training steps.
type Watcher interface {
	// Begin is called once the trainer exists, before the first step: a
	// watcher may set tr.RunOptions (its Observe is kept when the op
	// profile adds its own).
	Begin(dev *device.Device, tr *train.Trainer)
	StepStart()
	// StepDone follows step i (from 1; the first warmup ones untimed)
	// that took d on samples samples.
	StepDone(i, warmup, samples int, loss float64, d time.Duration)
}

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format, args...)
	}
}

// RunHeadroom measures workload w in this process. Resident memory is
// sampled after the parameters and the input batch exist and before
// anything of training does (the optimizer state, the compiled step, the
// arena and the gradients, which nothing has touched yet), which is the
// point at which PyTorch, whose gradients and Adam state appear lazily
// during the first step, is measured too.
func RunHeadroom(ctx context.Context, w Workload, o Options) (_ Result, err error) {
	if o.Steps < 1 || o.Warmup < 0 || o.Warmup > math.MaxInt-o.Steps {
		return Result{Workload: w.Name}, fmt.Errorf("bench: %d timed and %d warm-up steps: want at least 1 timed step and no negative count", o.Steps, o.Warmup)
	}
	if o.Threads > 0 {
		parallel.SetThreads(o.Threads)
	}
	res := Result{Workload: w.Name, Engine: Headroom, Threads: parallel.Threads(), Batch: w.Batch, Warmup: o.Warmup}
	if w.Model == nil {
		return runSgemm(ctx, res, o)
	}
	res.Unit, res.Work = "samples", float64(w.Batch)

	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	dev := device.CPU()
	store := nn.NewStore()
	model := w.Model(store.Root())
	if err := store.Materialize(dev, int64(o.Seed)); err != nil {
		return res, err
	}
	defer store.Release()
	// A fresh batch every step: a model that saw one batch over and over
	// would fit it, and its shrinking gradients would reach subnormal floats
	// (slow on x86), which real training rarely does.
	// They are made before measuring, so their count is bounded by the
	// memory they take: --steps 1000000000 took 16 GiB (and was deaf to
	// SIGTERM) before its first step.
	x0, y0 := w.Inputs(rng)
	n := o.Warmup + o.Steps
	if per := int64(x0.Bytes() + y0.Bytes()); per > 0 && int64(n) > MaxInputBytes/per {
		return res, fmt.Errorf("bench: %s: %d steps need as many fresh input batches of %s, more than %s in all; use fewer --steps and --warmup, or more --rounds",
			w.Name, n, device.FormatBytes(per), device.FormatBytes(MaxInputBytes))
	}
	batches := make([][2]*tensor.Tensor, n)
	batches[0] = [2]*tensor.Tensor{x0, y0}
	for i := 1; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		x, y := w.Inputs(rng)
		batches[i] = [2]*tensor.Tensor{x, y}
	}
	x, y := batches[0][0], batches[0][1]

	runtime.GC()
	debug.FreeOSMemory()
	before, err := ReadMemory()
	if err != nil {
		return res, err
	}
	res.RSSBefore = before.RSS
	res.PeakReset = ResetPeak()
	allocBefore := dev.Alloc.Stats().AllocatedBytes.Current

	opt, err := optim.NewAdam(optim.AdamDefaults())
	if err != nil {
		return res, err
	}
	// Made under the configuration, so that gradient buffers a step will
	// not hold are never allocated.
	cfg := train.Config{Precision: o.Precision, GradientBuffers: o.GradientBuffers, Recompute: o.Recompute}
	tr, err := train.NewConfig(dev, store, model, w.Loss, opt, cfg)
	if err != nil {
		return res, err
	}
	defer tr.Close()
	if o.InBackward {
		if err := tr.CheckOptimizerInBackward(1); err != nil {
			o.progress("  %s: --optimizer-in-backward does not apply, keeping gradient buffers: %v\n", w.Name, err)
		} else {
			cfg.OptimizerInBackward = true
		}
	}
	if cfg != tr.Config() {
		if err := tr.SetConfig(cfg); err != nil {
			return res, err
		}
	}
	res.Precision = o.Precision.String()
	res.InBackward = cfg.OptimizerInBackward
	res.ArenaGradients = tr.GradientsInArena(1)
	if cfg.Recompute != train.NoRecompute {
		res.Recompute = cfg.Recompute.String()
	}
	xm, ym := trace.Meta{DType: x.DType, Shape: x.Shape}, trace.Meta{DType: y.DType, Shape: y.Shape}
	mp, comp, err := tr.PlanConfig(tr.Config(), xm, ym)
	if err != nil {
		return res, err
	}
	res.Planned = mp.Total() - mp.Parameters
	res.Flops = StepFlops(comp.Program.Graph)
	grads := device.FormatBytes(mp.Gradients)
	if res.ArenaGradients {
		grads = "in the arena, " + device.FormatBytes(mp.TransientGradients) + " at the peak"
	}
	o.progress("  %s: %d parameters, planned training memory %s (gradients %s, optimizer state %s, activations %s)\n",
		w.Name, store.NumParams(), device.FormatBytes(res.Planned), grads,
		device.FormatBytes(mp.OptimizerState), device.FormatBytes(mp.Activations-mp.TransientGradients))

	prof := newOpProfile(o.OpShapes)
	// Beside each op, what the planner estimates for it: the cost model
	// Fit ranks this step's plans with (this CPU's row, the kernels'
	// arithmetic, this precision's bf16 rate).
	prof.est = budget.HostCost().On(dev.Backend).ForPrecision(o.Precision).Node
	if o.Watch != nil {
		o.Watch.Begin(dev, tr)
	}
	for i := 0; i < o.Warmup+o.Steps; i++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		timed := i >= o.Warmup
		if timed && i == o.Warmup {
			if o.OpProfile != nil {
				opts := exec.Options{Observe: prof.observe}
				if tr.RunOptions != nil {
					opts = *tr.RunOptions
					watch := opts.Observe
					opts.Observe = func(i int, n *trace.Node, d time.Duration) {
						prof.observe(i, n, d)
						if watch != nil {
							watch(i, n, d)
						}
					}
				}
				tr.RunOptions = &opts
			}
			if o.CPUProfile != "" {
				// Through safefile, as every file headroom writes: a
				// symlink at the name is not followed, and an
				// interrupted run leaves no half profile.
				f, err := safefile.Create(o.CPUProfile, 0o644)
				if err != nil {
					return res, err
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					f.Abort()
					return res, err
				}
				defer func() {
					pprof.StopCPUProfile()
					if cerr := f.Commit(); cerr != nil && err == nil {
						err = fmt.Errorf("cpu profile: %w", cerr)
					}
				}()
			}
		}
		if o.Watch != nil {
			o.Watch.StepStart()
		}
		start, cpu0 := time.Now(), cpuTime()
		loss, err := tr.Step(ctx, batches[i][0], batches[i][1])
		el := time.Since(start)
		d, cpu := el.Seconds(), (cpuTime() - cpu0).Seconds()
		if err != nil {
			return res, err
		}
		if o.Watch != nil {
			o.Watch.StepDone(i+1, o.Warmup, batches[i][0].Shape[0], loss, el)
		}
		res.Loss = loss
		if timed {
			res.Steps = append(res.Steps, d)
			res.CPU = append(res.CPU, cpu)
			o.progress("  %s headroom step %d/%d: %s, cpu %s (loss %.4f)\n", w.Name, i-o.Warmup+1, o.Steps, FormatSeconds(d), FormatSeconds(cpu), loss)
		} else {
			o.progress("  %s headroom warm-up %d/%d: %s (loss %.4f)\n", w.Name, i+1, o.Warmup, FormatSeconds(d), loss)
		}
	}
	after, err := ReadMemory()
	if err != nil {
		return res, err
	}
	res.RSSPeak = after.Peak
	res.Allocated = dev.Alloc.Stats().AllocatedBytes.Peak - allocBefore
	if o.OpProfile != nil {
		prof.write(o.OpProfile, o.Steps)
	}
	return res, nil
}

func runSgemm(ctx context.Context, res Result, o Options) (Result, error) {
	n := GEMMSize
	res.Unit, res.Work = "flop", 2*float64(n)*float64(n)*float64(n)
	res.Flops = res.Work
	rng := rand.New(rand.NewPCG(o.Seed, 1))
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = rng.Float32()-0.5, rng.Float32()-0.5
	}
	before, err := ReadMemory()
	if err != nil {
		return res, err
	}
	res.RSSBefore = before.RSS
	res.PeakReset = ResetPeak()
	for i := 0; i < o.Warmup+o.Steps; i++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		// A step is GEMMReps products (about 0.1 s), so that a short
		// hiccup of the machine does not make a step; its time is per
		// product.
		th0, pool0 := cputime.Threads(), defaultPool.Stats()
		start, cpu0 := time.Now(), cpuTime()
		for range GEMMReps {
			cpu.Sgemm(false, false, n, n, n, 1, a, n, b, n, 0, c, n)
		}
		d, cpu := time.Since(start).Seconds()/GEMMReps, (cpuTime()-cpu0).Seconds()/GEMMReps
		if i >= o.Warmup {
			res.Steps = append(res.Steps, d)
			res.CPU = append(res.CPU, cpu)
			o.progress("  sgemm headroom step %d/%d: %s a product, cpu %s%s\n", i-o.Warmup+1, o.Steps, FormatSeconds(d), FormatSeconds(cpu),
				threadReport(th0, cputime.Threads(), pool0, defaultPool.Stats(), res.Threads, GEMMReps))
		}
	}
	o.progress("  sgemm headroom: %d steps of %d products, median %s a product (%.1f GFLOP/s)\n", len(res.Steps), GEMMReps, FormatSeconds(Summarize(res.Steps).Median), res.Throughput()/1e9)
	after, err := ReadMemory()
	if err != nil {
		return res, err
	}
	res.RSSPeak = after.Peak
	res.Loss = float64(c[0])
	if o.Progress != nil {
		// The machine's FMA rate right after the steps (and after the
		// memory reading: its threads are not the product's), next to
		// the header's peak: on a shared host a neighbour can halve both
		// cores' rate for seconds, the FMA loop's as much as the
		// product's, while our threads each run all the time (the step
		// lines).
		p := cpu.FMAPeak(res.Threads, 100*time.Millisecond)
		o.progress("  sgemm headroom: FMA rate right after the steps %.1f GFLOP/s (%d threads, best of %d tries of 10 ms; median %.1f)\n", p.FLOPS/1e9, p.Threads, p.Tries, p.Median/1e9)
	}
	return res, nil
}

// threadReport says, for a step of reps products, how long the busiest
// threads threads ran and how long all waited for a CPU (per product),
// from cputime.Threads before and after, and how the pool's workers fared
// (from its Stats): what tells a slow step whose threads did not all run
// (waits, loops run alone, workers woken from sleep) from one whose
// threads all ran but slowly (the machine's cores were slower: another
// virtual machine on them, say). Empty where the system gives no
// per-thread times.
func threadReport(before, after []cputime.Thread, p0, p1 parallel.Stats, threads, reps int) string {
	if before == nil || after == nil {
		return ""
	}
	was := make(map[int]cputime.Thread, len(before))
	for _, t := range before {
		was[t.ID] = t
	}
	var runs []time.Duration
	var wait time.Duration
	for _, t := range after {
		b := was[t.ID] // zero for a thread started during the step
		runs = append(runs, (t.Run-b.Run)/time.Duration(reps))
		wait += (t.Wait - b.Wait) / time.Duration(reps)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i] > runs[j] })
	runs = runs[:min(len(runs), max(1, threads))]
	ran := make([]string, len(runs))
	for i, r := range runs {
		ran[i] = FormatSeconds(r.Seconds())
	}
	waited := "0s"
	if wait > 0 {
		waited = FormatSeconds(wait.Seconds())
	}
	return fmt.Sprintf("; threads ran %s, waited %s for a CPU; %d of %d loops run alone, %d worker wake-ups",
		strings.Join(ran, "+"), waited, p1.Alone-p0.Alone, p1.Loops-p0.Loops, p1.Blocked-p0.Blocked)
}

// StepFlops is the arithmetic of a compiled step, as the ops declare it
// (op.Cost, the planner's cost model): multiply-adds count as 2.
func StepFlops(g *trace.Graph) float64 {
	var f float64
	for _, n := range g.Nodes {
		f += budget.Flops(n)
	}
	return f
}

// defaultPool is package parallel's default pool (a nil *Pool), whose
// Stats the sgemm workload reports.
var defaultPool *parallel.Pool

// cpuTime is the CPU time the process has used, all threads.
func cpuTime() time.Duration { return cputime.Process() }
