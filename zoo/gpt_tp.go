package zoo

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// ErrTensorParallel is matched by errors.Is when a GPT cannot be split
// across the ranks asked for.
var ErrTensorParallel = errors.New("zoo: tensor parallel GPT")

// TPGPT is rank Rank's part of a GPT split across Size ranks in
// Megatron-LM's layout (Shoeybi et al. 2019, section 3):
//
//   - attention: c_attn is column-parallel (each rank computes the query,
//     key and value of NHead/Size heads: its rows of each of the three
//     parts of the weight and bias), attention runs on those heads alone,
//     c_proj is row-parallel (the columns that read its heads), and the
//     ranks' partial outputs are all-reduced before c_proj's bias;
//   - MLP: c_fc is column-parallel (4*NEmbd/Size of its outputs), GELU is
//     local, c_proj row-parallel followed by an all-reduce and the bias;
//   - layer norms, the token and position embeddings and the (tied) LM
//     head are replicated: every rank holds them whole and computes them
//     alike, and their gradients come out alike on every rank.
//
// Each split region starts with op.CopyToRanks (Megatron's f: identity,
// gradient all-reduced) and ends with op.AllReduce (g: all-reduce,
// gradient passed through), so the loss and every gradient equal the
// single-device model's, up to the order of float sums. The parameters
// keep the full model's names (state_dict keys) with this rank's shapes;
// LoadFull takes them from the full model's weights and TPGather puts
// the ranks' pieces back together. Dropout in a split region draws other
// masks than the full model's (positions differ), so equality holds with
// dropout off.
type TPGPT struct {
	nn.Module
	Config     GPTConfig
	Rank, Size int
	WTE, WPE   *nn.Embedding
	Drop       *nn.Dropout
	H          []*TPBlock
	LNF        *nn.LayerNorm
}

// TPBlock is one transformer block of a TPGPT.
type TPBlock struct {
	nn.Module
	LN1, LN2 *nn.LayerNorm
	// CAttn and CFC are column-parallel: this rank's rows of the weight
	// and bias. AttnProj and MLPProj are row-parallel: this rank's columns
	// of the weight; their biases (AttnBias, MLPBias) are whole, added
	// after the all-reduce.
	CAttn, CFC          *nn.Linear
	AttnProj, MLPProj   *nn.Linear
	AttnBias, MLPBias   *nn.Param
	AttnDrop, ResidDrop *nn.Dropout
	MLPDrop             *nn.Dropout
	gpt                 *TPGPT
}

// CheckTensorParallel reports whether cfg can be split across size ranks:
// whole attention heads per rank.
func CheckTensorParallel(cfg GPTConfig, size int) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if size < 1 {
		return fmt.Errorf("%w: %d ranks", ErrTensorParallel, size)
	}
	if cfg.NHead%size != 0 {
		return fmt.Errorf("%w: %d attention heads cannot be split evenly across %d ranks (n_head must be a multiple of the tensor-parallel ranks)", ErrTensorParallel, cfg.NHead, size)
	}
	return nil
}

// NewTPGPT registers rank's parameters of cfg's GPT split across size
// ranks under b, with the full model's names. Initialize it from the full
// model's weights (LoadFull): its own initialization draws each piece as
// if it were a whole tensor.
func NewTPGPT(b nn.Builder, cfg GPTConfig, rank, size int) (*TPGPT, error) {
	if err := CheckTensorParallel(cfg, size); err != nil {
		return nil, err
	}
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrTensorParallel, rank, size)
	}
	m := &TPGPT{Module: nn.NewModule(b), Config: cfg, Rank: rank, Size: size}
	t := b.Sub("transformer")
	std := nn.Normal(0, 0.02)
	m.WTE = nn.NewEmbedding(t.Sub("wte"), cfg.VocabSize, cfg.NEmbd)
	m.WTE.Weight.Init = std
	m.WPE = nn.NewEmbedding(t.Sub("wpe"), cfg.BlockSize, cfg.NEmbd)
	m.WPE.Weight.Init = std
	m.Drop = nn.NewDropout(t.Sub("drop"), cfg.Dropout)
	e := cfg.NEmbd
	for i := range cfg.NLayer {
		hb := t.Sub("h").Sub(strconv.Itoa(i))
		blk := &TPBlock{Module: nn.NewModule(hb), gpt: m}
		blk.LN1 = nn.NewLayerNorm(hb.Sub("ln_1"), tensor.Shape{e}, cfg.Bias)
		ab := hb.Sub("attn")
		blk.CAttn = nn.NewLinear(ab.Sub("c_attn"), e, 3*e/size, cfg.Bias)
		blk.AttnProj = nn.NewLinear(ab.Sub("c_proj"), e/size, e, false)
		if cfg.Bias {
			blk.AttnBias = ab.Sub("c_proj").Param("bias", tensor.Shape{e}, nn.Constant(0))
		}
		blk.AttnDrop = nn.NewDropout(ab.Sub("attn_dropout"), cfg.Dropout)
		blk.ResidDrop = nn.NewDropout(ab.Sub("resid_dropout"), cfg.Dropout)
		blk.LN2 = nn.NewLayerNorm(hb.Sub("ln_2"), tensor.Shape{e}, cfg.Bias)
		mb := hb.Sub("mlp")
		blk.CFC = nn.NewLinear(mb.Sub("c_fc"), e, 4*e/size, cfg.Bias)
		blk.MLPProj = nn.NewLinear(mb.Sub("c_proj"), 4*e/size, e, false)
		if cfg.Bias {
			blk.MLPBias = mb.Sub("c_proj").Param("bias", tensor.Shape{e}, nn.Constant(0))
		}
		blk.MLPDrop = nn.NewDropout(mb.Sub("dropout"), cfg.Dropout)
		m.H = append(m.H, blk)
	}
	m.LNF = nn.NewLayerNorm(t.Sub("ln_f"), tensor.Shape{e}, cfg.Bias)
	return m, nil
}

