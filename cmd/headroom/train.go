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
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

type trainFlags struct {
	model       string
	epochs      int
	batch       int
	lr          float64
	weightDecay float64
	clipGrad    float64
	optimizer   string
	device      string
	threads     int
	seed        int64
	save        string
	load        string
	data        string
	limit       int
	budget      string
	recompute   string
	accum       int
	inBack      bool
	// gradBuffers keeps gradient buffers for the whole step; by default
	// a step of one micro-batch keeps its gradients in the arena.
	gradBuffers bool
	snapshot    string
	watch       watchFlags // --live, --profile (live.go)
	summary     bool
	history     int
	precision   string
	compress    string
	steps       int
	saveEvery   string
	// everySteps and everyTime are --save-every parsed by check.
	everySteps int
	everyTime  time.Duration
	keep       int
	ckptDir    string
	resume     string
	logPath    string
	valSplit   float64
	dist       distFlags // data parallel under mpirun (dist.go)
	sched      scheduleFlags
	progress   progressFlags
	// tensorboard is --tensorboard: a directory for event files.
	tensorboard string
	// maxBatch is --max-batch (maxbatch.go).
	maxBatch bool
	prefetch int    // the data loader's staging buffers (data.go)
	skipBad  bool   // --skip-bad: skip and count bad samples of --data (data.go)
	val      string // a validation set (data.go)
	// shuffleBuf is --shuffle-buffer: a stream's shuffle buffer (shards.go).
	shuffleBuf optInt
	// given holds the names of the flags given on the command line (nil
	// when the flags were filled in by a test).
	given map[string]bool
}

