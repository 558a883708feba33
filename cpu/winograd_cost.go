package cpu

import "math"

// The arithmetic of the Winograd paths, for the planner's cost model
// (Flops in cost.go): the 36 products of the transformed domain and the
// transforms, each 2-D transform counted as the portable code computes it
// (1-D transforms down the columns, then along the rows; the AVX2 kernels
// compute the same sums), with every pass the plan makes over them.
const (
	// Bᵀ d B (winoInput): 6 + 6 transforms of 6 values, 19 operations each.
	winoInputFlops = 12 * 19
	// Aᵀ m A (winoOutput): 6 + 4 transforms of 6 values into 4, 13 each.
	winoOutputFlops = 10 * 13
	// G g Gᵀ (winoWeight): 3 + 6 transforms of 3 values into 6, 17 each.
	winoWeightFlops = 9 * 17
	// A ȳ Aᵀ (transformGrad): 4 + 6 transforms of 4 values into 6, 11 each.
	winoGradFlops = 10 * 11
	// Gᵀ m G (transformWgradOutput): 6 + 3 transforms of 6 values into 3,
	// 16 each.
	winoWgradOutFlops = 9 * 16
)

// flops is the arithmetic of run: per point a product [K, C]·[C, tiles]
// (36 multiply-adds per 4×4 output tile and channel pair, against a
// direct 3×3 convolution's 144), each tile of each input channel
// transformed once, each output tile once, and the weights once, or once
// per chunk of tiles when they are transformed a block of output channels
// at a time.
func (w winograd) flops() float64 {
	C, K, T := float64(w.g.C), float64(w.g.K), float64(w.tiles)
	weights := 1.0
	if w.kb < w.kpad {
		weights = math.Ceil(T / float64(w.tc))
	}
	return 2*winoPts*K*C*T + winoInputFlops*C*T + winoOutputFlops*K*T + winoWeightFlops*K*C*weights
}

// flops is the arithmetic of weightGrad: per point a product
// [K, tiles]·[tiles, C], each tile of ȳ transformed once per output
// channel, the input once per channel and tile (again for each block of
// output channels unless one chunk holds every tile), and each weight's
// gradient once.
func (w winoWgrad) flops() float64 {
	C, K, T := float64(w.g.C), float64(w.g.K), float64(w.tiles)
	inputs := 1.0
	if w.tc < w.tiles {
		inputs = math.Ceil(K / float64(w.kb))
	}
	return 2*winoPts*K*C*T + winoInputFlops*C*T*inputs + winoGradFlops*K*T + winoWgradOutFlops*K*C
}
