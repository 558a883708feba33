package cpu

import (
	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// Mixed pointwise convolutions (1x1, stride 1, unpadded, groups 1) on
// bfloat16 operands, natively: in NCHW each image's plane is a [channels,
// positions] matrix, so the three convolutions are products of the
// weight and the planes as they lie, with no im2col and the output
// written in place (blas.BF16Tile's MulBatch and MulSumBatch):
//
//	forward       Y[n] = W · X[n]           [K, HW]
//	input grad    X̄[n] = Wᵀ · Ȳ[n]          [C, HW]
//	weight grad   W̄ = Σ_n Ȳ[n] · X[n]ᵀ      [K, C]
//
// The general native path (convForwardBF16 and friends) runs them as
// products with positions as rows, an explicit bf16 im2col (here a copy)
// and the output transposed back, and its tiled weight gradient sums
// each image's positions apart (ResNet-152's 4x4 planes: 8 pairs a
// block); by default the forward and input gradient even widen to the
// float32 kernels. On ResNet-152's 1x1 layers at batch 8 (Zen 4, 2
// threads, TestConvPwPerfReport, interleaved) these products took
// 1.4-2.5x less wall time than what ran before for the forward and input
// gradient, 1.1-4.7x for the weight gradient (its 4x4 planes most).
//
// Only mixed nodes with both operands bfloat16 come here: under bf16
// autocast transform.ReadLow hands pointwise convolutions bf16 input and
// weight (convLow), so in a ResNet's bf16-mixed step all of its 1x1
// stride-1 convolutions and their gradients run here (ResNet-152-128,
// batch 8: the step 1.06-1.18 s -> 0.79-0.92 s).

// convPwBF16On selects which of the three run here (convBF16Fwd etc.).
var convPwBF16On = convBF16Fwd | convBF16Bwi | convBF16Bww

// convPwBF16 reports whether op runs on the pointwise path for g (with
// both operands bfloat16, where the native tile kernel is on).
func convPwBF16(op trace.Op, g prim.ConvGeom) bool {
	if !g.Pointwise() || g.Groups != 1 || g.N == 0 {
		return false
	}
	switch op.(type) {
	case *prim.Conv2dOp:
		return convPwBF16On&convBF16Fwd != 0
	case *prim.Conv2dBackwardInput:
		return convPwBF16On&convBF16Bwi != 0
	case *prim.Conv2dBackwardWeight:
		return convPwBF16On&convBF16Bww != 0
	}
	return false
}

// convPwForwardBF16 is the pointwise forward: y = conv(x, w) + bias.
func convPwForwardBF16(pool *parallel.Pool, t blas.BF16Tile, g prim.ConvGeom, x, w []uint16, bias, y []float32) {
	P := g.H * g.W
	t.MulBatch(pool, false, g.K, P, g.C, w, g.C, g.N, x, P, g.C*P, y, P, g.K*P)
	convAddBias(pool, g.K, P, bias, y)
}

// convPwInputGradBF16 is the pointwise input gradient x̄ = Wᵀ·ȳ.
func convPwInputGradBF16(pool *parallel.Pool, t blas.BF16Tile, g prim.ConvGeom, gy, w []uint16, gx []float32) {
	P := g.H * g.W
	t.MulBatch(pool, true, g.C, P, g.K, w, g.C, g.N, gy, P, g.K*P, gx, P, g.C*P)
}

// convPwWeightGradBF16 is the pointwise weight gradient W̄ = Σ ȳ·xᵀ.
func convPwWeightGradBF16(pool *parallel.Pool, t blas.BF16Tile, g prim.ConvGeom, gy, x []uint16, gw []float32) {
	P := g.H * g.W
	t.MulSumBatch(pool, g.K, g.C, P, g.N, gy, P, g.K*P, x, P, g.C*P, gw, g.C, false)
}
