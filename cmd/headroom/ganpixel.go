package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand"
	"time"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/gan"
	"github.com/headroom-ml/headroom/internal/cputime"
	"github.com/headroom-ml/headroom/internal/runreport"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// headroom gan --pixel-only: ESRGAN's PSNR-oriented pre-training (BasicSR's
// train_RRDBNet_PSNR_x4.yml): the generator alone, L1 pixel loss, Adam
// betas (0.9, 0.99). Validation is PSNR on fixed crops of held-out photos
// against bicubic upsampling of the same inputs, logged to --log as eval
// lines with metrics, which headroom report charts.

// photo is a decoded image, [3, h, w] in [0, 1].
type photo struct {
	x    []float32
	h, w int
}

// loadPhotos decodes every image of an image folder once: a training
// sample is a crop, and decoding a 2560×1600 JPEG per crop would cost more
// than a small model's step.
func loadPhotos(dir string) ([]photo, error) {
	src, err := dataset.OpenImageFolder(dir, 3)
	if err != nil {
		return nil, err
	}
	var out []photo
	for i := range src.Len() {
		var ex dataset.Example
		if err := src.Get(i, &ex); err != nil {
			return nil, err
		}
		out = append(out, photo{ex.X, ex.Shape[1], ex.Shape[2]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("gan: %s has no images", dir)
	}
	return out, nil
}

// crop copies the s×s square at (y0, x0) of p into dst ([3, s, s]).
func (p photo) crop(y0, x0, s int, dst []float32) {
	for ch := range 3 {
		for y := range s {
			copy(dst[(ch*s+y)*s:][:s], p.x[(ch*p.h+y0+y)*p.w+x0:][:s])
		}
	}
}

// augment is BasicSR's augment on a [3, s, s] crop: horizontal flip,
// vertical flip and transpose with probability 1/2 each (the eight flips
// and rotations), as dataset.HorizontalFlip, VerticalFlip and Transpose.
func augment(r *rand.Rand, v []float32, s int, tmp []float32) {
	hf, vf, tr := r.Intn(2) == 1, r.Intn(2) == 1, r.Intn(2) == 1
	for ch := range 3 {
		p := v[ch*s*s : (ch+1)*s*s]
		for y := range s {
			sy := y
			if vf {
				sy = s - 1 - y
			}
			for x := range s {
				sx := x
				if hf {
					sx = s - 1 - x
				}
				if tr {
					tmp[x*s+y] = p[sy*s+sx]
				} else {
					tmp[y*s+x] = p[sy*s+sx]
				}
			}
		}
		copy(p, tmp[:s*s])
	}
}

// permuteChannels reorders the planes of a [3, s, s] crop: channel c of
// the result is channel perm[c] of v.
func permuteChannels(v []float32, s int, perm []int, tmp []float32) {
	n := s * s
	copy(tmp[:3*n], v[:3*n])
	for c, from := range perm {
		copy(v[c*n:(c+1)*n], tmp[from*n:(from+1)*n])
	}
}

// pixelBatch makes a training batch: random crops of random photos,
// augmented, and their bicubic downscales rounded to 8-bit levels: the
// upscaler's inputs are 8-bit images (BasicSR trains on saved LR PNGs), and
// a model that never saw the rounding takes its one-level steps on smooth
// skies for edges to sharpen. With probability rgbPermute a crop's colour
// channels are shuffled by a random permutation before the downscale (the
// "RGB permutation" of Yoo et al., CVPR 2020, CutBlur's rgb augment): ten
// photos cover little of the colour space, and a generator trained on
// them alone reproduces a colour it never saw, such as a deep blue sky
// with red near 0, with a shift of up to 3 levels (docs/esrgan.md). With 0
// no extra random numbers are drawn: batches are those of earlier runs.
func pixelBatch(r *rand.Rand, photos []photo, batch, crop, scale int, rgbPermute float64) (lq, gt *tensor.Tensor) {
	l := crop / scale
	gt = tensor.New(tensor.Float32, tensor.Shape{batch, 3, crop, crop})
	lq = tensor.New(tensor.Float32, tensor.Shape{batch, 3, l, l})
	g, q := gt.F32(), lq.F32()
	tmp := make([]float32, 3*crop*crop)
	per := 3 * crop * crop
	for i := range batch {
		p := photos[r.Intn(len(photos))]
		dst := g[i*per : (i+1)*per]
		p.crop(r.Intn(p.h-crop+1), r.Intn(p.w-crop+1), crop, dst)
		augment(r, dst, crop, tmp)
		if rgbPermute > 0 && r.Float64() < rgbPermute {
			permuteChannels(dst, crop, r.Perm(3), tmp)
		}
		dataset.BicubicDown{Factor: scale}.Down(dst, 3, crop, crop, q[i*3*l*l:(i+1)*3*l*l])
	}
	gan.Quantize(q)
	return lq, gt
}

// valSet is fixed crops of held-out photos (an n×n grid of each), their
// 8-bit bicubic downscales (the network's input, as a saved LR image
// would be) and the bicubic upsampling of those, with its PSNR.
type valSet struct {
	lq, gt              *tensor.Tensor
	crop                int
	bicY, bicRGB, bicL1 float64
}

func newValSet(photos []photo, crop, grid, scale int) (*valSet, error) {
	n := len(photos) * grid * grid
	v := &valSet{crop: crop, gt: tensor.New(tensor.Float32, tensor.Shape{n, 3, crop, crop})}
	l := crop / scale
	v.lq = tensor.New(tensor.Float32, tensor.Shape{n, 3, l, l})
	per, lper := 3*crop*crop, 3*l*l
	k := 0
	for _, p := range photos {
		if p.h < crop || p.w < crop {
			return nil, fmt.Errorf("gan: --val photo of %d×%d is smaller than --val-crop %d", p.w, p.h, crop)
		}
		for i := range grid {
			for j := range grid {
				y0 := (2*i+1)*p.h/(2*grid) - crop/2
				x0 := (2*j+1)*p.w/(2*grid) - crop/2
				y0, x0 = min(max(y0, 0), p.h-crop), min(max(x0, 0), p.w-crop)
				gt := v.gt.F32()[k*per : (k+1)*per]
				p.crop(y0, x0, crop, gt)
				lq := v.lq.F32()[k*lper : (k+1)*lper]
				dataset.BicubicDown{Factor: scale}.Down(gt, 3, crop, crop, lq)
				gan.Quantize(lq)
				k++
			}
		}
	}
	up := make([]float32, v.gt.Shape.NumElements())
	for k := range n {
		dataset.BicubicUp{Factor: scale}.Up(v.lq.F32()[k*lper:(k+1)*lper], 3, l, l, up[k*per:(k+1)*per])
	}
	gan.Quantize(up)
	v.bicY, v.bicRGB, v.bicL1 = v.score(up)
	return v, nil
}

// score is the mean PSNR (Y and RGB, border = 4 pixels, BasicSR's
// crop_border for 4×) of out's images against the targets, and the mean
// L1 (out is quantized first, as a saved image would be).
func (v *valSet) score(out []float32) (psnrY, psnrRGB, l1 float64) {
	n, c := v.gt.Shape[0], v.crop
	per := 3 * c * c
	g := v.gt.F32()
	var sum float64
	for i, x := range out {
		sum += math.Abs(float64(x) - float64(g[i]))
	}
	for k := range n {
		a, b := out[k*per:(k+1)*per], g[k*per:(k+1)*per]
		psnrY += gan.PSNR(a, b, c, c, 4, true) / float64(n)
		psnrRGB += gan.PSNR(a, b, c, c, 4, false) / float64(n)
	}
	return psnrY, psnrRGB, sum / float64(len(out))
}

// valMetrics is one validation's line in --log: an eval record with the
// PSNRs of the model and of bicubic upsampling.
type valMetrics = runreport.Eval

func (v *valSet) eval(ctx context.Context, tr *train.Trainer) (valMetrics, error) {
	res, err := tr.Predict(ctx, v.lq)
	if err != nil {
		return valMetrics{}, err
	}
	out := append([]float32(nil), res.F32()...)
	gan.Quantize(out)
	y, rgb, l1 := v.score(out)
	return valMetrics{
		Kind: runreport.KindEval, Set: "val", Loss: l1, LossName: "l1", Samples: v.gt.Shape[0],
		Metrics: map[string]float64{"psnr_y": y, "psnr_rgb": rgb, "bicubic_psnr_y": v.bicY, "bicubic_psnr_rgb": v.bicRGB},
	}, nil
}

// annealProgress is how far the run is through its budget, in [0, 1]: the
// largest of the fractions of --steps, of --time (cpu seconds) and of
// --wall used, so that a cosine reaches 0 at whichever limit ends the run.
// On a shared machine the steps a time limit allows are not known in
// advance; annealing over --steps alone would stop a run at a high rate.
func annealProgress(step int64, steps int, cpu float64, cpuLimit time.Duration, wall, wallLimit time.Duration) float64 {
	p := float64(step) / float64(steps)
	if cpuLimit > 0 {
		p = max(p, cpu/cpuLimit.Seconds())
	}
	if wallLimit > 0 {
		p = max(p, wall.Seconds()/wallLimit.Seconds())
	}
	return min(p, 1)
}

// weightEMA is BasicSR's model_ema: an exponential moving average of the
// generator's weights, updated after every step (ema = d·ema + (1-d)·w),
// which validation and --save use. It smooths the step-to-step noise of
// the weights, which on flat skies shows as colour shifts.
type weightEMA struct {
	decay float64
	avg   map[string]*tensor.Tensor
}

// update folds the store's weights into the average (the first call
// copies them).
func (e *weightEMA) update(gs *nn.Store) {
	sd := gs.StateDict()
	if e.avg == nil {
		e.avg = sd
		return
	}
	d := float32(e.decay)
	for k, w := range sd {
		a := e.avg[k].F32()
		for i, v := range w.F32() {
			a[i] = d*a[i] + (1-d)*v
		}
	}
}

// with runs f with the average loaded into the store, then puts the
// trained weights back.
func (e *weightEMA) with(gs *nn.Store, f func() error) error {
	if e == nil || e.avg == nil {
		return f()
	}
	own := gs.StateDict()
	if err := gs.LoadStateDict(e.avg, true); err != nil {
		return err
	}
	ferr := f()
	if err := gs.LoadStateDict(own, true); err != nil {
		return err
	}
	return ferr
}

// cpuSeconds is the process's user+sys time.
func cpuSeconds() float64 { return cputime.Process().Seconds() }

// ganPixel is headroom gan --pixel-only.
func ganPixel(ctx context.Context, out io.Writer, f ganFlags) error {
	if f.data == "" {
		return fmt.Errorf("gan: --pixel-only needs --data (an image folder of photos)")
	}
	if f.crop%f.scale != 0 || f.valCrop%f.scale != 0 {
		return fmt.Errorf("gan: --crop and --val-crop must be multiples of --scale")
	}
	photos, err := loadPhotos(f.data)
	if err != nil {
		return err
	}
	for _, p := range photos {
		if p.h < f.crop || p.w < f.crop {
			return fmt.Errorf("gan: a --data photo of %d×%d is smaller than --crop %d", p.w, p.h, f.crop)
		}
	}
	var val *valSet
	if f.val != "" {
		vp, err := loadPhotos(f.val)
		if err != nil {
			return err
		}
		if val, err = newValSet(vp, f.valCrop, f.valGrid, f.scale); err != nil {
			return err
		}
	}
	step := train.Config{Threads: f.threads}
	var perr error
	if step.Recompute, perr = parseGANRecompute(f.recompute); perr != nil {
		return perr
	}
	dev := device.CPU()
	gs := nn.NewStore()
	cfg := zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: f.nf, NB: f.nb, GC: f.gc}
	g := zoo.NewRRDBNet(gs.Root(), cfg)
	if err := gs.Materialize(dev, f.seed); err != nil {
		return err
	}
	if f.init != "" {
		sd, err := safetensors.Load(f.init)
		if err != nil {
			return fmt.Errorf("gan: --init: %w", err)
		}
		if err := gs.LoadStateDict(sd, true); err != nil {
			return fmt.Errorf("gan: --init: %w", err)
		}
	}
	opt, err := optim.NewAdam(optim.AdamConfig{LR: f.lr, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8})
	if err != nil {
		return err
	}
	tr, err := train.NewConfig(dev, gs, g, func(o, t *trace.Tensor) *trace.Tensor { return gan.PixelLoss(o, t, 1) }, opt, step)
	if err != nil {
		return err
	}
	defer tr.Close()
	l := f.crop / f.scale
	lqm := trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{f.batch, 3, l, l}}
	gtm := trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{f.batch, 3, f.crop, f.crop}}
	p, err := tr.Plan(lqm, gtm)
	if err != nil {
		return err
	}
	model := fmt.Sprintf("rrdbnet nf %d nb %d gc %d (L1 pre-training)", f.nf, f.nb, f.gc)
	fmt.Fprintf(out, "%s: %d parameters, batch %d, %d×%d crops from %d×%d inputs, %d training photos, Adam lr %g betas (0.9, 0.99)\n",
		model, gs.NumParams(), f.batch, f.crop, f.crop, l, l, len(photos), f.lr)
	p.Print(out)
	schedule := "constant"
	if f.cosine {
		schedule = fmt.Sprintf("cosine to 0 over %d steps", f.steps)
		if f.duration > 0 || f.wall > 0 {
			schedule += " or the --time/--wall limit, whichever is nearer"
		}
	}
	var logw *runner
	if f.logPath != "" {
		lf, err := openLog(f.logPath, f.from > 0)
		if err != nil {
			return fmt.Errorf("gan: --log: %w", err)
		}
		defer lf.Close()
		logw = &runner{logFile: lf}
		if err := logw.writeLine(runreport.Header{Kind: runreport.KindRun, Time: time.Now().UTC().Format(time.RFC3339), Model: model, Parameters: gs.NumParams(),
			Optimizer: "adam", LR: f.lr, Schedule: schedule, Batch: f.batch, MicroBatch: f.batch, Accumulation: 1, Precision: "fp32",
			Device: fmt.Sprint(dev), Threads: f.threads, Samples: f.batch * f.steps, StepsPerEpoch: f.steps, Epochs: 1, ResumedAt: int64(f.from), PlannedPeak: p.Total()}); err != nil {
			return err
		}
	}
	var ema *weightEMA
	if f.ema > 0 {
		if f.ema >= 1 {
			return fmt.Errorf("gan: --ema %g: the decay must be in [0, 1)", f.ema)
		}
		ema = &weightEMA{decay: f.ema}
		ema.update(gs)
	}
	validate := func(ctx context.Context, stepN int64) error {
		if val == nil {
			return nil
		}
		var m valMetrics
		err := ema.with(gs, func() (err error) {
			m, err = val.eval(ctx, tr)
			return err
		})
		if err != nil {
			return err
		}
		m.Step = stepN
		fmt.Fprintf(out, "step %d: val PSNR Y %.3f dB (bicubic %.3f), RGB %.3f dB (bicubic %.3f), L1 %.5f (bicubic %.5f), cpu %.0fs\n",
			stepN, m.Metrics["psnr_y"], val.bicY, m.Metrics["psnr_rgb"], val.bicRGB, m.Loss, val.bicL1, cpuSeconds())
		if logw != nil {
			return logw.writeLine(m)
		}
		return nil
	}
	if f.from == 0 { // a second leg's start is the first's end, validated there
		if err := validate(ctx, 0); err != nil {
			return err
		}
	}
	r := rand.New(rand.NewSource(f.seed))
	start, cpu0 := time.Now(), cpuSeconds()
	var stepN int64
	var lastVal int64
	for stepN < int64(f.steps) && (f.duration == 0 || cpuSeconds()-cpu0 < f.duration.Seconds()) &&
		(f.wall == 0 || time.Since(start) < f.wall) {
		if err := ctx.Err(); err != nil {
			break
		}
		lr := f.lr
		if f.cosine {
			lr = f.lr * (1 + math.Cos(math.Pi*annealProgress(stepN, f.steps, cpuSeconds()-cpu0, f.duration, time.Since(start), f.wall))) / 2
			opt.SetLR(lr)
		}
		t0 := time.Now()
		lq, gt := pixelBatch(r, photos, f.batch, f.crop, f.scale, f.rgbPermute)
		wait := time.Since(t0)
		loss, err := tr.Step(ctx, lq, gt)
		if err != nil {
			return err
		}
		stepN++
		if ema != nil {
			ema.update(gs)
		}
		el := time.Since(t0)
		if logw != nil {
			st := dev.Alloc.Stats()
			if err := logw.writeLine(runreport.Step{Step: int64(f.from) + stepN, Epoch: 1, Loss: loss, LR: lr, Samples: f.batch,
				SamplesPerSec: float64(f.batch) / el.Seconds(), StepSec: el.Seconds(), DataWaitSec: wait.Seconds(),
				PeakAllocated: st.AllocatedBytes.Peak, PeakReserved: st.ReservedBytes.Peak, MicroBatches: 1, PlannedPeak: p.Total()}); err != nil {
				return err
			}
		}
		if stepN%10 == 0 {
			fmt.Fprintf(out, "step %d: L1 %.5f, lr %.3g, %.2fs\n", int64(f.from)+stepN, loss, lr, el.Seconds())
		}
		if f.valEvery > 0 && stepN%int64(f.valEvery) == 0 {
			if err := validate(ctx, int64(f.from)+stepN); err != nil {
				return err
			}
			lastVal = stepN
		}
	}
	// An interrupted run still validates and saves what it trained: the
	// context's cancellation stops the steps, not the ending.
	if lastVal != stepN {
		if err := validate(context.WithoutCancel(ctx), int64(f.from)+stepN); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "trained %d steps in %.0fs wall, %.0fs cpu (user+sys of the process, validation included)\n",
		stepN, time.Since(start).Seconds(), cpuSeconds()-cpu0)
	if f.save != "" {
		sd := gs.StateDict()
		if ema != nil {
			sd = ema.avg
			model += fmt.Sprintf(", EMA %g", f.ema)
		}
		if err := safetensors.WriteFile(f.save, sd, map[string]string{"format": "pt", "model": model}); err != nil {
			return fmt.Errorf("gan: --save: %w", err)
		}
		fmt.Fprintf(out, "wrote %s\n", f.save)
	}
	return ctx.Err()
}
