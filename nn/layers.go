package nn

import (
	"hash/fnv"
	"math"
	"math/rand"

	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// KaimingNormal fills with N(0, (gain/sqrt(fan))²): torch.nn.init.kaiming_normal_
// with fan the fan-in or fan-out (per its mode) and gain sqrt(2) for ReLU.
func KaimingNormal(fan int, gain float64) func(*rand.Rand, *tensor.Tensor) {
	return Normal(0, gain/math.Sqrt(float64(fan)))
}

// BatchNorm is torch.nn.BatchNorm1d/2d/3d (the op takes any [N, C, *]
// input): parameters weight [C] (init 1) and bias [C] (init 0), buffers
// running_mean [C] (0), running_var [C] (1) and num_batches_tracked (int64
// scalar, 0), under PyTorch's names.
//
// In training mode (the store's) it normalizes with batch statistics and
// updates the running statistics in place with Momentum, and adds one to
// num_batches_tracked, as PyTorch does; in evaluation mode it uses the
// running statistics.
type BatchNorm struct {
	Module
	Weight, Bias            *Param // nil without affine
	RunningMean, RunningVar *Param // nil without track_running_stats
	NumBatchesTracked       *Param
	Eps, Momentum           float64
}

// BatchNormOpts are the constructor options of torch.nn.BatchNorm2d that
// differ from the defaults when set: NoAffine is affine=False, NoTrack is
// track_running_stats=False. Zero Eps and Momentum mean 1e-5 and 0.1
// (PyTorch's defaults), so momentum=0, which PyTorch takes as running
// statistics that never move, is not expressible here.
type BatchNormOpts struct {
	Eps, Momentum     float64
	NoAffine, NoTrack bool
}

// NewBatchNorm2d is torch.nn.BatchNorm2d(features) with PyTorch's defaults.
func NewBatchNorm2d(b Builder, features int) *BatchNorm {
	return NewBatchNorm(b, features, BatchNormOpts{})
}

// NewBatchNorm registers a batch norm over features channels.
func NewBatchNorm(b Builder, features int, o BatchNormOpts) *BatchNorm {
	if o.Eps == 0 {
		o.Eps = 1e-5
	}
	if o.Momentum == 0 {
		o.Momentum = 0.1
	}
	bn := &BatchNorm{Module: NewModule(b), Eps: o.Eps, Momentum: o.Momentum}
	s := tensor.Shape{features}
	if !o.NoAffine {
		bn.Weight = b.Param("weight", s, Constant(1))
		bn.Bias = b.Param("bias", s, Constant(0))
	}
	if !o.NoTrack {
		bn.RunningMean = b.Buffer("running_mean", tensor.Float32, s, Constant(0))
		bn.RunningVar = b.Buffer("running_var", tensor.Float32, s, Constant(1))
		bn.NumBatchesTracked = b.Buffer("num_batches_tracked", tensor.Int64, tensor.Shape{}, Constant(0))
	}
	return bn
}

func paramT(p *Param, g *trace.Graph) *trace.Tensor {
	if p == nil {
		return nil
	}
	return p.T(g)
}

// Forward normalizes x [N, C, *].
func (m *BatchNorm) Forward(x *trace.Tensor) *trace.Tensor {
	return m.Scope(x, func() *trace.Tensor {
		g := x.Graph()
		training := m.Training() || m.RunningMean == nil
		y := op.BatchNorm(x, paramT(m.Weight, g), paramT(m.Bias, g), paramT(m.RunningMean, g), paramT(m.RunningVar, g),
			training, m.Momentum, m.Eps)
		if m.Training() && m.NumBatchesTracked != nil {
			op.IncrementCounter(m.NumBatchesTracked.T(g))
		}
		return y
	})
}

// LayerNorm is torch.nn.LayerNorm over the last dimensions, Shape: weight
// (init 1) and, unless built without, bias (init 0). PyTorch 2.1's
// bias=False, and nanoGPT's LayerNorm(ndim, bias), have no bias parameter.
type LayerNorm struct {
	Module
	Weight, Bias *Param
	Shape        tensor.Shape
	Eps          float64
}

// NewLayerNorm registers a layer norm over the trailing shape (usually one
// dimension, the features), eps 1e-5.
func NewLayerNorm(b Builder, shape tensor.Shape, bias bool) *LayerNorm {
	l := &LayerNorm{Module: NewModule(b), Shape: shape.Clone(), Eps: 1e-5}
	l.Weight = b.Param("weight", shape, Constant(1))
	if bias {
		l.Bias = b.Param("bias", shape, Constant(0))
	}
	return l
}

// Forward normalizes x over its last len(Shape) dimensions.
func (l *LayerNorm) Forward(x *trace.Tensor) *trace.Tensor {
	return l.Scope(x, func() *trace.Tensor {
		g := x.Graph()
		return op.LayerNorm(x, l.Shape, paramT(l.Weight, g), paramT(l.Bias, g), l.Eps)
	})
}

// GroupNorm is torch.nn.GroupNorm(groups, channels): weight [C] (init 1)
// and bias [C] (init 0), eps 1e-5.
type GroupNorm struct {
	Module
	Weight, Bias *Param
	Groups       int
	Eps          float64
}

// NewGroupNorm registers a group norm of channels channels in groups groups.
func NewGroupNorm(b Builder, groups, channels int) *GroupNorm {
	gn := &GroupNorm{Module: NewModule(b), Groups: groups, Eps: 1e-5}
	gn.Weight = b.Param("weight", tensor.Shape{channels}, Constant(1))
	gn.Bias = b.Param("bias", tensor.Shape{channels}, Constant(0))
	return gn
}

// Forward normalizes x [N, C, *].
func (m *GroupNorm) Forward(x *trace.Tensor) *trace.Tensor {
	return m.Scope(x, func() *trace.Tensor {
		g := x.Graph()
		return op.GroupNorm(x, m.Groups, paramT(m.Weight, g), paramT(m.Bias, g), m.Eps)
	})
}

// Embedding is torch.nn.Embedding(num, dim): weight [num, dim], init N(0, 1).
type Embedding struct {
	Module
	Weight *Param
}

// NewEmbedding registers an embedding table.
func NewEmbedding(b Builder, num, dim int) *Embedding {
	e := &Embedding{Module: NewModule(b)}
	e.Weight = b.Param("weight", tensor.Shape{num, dim}, Normal(0, 1))
	return e
}

// Forward looks up int64 indices of any shape, giving [..., dim].
func (e *Embedding) Forward(idx *trace.Tensor) *trace.Tensor {
	return e.Scope(idx, func() *trace.Tensor { return op.Embedding(idx, e.Weight.T(idx.Graph())) })
}

// Dropout is torch.nn.Dropout(p). It has no parameters. Its mask is a pure
// function of Seed, the step number (the graph's op.StepInput, fed by the
// trainer) and the element index (see op.DropoutStep): the seed comes from
// the module path, so two dropout layers differ, each step draws a fresh
// mask, and recomputation reproduces it exactly. PyTorch's random numbers
// are not reproduced.
type Dropout struct {
	Module
	P    float64
	Seed uint64
}

// NewDropout returns a dropout layer at b's path.
func NewDropout(b Builder, p float64) *Dropout {
	h := fnv.New64a()
	h.Write([]byte(b.Path()))
	return &Dropout{Module: NewModule(b), P: p, Seed: h.Sum64()}
}

// Forward zeroes elements with probability P in training mode; it returns x
// itself in evaluation mode or when P is 0.
func (d *Dropout) Forward(x *trace.Tensor) *trace.Tensor {
	if d.P == 0 || !d.Training() {
		return x
	}
	return d.Scope(x, func() *trace.Tensor { return op.DropoutStep(x, d.P, true, d.Seed, op.StepTensor(x.Graph())) })
}

// MaxPool2d is torch.nn.MaxPool2d (no parameters).
type MaxPool2d struct{ Opts op.PoolOpts }

// NewMaxPool2d is MaxPool2d(kernel, stride, padding) with square windows;
// stride 0 means stride = kernel, as in PyTorch.
func NewMaxPool2d(kernel, stride, padding int) *MaxPool2d {
	return &MaxPool2d{Opts: op.PoolOpts{Kernel: [2]int{kernel, kernel}, Stride: [2]int{stride, stride}, Padding: [2]int{padding, padding}}}
}

// Forward pools x [N, C, H, W].
func (m *MaxPool2d) Forward(x *trace.Tensor) *trace.Tensor { return op.MaxPool2d(x, m.Opts) }

// AvgPool2d is torch.nn.AvgPool2d (no parameters).
type AvgPool2d struct{ Opts op.PoolOpts }

// NewAvgPool2d is AvgPool2d(kernel, stride, padding) with square windows
// and PyTorch's defaults (count_include_pad=True); stride 0 means kernel.
func NewAvgPool2d(kernel, stride, padding int) *AvgPool2d {
	return &AvgPool2d{Opts: op.PoolOpts{Kernel: [2]int{kernel, kernel}, Stride: [2]int{stride, stride}, Padding: [2]int{padding, padding}}}
}

// Forward pools x [N, C, H, W].
func (m *AvgPool2d) Forward(x *trace.Tensor) *trace.Tensor { return op.AvgPool2d(x, m.Opts) }

// AdaptiveAvgPool2d is torch.nn.AdaptiveAvgPool2d((h, w)) (no parameters).
type AdaptiveAvgPool2d struct{ Size [2]int }

// NewAdaptiveAvgPool2d pools to an h x w output.
func NewAdaptiveAvgPool2d(h, w int) *AdaptiveAvgPool2d { return &AdaptiveAvgPool2d{Size: [2]int{h, w}} }

// Forward pools x [N, C, H, W] to [N, C, h, w].
func (m *AdaptiveAvgPool2d) Forward(x *trace.Tensor) *trace.Tensor {
	return op.AdaptiveAvgPool2d(x, m.Size)
}
