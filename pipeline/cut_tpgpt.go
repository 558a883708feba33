package pipeline

import (
	"fmt"

	"github.com/headroom-ml/headroom/nn"
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
	return gptLayers(cfg.NLayer, build, func(m *zoo.TPGPT) gptParts {
		return gptParts{m.WTE, m.WPE, m.Drop, m.LNF, m.Path, func(k int) nn.Layer { return m.H[k] }}
	}), nil
}
