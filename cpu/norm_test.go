package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Batch norm's one-pass statistics (Σx and Σx² in float64) give the saved
// mean and inverse standard deviation of a float64 two-pass reference to
// within float32 rounding, also where the mean is large against the
// spread (the cancellation in Σx² - m·Σx) or the channel is constant.
func TestBatchNormStatsOnePass(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mean, std  float64
		n, c, h, w int
	}{
		{"unit", 0, 1, 4, 3, 5, 7},
		{"offset", 300, 0.5, 8, 4, 8, 8},
		{"narrow", -2, 1e-3, 2, 5, 16, 16},
		{"constant", 7, 0, 3, 2, 4, 4},
		{"short planes", 1, 2, 5, 6, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 6))
			x := tensor.New(tensor.Float32, tensor.Shape{tc.n, tc.c, tc.h, tc.w})
			for i := range x.F32() {
				x.F32()[i] = float32(tc.mean + tc.std*r.NormFloat64())
			}
			k := newKernelCase(t, &prim.BatchNormOp{Training: true, Eps: 1e-5}, trace.Meta{DType: tensor.Float32, Shape: x.Shape})
			k.in[0] = x
			k.run(t)
			S := tc.h * tc.w
			for c := 0; c < tc.c; c++ {
				var s float64
				for i := 0; i < tc.n; i++ {
					for _, v := range x.F32()[(i*tc.c+c)*S:][:S] {
						s += float64(v)
					}
				}
				m := s / float64(tc.n*S)
				var q float64
				for i := 0; i < tc.n; i++ {
					for _, v := range x.F32()[(i*tc.c+c)*S:][:S] {
						q += (float64(v) - m) * (float64(v) - m)
					}
				}
				inv := 1 / math.Sqrt(q/float64(tc.n*S)+1e-5)
				gotM, gotInv := float64(k.out[1].F32()[c]), float64(k.out[2].F32()[c])
				if math.Abs(gotM-m) > 2e-7*math.Abs(m)+1e-12 || math.Abs(gotInv-inv) > 2e-7*inv {
					t.Errorf("channel %d: mean %v invstd %v, want %v %v", c, gotM, gotInv, m, inv)
				}
			}
		})
	}
}

// Batch norm's forward and backward go channel by channel or image by
// image (bnPlanes) with vector passes over plane prefixes and scalar
// tails; both orders, on planes of every kind of size, agree with a
// float64 reference: y, the saved statistics, x̄, w̄ and b̄.
func TestBatchNormPlaneOrders(t *testing.T) {
	defer func(v int) { bnPlaneMajor = v }(bnPlaneMajor)
	const N, C = 3, 5
	for _, hw := range [][2]int{{1, 1}, {2, 2}, {3, 3}, {4, 4}, {4, 5}, {8, 8}, {10, 10}, {16, 16}, {32, 32}} {
		S := hw[0] * hw[1]
		r := rand.New(rand.NewPCG(uint64(S), 9))
		shape := tensor.Shape{N, C, hw[0], hw[1]}
		x, gy := tensor.New(tensor.Float32, shape), tensor.New(tensor.Float32, shape)
		w, b := tensor.New(tensor.Float32, tensor.Shape{C}), tensor.New(tensor.Float32, tensor.Shape{C})
		for i := range x.F32() {
			x.F32()[i] = float32(0.5 + 2*r.NormFloat64())
			gy.F32()[i] = float32(r.NormFloat64())
		}
		for c := range C {
			w.F32()[c], b.F32()[c] = float32(1+r.Float64()), float32(r.NormFloat64())
		}
		// The float64 reference.
		cnt := float64(N * S)
		at := func(t *tensor.Tensor, i, c, j int) float64 { return float64(t.F32()[(i*C+c)*S+j]) }
		wantY, wantGx := make([]float64, N*C*S), make([]float64, N*C*S)
		wantGw, wantGb := make([]float64, C), make([]float64, C)
		for c := range C {
			var m, v float64
			for i := range N {
				for j := range S {
					m += at(x, i, c, j)
				}
			}
			m /= cnt
			for i := range N {
				for j := range S {
					v += (at(x, i, c, j) - m) * (at(x, i, c, j) - m)
				}
			}
			inv := 1 / math.Sqrt(v/cnt+1e-5)
			var sg, sgx float64
			for i := range N {
				for j := range S {
					xh := (at(x, i, c, j) - m) * inv
					wantY[(i*C+c)*S+j] = xh*float64(w.F32()[c]) + float64(b.F32()[c])
					sg += at(gy, i, c, j)
					sgx += at(gy, i, c, j) * xh
				}
			}
			wantGw[c], wantGb[c] = sgx, sg
			for i := range N {
				for j := range S {
					xh := (at(x, i, c, j) - m) * inv
					wantGx[(i*C+c)*S+j] = float64(w.F32()[c]) * inv * (at(gy, i, c, j) - sg/cnt - xh*sgx/cnt)
				}
			}
		}
		for _, major := range []int{0, 1 << 30} {
			bnPlaneMajor = major
			name := fmt.Sprintf("%dx%d/channel-major=%v", hw[0], hw[1], major > S)
			meta := trace.Meta{DType: tensor.Float32, Shape: shape}
			cm := trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{C}}
			fwd := newKernelCase(t, &prim.BatchNormOp{Training: true, Eps: 1e-5, HasWeight: true, HasBias: true}, meta, cm, cm)
			fwd.in[0], fwd.in[1], fwd.in[2] = x, w, b
			fwd.run(t)
			bwd := newKernelCase(t, &prim.BatchNormBackward{Training: true, HasWeight: true, HasBias: true}, meta, meta, cm, cm, cm)
			bwd.in[0], bwd.in[1], bwd.in[2], bwd.in[3], bwd.in[4] = gy, x, fwd.out[1], fwd.out[2], w
			bwd.run(t)
			check := func(what string, got []float32, want []float64, scale float64) {
				for i, v := range got {
					if d := math.Abs(float64(v) - want[i]); d > 2e-5*(scale+math.Abs(want[i])) {
						t.Fatalf("%s: %s[%d] = %v, want %v", name, what, i, v, want[i])
					}
				}
			}
			check("y", fwd.out[0].F32(), wantY, 1)
			check("x̄", bwd.out[0].F32(), wantGx, 1)
			check("w̄", bwd.out[1].F32(), wantGw, math.Sqrt(cnt))
			check("b̄", bwd.out[2].F32(), wantGb, math.Sqrt(cnt))
		}
	}
}