// Forward maps token indices [B, T] to logits [B, T, VocabSize], every
// rank alike.
func (m *TPGPT) Forward(idx *trace.Tensor) *trace.Tensor {
	return gptForward(&m.Module, m.Config, m.WTE, m.WPE, m.Drop, m.LNF, idx, func(x *trace.Tensor) *trace.Tensor {
		for _, blk := range m.H {
			x = blk.Forward(x)
		}
		return x
	})
}

// Forward applies the block to x [B, T, C].
func (blk *TPBlock) Forward(x *trace.Tensor) *trace.Tensor {
	return blk.Scope(x, func() *trace.Tensor {
		g := x.Graph()
		size := blk.gpt.Size
		var a *trace.Tensor
		g.WithModule("attn", func() {
			a = blk.attention(op.CopyToRanks(blk.LN1.Forward(x), size))
			a = blk.ResidDrop.Forward(blk.rowParallelOut(a, blk.AttnBias, "c_proj"))
		})
		x = op.Add(x, a)
		h := op.CopyToRanks(blk.LN2.Forward(x), size)
		g.WithModule("mlp", func() {
			h = blk.MLPProj.Forward(op.GELU(blk.CFC.Forward(h), "none"))
			h = blk.MLPDrop.Forward(blk.rowParallelOut(h, blk.MLPBias, "c_proj"))
		})
		return op.Add(x, h)
	})
}

// rowParallelOut sums the ranks' partial outputs of a row-parallel layer
// and adds its (whole) bias.
func (blk *TPBlock) rowParallelOut(y *trace.Tensor, bias *nn.Param, module string) *trace.Tensor {
	g := y.Graph()
	g.WithModule(module, func() {
		y = op.AllReduce(y, blk.gpt.Size)
		if bias != nil {
			y = op.Add(y, bias.T(g))
		}
	})
	return y
}

// attention is CausalSelfAttention on this rank's heads, up to the
// row-parallel projection's partial output (before the all-reduce).
func (blk *TPBlock) attention(x *trace.Tensor) *trace.Tensor {
	cfg := blk.gpt.Config
	b, t := x.Dim(0), x.Dim(1)
	hs := cfg.NEmbd / cfg.NHead
	nh := cfg.NHead / blk.gpt.Size
	c := nh * hs
	qkv := op.SplitSizes(blk.CAttn.Forward(x), 2, c, c, c)
	heads := func(v *trace.Tensor) *trace.Tensor {
		return op.Transpose(op.Reshape(v, tensor.Shape{b, t, nh, hs}), 1, 2)
	}
	q, k, v := heads(qkv[0]), heads(qkv[1]), heads(qkv[2])
	var y *trace.Tensor
	if blk.AttnDrop.P > 0 && blk.AttnDrop.Training() {
		g := q.Graph()
		att := op.Scale(op.MatMulT(q, k, false, true), 1/math.Sqrt(float64(hs)))
		mask := make([]float32, t*t)
		for i := range t {
			for j := i + 1; j < t; j++ {
				mask[i*t+j] = float32(math.Inf(-1))
			}
		}
		att = op.Add(att, g.Const(tensor.FromFloat32(tensor.Shape{t, t}, mask)))
		y = op.Mm(blk.AttnDrop.Forward(op.Softmax(att, -1)), v)
	} else {
		y = op.ScaledDotProductAttention(q, k, v, true)
	}
	y = op.Reshape(op.Transpose(y, 1, 2), tensor.Shape{b, t, c})
	return blk.AttnProj.Forward(y)
}

