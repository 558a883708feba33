package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/internal/runreport"
	"github.com/headroom-ml/headroom/internal/tfevents"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// syntheticSamples is the size of a generated training set without --limit.
const syntheticSamples = 1024

// isFashion reports whether a model trains on Fashion-MNIST.
func isFashion(model string) bool {
	m := cmp.Or(model, "cnn")
	return m == "cnn" || m == "mlp"
}

// checkProduct checks the flags of checkpoints, logs and validation.
func (f *trainFlags) checkProduct() error {
	if f.saveEvery != "" {
		if n, err := strconv.Atoi(f.saveEvery); err == nil {
			f.everySteps = n
		} else if d, err := time.ParseDuration(f.saveEvery); err == nil && d > 0 {
			f.everyTime = d
		} else {
			return fmt.Errorf("--save-every %q: a number of steps or a positive duration (10m, 1h30m)", f.saveEvery)
		}
	}
	switch {
	case f.steps < 0:
		return fmt.Errorf("--steps %d: must be at least 0 (0: run the --epochs)", f.steps)
	case f.everySteps < 0:
		return fmt.Errorf("--save-every %d: must be at least 0 (0: no periodic checkpoints)", f.everySteps)
	case f.keep < 0:
		return fmt.Errorf("--keep %d: must be at least 0 (0: keep all)", f.keep)
	case !(f.valSplit >= 0 && f.valSplit < 1):
		return fmt.Errorf("--val-split %g: must be at least 0 and below 1", f.valSplit)
	case (f.everySteps > 0 || f.everyTime > 0) && f.ckptDir == "" && f.resume == "":
		return fmt.Errorf("--save-every needs --checkpoint-dir (where the checkpoints go)")
	}
	if f.ckptDir != "" {
		if fi, err := os.Stat(f.ckptDir); err == nil && !fi.IsDir() {
			return fmt.Errorf("--checkpoint-dir %s: not a directory", f.ckptDir)
		} else if err != nil {
			if err := checkOutputPath(f.ckptDir); err != nil {
				return fmt.Errorf("--checkpoint-dir: %w", err)
			}
		}
	}
	if f.resume != "" {
		if _, err := train.LatestCheckpoint(f.resume); err != nil {
			return fmt.Errorf("--resume: %w", err)
		}
	}
	return nil
}

// source is training or evaluation data addressed by sample index.
type source interface {
	Batch(idx []int) (x, y *tensor.Tensor, err error)
}

type fashionSource struct{ ds *dataset.Dataset }

func (s fashionSource) Batch(idx []int) (*tensor.Tensor, *tensor.Tensor, error) {
	return s.ds.Tensors(idx, dataset.TrainMean, dataset.TrainStd)
}

type synthSource struct{ d *zoo.Synthetic }

func (s synthSource) Batch(idx []int) (*tensor.Tensor, *tensor.Tensor, error) {
	x, y := s.d.Batch(idx)
	return x, y, nil
}

// evalSet is a set evaluated each epoch: samples [lo, hi) of src.
type evalSet struct {
	name   string
	src    source
	lo, hi int
}

// openLog opens --log for writing one line per step. It is not written
// through safefile: the point of a per-step log is that it can be read
// (tail -f, a plot) while training runs, and a killed run's lines are
// what is left of it. A symlink at path is refused (O_NOFOLLOW), as
// safefile never follows one either; a resumed run appends.
func openLog(path string, appendTo bool) (*os.File, error) {
	flags := os.O_WRONLY | os.O_CREATE | noFollow
	if appendTo {
		flags |= os.O_APPEND
	} else {
		flags |= os.O_TRUNC
	}
	return os.OpenFile(path, flags, 0o644)
}

func trainFashion(ctx context.Context, f trainFlags, out, log io.Writer) error {
	if err := f.check(log); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	out, log, err := f.setupDist(out, log)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return f.dist.finish(trainRank(ctx, f, out, log))
}

