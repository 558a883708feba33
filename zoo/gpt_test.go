package zoo_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

func tokens(b, t, vocab int, seed int) *tensor.Tensor {
	v := make([]int64, b*t)
	for i := range v {
		v[i] = int64((i*7 + seed*13 + i*i) % vocab)
	}
	return tensor.FromInt64(tensor.Shape{b, t}, v)
}

// gptStep runs one step without an optimizer and returns the loss and the
// gradients by name.
func gptStep(t *testing.T, cfg zoo.GPTConfig, manual bool, x, y *tensor.Tensor) (float64, map[string][]float64, *train.Trainer) {
	t.Helper()
	s := nn.NewStore()
	m := zoo.NewGPT(s.Root(), cfg)
	m.ManualAttention = manual
	materialize(t, s, device.CPU())
	if err := s.LoadStateDict(hashStateDict(s), true); err != nil {
		t.Fatal(err)
	}
	tr, err := train.New(s.Device(), s, m, zoo.GPTLoss, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	loss, err := tr.Step(context.Background(), x, y)
	if err != nil {
		t.Fatal(err)
	}
	grads := map[string][]float64{}
	for _, p := range s.Trainable() {
		grads[p.Name] = p.Grad.Float64s()
	}
	return loss, grads, tr
}

// The fused attention op and nanoGPT's explicit attention agree.
func TestGPTManualAttention(t *testing.T) {
	cfg := zoo.GPTConfig{NLayer: 2, NHead: 4, NEmbd: 32, BlockSize: 16, VocabSize: 48, Bias: true}
	x, y := tokens(3, 10, 48, 1), tokens(3, 10, 48, 2)
	l1, g1, _ := gptStep(t, cfg, false, x, y)
	l2, g2, _ := gptStep(t, cfg, true, x, y)
	if math.Abs(l1-l2) > 1e-6*math.Abs(l1) {
		t.Errorf("loss: fused %v, manual %v", l1, l2)
	}
	for k, a := range g1 {
		if r := relErr(a, g2[k], maxAbs(g2[k])); r > 1e-5 {
			t.Errorf("%s: gradients differ by %.3g", k, r)
		}
	}
}

// With dropout the model still trains (attention falls back to the explicit
// path), and in evaluation mode dropout is off: the output equals that of
// the same weights without dropout.
func TestGPTDropout(t *testing.T) {
	cfg := zoo.GPTConfig{NLayer: 1, NHead: 2, NEmbd: 16, BlockSize: 8, VocabSize: 20, Dropout: 0.3}
	x, y := tokens(2, 8, 20, 3), tokens(2, 8, 20, 4)
	lossDrop, _, trDrop := gptStep(t, cfg, false, x, y)
	cfg.Dropout = 0
	loss, _, tr := gptStep(t, cfg, false, x, y)
	if math.IsNaN(lossDrop) || lossDrop == loss {
		t.Errorf("loss with dropout %v, without %v: dropout had no effect", lossDrop, loss)
	}
	a, err := trDrop.Predict(context.Background(), x)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.Predict(context.Background(), x)
	if err != nil {
		t.Fatal(err)
	}
	if r := relErr(a.Float64s(), b.Float64s(), maxAbs(b.Float64s())); r != 0 {
		t.Errorf("evaluation output depends on dropout (relative difference %.3g)", r)
	}
}

func TestGPTSequenceTooLong(t *testing.T) {
	s := nn.NewStore()
	m := smallGPT(s) // block size 8
	g := trace.New()
	err := trace.Capture(func() { m.Forward(g.Input("x", tensor.Int64, tensor.Shape{1, 9})) })
	var se *trace.ShapeError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "block size") {
		t.Errorf("got %v, want a shape error about the block size", err)
	}
}
