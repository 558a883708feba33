package pipeline

import (
	"fmt"
	"strconv"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// TPGPTLayers is tensor rank rank's part of a zoo GPT split across size
// ranks (zoo.NewTPGPT, Megatron's layout) as pipeline layers, cut as
// GPTLayers cuts the whole GPT: one per transformer block, the
// embeddings in the first and the final layer norm and the tied LM head
// in the last. Each block's all-reduces (op.AllReduce, op.CopyToRanks)
// are nodes of its stage's programs, run on the tensor group's
// communicator; the replicated parameters (embeddings, layer norms,
// row-parallel biases) are whole on every tensor rank.
func TPGPTLayers(cfg zoo.GPTConfig, rank, size int) ([]Layer, error) {
	if cfg.NLayer < 1 {
		return nil, fmt.Errorf("pipeline: GPT %+v has no blocks to cut", cfg)
	}
	if cfg.Dropout > 0 {
		return nil, fmt.Errorf("%w: the GPT's dropout is %g", ErrDropout, cfg.Dropout)
	}
	if err := zoo.CheckTensorParallel(cfg, size); err != nil {
		return nil, err
	}
	if _, err := zoo.NewTPGPT(nn.NewStore().Root(), cfg, rank, size); err != nil {
		return nil, err
	}
	build := func(b nn.Builder) *zoo.TPGPT {
		m, _ := zoo.NewTPGPT(b, cfg, rank, size) // checked above
		return m
	}
	var ls []Layer
	for k := range cfg.NLayer {
		first, last := k == 0, k == cfg.NLayer-1
		ls = append(ls, func(b nn.Builder) train.Model {
			return unit(b, build, func(m *zoo.TPGPT) (train.Model, []string) {
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