// trainRank is trainFashion on one rank (the only one without mpirun).
func trainRank(ctx context.Context, f trainFlags, out, log io.Writer) error {
	f.model = cmp.Or(f.model, "cnn")
	spec, err := lookupSpec(f.model)
	if err != nil {
		return err
	}
	if f.resume != "" && f.ckptDir == "" {
		// Checkpoints of the resumed run go where it came from.
		dir, _ := train.LatestCheckpoint(f.resume)
		f.ckptDir = filepath.Dir(dir)
	}
	// The meta device has no data: it plans the step and nothing runs, so
	// there is no dataset to read, no loss and no accuracy to report.
	meta := isMeta(f.device)
	var trainSrc source
	var md *mapData // --data read through the loader
	var evals []evalSet
	n := 0
	if !meta {
		switch {
		case isFashion(f.model) && (f.data == "" || hasFashionFiles(f.data)):
			trainSet, testSet, where, err := loadFashion(ctx, f.data)
			if err != nil {
				return err
			}
			n = trainSet.Len()
			if f.limit > 0 && f.limit < n {
				n = f.limit
			}
			trainSrc = fashionSource{trainSet}
			evals = []evalSet{{"test", fashionSource{testSet}, 0, testSet.Len()}}
			fmt.Fprintf(out, "data: %s (%d training, %d test images)\n", where, n, testSet.Len())
		case f.data != "":
			if md, err = openTrainData(f.data, spec, f.skipBad); err != nil {
				return fmt.Errorf("train: --data: %w", err)
			}
			if err := md.checkTrain(f.limit, f.valSplit); err != nil {
				return fmt.Errorf("train: --data %s: %w", f.data, err)
			}
			n = md.len()
			if f.limit > 0 && f.limit < n {
				n = f.limit
			}
			if n == 0 {
				return fmt.Errorf("train: --data %s: no samples", f.data)
			}
			if md.classes > 0 {
				if o, err := zoo.OutputMeta(spec, 1); err == nil && md.classes > o.Shape[len(o.Shape)-1] {
					return fmt.Errorf("train: --data %s: %d classes, more than the %d outputs of %s", f.data, md.classes, o.Shape[len(o.Shape)-1], f.model)
				}
			}
			trainSrc = md
			fmt.Fprintf(out, "data: %s; training on %d samples through the loader\n", md.what, n)
		default:
			synth, err := zoo.NewSynthetic(spec, uint64(f.seed))
			if err != nil {
				return err
			}
			n = cmp.Or(f.limit, syntheticSamples)
			// The test samples are other indices of the same generator.
			m := max(1, min(256, n/4))
			trainSrc = synthSource{synth}
			evals = []evalSet{{"test", trainSrc, n, n + m}}
			fmt.Fprintf(out, "data: generated for %s (zoo.Synthetic, seed %d: %d training, %d test samples)\n", f.model, f.seed, n, m)
		}
		if err := md.setShuffle(f.shuffleBuf); err != nil { // nil md: not through the loader
			return fmt.Errorf("train: %w", err)
		}
		if f.val != "" {
			classes := 0
			if md != nil {
				classes = md.classes
			}
			_, fashion := trainSrc.(fashionSource)
			v, what, err := openVal(f.val, spec, fashion, classes)
			if err != nil {
				return fmt.Errorf("train: %w", err)
			}
			evals = append([]evalSet{v}, evals...)
			fmt.Fprintf(out, "validation: %s\n", what)
		}
		if k := int(f.valSplit * float64(n)); k > 0 {
			if k >= n {
				return fmt.Errorf("train: --val-split %g leaves no training samples of %d", f.valSplit, n)
			}
			n -= k
			evals = append([]evalSet{{"val", trainSrc, n, n + k}}, evals...)
			fmt.Fprintf(out, "validation: the last %d of the training samples (--val-split %g); training on %d\n", k, f.valSplit, n)
		}
		if f.batch > n {
			what := "samples"
			if isFashion(f.model) {
				what = "images"
			}
			// The plan and the budget are then for the batches that run.
			fmt.Fprintf(log, "headroom: --batch-size %d is more than the %d training %s: each step uses all %d\n", f.batch, n, what, n)
			f.batch = n
			if f.accum > f.batch {
				return fmt.Errorf("train: --accumulate %d: more micro-batches than the %d training %s", f.accum, n, what)
			}
		}
	}
	accum, remat, policy, inBack := max(f.accum, 1), policyByName(f.recompute), f.recompute, f.inBack
	// Gradients in the arena (the default) where a step is one micro-batch
	// on one process: accumulation adds micro-batches up in buffers, and
	// the plan below is of one micro-batch's step.
	arena := !f.gradBuffers && accum == 1 && f.dist.c == nil
	precs, comps, err := parseNumerics(cmp.Or(f.precision, "fp32"), cmp.Or(f.compress, "none"), f.budget != "")
	if err != nil {
		return err
	}
	prec := precs[0]
	var compress transform.CompressPolicy // nil: kept as produced
	if comps[0] != (transform.Compression{}) {
		compress = comps[0]
	}
	depth := cmp.Or(f.prefetch, defaultPrefetch) // lowered to fit a budget
	loaderCfg := func() dataset.Config {
		return dataset.Config{BatchSize: f.batch, Shuffle: true, Seed: uint64(f.seed), Workers: parallel.Threads(), Depth: depth, Transforms: md.transforms}
	}
	var lp loaderPlan // the data loader's memory, as planned
	if md != nil {
		if lp, err = md.plan(n, loaderCfg()); err != nil {
			return fmt.Errorf("train: --data: %w", err)
		}
	}
	if f.maxBatch {
		if err := f.chooseMaxBatch(ctx, spec, n, md, loaderCfg, out); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	if f.budget != "" && f.dist.c != nil {
		// Several ranks: each plans itself under the budget (dist.go).
		fit, err := f.fitRanks(ctx, spec, precs, comps, accum, out)
		if err != nil {
			return err
		}
		accum, prec, compress, remat, policy = fit.accum, fit.prec, fit.compress, fit.remat, fit.policy
	} else if f.budget != "" {
		b, err := device.ParseBytes(f.budget)
		if err != nil {
			return fmt.Errorf("train: --budget: %w", err)
		}
		prob := budget.Problem{
			Build: func(s *nn.Store) (train.Model, train.LossFunc) {
				return spec.New(s.Root()), spec.Loss
			},
			Example: spec.Example,
			Batch:   f.batch, Budget: b,
			NewOptimizer: func() (optim.Optimizer, error) { return newOptimizer(f.optimizer, f.lr, f.weightDecay) },
			Precisions:   precs, Compress: comps, OptimizerInBackward: f.inBack,
			GradientBuffers: f.gradBuffers,
		}
		if f.recompute != "none" {
			pol, _ := budget.ParsePolicy(f.recompute)
			prob.Policies = []budget.Policy{pol}
		}
		var res *budget.Result
		if md != nil {
			// The loader's staging buffers come from the device and its
			// shuffle state and scratch from the heap: they are part of
			// the budget, at the deepest prefetch that leaves the step
			// room, and the step gets the rest.
			plan := func(d int) (loaderPlan, error) {
				c := loaderCfg()
				c.Depth = d
				return md.plan(n, c)
			}
			if res, lp, err = md.fitLoader(ctx, out, prob, plan, depth, f.batch); err != nil {
				return fmt.Errorf("train: --budget %s: %w", f.budget, err)
			}
			if lp.mem.Depth < depth {
				fmt.Fprintf(out, "data loader: prefetch depth lowered from %d to %d to fit the budget\n", depth, lp.mem.Depth)
			}
			depth = lp.mem.Depth
			fmt.Fprintf(out, "data loader staging %s of the budget (%s of device segments at prefetch depth %d), shuffle and scratch %s: %s in all; the step is planned in the remaining %s\n",
				device.FormatBytes(lp.mem.Staging()), device.FormatBytes(lp.reserved), depth, device.FormatBytes(lp.heap()), device.FormatBytes(lp.cost()), device.FormatBytes(b-lp.cost()))
			b -= lp.cost()
		} else if res, err = budget.Fit(ctx, prob); err != nil {
			return err
		}
		// The compiled step's Go objects (its graphs and plan: 10 MiB
		// for RRDBNet) come out of the device's share where the plan
		// leaves room for them, so that the heap limit below leaves the
		// collector room above them; without a limit the collector lets
		// the step's garbage double the heap.
		progHeap, err := stepHeap(prob, res.Best)
		if err != nil {
			return fmt.Errorf("train: --budget: %w", err)
		}
		if res.Best.Reserved+progHeap > res.Best.Capacity {
			progHeap = 0 // the step's segments need it: the heap makes do
		}
		defer limitHeap(lp.heap() + progHeap)()
		res.Print(out, b)
		if progHeap > 0 {
			fmt.Fprintf(out, "  %-22s %12s   (the compiled step's Go objects, on the heap; the device is capped at %s)\n", "compiled step", device.FormatBytes(progHeap), device.FormatBytes(res.Best.Capacity-progHeap))
		}
		if md != nil {
			lp.row(out)
		}
		accum, remat, policy = res.Best.Accumulation, res.Best.Remat, res.Best.Policy.String()
		prec, compress = res.Best.Precision, res.Best.Compress
		// The plan says where the optimizer runs, and why not in the
		// backward pass when it was asked for.
		inBack, arena = res.Best.InBackward, res.Best.ArenaGradients
		if !strings.Contains(f.device, "mem=") {
			// The budget, or the tighter capacity the plan fits, and the
			// loader's staging segments.
			f.device = fmt.Sprintf("%s:mem=%d", f.device, res.Best.Capacity-progHeap+lp.reserved)
		}
	}
	dev, err := device.New(f.device)
	if err != nil {
		return err
	}
	if f.snapshot != "" || f.watch.history() {
		dev.Alloc.RecordHistory(cmp.Or(f.history, defaultHistory))
	}
	var staging *stagingPool // the loader's, allocated before the model takes the device
	if md != nil {
		if staging, err = allocStaging(dev, lp, f.budget != ""); err != nil {
			return fmt.Errorf("train: --data: %w", err)
		}
		defer staging.release()
	}
	store := nn.NewStore()
	model := spec.New(store.Root())
	if err := store.Materialize(f.dist.initDevice(dev), f.seed); err != nil {
		return err
	}
	defer store.Release()
	if f.load != "" {
		if err := store.LoadFile(f.load, true); err != nil {
			return err
		}
		fmt.Fprintf(out, "loaded weights from %s\n", f.load)
	}
	opt, err := newOptimizer(f.optimizer, f.lr, f.weightDecay)
	if err != nil {
		return err
	}
	st, err := train.StorageOf(compress)
	if err != nil {
		return err
	}
	tr, closeTrainer, err := f.dist.newRankTrainer(ctx, out, dev, store, model, spec.Loss, opt,
		train.Config{Precision: prec, Recompute: train.MustRecompute(remat), Storage: st, OptimizerInBackward: inBack, GradientBuffers: !arena})
	if err != nil {
		return err
	}
	defer closeTrainer()
	tr.ClipNorm = f.clipGrad
	if inBack {
		if err := tr.CheckOptimizerInBackward(accum); err != nil {
			fmt.Fprintf(log, "headroom: --optimizer-in-backward does not apply, training with gradient buffers: %v\n", err)
		}
	}
	storage := "kept"
	if compress != nil {
		storage = fmt.Sprint(compress)
	}
	fmt.Fprintf(out, "model: %s, %d parameters; optimizer %s lr %g; batch %d; precision %s; saved activations %s; device %v; %d threads\n",
		f.model, store.NumParams(), f.optimizer, f.lr, f.batch, prec, storage, dev, parallel.Threads())

	micro := (f.dist.localBatch(f.batch) + accum - 1) / accum
	xMeta, yMeta := spec.Example(micro)
	mp, err := tr.Plan(xMeta, yMeta)
	if err != nil {
		return err
	}
	if accum > 1 || remat != nil {
		fmt.Fprintf(out, "micro-batch %d x %d accumulation steps; recomputation %s\n", micro, accum, policy)
	}
	if f.budget == "" { // else the budget's plan said it
		printGradients(out, tr, accum, f.gradBuffers)
	}
	mp.Print(out)
	if md != nil && f.budget == "" {
		lp.row(out)
	}
	if meta {
		fmt.Fprintf(out, "device %v: shapes only, nothing runs (this is the plan; no step, loss or accuracy)\n", dev)
		return writeTrainSnapshot(f, dev, out)
	}
	proc := newProcProbe(dev) // the whole-process view (procview.go)
	watch, err := newTrainWatch(ctx, f.watch, dev, tr, proc, out)
	if err != nil {
		return err
	}
	r := &runner{f: f, out: out, log: log, tr: tr, dev: dev, evals: evals, n: n, accum: accum, micro: micro, evalBatch: f.dist.evalBatch(f.batch, accum), plan: mp, watch: watch}
	r.open = func(start dataset.State) (batches, error) {
		if md == nil {
			return &samplerBatches{s: dataset.Sampler{N: n, BatchSize: f.batch, Shuffle: true, Seed: uint64(f.seed)}, src: trainSrc, epoch: start.Epoch, step: start.Step}, nil
		}
		cfg := loaderCfg()
		cfg.Alloc, cfg.Start = staging.alloc, start
		l, err := md.newLoader(n, cfg)
		if err != nil {
			return nil, fmt.Errorf("--data: %w", err)
		}
		m := l.Memory()
		proc.setLoader(m)
		fmt.Fprintf(out, "data loader: %s staging (%d x %s) from the device as input, shuffle %s, scratch %d x %s; %s in all\n",
			device.FormatBytes(m.Staging()), m.Depth, device.FormatBytes(m.StagingBuffer), device.FormatBytes(m.Shuffle),
			m.Workers, device.FormatBytes(m.ScratchPerWorker), device.FormatBytes(m.Total()))
		// The plan's figure against the allocator's own count: nothing
		// else allocates category input.
		fmt.Fprintf(out, "data loader input bytes: planned %d, allocator %d\n", lp.allocated, dev.Alloc.Stats().ByCategory[device.Input])
		return md.batches(l, f.batch), nil
	}
	err = r.run(ctx)
	if err == nil {
		proc.printProcess(out)
	}
	if err == nil && f.budget != "" {
		b, _ := device.ParseBytes(f.budget)
		reportPeak(out, b)
	}
	return errors.Join(err, watch.end(err))
}

// runner is one training run after set-up: the loop over epochs and
// steps, its checkpoints, log and evaluations.
type runner struct {
	f          trainFlags
	out, log   io.Writer
	tr         *train.Trainer
	dev        *device.Device
	open       func(start dataset.State) (batches, error)
	evals      []evalSet
	n          int
	accum      int
	micro      int
	evalBatch  int              // distFlags.evalBatch
	last       train.Checkpoint // after the last complete step
	logFile    *os.File
	savedSteps int64 // the step of the newest checkpoint written, -1: none
	// The learning-rate schedule (schedule.go): nil at a constant rate.
	sched      optim.StatefulScheduler
	schedDesc  string
	resumed    bool
	resumeMeta map[string]string // the resumed checkpoint's
	prog       *progress
	tb         *tfevents.Writer
	plan       train.MemoryPlan
	// watch is --live and --profile (live.go); nil: none.
	watch *trainWatch
}

// save writes --save's weights; a failure is the run's error.
func (r *runner) save(why string) error {
	if r.f.dist.sharded() {
		return r.f.dist.saveSharded(context.Background(), r.tr, why, r.f.model, r.out)
	}
	if r.f.save == "" {
		return nil
	}
	if err := r.tr.Store.SaveFile(r.f.save, map[string]string{"format": "pt", "model": r.f.model}); err != nil {
		return fmt.Errorf("--save %s (%s): %w", r.f.save, why, err)
	}
	fmt.Fprintf(r.out, "saved weights to %s (%s)\n", r.f.save, why)
	return nil
}

// checkpoint writes the state after the last complete step under
// --checkpoint-dir (once per step).
func (r *runner) checkpoint(why string) error {
	if r.f.ckptDir == "" || r.savedSteps == r.last.Step {
		return nil
	}
	r.prog.clear()
	c := r.last
	c.Meta = map[string]string{"model": r.f.model, "optimizer": r.f.optimizer, "seed": fmt.Sprint(r.f.seed), "batch": fmt.Sprint(r.f.batch), "samples": fmt.Sprint(r.n), "lr_schedule": r.schedDesc}
	// Several ranks: ZeRO's shards gathered, rank 0 writes (dist.go).
	if write, err := r.f.dist.checkpoint(why); err != nil || !write {
		if err == nil {
			r.savedSteps = r.last.Step
		}
		return err
	}
	dir, err := r.tr.SaveCheckpoint(r.f.ckptDir, c, r.f.keep)
	if err != nil {
		return fmt.Errorf("--checkpoint-dir %s (%s): %w", r.f.ckptDir, why, err)
	}
	r.savedSteps = r.last.Step
	fmt.Fprintf(r.out, "saved checkpoint %s (step %d, %s)\n", dir, r.last.Step, why)
	return nil
}

// interrupted saves what is complete and returns the run's error.
// partial is true when the interrupted step may have changed weights
// (the optimizer in the backward pass updates them one by one).
func (r *runner) interrupted(where string, cause error, partial bool) error {
	r.prog.clear()
	err := fmt.Errorf("interrupted %s; the last complete step is %d", where, r.last.Step)
	if cause != nil {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	if partial {
		fmt.Fprintf(r.out, "the interrupted step had updated some weights in its backward pass: nothing saved (the newest checkpoint on disk is complete)\n")
		return err
	}
	errs := []error{err, r.save("interrupted"), r.checkpoint("interrupted")}
	if r.f.ckptDir != "" && r.savedSteps == r.last.Step {
		fmt.Fprintf(r.out, "resume with: headroom train --resume %s (and the same flags)\n", r.f.ckptDir)
	}
	return errors.Join(errs...)
}

func (r *runner) run(ctx context.Context) error {
	f, tr := r.f, r.tr
	r.savedSteps = -1
	if n, err := train.CleanCheckpoints(f.ckptDir); err != nil {
		return fmt.Errorf("--checkpoint-dir: %w", err)
	} else if n > 0 {
		fmt.Fprintf(r.out, "removed %d unfinished checkpoint file(s) of an earlier run from %s\n", n, f.ckptDir)
	}
	if f.resume != "" {
		ck, dir, err := train.ReadCheckpoint(f.resume)
		if err != nil {
			return err
		}
		for _, kv := range [][2]string{{"model", f.model}, {"optimizer", f.optimizer}, {"seed", fmt.Sprint(f.seed)}, {"batch", fmt.Sprint(f.batch)}, {"samples", fmt.Sprint(r.n)}} {
			if got, ok := ck.Meta[kv[0]]; ok && got != kv[1] {
				return fmt.Errorf("--resume %s: the checkpoint was trained with %s %s, this run has %s (resuming exactly needs the same)", dir, kv[0], got, kv[1])
			}
		}
		if ck, dir, err = tr.LoadCheckpoint(dir); err != nil {
			return err
		}
		r.last, r.savedSteps = ck, ck.Step
		r.resumed, r.resumeMeta = true, ck.Meta
		r.last.Meta = nil
		fmt.Fprintf(r.out, "resumed from %s: step %d, epoch %d, batch %d\n", dir, ck.Step, ck.Epoch+1, ck.Batch)
	} else {
		r.last.Passes = tr.Passes()
	}
	if err := r.openLogs(); err != nil {
		return err
	}
	defer r.closeLogs()
	if r.last.Epoch >= f.epochs {
		fmt.Fprintf(r.out, "the checkpoint is at the end of epoch %d: nothing left to train (raise --epochs)\n", r.last.Epoch)
		return writeTrainSnapshot(f, r.dev, r.out)
	}
	data, err := r.open(dataset.State{Epoch: r.last.Epoch, Step: r.last.Batch})
	if err != nil {
		return err
	}
	defer data.Close()
	steps := data.NumBatches()
	if err := r.startSchedule(steps); err != nil {
		return err
	}
	if err := r.logRun(steps); err != nil {
		return err
	}
	lastSave := time.Now()
	done := f.steps > 0 && r.last.Step >= int64(f.steps)
	for epoch := r.last.Epoch; epoch < f.epochs && !done; epoch++ {
		start := time.Now()
		var sum float64
		var count int
		var epochPeak int64
		var epochWait, epochSteps time.Duration // the steps' data wait, and the steps with it
		b := 0
		if epoch == r.last.Epoch {
			b = r.last.Batch // done before the checkpoint
		}
		r.startProgress(epoch, steps, b)
		dataStart := time.Now()
		for {
			if f.steps > 0 && r.last.Step >= int64(f.steps) {
				done = true
				break
			}
			if err := ctx.Err(); err != nil {
				return r.interrupted(fmt.Sprintf("in epoch %d at step %d/%d", epoch+1, b, steps), nil, false)
			}
			x, y, err := data.Next(ctx)
			if err == io.EOF {
				// The epoch is over (a stream may end short of its scan's
				// count: a shard cut short, skipped under --skip-bad).
				r.last.Epoch, r.last.Batch = epoch+1, 0
				break
			}
			if err != nil && ctx.Err() != nil {
				return r.interrupted(fmt.Sprintf("in epoch %d at step %d/%d (waiting for data)", epoch+1, b, steps), nil, false)
			}
			if err != nil {
				return err
			}
			x, y, ok, err := f.dist.shard(x, y)
			if err != nil {
				return err
			} else if !ok {
				// Fewer samples than ranks (an epoch's last batch): every
				// rank skips it.
				b++
				r.last.Epoch, r.last.Batch = epoch, b
				if b == steps {
					r.last.Epoch, r.last.Batch = epoch+1, 0
				}
				continue
			}
			samples := x.Shape[0]
			parts, err := train.Split(train.Batch{X: x, Y: y}, min(r.accum, samples))
			if err != nil {
				return err
			}
			stepStart := time.Now()
			wait := stepStart.Sub(dataStart)
			splits := tr.Splits
			r.dev.Alloc.ResetPeak()
			r.watch.stepStart()
			loss, err := tr.StepAccumulate(ctx, parts)
			if err != nil && ctx.Err() != nil {
				partial := tr.Config().OptimizerInBackward && tr.CheckOptimizerInBackward(len(parts)) == nil
				return r.interrupted(fmt.Sprintf("in epoch %d at step %d/%d", epoch+1, b+1, steps), err, partial)
			}
			if err != nil {
				var nf *train.NonFiniteError
				if errors.As(err, &nf) {
					return fmt.Errorf("epoch %d step %d: %w", epoch+1, b+1, err)
				}
				return err
			}
			stats := r.dev.Alloc.Stats()
			epochPeak = max(epochPeak, stats.AllocatedBytes.Peak)
			b++
			r.last = train.Checkpoint{Step: r.last.Step + 1, Epoch: epoch, Batch: b, Passes: tr.Passes()}
			if b == steps {
				r.last.Epoch, r.last.Batch = epoch+1, 0
			}
			sum += loss * float64(samples)
			count += samples
			el := time.Since(stepStart)
			epochWait, epochSteps = epochWait+wait, epochSteps+wait+el
			r.watch.stepDone(r.last.Step, epoch+1, loss, samples, el, wait, stats)
			rec := runreport.Step{Step: r.last.Step, Epoch: epoch + 1, Loss: loss, LR: tr.Opt.LR(), Samples: samples,
				SamplesPerSec: float64(samples) / el.Seconds(), StepSec: el.Seconds(), DataWaitSec: wait.Seconds(),
				PeakAllocated: stats.AllocatedBytes.Peak, PeakReserved: stats.ReservedBytes.Peak,
				MicroBatches: len(parts) + tr.Splits - splits}
			if err := r.logStep(rec, stats); err != nil {
				return err
			}
			r.advanceSchedule()
			if f.everySteps > 0 && r.last.Step%int64(f.everySteps) == 0 {
				if err := r.checkpoint(fmt.Sprintf("every %d steps", f.everySteps)); err != nil {
					return err
				}
			}
			if f.everyTime > 0 && time.Since(lastSave) >= f.everyTime {
				if err := r.checkpoint(fmt.Sprintf("every %v", f.everyTime)); err != nil {
					return err
				}
				lastSave = time.Now()
			}
			r.prog.update(progressStat{step: b, loss: sum / float64(count), samples: count, peak: epochPeak})
			dataStart = time.Now()
		}
		r.prog.endEpoch(progressStat{step: b, loss: sum / float64(max(count, 1)), samples: count, peak: epochPeak})
		last := epoch+1 == f.epochs || done || (f.steps > 0 && r.last.Step >= int64(f.steps))
		if last {
			// The weights are saved before evaluation: an evaluation that
			// fails or is interrupted does not lose them.
			if err := errors.Join(r.save("end of training"), r.checkpoint("end of training")); err != nil {
				return err
			}
		}
		line := fmt.Sprintf("epoch %d:", epoch+1)
		if count > 0 {
			line += fmt.Sprintf(" train loss %.4f,", sum/float64(count))
		}
		for _, e := range r.evals {
			// Evaluation runs at the training micro-batch, budget or not:
			// a forward pass at that size needs less than a training step,
			// so evaluating never raises the run's peak (at 500 samples a
			// batch it mapped 6x the training peak for the default cnn).
			res, err := r.evaluate(ctx, tr, e)
			if err != nil && ctx.Err() != nil {
				return r.interrupted(fmt.Sprintf("in epoch %d while evaluating %s", epoch+1, e.name), err, false)
			}
			if err != nil {
				return err
			}
			line += " " + res.format(e.name) + ","
			if err := r.logEval(epoch+1, e.name, res); err != nil {
				return err
			}
		}
		if s, ok := data.(interface{ skipNote() string }); ok {
			line += s.skipNote()
		}
		if epochSteps > 0 {
			line += fmt.Sprintf(" data wait %.2fs (%.1f%% of the steps' time),", epochWait.Seconds(), 100*epochWait.Seconds()/epochSteps.Seconds())
		}
		fmt.Fprintf(r.out, "%s %.1fs, training peak allocated %s\n", line, time.Since(start).Seconds(), device.FormatBytes(epochPeak))
		if f.summary {
			fmt.Fprint(r.out, r.dev.Alloc.Summary())
		}
		if !last {
			// Between epochs the arena and gradients go back to the OS.
			tr.ReleaseMemory()
		}
		r.dev.Alloc.ResetPeak()
		if last {
			break
		}
	}
	if done && r.last.Step >= int64(f.steps) {
		fmt.Fprintf(r.out, "stopped after %d steps (--steps)\n", f.steps)
	}
	return writeTrainSnapshot(f, r.dev, r.out)
}

// evalResult is a set's loss and, for class targets, accuracy.
type evalResult struct {
	n        int // samples
	loss     float64
	lossName string
	correct  int64
	targets  int64 // class targets scored (tokens for a language model)
}

func (e evalResult) format(name string) string {
	s := fmt.Sprintf("%s %s %.4f", name, e.lossName, e.loss)
	if e.targets > 0 {
		s += fmt.Sprintf(", %s accuracy %.2f%% (%d samples)", name, 100*float64(e.correct)/float64(e.targets), e.n)
	}
	return s
}

// runner.evaluate is evaluate with the run's progress: an evaluation that takes
// longer than evalQuiet (RRDBNet's 256 generated test samples: half a
// minute on 2 cores) shows how far it is, as training steps do.
func (r *runner) evaluate(ctx context.Context, tr *train.Trainer, e evalSet) (evalResult, error) {
	now := r.prog.now
	start, noted := now(), ""
	total := e.hi - e.lo
	note := func(done int) {
		if el := now().Sub(start); el >= evalQuiet {
			noted = fmt.Sprintf("evaluating %s: %d/%d samples, %s", e.name, done, total, el.Round(time.Second))
			r.prog.note(noted)
		}
	}
	res, err := evaluate(ctx, tr, e, r.evalBatch, r.f.dist.evalComm(), note)
	if noted != "" {
		r.prog.endNote(noted) // the last batch's line, unless shown
	}
	return res, err
}

// evalQuiet is how long an evaluation runs before it shows progress.
const evalQuiet = 2 * time.Second

// evaluate scores the samples of e in batches of batch. A batch whose
// forward pass does not fit in the device's memory is split in two, and
// again, as training steps are (train.Trainer.runResilient): evaluation
// runs under the same capacity as training. With c (evalComm: forward
// passes collective over its ranks) the ranks agree first whether the
// batch fits on every one of them and split it all alike. note, when not
// nil, is called with the number of samples scored after each batch.
func evaluate(ctx context.Context, tr *train.Trainer, e evalSet, batch int, c comm.Comm, note func(done int)) (evalResult, error) {
	var acc evalResult
	var lossSum float64
	var weight float64
	var run func(idx []int) error
	split := func(idx []int) error {
		h := len(idx) / 2
		if err := run(idx[:h]); err != nil {
			return err
		}
		return run(idx[h:])
	}
	run = func(idx []int) error {
		x, y, err := e.src.Batch(idx)
		if err != nil {
			return err
		}
		if c != nil {
			fits, err := agreeFits(ctx, tr, c, e.name, idx, x) // evalranks.go
			if err != nil {
				return err
			}
			if !fits {
				return split(idx)
			}
		}
		out, err := tr.Predict(ctx, x)
		if errors.Is(err, device.ErrOutOfMemory) && len(idx) > 1 && c == nil {
			return split(idx)
		}
		if err != nil {
			return err
		}
		if out.Data == nil {
			return nil // meta device
		}
		l, w, c, t := score(out, y)
		lossSum += l
		weight += w
		acc.correct += c
		acc.targets += t
		acc.n += len(idx)
		return nil
	}
	idx := make([]int, 0, batch)
	for lo := e.lo; lo < e.hi; lo += batch {
		idx = idx[:0]
		for i := lo; i < min(lo+batch, e.hi); i++ {
			idx = append(idx, i)
		}
		if err := run(idx); err != nil {
			return acc, err
		}
		if note != nil {
			note(acc.n)
		}
	}
	acc.lossName = "loss"
	if acc.targets == 0 {
		acc.lossName = "L1 loss"
	}
	if weight > 0 {
		acc.loss = lossSum / weight
	}
	return acc, nil
}

// score returns the summed loss of a batch's outputs and its weight:
// cross-entropy and correct argmaxes over the last axis for class targets
// (int64), mean absolute error for float targets (an L1-trained model).
func score(out, y *tensor.Tensor) (loss, weight float64, correct, targets int64) {
	o := out.Convert(tensor.Float32).F32()
	if y.DType == tensor.Int64 {
		ys := y.I64()
		c := len(o) / len(ys)
		for i, want := range ys {
			row := o[i*c : (i+1)*c]
			best, mx := 0, row[0]
			for j, v := range row {
				if v > mx {
					best, mx = j, v
				}
			}
			var z float64
			for _, v := range row {
				z += math.Exp(float64(v - mx))
			}
			if want >= 0 && int(want) < c {
				loss += math.Log(z) - float64(row[want]-mx)
				weight++
				targets++
				if int64(best) == want {
					correct++
				}
			}
		}
		return loss, weight, correct, targets
	}
	t := y.Convert(tensor.Float32).F32()
	for i, v := range o {
		loss += math.Abs(float64(v - t[i]))
	}
	return loss, float64(len(o)), 0, 0
}
