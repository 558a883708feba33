package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

type AttentionOp = prim.AttentionOp

// AttentionDims checks attention operand shapes q [..., T, D], k [..., S, D],
// v [..., S, Dv] and returns the batch shape (the leading axes) and T, S, D,
// Dv.
func AttentionDims(q, k, v tensor.Shape) (batch tensor.Shape, t, s, d, dv int, err error) {
	return prim.AttentionDims(q, k, v)
}

type AttentionBackward = prim.AttentionBackward
type ConvOpts = prim.ConvOpts
type ConvGeom = prim.ConvGeom

// ConvGeometry validates the input shape x and weight shape w of a conv2d
// with options o (zero fields meaning defaults) and returns its geometry.
func ConvGeometry(x, w tensor.Shape, o prim.ConvOpts) (prim.ConvGeom, error) {
	return prim.ConvGeometry(x, w, o)
}

type Conv2dOp = prim.Conv2dOp
type Conv2dBackwardInput = prim.Conv2dBackwardInput
type Conv2dBackwardWeight = prim.Conv2dBackwardWeight
type DropoutOp = prim.DropoutOp

// DropoutMaskShape is the shape of the bit-packed mask of a tensor of shape s.
func DropoutMaskShape(s tensor.Shape) tensor.Shape { return prim.DropoutMaskShape(s) }

// DropoutScale is the factor kept elements are multiplied by: 1/(1-p), and 0
// for p = 1 (everything is dropped).
func DropoutScale(p float64) float64 { return prim.DropoutScale(p) }

type DropoutBackward = prim.DropoutBackward
type DropoutStream = prim.DropoutStream

// NewDropoutStream returns the stream of seed.
func NewDropoutStream(seed uint64) prim.DropoutStream { return prim.NewDropoutStream(seed) }

// DropoutStepSeed is the seed DropoutOp uses when given a step value.
func DropoutStepSeed(seed uint64, step int64) uint64 { return prim.DropoutStepSeed(seed, step) }

// DropoutThreshold is the cut for probability p: an element is dropped when
// its Bits are below it. For p >= 1 every element is dropped regardless.
func DropoutThreshold(p float64) uint64 { return prim.DropoutThreshold(p) }

type BinaryKind = prim.BinaryKind

const AddKind = prim.AddKind
const SubKind = prim.SubKind
const MulKind = prim.MulKind
const DivKind = prim.DivKind
const MaxKind = prim.MaxKind
const MinKind = prim.MinKind

type Binary = prim.Binary
type Compare = prim.Compare

// Apply1 applies op to inputs in their graph.
func Apply1(o trace.Op, in ...*trace.Tensor) *trace.Tensor { return prim.Apply1(o, in...) }

type UnaryKind = prim.UnaryKind

const NegKind = prim.NegKind
const ExpKind = prim.ExpKind
const LogKind = prim.LogKind
const SqrtKind = prim.SqrtKind
const RsqrtKind = prim.RsqrtKind
const TanhKind = prim.TanhKind
const SigmoidKind = prim.SigmoidKind
const ReLUKind = prim.ReLUKind
const AbsKind = prim.AbsKind
const SquareKind = prim.SquareKind
const SignKind = prim.SignKind
const ScaleKind = prim.ScaleKind
const AddConstKind = prim.AddConstKind
const PowKind = prim.PowKind
const LeakyReLUKind = prim.LeakyReLUKind
const SiLUKind = prim.SiLUKind
const GELUKind = prim.GELUKind
const GELUTanhKind = prim.GELUTanhKind
const ReciprocalKind = prim.ReciprocalKind
const SinKind = prim.SinKind
const CosKind = prim.CosKind

type Unary = prim.Unary
type UnaryBackward = prim.UnaryBackward
type EmbeddingOp = prim.EmbeddingOp
type EmbeddingBackward = prim.EmbeddingBackward
type Fused = prim.Fused
type FusedLoad = prim.FusedLoad
type FusedInstr = prim.FusedInstr
type FusedOut = prim.FusedOut

// FusedElementwise reports whether o can be an instruction of a Fused:
// its fusion role is FuseElementwise.
func FusedElementwise(o trace.Op) bool { return prim.FusedElementwise(o) }

type CrossEntropyOpts = prim.CrossEntropyOpts

const DefaultIgnoreIndex = prim.DefaultIgnoreIndex

type ClassIndex = prim.ClassIndex
type CrossEntropyOp = prim.CrossEntropyOp
type CrossEntropyBackward = prim.CrossEntropyBackward
type PointwiseLossKind = prim.PointwiseLossKind

const MSEKind = prim.MSEKind
const L1Kind = prim.L1Kind

type PointwiseLoss = prim.PointwiseLoss
type PointwiseLossBackward = prim.PointwiseLossBackward
type MaskedFillOp = prim.MaskedFillOp
type MatMul = prim.MatMul
type BatchNormOp = prim.BatchNormOp
type BatchNormBackward = prim.BatchNormBackward
type RunningStatsUpdate = prim.RunningStatsUpdate
type Increment = prim.Increment
type LayerNormOp = prim.LayerNormOp
type LayerNormBackward = prim.LayerNormBackward
type GroupNormOp = prim.GroupNormOp
type GroupNormBackward = prim.GroupNormBackward
type Reduction = prim.Reduction

const ReductionMean = prim.ReductionMean
const ReductionSum = prim.ReductionSum
const ReductionNone = prim.ReductionNone

