package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"strings"
	"time"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/gan"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

const ganUsage = `Usage: headroom gan [flags]

Trains ESRGAN: an RRDBNet generator against BasicSR's VGG-style 128x128
discriminator, with the L1 pixel loss, the perceptual loss on vgg19 conv5_4
features (weights from --vgg) and the relativistic GAN loss, Adam lr 1e-4,
betas (0.9, 0.99) for both. Each iteration is a generator step with the
discriminator frozen, then a discriminator step; both are planned before
the first one runs, in one arena.

Data: --data DIR is an image folder (DIR/<class>/*.png|jpg, as
torchvision's ImageFolder); each sample is a random crop of --crop pixels,
randomly flipped and rotated, and its --scale x bicubic downscale is the
generator's input. Without --data the images are random (for planning and
timing).

--table prints the case study's table: the planned and measured peak and
the step time of the baseline (fp32, nothing recomputed), checkpointing of
generator and discriminator, plus bf16-mixed, and the planner's choice under
half the baseline's peak.

--pixel-only trains the generator alone with the L1 loss (ESRGAN's
PSNR-oriented pre-training), validating PSNR against bicubic upsampling on
the held-out photos of --val, logged to --log for headroom report. Its
inputs are 8-bit, as a saved LR image is; --ema validates and saves a
moving average of the weights; --rgb-permute shuffles the colour channels
of some crops; an interrupt (Ctrl-C) ends it with a validation and --save.

Flags:
`

type ganFlags struct {
	data                   string
	steps, batch           int
	crop, scale            int
	nf, nb, gc, dfeat      int
	vgg                    string
	vggRandom              bool
	precision, recompute   string
	budget                 string
	planOnly, table, quiet bool
	seed                   int64
	workers, repeat        int
	// --pixel-only (ganpixel.go)
	pixelOnly        bool
	lr               float64
	threads          int
	logPath, val     string
	valEvery         int
	valCrop, valGrid int
	save             string
	duration, wall   time.Duration
	init             string
	cosine           bool
	ema              float64
	rgbPermute       float64
	from             int
}

// enlarged repeats a source k times (BasicSR's dataset_enlarge_ratio):
// each repetition of a photo is a different sample, with its own crop and
// flips, so a few large photos fill many batches per epoch.
type enlarged struct {
	dataset.MapSource
	k int
}

func (e enlarged) Len() int { return e.MapSource.Len() * e.k }

func (e enlarged) Get(i int, ex *dataset.Example) error {
	return e.MapSource.Get(i%e.MapSource.Len(), ex)
}

func cmdGAN(ctx context.Context, args []string) error { return ganMain(ctx, args, os.Stdout) }