func cmdTrain(ctx context.Context, args []string) error {
	if wantsPipeline(args) {
		return pipeTrainMain(ctx, args, os.Stdout, os.Stderr) // pipetrain.go
	}
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

Trains a model of the zoo and reports its test loss and accuracy. cnn and mlp
(the default: cnn) train on Fashion-MNIST: from --data, else
$HEADROOM_FASHION_MNIST, else /usr/share/datasets/fashion-mnist (Debian package
dataset-fashion-mnist), else the 2000/500-image subset built into the binary.
Every other model trains on learnable data it generates (zoo.Synthetic: images
labelled by a fixed random linear teacher, token sequences with a pattern,
image pairs for super-resolution); --limit sets its size (default 1024).
With --checkpoint-dir, checkpoints that resume exactly (weights, optimizer
state, step, data position, dropout and loss-scaler state) are written every
--save-every steps, at the end and on Ctrl-C; --resume continues from one.
Before the first step it prints the memory plan of a step. With --budget it
first chooses how to fit the budget (micro-batches, recomputation, and with
--precision auto / --compress auto the precision among fp32 and bf16-mixed and
the storage of saved activations among none, ReLU masks as bits, bf16 and
int8), prints that plan, and trains with it on a device capped at the budget.

Flags:
`)
		printFlags(fs.Output(), fs)
	}
	fs.StringVar(&f.model, "model", "cnn", "model of the zoo: "+strings.Join(zoo.Names(), ", "))
	fs.IntVar(&f.epochs, "epochs", 1, "number of passes over the training set")
	fs.IntVar(&f.batch, "batch-size", 32, "samples per step (the last batch of an epoch may be shorter)")
	fs.IntVar(&f.batch, "batch", 32, "the same as --batch-size")
	fs.Float64Var(&f.lr, "lr", 1e-3, "learning rate")
	fs.Float64Var(&f.weightDecay, "weight-decay", -1, "weight decay (-1: the optimizer's default, 0.01 for adamw and 0 for adam and sgd)")
	fs.Float64Var(&f.clipGrad, "clip-grad", 0, "clip the gradients' global L2 norm to this value, after unscaling (torch.nn.utils.clip_grad_norm_; 0: no clipping)")
	fs.StringVar(&f.optimizer, "optimizer", "adam", "optimizer: adam, adamw or sgd (momentum 0.9)")
	fs.StringVar(&f.device, "device", "cpu", "device: cpu, cpu:mem=SIZE (a capacity, e.g. 512MiB) or meta (prints the plan; nothing runs, so no --save or --load)")
	fs.IntVar(&f.threads, "threads", 0, "worker threads for kernels, at least 1; more than the CPUs are lowered to their number (default $HEADROOM_NUM_THREADS or all cores)")
	fs.Int64Var(&f.seed, "seed", 1, "seed for initialization and shuffling")
	fs.StringVar(&f.save, "save", "", "write the trained weights to this safetensors file (also on Ctrl-C)")
	fs.StringVar(&f.load, "load", "", "start from the weights in this safetensors file (a headroom or PyTorch state_dict)")
	fs.StringVar(&f.data, "data", "", "training data: for cnn and mlp a directory with Fashion-MNIST IDX files (overrides the search above); for any classifier an image folder (one subfolder per class), IDX files (a directory with a train pair, or the images file; reshaped or resized to the model's input) a .csv/.tsv table (label in column 0) or WebDataset shards (a directory of .tar files, one .tar or a glob, as headroom prepare --images writes them: read as a stream), for the gpt models a token file (uint16, as nanoGPT's train.bin), read through the loader")
	fs.IntVar(&f.limit, "limit", 0, "use only the first N training samples (0: all; generated data: 1024); a --batch-size above it is lowered to it")
	fs.IntVar(&f.steps, "steps", 0, "stop after this many steps in all (0: run the --epochs); counts the steps of a resumed run too")
	fs.StringVar(&f.ckptDir, "checkpoint-dir", "", "write checkpoints (DIR/step-N/{model.safetensors,optimizer.safetensors,state.json}) here: every --save-every steps, at the end and on Ctrl-C")
	fs.StringVar(&f.saveEvery, "save-every", "", "write a checkpoint every N steps, or every DURATION of training (e.g. 10m), at the end of the step that reaches it (needs --checkpoint-dir or --resume)")
	fs.IntVar(&f.keep, "keep", 3, "keep only the newest K checkpoints (0: all)")
	fs.StringVar(&f.resume, "resume", "", "resume exactly from a checkpoint: a step-N directory, a file in one, or a --checkpoint-dir (its newest); later checkpoints go to the same --checkpoint-dir unless another is given")
	fs.StringVar(&f.logPath, "log", "", "write one JSON line per step to this file (step, epoch, loss, lr, samples/s, data wait, peak allocated and reserved, micro-batches), flushed per line; appended to with --resume")
	fs.Float64Var(&f.valSplit, "val-split", 0, "hold out this fraction of the training samples (0 to 1) and report validation loss and accuracy each epoch")
	fs.StringVar(&f.budget, "budget", "", "memory budget (e.g. 64MiB): plan micro-batching, recomputation and (with --precision/--compress auto) precision and compression to fit it, print the plan, and cap the device at it (so not with --device ...:mem=)")
	fs.StringVar(&f.recompute, "recompute", "none", "activations to recompute in the backward pass: none, selective (activations and norms) or auto (only with --budget)")
	fs.StringVar(&f.snapshot, "memory-snapshot", "", "record the allocator's history and write a memory snapshot to this file at the end (.json, or .pickle for PyTorch's memory_viz)")
	f.watch.register(fs)
	fs.IntVar(&f.history, "memory-history", 100000, "events kept in the history ring buffer (only with --memory-snapshot)")
	fs.BoolVar(&f.summary, "memory-summary", false, "print the allocator's memory summary at the end of each epoch")
	fs.StringVar(&f.precision, "precision", "fp32", precisionHelp+"; fp16-mixed trains with dynamic loss scaling")
	fs.StringVar(&f.compress, "compress", "none", compressHelp)
	fs.BoolVar(&f.inBack, "optimizer-in-backward", false, "update each parameter as soon as its gradient is final and free the gradient (gradients never all in memory at once; same results); needs one micro-batch and no loss scaling (not fp16-mixed) (with --budget the planner uses it for plans that have them)")
	fs.BoolVar(&f.gradBuffers, "gradient-buffers", false, gradBuffersHelp)
	f.sched.define(fs)
	f.progress.define(fs)
	fs.BoolVar(&f.maxBatch, "max-batch", false, "with --budget: train with the largest batch that fits the budget in one pass (no accumulation), at most --batch-size when given, else at most the training samples; found from plans, as plan --max-batch")
	fs.StringVar(&f.tensorboard, "tensorboard", "", "also write the per-step scalars (loss, learning rate, throughput, memory; validation and test each epoch) as TensorBoard event files into this directory")
	fs.IntVar(&f.accum, "accumulate", 1, "split each batch into this many micro-batches (gradient accumulation; same gradient)")
	addDistFlags(fs, &f.dist)
	dataFlags(fs, f)
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
	spec, err := lookupSpec(cmp.Or(f.model, "cnn"))
	if err != nil {
		return fmt.Errorf("--model: %w", err)
	}
	// The input of one step must be a tensor that can exist.
	if x, y := spec.Example(f.batch); x.Shape.Check(x.DType) != nil || y.Shape.Check(y.DType) != nil {
		err := cmp.Or(x.Shape.Check(x.DType), y.Shape.Check(y.DType))
		return fmt.Errorf("--batch-size %d: must be smaller: %w", f.batch, err)
	}
	if !(f.lr > 0) || math.IsInf(f.lr, 0) {
		return fmt.Errorf("--lr %g: must be a positive, finite number", f.lr)
	}
	if f.weightDecay != -1 && !(f.weightDecay >= 0 && !math.IsInf(f.weightDecay, 0)) {
		return fmt.Errorf("--weight-decay %g: must be a finite number of at least 0", f.weightDecay)
	}
	if !(f.clipGrad >= 0) || math.IsInf(f.clipGrad, 0) {
		return fmt.Errorf("--clip-grad %g: must be a finite number of at least 0 (0: no clipping)", f.clipGrad)
	}
	if err := f.sched.check(f.lr, f.given); err != nil {
		return err
	}
	if err := f.progress.check(); err != nil {
		return err
	}
	if err := f.checkMaxBatch(); err != nil {
		return err
	}
	if _, err := newOptimizer(f.optimizer, f.lr, f.weightDecay); err != nil {
		return fmt.Errorf("--optimizer: %w", err)
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
		for _, fl := range []struct{ name, value string }{{"save", f.save}, {"load", f.load}, {"checkpoint-dir", f.ckptDir}, {"resume", f.resume}} {
			if fl.value != "" {
				return fmt.Errorf("--%s with --device %s: the meta device holds no data (it plans; nothing runs), so there are no weights to %s", fl.name, f.device, fl.name)
			}
		}
	}
	if f.snapshot != "" || f.given["memory-history"] {
		if f.snapshot == "" && !f.watch.history() {
			return fmt.Errorf("--memory-history applies only with --memory-snapshot or --live")
		}
		if f.history < 1 {
			return fmt.Errorf("--memory-history %d: must be at least 1 (events kept)", f.history)
		}
	}
	for _, out := range []struct{ name, path string }{{"save", f.save}, {"memory-snapshot", f.snapshot}, {"log", f.logPath}} {
		if out.path == "" {
			continue
		}
		if err := checkOutputPath(out.path); err != nil {
			return fmt.Errorf("--%s: %w", out.name, err)
		}
	}
	if err := f.checkProduct(); err != nil {
		return err
	}
	if err := f.watch.check(f.snapshot); err != nil {
		return err
	}
	if err := f.checkData(); err != nil {
		return err
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

// buildFashionModel builds a model of the zoo (the name says "Fashion"
// for history: cnn and mlp are the Fashion-MNIST models).
func buildFashionModel(name string, s *nn.Store) (train.Model, error) {
	spec, err := zoo.Lookup(name)
	if err != nil {
		return nil, err
	}
	return spec.New(s.Root()), nil
}

// newOptimizer makes the named optimizer with PyTorch's defaults, the
// learning rate lr and, when wd >= 0, that weight decay (below 0: the
// optimizer's default, 0.01 for adamw and 0 otherwise).
func newOptimizer(name string, lr, wd float64) (optim.Optimizer, error) {
	switch name {
	case "adam":
		c := optim.AdamDefaults()
		c.LR = lr
		if wd >= 0 {
			c.WeightDecay = wd
		}
		return optim.NewAdam(c)
	case "adamw":
		c := optim.AdamWDefaults()
		c.LR = lr
		if wd >= 0 {
			c.WeightDecay = wd
		}
		return optim.NewAdamW(c)
	case "sgd":
		return optim.NewSGD(optim.SGDConfig{LR: lr, Momentum: 0.9, WeightDecay: max(wd, 0)})
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