type PoolGeom = prim.PoolGeom
type PoolOpts = prim.PoolOpts
type MaxPool2dOp = prim.MaxPool2dOp
type MaxPool2dBackward = prim.MaxPool2dBackward
type AvgPool2dOp = prim.AvgPool2dOp
type AvgPool2dBackward = prim.AvgPool2dBackward
type AdaptiveAvgPool2dOp = prim.AdaptiveAvgPool2dOp
type AdaptiveAvgPool2dBackward = prim.AdaptiveAvgPool2dBackward

// QuantAxis is the channel axis of per-channel int8 quantization for a
// tensor of shape s: 1 for 4-D NCHW activations, the last axis otherwise
// (features of [N, C] and [B, T, C]); -1 (one scale for the whole tensor)
// for scalars and vectors.
func QuantAxis(s tensor.Shape) int { return prim.QuantAxis(s) }

// QuantChannels returns the number of channels of s along axis and the
// number of contiguous elements per channel run (the product of the axes
// after it): element i belongs to channel (i / inner) % channels. Axis -1
// is one channel.
func QuantChannels(s tensor.Shape, axis int) (channels, inner int) {
	return prim.QuantChannels(s, axis)
}

type Quantize = prim.Quantize
type Dequantize = prim.Dequantize

// QuantizeInt8 returns the int8 codes and per-channel scales of x
// (float32), channels on QuantAxis.
func QuantizeInt8(x *trace.Tensor) (q, scale *trace.Tensor) { return prim.QuantizeInt8(x) }

// DequantizeInt8 is the float32 tensor that q and scale encode.
func DequantizeInt8(q, scale *trace.Tensor) *trace.Tensor { return prim.DequantizeInt8(q, scale) }

type PackMask = prim.PackMask
type ReLUBackwardMask = prim.ReLUBackwardMask

// ReLUMask returns the bit mask of x > 0 (or NaN).
func ReLUMask(x *trace.Tensor) *trace.Tensor { return prim.ReLUMask(x) }

type RoundState = prim.RoundState

// RoundStateInPlace records the in-place rounding of state tensor s.
func RoundStateInPlace(s *trace.Tensor, to tensor.DType) { prim.RoundStateInPlace(s, to) }

type Round = prim.Round
type AccumulateRounded = prim.AccumulateRounded
type HostStore = prim.HostStore
type Offload = prim.Offload
type Reload = prim.Reload
type ReduceKind = prim.ReduceKind

const SumKind = prim.SumKind
const MeanKind = prim.MeanKind
const AmaxKind = prim.AmaxKind

type Reduce = prim.Reduce
type AmaxBackward = prim.AmaxBackward
type Expand = prim.Expand
type ReshapeOp = prim.ReshapeOp
type Permute = prim.Permute
type Fill = prim.Fill
type Cast = prim.Cast
type SliceOp = prim.SliceOp
type SliceBackward = prim.SliceBackward
type CatOp = prim.CatOp
type SplitOp = prim.SplitOp
type SoftmaxOp = prim.SoftmaxOp
type SoftmaxBackward = prim.SoftmaxBackward
type Accumulate = prim.Accumulate

// AccumulateInto records dst (+)= src for a state tensor dst.
func AccumulateInto(dst, src *trace.Tensor, add bool) { prim.AccumulateInto(dst, src, add) }

type Primitive = prim.Primitive
type Traits = prim.Traits
type Autocast = prim.Autocast
type Fusion = prim.Fusion
type Stats = prim.Stats
type Recompute = prim.Recompute
type Kernel = prim.Kernel
type Cost = prim.Cost

const AutocastLow = prim.AutocastLow
const AutocastFP32 = prim.AutocastFP32
const AutocastFP32Forward = prim.AutocastFP32Forward
const AutocastFirstInput = prim.AutocastFirstInput
const AutocastPromote = prim.AutocastPromote
const AutocastExact = prim.AutocastExact
const FuseNone = prim.FuseNone
const FuseProducer = prim.FuseProducer
const FuseElementwise = prim.FuseElementwise
const StatsNone = prim.StatsNone
const StatsAfterFirst = prim.StatsAfterFirst
const RecomputeCheap = prim.RecomputeCheap
const RecomputeResidual = prim.RecomputeResidual
const RecomputeExpensive = prim.RecomputeExpensive
const RecomputeNever = prim.RecomputeNever
const KernelRequired = prim.KernelRequired
const KernelNone = prim.KernelNone

func Of(o trace.Op) prim.Primitive { return prim.Of(o) }

func TraitsOf(o trace.Op) prim.Traits { return prim.TraitsOf(o) }

func NodeCost(n *trace.Node) prim.Cost { return prim.NodeCost(n) }

func All() []prim.Primitive { return prim.All() }

func Check(p prim.Primitive) error { return prim.Check(p) }

type OptimizerStep = prim.OptimizerStep

// StepInBackward records the optimizer's update of parameter param (a state
// tensor named name) from its final gradient grad, guarded by the step's
// loss.
func StepInBackward(param, grad, loss *trace.Tensor, name string) {
	prim.StepInBackward(param, grad, loss, name)
}

// NearestSourceIndex is PyTorch's nearest-neighbour rule (nearest_idx): the
// input index that output index dst reads along an axis resized from in to
// out. scale is the scale factor the user gave (0 when an output size was
// given); as in PyTorch, the ratio is computed in float32:
// min(floor(dst * s), in-1) with s = 1/scale, or in/out.
func NearestSourceIndex(dst, in, out int, scale float64) int {
	return prim.NearestSourceIndex(dst, in, out, scale)
}

type UpsampleNearest2dOp = prim.UpsampleNearest2dOp
type UpsampleNearest2dBackward = prim.UpsampleNearest2dBackward
