package zoo_test

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/autodiff"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/gan"
	"github.com/headroom-ml/headroom/internal/check"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/zoo"
)

func readTensors(t *testing.T, name string) map[string]*tensor.Tensor {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("%v (regenerate with /usr/bin/python3 scripts/reference/gan_ref.py)", err)
	}
	out := map[string]*tensor.Tensor{}
	for _, n := range f.Names() {
		if out[n], err = f.Tensor(n); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// within checks got against want with error max|a-b|/max|b|.
func within(t *testing.T, what string, got, want *tensor.Tensor, tol float64) {
	t.Helper()
	if !got.Shape.Equal(want.Shape) {
		t.Errorf("%s: shape %v, PyTorch %v", what, got.Shape, want.Shape)
		return
	}
	b := want.Float64s()
	r := relErr(got.Float64s(), b, maxAbs(b))
	if !(r <= tol) {
		t.Errorf("%s: relative error %.3g > %g (got %v, PyTorch %v)", what, r, tol, clip(got.Float64s()), clip(b))
	}
}

func scalarT(v float64) *tensor.Tensor { return tensor.FromFloat64(tensor.Shape{}, []float64{v}) }

// TestGANLosses checks the relativistic GAN losses of both networks and the
// perceptual loss, values and input gradients, against PyTorch
// (BasicSR's GANLoss 'vanilla' as ESRGANModel uses it; F.l1_loss on
// vgg19 conv5_4 features with ImageNet normalization).
func TestGANLosses(t *testing.T) {
	ref := readTensors(t, "gan_losses.safetensors")
	real64, fake64 := ref["real_pred"].Convert(tensor.Float64), ref["fake_pred"].Convert(tensor.Float64)
	one := scalarT(1)
	w := gan.ESRGANWeights()

	out, grads, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor {
		return gan.GeneratorGANLoss(xs[0], xs[1], w.GAN)
	}, []*tensor.Tensor{real64, fake64}, one)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "generator GAN loss", out, ref["g_loss"], lossTol)
	within(t, "generator GAN loss: gradient of the fake logits", grads[1], ref["g_grad_fake"], gradTol)
	if m := maxAbs(grads[0].Float64s()); m != 0 {
		t.Errorf("generator GAN loss: the real logits got a gradient (max %g); they are detached", m)
	}

	for _, half := range []string{"real", "fake"} {
		out, _, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor {
			r, f := gan.DiscriminatorGANLoss(xs[0], xs[1])
			if half == "real" {
				return r
			}
			return f
		}, []*tensor.Tensor{real64, fake64}, nil)
		if err != nil {
			t.Fatal(err)
		}
		within(t, "discriminator loss, "+half+" half", out, ref["d_loss_"+half], lossTol)
	}
	_, grads, err = check.Eval(func(xs []*trace.Tensor) *trace.Tensor {
		r, f := gan.DiscriminatorGANLoss(xs[0], xs[1])
		return op2Add(r, f)
	}, []*tensor.Tensor{real64, fake64}, one)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "discriminator loss: gradient of the real logits", grads[0], ref["d_grad_real"], gradTol)
	within(t, "discriminator loss: gradient of the fake logits", grads[1], ref["d_grad_fake"], gradTol)

	// The perceptual loss, with hashinit vgg19 weights, in float32.
	s := nn.NewStore()
	vgg := zoo.NewVGG19Extractor(s.Root(), zoo.VGG19Conv54)
	dev := device.CPU()
	if err := s.Materialize(dev, 1); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if err := s.LoadStateDict(perceptualGain(hashStateDict(s)), true); err != nil {
		t.Fatal(err)
	}
	sr, gt := ref["sr"], ref["gt"]
	g := trace.New()
	err = trace.Capture(func() {
		x := g.Input("sr", sr.DType, sr.Shape)
		y := g.Input("gt", gt.DType, gt.Shape)
		l := gan.PerceptualLoss(vgg, x, y, w.Perceptual)
		g.Output("loss", l)
		gs, err := autodiffBackward(l, x)
		if err != nil {
			panic(err)
		}
		g.Output("grad", gs)
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := exec.Compile(g, dev)
	if err != nil {
		t.Fatal(err)
	}
	arena := exec.NewArena(dev)
	defer arena.Release()
	res, err := p.Run(context.Background(), arena, s, map[string]*tensor.Tensor{"sr": sr, "gt": gt}, nil)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "perceptual loss", res["loss"], ref["percep_loss"], lossTol)
	within(t, "perceptual loss: gradient of the output", res["grad"], ref["percep_grad_sr"], gradTol)
}

// BCEWithLogits matches PyTorch's value and gradient at 0, where a
// formula with |x| or relu alone would lose half the gradient, and does
// not overflow far from it.
func TestBCEWithLogitsEdges(t *testing.T) {
	x := tensor.FromFloat64(tensor.Shape{4}, []float64{0, 0, 800, -800})
	for _, target := range []float64{0, 1} {
		out, grads, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor { return gan.BCEWithLogits(xs[0], target) },
			[]*tensor.Tensor{x}, scalarT(1))
		if err != nil {
			t.Fatal(err)
		}
		// mean of softplus(±x): log 2 twice, 0 or 800 at the ends.
		want := (2*math.Log(2) + 800) / 4
		if math.Abs(out.Float64s()[0]-want) > 1e-12 {
			t.Errorf("target %v: loss %v, want %v", target, out.Float64s()[0], want)
		}
		g := grads[0].Float64s()
		// d/dx = (sigmoid(x) - target) / 4
		for i, w := range []float64{0.5 - target, 0.5 - target, 1 - target, -target} {
			if math.Abs(g[i]-w/4) > 1e-12 {
				t.Errorf("target %v: gradient at %v is %v, want %v", target, x.Float64s()[i], g[i], w/4)
			}
		}
	}
}

func op2Add(a, b *trace.Tensor) *trace.Tensor { return op.Add(a, b) }

func autodiffBackward(l, x *trace.Tensor) (*trace.Tensor, error) {
	gs, err := autodiff.Backward(l, []*trace.Tensor{x})
	if err != nil {
		return nil, err
	}
	return gs[0], nil
}

// perceptualGain is gan_ref.py's perceptual_gain: weights doubled, biases
// divided by 1024 (both exact), so that conv5_4 features depend on the
// image rather than on the biases.
func perceptualGain(sd map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	for k, v := range sd {
		f := float32(1.0 / 1024)
		if strings.HasSuffix(k, ".weight") {
			f = 2
		}
		x := v.F32()
		for i := range x {
			x[i] *= f
		}
	}
	return sd
}
