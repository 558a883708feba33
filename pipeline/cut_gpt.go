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
	return gptLayers(cfg.NLayer, build, func(m *zoo.GPT) gptParts {
		return gptParts{m.WTE, m.WPE, m.Drop, m.LNF, m.Path, func(k int) nn.Layer { return m.H[k] }}
	}), nil
}

// gptParts are what gptLayers cuts of a GPT, whole (zoo.GPT) or a tensor
// rank's part of it (zoo.TPGPT): both have nanoGPT's names.
type gptParts struct {
	wte, wpe *nn.Embedding
	drop     *nn.Dropout
	lnf      *nn.LayerNorm
	path     string
	block    func(k int) nn.Layer
}

// gptLayers cuts the GPT that build makes into one layer per block, the
// embeddings in the first and the final layer norm and tied LM head in
// the last (GPTLayers, TPGPTLayers).
func gptLayers[M any](nLayer int, build func(nn.Builder) M, parts func(M) gptParts) []Layer {
	var ls []Layer
	for k := range nLayer {
		first, last := k == 0, k == nLayer-1
		ls = append(ls, func(b nn.Builder) train.Model {
			return unit(b, build, func(mm M) (train.Model, []string) {
				m := parts(mm)
				blk := m.block(k)
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
						x = op.Add(m.wte.Forward(x), m.wpe.Forward(g.Const(tensor.FromInt64(tensor.Shape{t}, pos))))
						x = m.drop.Forward(x)
					}
					x = blk.Forward(x)
					if last {
						x = m.lnf.Forward(x)
						var logits *trace.Tensor
						g.AtModule(m.path, func() {
							g.WithModule("lm_head", func() { logits = op.Linear(x, m.wte.Weight.T(g), nil) })
						})
						x = logits
					}
					return x
				})
				// The LM head's weight is the token embedding's.
				const wte = "transformer.wte.weight"
				switch {
				case first && !last:
					model = tiedModel{Model: model, tied: map[string][]int{wte: {nLayer - 1}}}
				case last && !first:
					model = tiedModel{Model: model, tied: map[string][]int{wte: {0}}}
				}
				return model, prefixes
			})
		})
	}
	return ls
}
