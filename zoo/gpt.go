package zoo

import (
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// GPTConfig is nanoGPT's GPTConfig.
type GPTConfig struct {
	NLayer, NHead, NEmbd int
	BlockSize            int     // longest sequence (rows of wpe)
	VocabSize            int     // rows of wte
	Dropout              float64 // embedding, attention and residual dropout
	Bias                 bool    // biases in Linear and LayerNorm layers
}

// GPT2Config is GPT-2 small (124M) as nanoGPT trains it: vocabulary padded
// to 50304, biases on.
func GPT2Config() GPTConfig {
	return GPTConfig{NLayer: 12, NHead: 12, NEmbd: 768, BlockSize: 1024, VocabSize: 50304, Bias: true}
}

func (c GPTConfig) validate() error {
	switch {
	case c.NLayer < 0 || c.NHead <= 0 || c.NEmbd <= 0 || c.BlockSize <= 0 || c.VocabSize <= 0:
		return fmt.Errorf("zoo: GPT config %+v: sizes must be positive", c)
	case c.NEmbd%c.NHead != 0:
		return fmt.Errorf("zoo: GPT config: n_embd %d is not divisible by n_head %d", c.NEmbd, c.NHead)
	case !(c.Dropout >= 0 && c.Dropout <= 1):
		return fmt.Errorf("zoo: GPT config: dropout %v is not in [0, 1]", c.Dropout)
	}
	return nil
}

// GPT is Karpathy's nanoGPT (model.py) with the parameter names of its
// state_dict: transformer.wte, transformer.wpe, transformer.h.{i}.ln_1,
// .attn.c_attn, .attn.c_proj, .ln_2, .mlp.c_fc, .mlp.c_proj,
// transformer.ln_f, and nanoGPT's initialization (N(0, 0.02) for Linear
// and Embedding weights, N(0, 0.02/sqrt(2*n_layer)) for c_proj weights,
// zero biases, LayerNorm 1 and 0).
//
// Weight tying: lm_head.weight is transformer.wte.weight. The store holds
// the tensor once, as transformer.wte.weight (as model.parameters() lists
// it), and its gradient is the sum of both uses. PyTorch's state_dict names
// it twice; LoadStateDict accepts that (the two must be equal) and
// StateDict writes both keys. nanoGPT's causal-mask buffer attn.bias (only
// present with PyTorch < 2, which lacks flash attention) is ignored on load.
//
// Forward maps int64 token indices [B, T] (T <= BlockSize) to logits
// [B, T, VocabSize] for every position; GPTLoss is nanoGPT's loss.
type GPT struct {
	nn.Module
	Config GPTConfig
	WTE    *nn.Embedding
	WPE    *nn.Embedding
	Drop   *nn.Dropout
	H      []*GPTBlock
	LNF    *nn.LayerNorm
	// ManualAttention computes attention as softmax(q k^T/sqrt(d) + mask) v
	// with explicit ops instead of op.ScaledDotProductAttention. It is used
	// automatically when attention dropout is active in training.
	ManualAttention bool
}

// GPTBlock is one transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
type GPTBlock struct {
	nn.Module
	LN1, LN2            *nn.LayerNorm
	CAttn, AttnProj     *nn.Linear
	AttnDrop, ResidDrop *nn.Dropout
	CFC, MLPProj        *nn.Linear
	MLPDrop             *nn.Dropout
	gpt                 *GPT
}

// NewGPT registers a GPT's parameters under b (the model's root; names get
// the "transformer." prefix). It panics on an invalid config.
func NewGPT(b nn.Builder, cfg GPTConfig) *GPT {
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	m := &GPT{Module: nn.NewModule(b), Config: cfg}
	t := b.Sub("transformer")
	std := nn.Normal(0, 0.02)
	projStd := nn.Normal(0, 0.02/math.Sqrt(2*float64(cfg.NLayer)))
	m.WTE = nn.NewEmbedding(t.Sub("wte"), cfg.VocabSize, cfg.NEmbd)
	m.WTE.Weight.Init = std
	m.WPE = nn.NewEmbedding(t.Sub("wpe"), cfg.BlockSize, cfg.NEmbd)
	m.WPE.Weight.Init = std
	m.Drop = nn.NewDropout(t.Sub("drop"), cfg.Dropout)
	linear := func(b nn.Builder, in, out int, wInit func(*rand.Rand, *tensor.Tensor)) *nn.Linear {
		l := nn.NewLinear(b, in, out, cfg.Bias)
		l.Weight.Init = wInit
		if l.Bias != nil {
			l.Bias.Init = nn.Constant(0)
		}
		return l
	}
	e := cfg.NEmbd
	for i := range cfg.NLayer {
		hb := t.Sub("h").Sub(strconv.Itoa(i))
		blk := &GPTBlock{Module: nn.NewModule(hb), gpt: m}
		blk.LN1 = nn.NewLayerNorm(hb.Sub("ln_1"), tensor.Shape{e}, cfg.Bias)
		ab := hb.Sub("attn")
		blk.CAttn = linear(ab.Sub("c_attn"), e, 3*e, std)
		blk.AttnProj = linear(ab.Sub("c_proj"), e, e, projStd)
		blk.AttnDrop = nn.NewDropout(ab.Sub("attn_dropout"), cfg.Dropout)
		blk.ResidDrop = nn.NewDropout(ab.Sub("resid_dropout"), cfg.Dropout)
		blk.LN2 = nn.NewLayerNorm(hb.Sub("ln_2"), tensor.Shape{e}, cfg.Bias)
		mb := hb.Sub("mlp")
		blk.CFC = linear(mb.Sub("c_fc"), e, 4*e, std)
		blk.MLPProj = linear(mb.Sub("c_proj"), 4*e, e, projStd)
		blk.MLPDrop = nn.NewDropout(mb.Sub("dropout"), cfg.Dropout)
		m.H = append(m.H, blk)
	}
	m.LNF = nn.NewLayerNorm(t.Sub("ln_f"), tensor.Shape{e}, cfg.Bias)
	return m
}

// Forward maps token indices [B, T] to logits [B, T, VocabSize].
func (m *GPT) Forward(idx *trace.Tensor) *trace.Tensor {
	return gptForward(&m.Module, m.Config, m.WTE, m.WPE, m.Drop, m.LNF, idx, func(x *trace.Tensor) *trace.Tensor {
		for _, blk := range m.H {
			x = blk.Forward(x)
		}
		return x
	})
}

// gptForward is the GPT's forward pass around its blocks (the full model
// and the tensor-parallel one alike): token and position embeddings,
// dropout, the blocks, the final layer norm and the LM head, whose weight
// is the token embedding's (tied).
func gptForward(mod *nn.Module, cfg GPTConfig, wte, wpe *nn.Embedding, drop *nn.Dropout, lnf *nn.LayerNorm, idx *trace.Tensor, blocks func(*trace.Tensor) *trace.Tensor) *trace.Tensor {
	g := idx.Graph()
	if len(idx.Shape()) != 2 || idx.DType() != tensor.Int64 {
		g.Errorf("gpt", []*trace.Tensor{idx}, "expected int64 token indices [B, T], got %v", idx.Meta)
	}
	t := idx.Dim(1)
	if t > cfg.BlockSize {
		g.Errorf("gpt", []*trace.Tensor{idx}, "cannot forward sequence of length %d, block size is only %d", t, cfg.BlockSize)
	}
	pos := make([]int64, t)
	for i := range pos {
		pos[i] = int64(i)
	}
	x := op.Add(wte.Forward(idx), wpe.Forward(g.Const(tensor.FromInt64(tensor.Shape{t}, pos))))
	x = lnf.Forward(blocks(drop.Forward(x)))
	// lm_head: Linear(n_embd, vocab, bias=False) with the tied weight.
	var logits *trace.Tensor
	g.AtModule(mod.Path, func() {
		g.WithModule("lm_head", func() { logits = op.Linear(x, wte.Weight.T(g), nil) })
	})
	return logits
}

// Forward applies the block to x [B, T, C].
func (blk *GPTBlock) Forward(x *trace.Tensor) *trace.Tensor {
	return blk.Scope(x, func() *trace.Tensor {
		g := x.Graph()
		var a *trace.Tensor
		g.WithModule("attn", func() { a = blk.attention(blk.LN1.Forward(x)) })
		x = op.Add(x, a)
		h := blk.LN2.Forward(x)
		g.WithModule("mlp", func() {
			h = blk.MLPDrop.Forward(blk.MLPProj.Forward(op.GELU(blk.CFC.Forward(h), "none")))
		})
		return op.Add(x, h)
	})
}

// attention is nanoGPT's CausalSelfAttention.forward.
func (blk *GPTBlock) attention(x *trace.Tensor) *trace.Tensor {
	cfg := blk.gpt.Config
	b, t, c := x.Dim(0), x.Dim(1), x.Dim(2)
	nh, hs := cfg.NHead, c/cfg.NHead
	qkv := op.SplitSizes(blk.CAttn.Forward(x), 2, c, c, c)
	heads := func(v *trace.Tensor) *trace.Tensor {
		return op.Transpose(op.Reshape(v, tensor.Shape{b, t, nh, hs}), 1, 2) // [B, nh, T, hs]
	}
	q, k, v := heads(qkv[0]), heads(qkv[1]), heads(qkv[2])
	var y *trace.Tensor
	if blk.gpt.ManualAttention || blk.AttnDrop.P > 0 && blk.AttnDrop.Training() {
		y = blk.manualAttention(q, k, v)
	} else {
		y = op.ScaledDotProductAttention(q, k, v, true)
	}
	y = op.Reshape(op.Transpose(y, 1, 2), tensor.Shape{b, t, c})
	return blk.ResidDrop.Forward(blk.AttnProj.Forward(y))
}

// manualAttention is nanoGPT's non-flash path: explicit scores, causal mask,
// softmax, attention dropout, weighted sum.
func (blk *GPTBlock) manualAttention(q, k, v *trace.Tensor) *trace.Tensor {
	g := q.Graph()
	t := q.Dim(2)
	att := op.Scale(op.MatMulT(q, k, false, true), 1/math.Sqrt(float64(q.Dim(3))))
	mask := make([]float32, t*t)
	for i := range t {
		for j := i + 1; j < t; j++ {
			mask[i*t+j] = float32(math.Inf(-1))
		}
	}
	att = op.Add(att, g.Const(tensor.FromFloat32(tensor.Shape{t, t}, mask)))
	att = blk.AttnDrop.Forward(op.Softmax(att, -1))
	return op.Mm(att, v)
}

// GPTLoss is nanoGPT's loss: cross-entropy of logits [B, T, V] against
// targets [B, T] (int64), averaged over positions whose target is not -1.
func GPTLoss(logits, targets *trace.Tensor) *trace.Tensor {
	v := logits.Dim(-1)
	o := op.DefaultCrossEntropyOpts()
	o.IgnoreIndex = op.Class(-1)
	return op.CrossEntropy(op.Reshape(logits, tensor.Shape{-1, v}), op.Reshape(targets, tensor.Shape{-1}), o)
}

// GPTTiedKey is the state_dict key PyTorch writes for the tied lm_head
// weight, which the store holds once as GPTEmbeddingKey.
const (
	GPTTiedKey      = "lm_head.weight"
	GPTEmbeddingKey = "transformer.wte.weight"
)

// StateDict returns the store's tensors plus lm_head.weight (the same
// values as transformer.wte.weight), as nanoGPT's state_dict has them.
func (m *GPT) StateDict() map[string]*tensor.Tensor {
	sd := m.Module.Store.StateDict()
	if w, ok := sd[m.key(GPTEmbeddingKey)]; ok {
		sd[m.key(GPTTiedKey)] = w.Clone()
	}
	return sd
}

func (m *GPT) key(k string) string {
	if m.Module.Path == "" {
		return k
	}
	return m.Module.Path + "." + k
}

// LoadStateDict loads a nanoGPT state_dict into the store. lm_head.weight,
// when present, must equal transformer.wte.weight (a checkpoint with untied
// weights cannot be represented and is an error); the attn.bias mask
// buffers of PyTorch < 2 are dropped. Everything else is Store.LoadStateDict.
func (m *GPT) LoadStateDict(sd map[string]*tensor.Tensor, strict bool) error {
	out := make(map[string]*tensor.Tensor, len(sd))
	for k, v := range sd {
		if rest, ok := strings.CutPrefix(k, m.key("transformer.h.")); ok && strings.HasSuffix(rest, ".attn.bias") &&
			len(v.Shape) == 4 && v.Shape[0] == 1 && v.Shape[1] == 1 {
			continue // causal mask buffer, not a parameter
		}
		out[k] = v
	}
	if lm, ok := out[m.key(GPTTiedKey)]; ok {
		wte, ok := out[m.key(GPTEmbeddingKey)]
		if !ok {
			// Only lm_head given: it is the tied tensor.
			out[m.key(GPTEmbeddingKey)] = lm
		} else if !sameValues(lm, wte) {
			return fmt.Errorf("zoo: %s differs from %s, but GPT ties them (untied checkpoints are not supported)", GPTTiedKey, GPTEmbeddingKey)
		}
		delete(out, m.key(GPTTiedKey))
	}
	return m.Module.Store.LoadStateDict(out, strict)
}

func sameValues(a, b *tensor.Tensor) bool {
	if a.DType != b.DType || !a.Shape.Equal(b.Shape) || len(a.Data) != len(b.Data) {
		return false
	}
	for i := range a.Data {
		if a.Data[i] != b.Data[i] {
			return false
		}
	}
	return true
}