// ganMain is cmdGAN writing its report to out.
func ganMain(ctx context.Context, args []string, out io.Writer) error {
	var f ganFlags
	fs := flag.NewFlagSet("gan", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), ganUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.data, "data", "", "image folder `DIR` of high-resolution photos (default: random images)")
	fs.IntVar(&f.steps, "steps", 2, "iterations to run (each: a generator and a discriminator step)")
	fs.IntVar(&f.batch, "batch", 16, "batch size (ESRGAN: 16)")
	fs.IntVar(&f.crop, "crop", 128, "high-resolution crop size (the discriminator takes 128 or 256)")
	fs.IntVar(&f.scale, "scale", 4, "downscale factor of the generator's input (RRDBNet upscales by 4)")
	fs.IntVar(&f.nf, "nf", 64, "generator features (ESRGAN: 64)")
	fs.IntVar(&f.nb, "nb", 23, "generator RRDB blocks (ESRGAN: 23)")
	fs.IntVar(&f.gc, "gc", 32, "generator growth channels (ESRGAN: 32)")
	fs.IntVar(&f.dfeat, "d-features", 64, "discriminator base features (ESRGAN: 64)")
	fs.StringVar(&f.vgg, "vgg", "", "torchvision vgg19 weights as a safetensors `file` (features.* keys) for the perceptual loss; without it the perceptual term is skipped")
	fs.BoolVar(&f.vggRandom, "vgg-random", false, "use a randomly initialized vgg19 for the perceptual term: its memory and time count, its values mean nothing (for measuring)")
	fs.StringVar(&f.precision, "precision", "fp32", "fp32 or bf16-mixed")
	fs.StringVar(&f.recompute, "recompute", "none", "none, selective (cheap ops) or regions (each RRDB block and discriminator stage checkpointed)")
	fs.StringVar(&f.budget, "budget", "", "memory `budget` (e.g. 12GiB): the planner picks precision and recomputation, overriding --precision and --recompute")
	fs.BoolVar(&f.planOnly, "plan-only", false, "print the plan (on the meta device) and stop")
	fs.BoolVar(&f.table, "table", false, "print the case study's table (runs --steps iterations of each of its four rows; 0 for planned only)")
	fs.Int64Var(&f.seed, "seed", 1, "seed for weights, crops and augmentations")
	fs.IntVar(&f.workers, "workers", 2, "data loader workers")
	fs.IntVar(&f.repeat, "repeat", 100, "times each photo is repeated per epoch, each with its own crop (BasicSR's dataset_enlarge_ratio)")
	fs.BoolVar(&f.pixelOnly, "pixel-only", false, "train the generator alone with the L1 pixel loss (ESRGAN's PSNR-oriented pre-training), validating PSNR against bicubic on --val")
	fs.Float64Var(&f.lr, "lr", 2e-4, "with --pixel-only: Adam's learning rate (BasicSR's RRDBNet PSNR pre-training: 2e-4; the GAN steps use ESRGAN's 1e-4)")
	fs.IntVar(&f.threads, "threads", 0, "worker threads for kernels, at least 1 (default $HEADROOM_NUM_THREADS or all cores)")
	fs.StringVar(&f.logPath, "log", "", "with --pixel-only: write a JSON line per step and per validation to `file` (headroom report reads it)")
	fs.StringVar(&f.val, "val", "", "with --pixel-only: image folder `DIR` of held-out photos to validate on")
	fs.IntVar(&f.valEvery, "val-every", 100, "with --pixel-only: validate every this many steps (and at the start and the end)")
	fs.IntVar(&f.valCrop, "val-crop", 256, "with --pixel-only: size of the validation crops (high resolution)")
	fs.IntVar(&f.valGrid, "val-grid", 2, "with --pixel-only: an n×n grid of validation crops of each held-out photo")
	fs.StringVar(&f.save, "save", "", "with --pixel-only: write the trained generator's weights to this safetensors `file` (RRDBNet_arch.py's names; headroom upscale reads it)")
	fs.DurationVar(&f.duration, "time", 0, "with --pixel-only: stop after this much process cpu time (user+sys), or at --steps, whichever is first")
	fs.StringVar(&f.init, "init", "", "with --pixel-only: start from these generator weights (a --save file) instead of random ones")
	fs.IntVar(&f.from, "from-step", 0, "with --init: the step the weights were saved at; steps are numbered on from it and --log is appended to (a second leg of one run)")
	fs.Float64Var(&f.ema, "ema", 0, "with --pixel-only: validate and --save an exponential moving average of the weights with this decay (BasicSR's ema_decay: 0.999; 0: the weights themselves)")
	fs.BoolVar(&f.cosine, "cosine", false, "with --pixel-only: anneal the learning rate from --lr to 0 on a cosine (BasicSR's CosineAnnealingRestartLR, one period) over --steps, or over --time or --wall where one of those is nearer (the larger fraction used)")
	fs.Float64Var(&f.rgbPermute, "rgb-permute", 0, "with --pixel-only: shuffle a training crop's colour channels by a random permutation with this probability (CutBlur's RGB permutation; widens the colours ten photos cover)")
	fs.DurationVar(&f.wall, "wall", 0, "with --pixel-only: stop after this much wall-clock time too (on a shared machine)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("gan: unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if _, err := setThreads(given["threads"], f.threads, out); err != nil {
		return fmt.Errorf("gan: %w", err)
	}
	if f.pixelOnly {
		if f.batch < 1 || f.steps < 0 || f.scale != 4 || f.rgbPermute < 0 || f.rgbPermute > 1 {
			return fmt.Errorf("gan: --batch must be at least 1, --steps at least 0, --scale 4 and --rgb-permute in [0, 1]")
		}
		return ganPixel(ctx, out, f)
	}
	if f.repeat < 1 {
		return fmt.Errorf("gan: --repeat %d: at least 1", f.repeat)
	}
	if f.batch < 2 || f.steps < 0 || f.scale < 1 || f.crop%f.scale != 0 {
		return fmt.Errorf("gan: --batch must be at least 2 (batch norm), --steps at least 0 and --crop a multiple of --scale")
	}
	if f.scale != 4 {
		return fmt.Errorf("gan: --scale %d: RRDBNet upscales by 4", f.scale)
	}
	if f.crop != 128 && f.crop != 256 {
		return fmt.Errorf("gan: --crop %d: the discriminator takes 128 or 256", f.crop)
	}
	if f.vgg != "" && f.vggRandom {
		return fmt.Errorf("gan: --vgg and --vgg-random exclude each other")
	}
	var step train.Config
	var err error
	if step.Precision, err = transform.ParsePrecision(f.precision); err != nil {
		return fmt.Errorf("gan: --precision: %w", err)
	}
	if step.Recompute, err = parseGANRecompute(f.recompute); err != nil {
		return err
	}
	var budgetBytes int64
	if f.budget != "" {
		if budgetBytes, err = device.ParseBytes(f.budget); err != nil {
			return fmt.Errorf("gan: --budget: %w", err)
		}
	}
	var vggSD map[string]*tensor.Tensor
	if f.vgg != "" {
		if vggSD, err = readVGG(f.vgg); err != nil {
			return err
		}
	} else if !f.vggRandom {
		fmt.Fprintln(out, "perceptual loss skipped: no --vgg file given (torchvision's vgg19 weights as safetensors, features.* keys; --vgg-random measures with random ones)")
	}
	lq := trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{f.batch, 3, f.crop / f.scale, f.crop / f.scale}}
	gt := trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{f.batch, 3, f.crop, f.crop}}
	if f.table {
		return ganTable(ctx, out, f, vggSD, lq, gt)
	}
	cfg := gan.Config{Weights: gan.ESRGANWeights(), Step: step}
	devName := "cpu"
	var heap int64 // the Go heap's planned bytes under --budget: the data's
	if budgetBytes > 0 {
		if heap, err = f.dataHeap(lq, gt); err != nil {
			return err
		}
		capacity := max(budgetBytes-heap, 0)
		meta, err := f.build(device.Meta(), cfg, vggSD)
		if err != nil {
			return err
		}
		choice, opts, err := meta.Fit(capacity, lq, gt, ganCost())
		meta.Close()
		printOptions(out, opts, capacity)
		if err != nil {
			return fmt.Errorf("gan: --budget %s, less the data's %s on the heap: %w", device.FormatBytes(budgetBytes), device.FormatBytes(heap), err)
		}
		// The plan's total is what is allocated; the device maps
		// segments around it. The fastest option whose dry run (a step
		// on a meta device capped as the run will be) fits is the one.
		// The compiled steps' Go objects (three networks' graphs: some
		// 15 MiB) come out of the budget too, or the heap limit below
		// leaves the collector no room (it ran 1200 times in 4 iterations,
		// each 1.5x slower).
		var reserved, progHeap int64
		for _, o := range opts {
			if o.Plan.Total() > capacity {
				continue
			}
			c := cfg
			c.Step = o.Step
			if reserved, progHeap, err = f.dryRun(ctx, c, vggSD, capacity, lq, gt); err == nil && reserved+progHeap <= capacity {
				choice = o
				break
			}
			if err == nil {
				err = fmt.Errorf("%w: %s of device memory and %s of compiled steps on the heap", errNoFit, device.FormatBytes(reserved), device.FormatBytes(progHeap))
			} else if !errors.Is(err, device.ErrOutOfMemory) {
				return err
			}
			fmt.Fprintf(out, "%v, %v: planned %s, but with the allocator's segments and the compiled steps it needs more than %s\n", o.Step.Precision, o.Step.Recompute,
				device.FormatBytes(o.Plan.Total()), device.FormatBytes(capacity))
		}
		if err != nil {
			return fmt.Errorf("gan: --budget %s: %w", device.FormatBytes(budgetBytes), err)
		}
		cfg.Step = choice.Step
		fmt.Fprintf(out, "chosen: %v, %v (planned peak %s, device memory %s with the allocator's segments; compiled steps %s and data %s on the heap; budget %s)\n", choice.Step.Precision, choice.Step.Recompute,
			device.FormatBytes(choice.Plan.Total()), device.FormatBytes(reserved), device.FormatBytes(progHeap), device.FormatBytes(heap), device.FormatBytes(budgetBytes))
		heap += progHeap
		devName = fmt.Sprintf("cpu:mem=%d", capacity-progHeap)
	}
	dev, err := device.New(devName)
	if err != nil {
		return err
	}
	if f.planOnly {
		dev = device.Meta()
	}
	tr, err := f.build(dev, cfg, vggSD)
	if err != nil {
		return err
	}
	defer tr.Close()
	vggSD = nil // copied to the device
	if budgetBytes > 0 {
		defer limitHeap(heap)()
	}
	p, err := tr.Plan(lq, gt)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ESRGAN: RRDBNet nf %d nb %d gc %d, discriminator %d features, batch %d, %dx%d crops from %dx%d inputs, %v, recompute %v\n",
		f.nf, f.nb, f.gc, f.dfeat, f.batch, f.crop, f.crop, f.crop/f.scale, f.crop/f.scale, cfg.Step.Precision, cfg.Step.Recompute)
	p.Print(out)
	if f.planOnly || f.steps == 0 {
		return nil
	}
	m, err := f.run(ctx, dev, tr, lq, gt, func(i int, l gan.StepLosses, d time.Duration) {
		fmt.Fprintf(out, "iteration %d: G %.5g (pixel %.5g, perceptual %.5g, GAN %.5g), D %.5g (real %.5g, fake %.5g), %.1fs\n",
			i, l.G, l.Pixel, l.Perceptual, l.GAN, l.D, l.DReal, l.DFake, d.Seconds())
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "measured peak %s (planned %s), mean iteration %.1fs\n", device.FormatBytes(m.peak), device.FormatBytes(p.Total()), m.seconds)
	newProcProbe(dev).printProcess(out)
	if budgetBytes > 0 {
		reportPeak(out, budgetBytes)
	}
	return nil
}

