package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // photos as input
	"image/png"
	"io"
	"os"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/gan"
	"github.com/headroom-ml/headroom/internal/bench"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/zoo"
)

const upscaleUsage = `usage: headroom upscale --weights FILE --budget B [flags] in.png out.png
       headroom upscale --plan (--weights FILE | --nf N --nb N --gc N) --budget B in.png

Upscales a whole image 4× with an RRDBNet (ESRGAN's generator; weights as
safetensors with RRDBNet_arch.py's names, nf/nb/gc read from them), eval
only. The image is run in square tiles: the largest tile whose forward pass
fits the budget, planned on the meta device before anything runs, with an
overlap of the network's receptive radius so the result equals the untiled
one. The run is on a cpu device capped at the budget.

`

func cmdUpscale(ctx context.Context, args []string) error { return upscaleMain(ctx, args, os.Stdout) }

func upscaleMain(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("upscale", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), upscaleUsage)
		fs.PrintDefaults()
	}
	weights := fs.String("weights", "", "RRDBNet weights as a safetensors `file` (required, except with --plan and --nf/--nb/--gc)")
	budgetS := fs.String("budget", "", "device memory for the run (weights and one tile's pass), e.g. 2GiB (required)")
	overlap := fs.Int("overlap", -1, "input pixels each tile reaches beyond its core (default: the receptive radius, exact)")
	tile := fs.Int("tile", 0, "tile core in input pixels (default: the largest that fits the budget)")
	planOnly := fs.Bool("plan", false, "print the plan (untiled pass, chosen tile) for in.png's size and stop: nothing runs, no output image")
	var cfg zoo.RRDBNetConfig
	fs.IntVar(&cfg.NF, "nf", 0, "with --plan and no --weights: the RRDBNet's features (ESRGAN: 64)")
	fs.IntVar(&cfg.NB, "nb", 0, "with --plan and no --weights: its RRDB blocks (ESRGAN: 23)")
	fs.IntVar(&cfg.GC, "gc", 0, "with --plan and no --weights: its growth channels (ESRGAN: 32)")
	floatOut := fs.String("float", "", "also write the output as float32 safetensors to `file` (key \"image\", [1, 3, 4H, 4W]) to compare runs exactly")
	threads := fs.Int("threads", 0, "worker threads for kernels, at least 1 (default $HEADROOM_NUM_THREADS or all cores)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := false
	fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == "threads" })
	if _, err := setThreads(given, *threads, out); err != nil {
		return fmt.Errorf("upscale: %w", err)
	}
	byConfig := *planOnly && *weights == "" && cfg.NF > 0 && cfg.NB > 0 && cfg.GC > 0
	nargs := 2
	if *planOnly {
		nargs = 1
	}
	if (*weights == "" && !byConfig) || *budgetS == "" || fs.NArg() != nargs {
		fs.Usage()
		return fmt.Errorf("upscale: --weights (or --plan with --nf, --nb, --gc), --budget, an input and an output image are needed")
	}
	b, err := device.ParseBytes(*budgetS)
	if err != nil {
		return fmt.Errorf("upscale: --budget: %w", err)
	}
	var sd map[string]*tensor.Tensor
	if !byConfig {
		if sd, err = safetensors.Load(*weights); err != nil {
			return fmt.Errorf("upscale: --weights: %w", err)
		}
		if cfg, err = gan.RRDBNetConfigOf(sd); err != nil {
			return fmt.Errorf("upscale: %w", err)
		}
	}
	cfg.InNC, cfg.OutNC = cmp.Or(cfg.InNC, 3), cmp.Or(cfg.OutNC, 3)
	var img *tensor.Tensor
	var h, w int
	if *planOnly {
		if h, w, err = imageSize(fs.Arg(0)); err != nil {
			return err
		}
	} else {
		if img, err = readImage(fs.Arg(0)); err != nil {
			return err
		}
		h, w = img.Shape[2], img.Shape[3]
	}
	meta, err := gan.NewUpscalerConfig(device.Meta(), cfg, nil)
	if err != nil {
		return fmt.Errorf("upscale: %w", err)
	}
	defer meta.Close()
	if meta.Config.InNC != 3 || meta.Config.OutNC != 3 {
		return fmt.Errorf("upscale: the weights take %d channels to %d; RGB images need 3 to 3", meta.Config.InNC, meta.Config.OutNC)
	}
	o := *overlap
	if o < 0 {
		o = gan.Overlap(meta.Config)
	}
	whole, err := meta.Memory(h, w)
	if err != nil {
		return err
	}
	core := *tile
	if core <= 0 {
		if core, err = meta.PlanTile(h, w, o, b); err != nil {
			return fmt.Errorf("upscale: %w", err)
		}
	}
	planned, err := meta.Memory(min(h, core+2*o), min(w, core+2*o))
	if err != nil {
		return err
	}
	nt := len(gan.Tiles(h, core, o)) * len(gan.Tiles(w, core, o))
	fmt.Fprintf(out, "%s: %d×%d, RRDBNet nf %d nb %d gc %d; untiled pass plans %s, budget %s\n", fs.Arg(0), w, h, meta.Config.NF, meta.Config.NB, meta.Config.GC, device.FormatBytes(whole), device.FormatBytes(b))
	fmt.Fprintf(out, "tile %d px + overlap %d (%d×%d windows, %d of them), planned %s\n", core, o, min(w, core+2*o), min(h, core+2*o), nt, device.FormatBytes(planned))
	if *planOnly {
		return nil
	}
	dev, err := device.New(fmt.Sprintf("cpu:mem=%d", b))
	if err != nil {
		return err
	}
	u, err := gan.NewUpscaler(dev, sd)
	if err != nil {
		return fmt.Errorf("upscale: %w", err)
	}
	defer u.Close()
	start, cpu0 := time.Now(), cpuSeconds()
	res, err := u.Upscale(ctx, img, core, o)
	if errors.Is(err, device.ErrOutOfMemory) {
		return fmt.Errorf("upscale: tile %d does not fit %s: %w", core, device.FormatBytes(b), err)
	}
	if err != nil {
		return fmt.Errorf("upscale: %w", err)
	}
	wall, cpu := time.Since(start), cpuSeconds()-cpu0
	if err := writeImage(fs.Arg(1), res); err != nil {
		return err
	}
	if *floatOut != "" {
		if err := safetensors.WriteFile(*floatOut, map[string]*tensor.Tensor{"image": res}, nil); err != nil {
			return fmt.Errorf("upscale: --float: %w", err)
		}
	}
	st := dev.Alloc.Stats()
	fmt.Fprintf(out, "wrote %s (%d×%d) in %.1fs wall, %.1fs cpu; measured peak %s reserved, %s allocated, %d OOMs\n", fs.Arg(1), 4*w, 4*h, wall.Seconds(), cpu, device.FormatBytes(st.ReservedBytes.Peak), device.FormatBytes(st.AllocatedBytes.Peak), st.NumOOMs)
	// The images are the process's, outside the device's budget: the
	// input and the output as float32, the output again as 8-bit RGBA
	// while it is encoded.
	images := int64(4*3*h*w) + int64(4*3*16*h*w) + int64(4*16*h*w)
	if m, err := bench.ReadMemory(); err == nil {
		fmt.Fprintf(out, "process peak resident memory %s (VmHWM): the device's %s budget, the images' %s (input and output as float32, output as 8-bit RGBA) and the runtime\n",
			device.FormatBytes(m.Peak), device.FormatBytes(b), device.FormatBytes(images))
	}
	return nil
}

