package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

type trainFlags struct {
	model     string
	epochs    int
	batch     int
	lr        float64
	optimizer string
	device    string
	threads   int
	seed      int64
	save      string
	load      string
	data      string
	limit     int
	budget    string
	recompute string
	accum     int
	inBack    bool
	snapshot  string
	summary   bool
	history   int
	precision string
	compress  string
	// given holds the names of the flags given on the command line (nil
	// when the flags were filled in by a test).
	given map[string]bool
}

func cmdTrain(ctx context.Context, args []string) error {
	var f trainFlags
	fs := trainFlagSet(&f)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return runTrain(ctx, fs, f)
}

// trainFlagSet defines train's flags, stored in f.
func trainFlagSet(f *trainFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: headroom train [flags]

Trains a model on Fashion-MNIST and reports test accuracy. The data comes from
$HEADROOM_FASHION_MNIST, else /usr/share/datasets/fashion-mnist (Debian package
dataset-fashion-mnist), else the 2000/500-image subset built into the binary.
Before the first step it prints the memory plan of a step. With --budget it
first chooses how to fit the budget (micro-batches, recomputation, and with
--precision auto / --compress auto the precision among fp32 and bf16-mixed and
the storage of saved activations among none, ReLU masks as bits, bf16 and
int8), prints that plan, and trains with it on a device capped at the budget.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.model, "model", "cnn", "model: cnn (2 conv layers) or mlp (784-256-10)")
	fs.IntVar(&f.epochs, "epochs", 1, "number of passes over the training set")
	fs.IntVar(&f.batch, "batch-size", 32, "samples per step (the last batch of an epoch may be shorter)")
	fs.Float64Var(&f.lr, "lr", 1e-3, "learning rate")
	fs.StringVar(&f.optimizer, "optimizer", "adam", "optimizer: adam, adamw or sgd (momentum 0.9)")
	fs.StringVar(&f.device, "device", "cpu", "device: cpu, cpu:mem=SIZE (a capacity, e.g. 512MiB) or meta (prints the plan; nothing runs, so no --save or --load)")
	fs.IntVar(&f.threads, "threads", 0, "worker threads for kernels, at least 1; more than the CPUs are lowered to their number (default $HEADROOM_NUM_THREADS or all cores)")
	fs.Int64Var(&f.seed, "seed", 1, "seed for initialization and shuffling")
	fs.StringVar(&f.save, "save", "", "write the trained weights to this safetensors file (also on Ctrl-C)")
	fs.StringVar(&f.load, "load", "", "start from the weights in this safetensors file (a headroom or PyTorch state_dict)")
	fs.StringVar(&f.data, "data", "", "directory with Fashion-MNIST IDX files (overrides the search above)")
	fs.IntVar(&f.limit, "limit", 0, "use only the first N training images (0: all); a --batch-size above it is lowered to it")
	fs.StringVar(&f.budget, "budget", "", "memory budget (e.g. 64MiB): plan micro-batching, recomputation and (with --precision/--compress auto) precision and compression to fit it, print the plan, and cap the device at it (so not with --device ...:mem=)")
	fs.StringVar(&f.recompute, "recompute", "none", "activations to recompute in the backward pass: none, selective (activations and norms) or auto (only with --budget)")
	fs.StringVar(&f.snapshot, "memory-snapshot", "", "record the allocator's history and write a memory snapshot to this file at the end (.json, or .pickle for PyTorch's memory_viz)")
	fs.IntVar(&f.history, "memory-history", 100000, "events kept in the history ring buffer (only with --memory-snapshot)")
	fs.BoolVar(&f.summary, "memory-summary", false, "print the allocator's memory summary at the end of each epoch")
	fs.StringVar(&f.precision, "precision", "fp32", precisionHelp+"; fp16-mixed trains with dynamic loss scaling")
	fs.StringVar(&f.compress, "compress", "none", compressHelp)
	fs.BoolVar(&f.inBack, "optimizer-in-backward", false, "update each parameter as soon as its gradient is final and free the gradient (gradients never all in memory at once; same results); needs one micro-batch, fp32 and no loss scaling (with --budget the planner uses it for plans that have them)")
	fs.IntVar(&f.accum, "accumulate", 1, "split each batch into this many micro-batches (gradient accumulation; same gradient)")
	return fs
}