// errNoFit is matched by errors.Is when the planned option does not
// fit the budget with what the plan leaves out.
var errNoFit = errors.New("does not fit")

// dryRun builds the networks under cfg on a meta device capped at
// capacity and runs one iteration there (shapes only): what a real
// device capped alike allocates, segments included. It returns the
// device memory the iteration reserved and the Go heap its compiled
// steps keep (live after a collection, as the real run's are).
func (f ganFlags) dryRun(ctx context.Context, cfg gan.Config, vggSD map[string]*tensor.Tensor, capacity int64, lq, gt trace.Meta) (reserved, heap int64, err error) {
	dev := device.Meta()
	if err := dev.Alloc.SetCapacity(capacity); err != nil {
		return 0, 0, err
	}
	before := liveHeap()
	tr, err := f.build(dev, cfg, vggSD)
	if err != nil {
		return 0, 0, err
	}
	defer tr.Close()
	if _, err := tr.Step(ctx, &tensor.Tensor{DType: lq.DType, Shape: lq.Shape}, &tensor.Tensor{DType: gt.DType, Shape: gt.Shape}); err != nil {
		return 0, 0, err
	}
	return dev.Alloc.Stats().ReservedBytes.Peak, max(liveHeap()-before, 0), nil
}

// dataHeap is what the data keeps on the Go heap while training, planned
// into --budget: with --data the loader's buffers (dataset.PlanMemory; its
// batches are on the heap, not staged on the device), and each iteration's
// pair of input tensors, one in use and the last one's not yet collected.
func (f ganFlags) dataHeap(lq, gt trace.Meta) (int64, error) {
	pair := 2 * (lq.Bytes() + gt.Bytes())
	if f.data == "" {
		return pair + gt.Bytes(), nil // and the random image
	}
	src, err := dataset.OpenImageFolder(f.data, 3)
	if err != nil {
		return 0, err
	}
	m, err := dataset.PlanMemory(enlarged{src, f.repeat}, f.loaderConfig())
	if err != nil {
		return 0, fmt.Errorf("gan: --data %s: %w", f.data, err)
	}
	return pair + m.Total(), nil
}

