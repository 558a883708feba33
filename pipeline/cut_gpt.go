package pipeline

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// ErrDropout is matched by errors.Is when a model with dropout is cut
// into stages: a stage's backward pass recomputes its forward pass, which
// would draw other masks than the forward pass whose output went on.
var ErrDropout = errors.New("pipeline: stages of a model with dropout")

// GPTLayers is a zoo GPT as pipeline layers: one per transformer block,
// the token and position embeddings in the first and the final layer
// norm and LM head in the last, with nanoGPT's parameter names. The LM
// head's weight is the token embedding's (tied): the first and last
// stages each hold it, under one name, and a pipeline sums their
// gradients every step (as Megatron does), so the copies stay equal.
func GPTLayers(cfg zoo.GPTConfig) ([]Layer, error) {
	if cfg.NLayer < 1 {
		return nil, fmt.Errorf("pipeline: GPT %+v has no blocks to cut", cfg)
	}
	if cfg.Dropout > 0 {
		return nil, fmt.Errorf("%w: the GPT's dropout is %g", ErrDropout, cfg.Dropout)
	}
	build := func(b nn.Builder) *zoo.GPT { return zoo.NewGPT(b, cfg) }
	var ls []Layer
	for k := range cfg.NLayer {
		first, last := k == 0, k == cfg.NLayer-1
		ls = append(ls, func(b nn.Builder) train.Model {
			return unit(b, build, func(m *zoo.GPT) (train.Model, []string) {
				blk := m.H[k]
				prefixes := []string{"transformer.h." + strconv.Itoa(k)}
				if first {
					prefixes = append(prefixes, "transformer.wte", "transformer.wpe")
				}
				if last {
					prefixes = append(prefixes, "transformer.wte", "transformer.ln_f")
				}
				var model train.Model = forward(func(x *trace.Tensor) *trace.Tensor {
					g := x.Graph()
					if first {
						// gptForward's embeddings.
						t := x.Dim(1)
						pos := make([]int64, t)
						for i := range pos {
							pos[i] = int64(i)
						}
						x = op.Add(m.WTE.Forward(x), m.WPE.Forward(g.Const(tensor.FromInt64(tensor.Shape{t}, pos))))
						x = m.Drop.Forward(x)
					}
					x = blk.Forward(x)
					if last {
						x = m.LNF.Forward(x)
						var logits *trace.Tensor
						g.AtModule(m.Path, func() {
							g.WithModule("lm_head", func() { logits = op.Linear(x, m.WTE.Weight.T(g), nil) })
						})
						x = logits
					}
					return x
				})
				// The LM head's weight is the token embedding's.
				const wte = "transformer.wte.weight"
				switch {
				case first && !last:
					model = tiedModel{Model: model, tied: map[string][]int{wte: {cfg.NLayer - 1}}}
				case last && !first:
					model = tiedModel{Model: model, tied: map[string][]int{wte: {0}}}
				}
				return model, prefixes
			})
		})
	}
	return ls, nil
}