// imageSize reads an image's size from its header.
func imageSize(path string) (h, w int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("upscale: %w", err)
	}
	defer f.Close()
	c, _, err := image.DecodeConfig(f)
	if err != nil {
		return 0, 0, fmt.Errorf("upscale: %s: %w", path, err)
	}
	return c.Height, c.Width, nil
}

// readImage reads a PNG or JPEG as [1, 3, H, W] RGB in [0, 1] (ESRGAN's
// input).
func readImage(path string) (*tensor.Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("upscale: %w", err)
	}
	defer f.Close()
	m, _, err := image.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("upscale: %s: %w", path, err)
	}
	r := m.Bounds()
	h, w := r.Dy(), r.Dx()
	v := make([]float32, 3*h*w)
	for y := range h {
		for x := range w {
			c := color.NRGBAModel.Convert(m.At(r.Min.X+x, r.Min.Y+y)).(color.NRGBA)
			v[y*w+x] = float32(c.R) / 255
			v[(h+y)*w+x] = float32(c.G) / 255
			v[(2*h+y)*w+x] = float32(c.B) / 255
		}
	}
	return tensor.FromFloat32(tensor.Shape{1, 3, h, w}, v), nil
}

// writeImage writes [1, 3, H, W] in [0, 1] (clamped, rounded) as PNG.
func writeImage(path string, t *tensor.Tensor) error {
	h, w := t.Shape[2], t.Shape[3]
	v := t.F32()
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	q := func(f float32) uint8 { return uint8(min(max(f, 0), 1)*255 + 0.5) }
	for y := range h {
		for x := range w {
			m.SetNRGBA(x, y, color.NRGBA{q(v[y*w+x]), q(v[(h+y)*w+x]), q(v[(2*h+y)*w+x]), 255})
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("upscale: %w", err)
	}
	if err := png.Encode(f, m); err != nil {
		f.Close()
		return fmt.Errorf("upscale: %s: %w", path, err)
	}
	return f.Close()
}