// loaderConfig is the data loader's configuration for --data.
func (f ganFlags) loaderConfig() dataset.Config {
	return dataset.Config{BatchSize: f.batch, Shuffle: true, Seed: uint64(f.seed), DropLast: true,
		Workers: f.workers, Transforms: []dataset.Transform{
			dataset.RandomCrop{Height: f.crop, Width: f.crop},
			dataset.HorizontalFlip{}, dataset.VerticalFlip{}, dataset.Transpose{},
		}}
}

func parseGANRecompute(s string) (train.Recompute, error) {
	switch s {
	case "none":
		return train.NoRecompute, nil
	case "selective":
		return train.Selective, nil
	case "regions", "checkpoint":
		return train.Regions, nil
	}
	return train.NoRecompute, fmt.Errorf("gan: --recompute %q: none, selective or regions", s)
}

// readVGG reads torchvision's vgg19 weights: every features.* key the
// extractor needs must be there; the classifier's may be.
func readVGG(path string) (map[string]*tensor.Tensor, error) {
	sf, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gan: --vgg: %w", err)
	}
	sd := map[string]*tensor.Tensor{}
	for _, n := range sf.Names() {
		if !strings.HasPrefix(n, "features.") {
			continue
		}
		if sd[n], err = sf.Tensor(n); err != nil {
			return nil, fmt.Errorf("gan: --vgg: %w", err)
		}
	}
	var missing []string
	for _, n := range zoo.VGG19ParamNames() {
		if _, ok := sd[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("gan: --vgg %s is not torchvision's vgg19: missing %s", path, strings.Join(missing, ", "))
	}
	return sd, nil
}