// tpSplit says how the full model's tensor name is split across ranks:
// along dim, in parts equal pieces each split (c_attn's query, key and
// value); dim -1 for a replicated tensor.
func tpSplit(name string) (dim, parts int) {
	switch {
	case strings.HasSuffix(name, ".attn.c_attn.weight"), strings.HasSuffix(name, ".attn.c_attn.bias"):
		return 0, 3
	case strings.HasSuffix(name, ".mlp.c_fc.weight"), strings.HasSuffix(name, ".mlp.c_fc.bias"):
		return 0, 1
	case strings.HasSuffix(name, ".attn.c_proj.weight"), strings.HasSuffix(name, ".mlp.c_proj.weight"):
		return 1, 1
	}
	return -1, 1
}

// TPShard is rank's piece of the full model's tensor name split across
// size ranks (the tensor itself where it is replicated).
func TPShard(name string, full *tensor.Tensor, rank, size int) (*tensor.Tensor, error) {
	dim, parts := tpSplit(name)
	if dim < 0 || size == 1 {
		return full.Clone(), nil
	}
	if dim >= len(full.Shape) || full.Shape[dim]%(parts*size) != 0 {
		return nil, fmt.Errorf("%w: %s %v cannot be split along dimension %d into %d×%d pieces", ErrTensorParallel, name, full.Shape, dim, parts, size)
	}
	outer, inner := blocks(full.Shape, dim)
	n := full.Shape[dim] / (parts * size) // rows of a piece
	shape := full.Shape.Clone()
	shape[dim] = n * parts
	out := tensor.New(full.DType, shape)
	es := full.DType.Size()
	row := inner * es
	for o := range outer {
		for p := range parts {
			src := (o*full.Shape[dim] + p*n*size + rank*n) * row
			dst := (o*shape[dim] + p*n) * row
			copy(out.Data[dst:dst+n*row], full.Data[src:src+n*row])
		}
	}
	return out, nil
}

// TPGather puts the ranks' pieces of tensor name back together (TPShard's
// inverse); a replicated tensor is rank 0's.
func TPGather(name string, pieces []*tensor.Tensor) (*tensor.Tensor, error) {
	size := len(pieces)
	if size == 0 {
		return nil, fmt.Errorf("%w: no pieces of %s", ErrTensorParallel, name)
	}
	dim, parts := tpSplit(name)
	if dim < 0 || size == 1 {
		return pieces[0].Clone(), nil
	}
	s := pieces[0].Shape
	if dim >= len(s) || s[dim]%parts != 0 {
		return nil, fmt.Errorf("%w: %s piece %v cannot be joined along dimension %d", ErrTensorParallel, name, s, dim)
	}
	outer, inner := blocks(s, dim)
	n := s[dim] / parts
	shape := s.Clone()
	shape[dim] *= size
	out := tensor.New(pieces[0].DType, shape)
	row := inner * pieces[0].DType.Size()
	for r, pc := range pieces {
		if !pc.Shape.Equal(s) || pc.DType != pieces[0].DType {
			return nil, fmt.Errorf("%w: %s: rank %d's piece is %v%v, rank 0's %v%v", ErrTensorParallel, name, r, pc.DType, pc.Shape, pieces[0].DType, s)
		}
		for o := range outer {
			for p := range parts {
				src := (o*s[dim] + p*n) * row
				dst := (o*shape[dim] + p*n*size + r*n) * row
				copy(out.Data[dst:dst+n*row], pc.Data[src:src+n*row])
			}
		}
	}
	return out, nil
}

// blocks is the number of blocks before dimension dim and the elements of
// one index of dim.
func blocks(s tensor.Shape, dim int) (outer, inner int) {
	outer, inner = 1, 1
	for i, d := range s {
		switch {
		case i < dim:
			outer *= d
		case i > dim:
			inner *= d
		}
	}
	return outer, inner
}

// LoadFull loads this rank's pieces of a full GPT's state_dict (the
// nanoGPT names GPT.StateDict writes; lm_head.weight and the causal-mask
// buffers are dropped, as GPT.LoadStateDict drops them).
func (m *TPGPT) LoadFull(sd map[string]*tensor.Tensor, strict bool) error {
	out := make(map[string]*tensor.Tensor, len(sd))
	for k, v := range sd {
		if k == m.key(GPTTiedKey) || strings.HasSuffix(k, ".attn.bias") && len(v.Shape) == 4 {
			continue
		}
		p, err := TPShard(k, v, m.Rank, m.Size)
		if err != nil {
			return err
		}
		out[k] = p
	}
	return m.Module.Store.LoadStateDict(out, strict)
}

func (m *TPGPT) key(k string) string {
	if m.Module.Path == "" {
		return k
	}
	return m.Module.Path + "." + k
}