// runTrain trains with the parsed flags.
func runTrain(ctx context.Context, fs *flag.FlagSet, f trainFlags) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("train: unexpected argument %q", fs.Arg(0))
	}
	f.given = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	return trainFashion(ctx, f, os.Stdout, os.Stderr)
}

// check validates every flag, before any work (reading the dataset, fitting
// the budget, building the trainer), so that a mistake is reported at once,
// and sets the thread count. It fills in the defaults of zero fields (as
// tests leave them).
func (f *trainFlags) check(log io.Writer) error {
	var budgetBytes int64
	if f.batch <= 0 || f.epochs <= 0 {
		return fmt.Errorf("--batch-size and --epochs must be positive")
	}
	// The input of one step must be a tensor that can exist.
	if err := (tensor.Shape{f.batch, 1, dataset.Rows, dataset.Cols}).Check(tensor.Float32); err != nil {
		return fmt.Errorf("--batch-size %d: must be smaller: %w", f.batch, err)
	}
	if !(f.lr > 0) || math.IsInf(f.lr, 0) {
		return fmt.Errorf("--lr %g: must be a positive, finite number", f.lr)
	}
	if _, err := newOptimizer(f.optimizer, f.lr); err != nil {
		return fmt.Errorf("--optimizer: %w", err)
	}
	if _, err := buildFashionModel(f.model, nn.NewStore()); err != nil {
		return fmt.Errorf("--model: %w", err)
	}
	if f.limit < 0 {
		return fmt.Errorf("--limit %d: must be at least 0 (0: all the training images)", f.limit)
	}
	f.precision, f.compress, f.recompute = cmp.Or(f.precision, "fp32"), cmp.Or(f.compress, "none"), cmp.Or(f.recompute, "none")
	if _, err := budget.ParsePolicy(f.recompute); err != nil {
		return fmt.Errorf("--recompute: %w", err)
	}
	if f.given["budget"] || f.budget != "" {
		var err error
		if budgetBytes, err = device.ParseBytes(f.budget); err != nil {
			return fmt.Errorf("--budget: %w", err)
		}
	}
	if _, err := budget.ParsePrecisions(f.precision); err != nil {
		return fmt.Errorf("--precision: %w", err)
	}
	if _, err := budget.ParseCompressions(f.compress); err != nil {
		return fmt.Errorf("--compress: %w", err)
	}
	if _, _, err := parseNumerics(f.precision, f.compress, budgetBytes > 0); err != nil {
		return err
	}
	if f.recompute == "auto" && budgetBytes == 0 {
		return fmt.Errorf("--recompute auto needs --budget (auto chooses what to recompute to fit it)")
	}
	if f.accum == 0 && !f.given["accumulate"] {
		f.accum = 1
	}
	if f.accum < 1 || f.accum > f.batch {
		return fmt.Errorf("--accumulate %d: must be between 1 and the batch size %d", f.accum, f.batch)
	}
	capacity, err := device.Capacity(f.device)
	if err != nil {
		return fmt.Errorf("--device: %w", err)
	}
	if budgetBytes > 0 && capacity > 0 {
		return fmt.Errorf("--budget %s and --device %s both cap the memory: give only --budget (the device is then capped at the budget)", f.budget, f.device)
	}
	if isMeta(f.device) {
		for _, fl := range []struct{ name, value string }{{"save", f.save}, {"load", f.load}} {
			if fl.value != "" {
				return fmt.Errorf("--%s with --device %s: the meta device holds no data (it plans; nothing runs), so there are no weights to %s", fl.name, f.device, fl.name)
			}
		}
	}
	if f.snapshot != "" || f.given["memory-history"] {
		if f.snapshot == "" {
			return fmt.Errorf("--memory-history applies only with --memory-snapshot")
		}
		if f.history < 1 {
			return fmt.Errorf("--memory-history %d: must be at least 1 (events kept)", f.history)
		}
	}
	for _, out := range []struct{ name, path string }{{"save", f.save}, {"memory-snapshot", f.snapshot}} {
		if out.path == "" {
			continue
		}
		if err := checkOutputPath(out.path); err != nil {
			return fmt.Errorf("--%s: %w", out.name, err)
		}
	}
	if f.load != "" {
		fi, err := os.Stat(f.load)
		if err != nil {
			return fmt.Errorf("--load: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("--load %s: not a regular file", f.load)
		}
	}
	if _, err := setThreads(f.given["threads"], f.threads, log); err != nil {
		return err
	}
	return nil
}

// isMeta reports whether a device spec names the meta device.
func isMeta(spec string) bool {
	kind, _, _ := strings.Cut(spec, ":")
	return kind == "meta"
}

// checkOutputPath checks, before any work, that a file can be written at
// path: its directory exists and takes new files, and path is not a
// directory or a special file. Finding out after training would lose it.
func checkOutputPath(path string) error {
	if fi, err := os.Stat(path); err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s exists and is not a regular file", path)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("directory of %s: %w", path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	// Access bits do not tell the whole story (read-only mounts, ACLs):
	// creating a file does.
	tmp, err := os.CreateTemp(dir, ".headroom-check-*")
	if err != nil {
		return fmt.Errorf("%s: cannot create files in %s: %w", path, dir, err)
	}
	tmp.Close()
	return os.Remove(tmp.Name())
}

func policyByName(name string) transform.Policy {
	if name == "selective" {
		return transform.CheapOps
	}
	return nil
}

func buildFashionModel(name string, s *nn.Store) (train.Model, error) {
	switch name {
	case "cnn":
		return zoo.NewFashionCNN(s.Root()), nil
	case "mlp":
		return zoo.NewMLP(s.Root(), 784, 256, 10), nil
	}
	return nil, fmt.Errorf("unknown model %q (valid: cnn, mlp)", name)
}

func newOptimizer(name string, lr float64) (optim.Optimizer, error) {
	switch name {
	case "adam":
		c := optim.AdamDefaults()
		c.LR = lr
		return optim.NewAdam(c)
	case "adamw":
		c := optim.AdamWDefaults()
		c.LR = lr
		return optim.NewAdamW(c)
	case "sgd":
		return optim.NewSGD(optim.SGDConfig{LR: lr, Momentum: 0.9})
	}
	return nil, fmt.Errorf("unknown optimizer %q (valid: adam, adamw, sgd)", name)
}

func crossEntropy(out, y *trace.Tensor) *trace.Tensor {
	return op.CrossEntropy(out, y, op.DefaultCrossEntropyOpts())
}

func loadFashion(ctx context.Context, dir string) (trainSet, testSet *dataset.Dataset, source string, err error) {
	if dir == "" {
		return dataset.OpenContext(ctx)
	}
	if trainSet, err = dataset.FashionMNISTContext(ctx, dir, dataset.Train); err != nil {
		return nil, nil, "", err
	}
	if testSet, err = dataset.FashionMNISTContext(ctx, dir, dataset.Test); err != nil {
		return nil, nil, "", err
	}
	return trainSet, testSet, dir, nil
}

func trainFashion(ctx context.Context, f trainFlags, out, log io.Writer) error {
	if err := f.check(log); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	// The meta device has no data: it plans the step and nothing runs, so
	// there is no dataset to read, no loss and no accuracy to report.
	meta := isMeta(f.device)
	var trainSet, testSet *dataset.Dataset
	n := 0
	if !meta {
		var source string
		var err error
		if trainSet, testSet, source, err = loadFashion(ctx, f.data); err != nil {
			return err
		}
		n = trainSet.Len()
		if f.limit > 0 && f.limit < n {
			n = f.limit
		}
		fmt.Fprintf(out, "data: %s (%d training, %d test images)\n", source, n, testSet.Len())
		if f.batch > n {
			// The plan and the budget are then for the batches that run.
			fmt.Fprintf(log, "headroom: --batch-size %d is more than the %d training images: each step uses all %d\n", f.batch, n, n)
			f.batch = n
			if f.accum > f.batch {
				return fmt.Errorf("train: --accumulate %d: more micro-batches than the %d training images", f.accum, n)
			}
		}
	}
	accum, remat, policy, inBack := max(f.accum, 1), policyByName(f.recompute), f.recompute, f.inBack
	precs, comps, err := parseNumerics(cmp.Or(f.precision, "fp32"), cmp.Or(f.compress, "none"), f.budget != "")
	if err != nil {
		return err
	}
	prec := precs[0]
	var compress transform.CompressPolicy // nil: kept as produced
	if comps[0] != (transform.Compression{}) {
		compress = comps[0]
	}
	if f.budget != "" {
		b, err := device.ParseBytes(f.budget)
		if err != nil {
			return fmt.Errorf("train: --budget: %w", err)
		}
		prob := budget.Problem{
			Build: func(s *nn.Store) (train.Model, train.LossFunc) {
				m, _ := buildFashionModel(f.model, s)
				return m, crossEntropy
			},
			Example: func(n int) (trace.Meta, trace.Meta) {
				return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 1, dataset.Rows, dataset.Cols}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}
			},
			Batch: f.batch, Budget: b,
			NewOptimizer: func() (optim.Optimizer, error) { return newOptimizer(f.optimizer, f.lr) },
			Precisions:   precs, Compress: comps, OptimizerInBackward: f.inBack,
		}
		if f.recompute != "none" {
			pol, _ := budget.ParsePolicy(f.recompute)
			prob.Policies = []budget.Policy{pol}
		}
		res, err := budget.Fit(ctx, prob)
		if err != nil {
			return err
		}
		res.Print(out, b)
		accum, remat, policy = res.Best.Accumulation, res.Best.Remat, res.Best.Policy.String()
		prec, compress = res.Best.Precision, res.Best.Compress
		// The plan says where the optimizer runs, and why not in the
		// backward pass when it was asked for.
		inBack = res.Best.InBackward
		if !strings.Contains(f.device, "mem=") {
			f.device = fmt.Sprintf("%s:mem=%d", f.device, res.Best.Capacity) // the budget, or the tighter capacity the plan fits

		}
	}
	dev, err := device.New(f.device)
	if err != nil {
		return err
	}
	if f.snapshot != "" {
		dev.Alloc.RecordHistory(f.history)
	}
	store := nn.NewStore()
	model, err := buildFashionModel(f.model, store)
	if err != nil {
		return err
	}
	if err := store.Materialize(dev, f.seed); err != nil {
		return err
	}
	defer store.Release()
	if f.load != "" {
		if err := store.LoadFile(f.load, true); err != nil {
			return err
		}
		fmt.Fprintf(out, "loaded weights from %s\n", f.load)
	}
	opt, err := newOptimizer(f.optimizer, f.lr)
	if err != nil {
		return err
	}
	st, err := train.StorageOf(compress)
	if err != nil {
		return err
	}
	tr, err := train.NewConfig(dev, store, model, crossEntropy, opt,
		train.Config{Precision: prec, Recompute: train.MustRecompute(remat), Storage: st, OptimizerInBackward: inBack})
	if err != nil {
		return err
	}
	defer tr.Close()
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

	micro := (f.batch + accum - 1) / accum
	xMeta := trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{micro, 1, dataset.Rows, dataset.Cols}}
	yMeta := trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{micro}}
	mp, err := tr.Plan(xMeta, yMeta)
	if err != nil {
		return err
	}
	if accum > 1 || remat != nil {
		fmt.Fprintf(out, "micro-batch %d x %d accumulation steps; recomputation %s\n", micro, accum, policy)
	}
	mp.Print(out)
	if meta {
		fmt.Fprintf(out, "device %v: shapes only, nothing runs (this is the plan; no step, loss or accuracy)\n", dev)
		return writeTrainSnapshot(f, dev, out)
	}

	// A save that fails is the run's error: the weights are what it was for.
	save := func(why string) error {
		if f.save == "" {
			return nil
		}
		if err := store.SaveFile(f.save, map[string]string{"format": "pt", "model": f.model}); err != nil {
			return fmt.Errorf("--save %s (%s): %w", f.save, why, err)
		}
		fmt.Fprintf(out, "saved weights to %s (%s)\n", f.save, why)
		return nil
	}

	sampler := dataset.Sampler{N: n, BatchSize: f.batch, Shuffle: true, Seed: uint64(f.seed)}
	steps := sampler.NumBatches()
	for epoch := 0; epoch < f.epochs; epoch++ {
		start := time.Now()
		var sum float64
		var count int
		step := 0
		for idx := range sampler.Epoch(epoch) {
			if err := ctx.Err(); err != nil {
				return errors.Join(fmt.Errorf("interrupted in epoch %d at step %d/%d", epoch+1, step, steps), save("interrupted"))
			}
			x, y, err := trainSet.Tensors(idx, dataset.TrainMean, dataset.TrainStd)
			if err != nil {
				return err
			}
			parts, err := train.Split(train.Batch{X: x, Y: y}, min(accum, len(idx)))
			if err != nil {
				return err
			}
			loss, err := tr.StepAccumulate(ctx, parts)
			if err != nil && ctx.Err() != nil {
				return errors.Join(fmt.Errorf("interrupted in epoch %d at step %d/%d: %w", epoch+1, step+1, steps, err), save("interrupted"))
			}
			if err != nil {
				var nf *train.NonFiniteError
				if errors.As(err, &nf) {
					return fmt.Errorf("epoch %d step %d: %w", epoch+1, step+1, err)
				}
				return err
			}
			sum += loss * float64(len(idx))
			count += len(idx)
			step++
			if step%50 == 0 || step == steps {
				el := time.Since(start)
				eta := time.Duration(float64(el) / float64(step) * float64(steps-step))
				fmt.Fprintf(log, "\repoch %d  step %4d/%d  loss %.4f  %6.0f img/s  eta %v   ", epoch+1, step, steps, sum/float64(count), float64(count)/el.Seconds(), eta.Round(time.Second))
			}
		}
		fmt.Fprintln(log)
		trainPeak := dev.Alloc.Stats().AllocatedBytes.Peak
		evalBatch := 500
		if f.budget != "" {
			evalBatch = micro // a forward pass needs less than a training step
		}
		acc, err := accuracy(ctx, tr, testSet, evalBatch)
		if err != nil && ctx.Err() != nil {
			return errors.Join(fmt.Errorf("interrupted in epoch %d while testing: %w", epoch+1, err), save("interrupted"))
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "epoch %d: train loss %.4f, test accuracy %.2f%% (%d images), %.1fs, training peak allocated %s\n",
			epoch+1, sum/float64(count), 100*acc, testSet.Len(), time.Since(start).Seconds(), device.FormatBytes(trainPeak))
		if f.summary {
			fmt.Fprint(out, dev.Alloc.Summary())
		}
		if epoch+1 < f.epochs {
			// Between epochs the arena and gradients go back to the OS.
			tr.ReleaseMemory()
		}
		dev.Alloc.ResetPeak()
	}
	if err := save("end of training"); err != nil {
		return err
	}
	return writeTrainSnapshot(f, dev, out)
}