// build makes the three networks on dev and their trainer.
func (f ganFlags) build(dev *device.Device, cfg gan.Config, vggSD map[string]*tensor.Tensor) (*gan.Trainer, error) {
	gs, ds := nn.NewStore(), nn.NewStore()
	g := zoo.NewRRDBNet(gs.Root(), zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: f.nf, NB: f.nb, GC: f.gc})
	g.Checkpoint = true // regions are recorded; only the regions policy recomputes them
	d := zoo.NewVGGDisc(ds.Root(), zoo.VGGDiscConfig{InCh: 3, NumFeat: f.dfeat, InputSize: f.crop})
	d.Checkpoint = true
	stores := []*nn.Store{gs, ds}
	var fnet gan.Net
	if vggSD != nil || f.vggRandom {
		vs := nn.NewStore()
		fnet = gan.Net{Model: zoo.NewVGG19Extractor(vs.Root(), zoo.VGG19Conv54), Store: vs}
		stores = append(stores, vs)
	}
	for _, s := range stores {
		if err := s.Materialize(dev, f.seed); err != nil {
			return nil, err
		}
	}
	if vggSD != nil && dev.HasData() {
		if err := fnet.Store.LoadStateDict(vggSD, false); err != nil {
			return nil, fmt.Errorf("gan: --vgg: %w", err)
		}
	}
	og, err := optim.NewAdam(gan.ESRGANAdam())
	if err != nil {
		return nil, err
	}
	od, err := optim.NewAdam(gan.ESRGANAdam())
	if err != nil {
		return nil, err
	}
	return gan.New(dev, gan.Net{Model: g, Store: gs, Opt: og}, gan.Net{Model: d, Store: ds, Opt: od}, fnet, cfg)
}

type ganMeasure struct {
	peak    int64
	seconds float64 // mean iteration time, the first left out when there are more
}

// run trains f.steps iterations on the data (or random images).
func (f ganFlags) run(ctx context.Context, dev *device.Device, tr *gan.Trainer, lqm, gtm trace.Meta,
	each func(int, gan.StepLosses, time.Duration)) (ganMeasure, error) {
	next, closeData, err := f.batches(lqm, gtm)
	if err != nil {
		return ganMeasure{}, err
	}
	defer closeData()
	var times []float64
	for i := range f.steps {
		lq, gt, err := next(ctx)
		if err != nil {
			return ganMeasure{}, err
		}
		start := time.Now()
		l, err := tr.Step(ctx, lq, gt)
		if err != nil {
			return ganMeasure{}, err
		}
		d := time.Since(start)
		times = append(times, d.Seconds())
		if each != nil {
			each(i, l, d)
		}
	}
	if len(times) > 1 {
		times = times[1:]
	}
	var sum float64
	for _, s := range times {
		sum += s
	}
	return ganMeasure{peak: dev.Alloc.Stats().AllocatedBytes.Peak, seconds: sum / float64(max(1, len(times)))}, nil
}

