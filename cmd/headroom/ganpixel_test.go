package main

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/gan"
	"github.com/headroom-ml/headroom/internal/runreport"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/zoo"
)

// writePhotos makes an image folder (one class) of n random w×h PNGs.
func writePhotos(t *testing.T, dir string, n, w, h int, seed int64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "photos"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(seed))
	for i := range n {
		m := image.NewNRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				m.SetNRGBA(x, y, color.NRGBA{uint8(x * 4), uint8(y * 4), uint8(r.Intn(64)), 255})
			}
		}
		f, err := os.Create(filepath.Join(dir, "photos", string(rune('a'+i))+".png"))
		if err != nil {
			t.Fatal(err)
		}
		if err := png.Encode(f, m); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

// headroom gan --pixel-only trains the generator alone with the L1 loss,
// validating at the start, every --val-every steps and at the end: the
// log holds a run line, a line per step and eval lines with the model's
// and bicubic's PSNR (headroom report charts them), and --save writes
// weights headroom upscale reads (RRDBNet's names and sizes).
func TestGANPixelOnly(t *testing.T) {
	dir := t.TempDir()
	train, val := filepath.Join(dir, "train"), filepath.Join(dir, "val")
	writePhotos(t, train, 2, 40, 36, 1)
	writePhotos(t, val, 1, 40, 40, 2)
	logPath, weights := filepath.Join(dir, "run.jsonl"), filepath.Join(dir, "g.safetensors")
	var out bytes.Buffer
	args := []string{"--pixel-only", "--data", train, "--val", val, "--nf", "4", "--nb", "1", "--gc", "4",
		"--batch", "2", "--crop", "16", "--val-crop", "16", "--val-grid", "2", "--steps", "3", "--val-every", "2",
		"--threads", "1", "--log", logPath, "--save", weights}
	if err := ganMain(context.Background(), args, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	run, err := runreport.Parse("run", f)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Headers) != 1 || len(run.Steps) != 3 {
		t.Fatalf("%d run lines, %d steps; want 1, 3\n%s", len(run.Headers), len(run.Steps), out.String())
	}
	var at []int64
	for _, e := range run.Evals {
		at = append(at, e.Step)
		if e.Set != "val" || e.Samples != 4 || e.Metrics["psnr_y"] <= 0 || e.Metrics["bicubic_psnr_y"] <= 0 || e.Metrics["psnr_rgb"] <= 0 {
			t.Errorf("eval %+v", e)
		}
	}
	if len(at) != 3 || at[0] != 0 || at[1] != 2 || at[2] != 3 {
		t.Errorf("validated at steps %v, want [0 2 3]", at)
	}
	sd, err := safetensors.Load(weights)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := gan.RRDBNetConfigOf(sd); err != nil || c.NF != 4 || c.NB != 1 || c.GC != 4 {
		t.Errorf("saved weights: %+v, %v", c, err)
	}
	// A second leg from the saved weights: steps numbered on from 3, the
	// log appended to, the learning rate annealed on a cosine.
	leg2 := append(append([]string(nil), args...), "--init", weights, "--from-step", "3", "--cosine", "--lr", "1e-3")
	for i, a := range leg2 {
		if a == "--steps" {
			leg2[i+1] = "4"
		}
	}
	if err := ganMain(context.Background(), leg2, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	f2, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if run, err = runreport.Parse("run", f2); err != nil {
		t.Fatal(err)
	}
	var lrs []float64
	for i, s := range run.Steps {
		if s.Step != int64(i+1) {
			t.Errorf("step %d numbered %d", i+1, s.Step)
		}
		lrs = append(lrs, s.LR)
	}
	// Leg 2's rates: 1e-3·(1+cos(πk/4))/2 for k = 0..3.
	if len(lrs) != 7 || lrs[3] != 1e-3 || math.Abs(lrs[5]-5e-4) > 1e-12 || lrs[6] >= lrs[5] {
		t.Errorf("learning rates %v", lrs)
	}
	if len(run.Evals) != 5 || run.Evals[3].Step != 5 || run.Evals[4].Step != 7 {
		t.Errorf("%d evals", len(run.Evals))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pixel-only"}, "needs --data"},
		{[]string{"--pixel-only", "--data", train, "--crop", "16", "--init", "/nonexistent"}, "--init"},
		{[]string{"--pixel-only", "--data", train, "--crop", "18"}, "multiples of --scale"},
		{[]string{"--pixel-only", "--data", train, "--crop", "40"}, "smaller than --crop"},
		{[]string{"--pixel-only", "--data", train, "--crop", "16", "--val", val, "--val-crop", "64"}, "smaller than --val-crop"},
	} {
		err := ganMain(context.Background(), c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// A training batch's inputs are 8-bit levels, as the upscaler's are (a
// saved LR image): bicubic downscales of a smooth ramp are not, so the
// rounding must be there.
func TestPixelBatchInputs8Bit(t *testing.T) {
	const h, w = 48, 40
	p := photo{x: make([]float32, 3*h*w), h: h, w: w}
	for i := range p.x {
		p.x[i] = float32(i%w)/float32(3*w) + float32(i/w%h)/float32(5*h) + 0.1
	}
	lq, gt := pixelBatch(rand.New(rand.NewSource(1)), []photo{p}, 4, 16, 4, 0)
	if !lq.Shape.Equal(tensor.Shape{4, 3, 4, 4}) || !gt.Shape.Equal(tensor.Shape{4, 3, 16, 16}) {
		t.Fatalf("shapes %v %v", lq.Shape, gt.Shape)
	}
	for i, v := range lq.F32() {
		if l := float64(v) * 255; math.Abs(l-math.Round(l)) > 1e-4 {
			t.Fatalf("input value %d is %v, %v levels: not 8-bit", i, v, l)
		}
	}
}

// A batch's inputs keep their targets' colour: per channel, the mean of
// the 8-bit input over the batch equals the target's within 0.05 levels
// (the downscale's weights sum to 1, rounding is to nearest), on a photo of
// smooth colour gradients and fine texture, with and without the
// permutation. A biased input would teach the generator a colour shift.
func TestPixelBatchKeepsMeans(t *testing.T) {
	const h, w = 96, 120
	p := photo{x: make([]float32, 3*h*w), h: h, w: w}
	for c := range 3 {
		for y := range h {
			for x := range w {
				v := 0.25 + 0.25*float64(c) + 0.15*math.Sin(float64(x*(c+1))/17+float64(y)/23) + 0.04*math.Sin(float64(x*y)) // in [0.06, 0.94]
				p.x[(c*h+y)*w+x] = float32(v)
			}
		}
	}
	for _, perm := range []float64{0, 0.5} {
		lq, gt := pixelBatch(rand.New(rand.NewSource(2)), []photo{p}, 256, 32, 4, perm)
		for c := range 3 {
			var mq, mg float64
			for i := range 256 {
				for _, v := range lq.F32()[(i*3+c)*64:][:64] {
					mq += 255 * float64(v) / (256 * 64)
				}
				for _, v := range gt.F32()[(i*3+c)*1024:][:1024] {
					mg += 255 * float64(v) / (256 * 1024)
				}
			}
			if math.Abs(mq-mg) > 0.05 {
				t.Errorf("--rgb-permute %v, channel %d: input mean %.3f levels, target %.3f", perm, c, mq, mg)
			}
		}
	}
}

// --rgb-permute shuffles a crop's colour planes, the same way in the
// target and the input (the input is the downscale of the shuffled crop),
// and draws every permutation; at 0 the channels stay in order.
func TestPixelBatchRGBPermute(t *testing.T) {
	const h, w = 32, 32
	levels := [3]float32{20. / 255, 84. / 255, 141. / 255} // Kite's sky
	p := photo{x: make([]float32, 3*h*w), h: h, w: w}
	for c, v := range levels {
		for i := range h * w {
			p.x[c*h*w+i] = v
		}
	}
	for _, c := range []struct {
		prob      float64
		wantPerms int // distinct channel orders seen over the batch
	}{{0, 1}, {1, 6}, {0.5, 6}} {
		lq, gt := pixelBatch(rand.New(rand.NewSource(3)), []photo{p}, 64, 16, 4, c.prob)
		seen := map[[3]float32]bool{}
		var kept int
		for i := range 64 {
			var order [3]float32
			for ch := range 3 {
				g := gt.F32()[(i*3+ch)*256:][:256]
				q := lq.F32()[(i*3+ch)*16:][:16]
				order[ch] = g[0]
				for _, v := range g {
					if v != g[0] {
						t.Fatalf("p %v: crop %d channel %d is not one plane of the photo", c.prob, i, ch)
					}
				}
				for _, v := range q {
					if math.Abs(float64(v-g[0])) > 0.5/255 {
						t.Fatalf("p %v: crop %d channel %d: input %v, target %v: not the downscale of the shuffled crop", c.prob, i, ch, v*255, g[0]*255)
					}
				}
			}
			seen[order] = true
			if order == levels {
				kept++
			}
		}
		if len(seen) != c.wantPerms {
			t.Errorf("p %v: %d channel orders seen, want %d", c.prob, len(seen), c.wantPerms)
		}
		// Kept in order: all at 0; 1/6 at 1; 1/2 + 1/12 at 0.5.
		if c.prob == 0 && kept != 64 || c.prob == 1 && (kept < 3 || kept > 20) || c.prob == 0.5 && (kept < 25 || kept > 50) {
			t.Errorf("p %v: %d of 64 crops in the photo's order", c.prob, kept)
		}
	}
	err := ganMain(context.Background(), []string{"--pixel-only", "--data", "x", "--rgb-permute", "1.5"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--rgb-permute") {
		t.Errorf("--rgb-permute 1.5: %v", err)
	}
}

// The cosine's progress is the largest fraction of the run's limits used,
// so that a run stopped by --time or --wall ends annealed.
func TestAnnealProgress(t *testing.T) {
	m := time.Minute
	for _, c := range []struct {
		step              int64
		steps             int
		cpu               float64
		cpuLim, wall, wLm time.Duration
		want              float64
	}{
		{0, 100, 0, 0, 0, 0, 0},
		{25, 100, 999, 0, 99 * m, 0, 0.25},      // no time limits: steps only
		{25, 100, 30, m, 0, 0, 0.5},             // --time nearer
		{25, 100, 30, m, 45 * m, 60 * m, 0.75},  // --wall nearer
		{10, 1000, 0, 0, 90 * m, 60 * m, 1},     // past a limit: clamped
		{100, 100, 1, 10 * m, 1 * m, 60 * m, 1}, // --steps reached
	} {
		if got := annealProgress(c.step, c.steps, c.cpu, c.cpuLim, c.wall, c.wLm); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("annealProgress(%+v) = %v, want %v", c, got, c.want)
		}
	}
}

// The weight average is BasicSR's model_ema: the first update copies the
// weights, each later one moves it (1-decay) of the way to them; with
// loads it for the call and puts the trained weights back.
func TestWeightEMA(t *testing.T) {
	gs := nn.NewStore()
	zoo.NewRRDBNet(gs.Root(), zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 4, NB: 1, GC: 4})
	if err := gs.Materialize(device.CPU(), 1); err != nil {
		t.Fatal(err)
	}
	w0 := gs.StateDict()
	e := &weightEMA{decay: 0.75}
	e.update(gs)
	w1 := gs.StateDict()
	for _, v := range w1 {
		for i := range v.F32() {
			v.F32()[i] += 1
		}
	}
	if err := gs.LoadStateDict(w1, true); err != nil {
		t.Fatal(err)
	}
	e.update(gs)
	for k, a := range e.avg {
		for i, v := range a.F32() {
			if want := w0[k].F32()[i] + 0.25; math.Abs(float64(v-want)) > 1e-6 {
				t.Fatalf("%s[%d]: average %v, want %v", k, i, v, want)
			}
		}
	}
	var seen map[string]*tensor.Tensor
	if err := e.with(gs, func() error { seen = gs.StateDict(); return nil }); err != nil {
		t.Fatal(err)
	}
	after := gs.StateDict()
	for k := range w0 {
		if seen[k].F32()[0] != e.avg[k].F32()[0] || after[k].F32()[0] != w1[k].F32()[0] {
			t.Fatalf("%s: inside with %v (average %v), after %v (trained %v)", k, seen[k].F32()[0], e.avg[k].F32()[0], after[k].F32()[0], w1[k].F32()[0])
		}
	}
}

// cancelOn cancels a context when its output shows mark: an interrupt at
// a known step, without timing.
type cancelOn struct {
	bytes.Buffer
	mark   string
	cancel func()
}

func (c *cancelOn) Write(p []byte) (int, error) {
	n, err := c.Buffer.Write(p)
	if strings.Contains(c.String(), c.mark) {
		c.cancel()
	}
	return n, err
}

// An interrupted run (its context cancelled after step 10) still
// validates and writes --save: the steps it trained are not lost.
func TestGANPixelInterruptedSaves(t *testing.T) {
	dir := t.TempDir()
	trainDir, val := filepath.Join(dir, "train"), filepath.Join(dir, "val")
	writePhotos(t, trainDir, 1, 40, 36, 1)
	writePhotos(t, val, 1, 16, 16, 2)
	weights := filepath.Join(dir, "g.safetensors")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelOn{mark: "step 10: L1", cancel: cancel}
	err := ganMain(ctx, []string{"--pixel-only", "--data", trainDir, "--val", val, "--nf", "4", "--nb", "1", "--gc", "4",
		"--batch", "1", "--crop", "16", "--val-crop", "16", "--val-grid", "1", "--steps", "1000", "--val-every", "0",
		"--ema", "0.9", "--threads", "1", "--save", weights}, out)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "step 10: val PSNR") {
		t.Errorf("no validation at the end:\n%s", out.String())
	}
	if _, err := safetensors.Load(weights); err != nil {
		t.Fatalf("--save after an interrupt: %v\n%s", err, out.String())
	}
	var o bytes.Buffer
	if err := ganMain(context.Background(), []string{"--pixel-only", "--data", trainDir, "--crop", "16", "--ema", "1"}, &o); err == nil || !strings.Contains(err.Error(), "--ema") {
		t.Errorf("--ema 1: %v", err)
	}
}