// writeTrainSnapshot writes the memory snapshot --memory-snapshot asks for.
func writeTrainSnapshot(f trainFlags, dev *device.Device, out io.Writer) error {
	if f.snapshot == "" {
		return nil
	}
	if err := writeSnapshot(f.snapshot, dev.Alloc.Snapshot()); err != nil {
		return fmt.Errorf("--memory-snapshot: %w", err)
	}
	fmt.Fprintf(out, "wrote memory snapshot to %s (view it with: headroom viz %s)\n", f.snapshot, f.snapshot)
	return nil
}

func accuracy(ctx context.Context, tr *train.Trainer, ds *dataset.Dataset, batch int) (float64, error) {
	correct := 0
	idx := make([]int, 0, batch)
	for start := 0; start < ds.Len(); start += batch {
		idx = idx[:0]
		for i := start; i < min(start+batch, ds.Len()); i++ {
			idx = append(idx, i)
		}
		x, y, err := ds.Tensors(idx, dataset.TrainMean, dataset.TrainStd)
		if err != nil {
			return 0, err
		}
		logits, err := tr.Predict(ctx, x)
		if err != nil {
			return 0, err
		}
		if logits.Data == nil {
			return 0, nil // meta device: nothing to score
		}
		l := logits.F32()
		c := logits.Shape[1]
		for i, want := range y.I64() {
			best := 0
			for j := 1; j < c; j++ {
				if l[i*c+j] > l[i*c+best] {
					best = j
				}
			}
			if int64(best) == want {
				correct++
			}
		}
	}
	return float64(correct) / float64(ds.Len()), nil
}