// batches yields (lq, gt) pairs: crops of the image folder, flipped,
// transposed and downscaled by the dataset's transforms, or random images.
func (f ganFlags) batches(lqm, gtm trace.Meta) (func(context.Context) (*tensor.Tensor, *tensor.Tensor, error), func(), error) {
	down := dataset.BicubicDown{Factor: f.scale}
	pair := func(hr []float32) (*tensor.Tensor, *tensor.Tensor) {
		gt := tensor.New(tensor.Float32, gtm.Shape)
		lq := tensor.New(tensor.Float32, lqm.Shape)
		copy(gt.F32(), hr)
		per, lper := 3*f.crop*f.crop, lqm.Shape.NumElements()/f.batch
		for i := range f.batch {
			down.Down(gt.F32()[i*per:(i+1)*per], 3, f.crop, f.crop, lq.F32()[i*lper:(i+1)*lper])
		}
		return lq, gt
	}
	if f.data == "" {
		r := rand.New(rand.NewSource(f.seed))
		hr := make([]float32, gtm.Shape.NumElements())
		return func(context.Context) (*tensor.Tensor, *tensor.Tensor, error) {
			for i := range hr {
				hr[i] = r.Float32()
			}
			lq, gt := pair(hr)
			return lq, gt, nil
		}, func() {}, nil
	}
	src, err := dataset.OpenImageFolder(f.data, 3)
	if err != nil {
		return nil, nil, err
	}
	l, err := dataset.NewLoader(enlarged{src, f.repeat}, f.loaderConfig())
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context) (*tensor.Tensor, *tensor.Tensor, error) {
		b, err := l.Next(ctx)
		if errors.Is(err, io.EOF) { // a new epoch
			b, err = l.Next(ctx)
		}
		if err != nil {
			return nil, nil, err
		}
		if b.N != f.batch {
			return nil, nil, fmt.Errorf("gan: a batch of %d images, want %d (more photos than --batch are needed)", b.N, f.batch)
		}
		lq, gt := pair(b.X)
		return lq, gt, nil
	}, func() { l.Close() }, nil
}

func printOptions(w io.Writer, opts []gan.Option, budgetBytes int64) {
	fmt.Fprintf(w, "options under %s (fastest first; time by the cost model):\n", device.FormatBytes(budgetBytes))
	for _, o := range opts {
		fit := "fits"
		if o.Plan.Total() > budgetBytes {
			fit = "over"
		}
		fmt.Fprintf(w, "  %-10v %-10v planned peak %10s  est. %.2fs  %s\n", o.Step.Precision, o.Step.Recompute,
			device.FormatBytes(o.Plan.Total()), o.Seconds, fit)
	}
}

// ganTable runs the four configurations of the case study's table.
func ganTable(ctx context.Context, w io.Writer, f ganFlags, vggSD map[string]*tensor.Tensor, lq, gt trace.Meta) error {
	weights := gan.ESRGANWeights()
	rows := []struct {
		name string
		step train.Config
		fit  bool
	}{
		{"baseline (fp32, nothing recomputed)", train.Config{}, false},
		{"checkpointing G and D", train.Config{Recompute: train.Regions}, false},
		{"+ bf16-mixed", train.Config{Recompute: train.Regions, Precision: transform.BF16Mixed}, false},
		{"+ planner's choice under half the baseline", train.Config{}, true},
	}
	meta, err := f.build(device.Meta(), gan.Config{Weights: weights}, vggSD)
	if err != nil {
		return err
	}
	base, err := meta.Plan(lq, gt)
	if err != nil {
		meta.Close()
		return err
	}
	half := base.Total() / 2
	choice, opts, err := meta.Fit(half, lq, gt, ganCost())
	meta.Close()
	printOptions(w, opts, half)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n| configuration | precision | recompute | planned peak | measured peak | of baseline | step time (s) |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		step := r.step
		if r.fit {
			step = choice.Step
		}
		cfg := gan.Config{Weights: weights, Step: step}
		dev := device.CPU()
		if f.steps == 0 {
			dev = device.Meta()
		}
		tr, err := f.build(dev, cfg, vggSD)
		if err != nil {
			return err
		}
		p, err := tr.Plan(lq, gt)
		if err != nil {
			tr.Close()
			return err
		}
		measured, secs := "—", "—"
		if f.steps > 0 {
			m, err := f.run(ctx, dev, tr, lq, gt, func(i int, l gan.StepLosses, d time.Duration) {
				fmt.Fprintf(os.Stderr, "%s: iteration %d: G %.5g, D %.5g, %.1fs\n", r.name, i, l.G, l.D, d.Seconds())
			})
			if err != nil {
				tr.Close()
				return err
			}
			measured, secs = device.FormatBytes(m.peak), fmt.Sprintf("%.1f", m.seconds)
		}
		tr.Close()
		fmt.Fprintf(w, "| %s | %v | %v | %s | %s | %.0f%% | %s |\n", r.name, step.Precision, step.Recompute,
			device.FormatBytes(p.Total()), measured, 100*float64(p.Total())/float64(base.Total()), secs)
	}
	return nil
}

// ganCost is the cost model budget.Fit charges a single model's step with:
// this CPU's rates and the arithmetic of the kernels the cpu backend would
// run (Winograd where it applies), so the two planners rank alike.
func ganCost() budget.CostModel { return budget.HostCost().On(device.Meta().Backend) }
