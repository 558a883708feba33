package cpu

import (
	"fmt"
	"math"
	"sync"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	Register[*prim.Quantize](quantizeKernel)
	Register[*prim.Dequantize](dequantizeKernel)
	Register[*prim.PackMask](func(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
		strict := n.Op.(*prim.PackMask).Strict
		return dispatch(n, in[0].DType, func() error { return packMaskKernel[float32](pool, strict, in, out) }, func() error { return packMaskKernel[float64](pool, strict, in, out) })
	})
	Floats[*prim.ReLUBackwardMask](reluBackwardMaskKernel[float32], reluBackwardMaskKernel[float64])
	Register[*prim.RoundState](roundStateKernel)
	Register[*prim.Round](roundKernel)
	Register[*prim.AccumulateRounded](accumulateRoundedKernel)
	// prim.Offload and prim.Reload have no kernel: they move bytes to and from
	// the host store a run binds, which package exec does itself.
}

// quantGrain is the number of elements per parallel range of the
// elementwise passes.
const quantGrain = 1 << 14

func quantizeKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.Quantize)
	x, q, scale := in[0].F32(), out[0].Data, out[1].F32()
	c, inner := prim.QuantChannels(in[0].Shape, o.Axis)
	if len(x) == 0 {
		for i := range scale {
			scale[i] = 0
		}
		return nil
	}
	outer := len(x) / (c * inner)
	// Per-channel max |x|, reduced over ranges of the outer index; NaN
	// sticks (v != v), so a channel with NaN or Inf is flagged below.
	absmax := make([]float32, c) // c floats: a few KiB at most, not a buffer
	var mu sync.Mutex
	pool.For(outer, max(1, quantGrain/(c*inner)), func(lo, hi int) {
		local := make([]float32, c)
		for r := lo; r < hi; r++ {
			row := x[r*c*inner : (r+1)*c*inner]
			for ch := 0; ch < c; ch++ {
				m := local[ch]
				for _, v := range row[ch*inner : (ch+1)*inner] {
					if v < 0 {
						v = -v
					}
					if v > m || v != v {
						m = v
					}
				}
				local[ch] = m
			}
		}
		mu.Lock()
		for ch, m := range local {
			if m > absmax[ch] || m != m {
				absmax[ch] = m
			}
		}
		mu.Unlock()
	})
	inv := make([]float32, c)
	for ch, m := range absmax {
		switch {
		case !(m <= math.MaxFloat32): // NaN or Inf
			scale[ch] = float32(math.NaN())
		case m == 0:
			scale[ch] = 0
		default:
			scale[ch] = m / 127
			inv[ch] = 127 / m
		}
	}
	pool.For(len(x), quantGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ch := (i / inner) % c
			v := math.RoundToEven(float64(x[i] * inv[ch]))
			if v > 127 {
				v = 127
			} else if v < -127 {
				v = -127
			} else if v != v {
				v = 0
			}
			q[i] = uint8(int8(v))
		}
	})
	return nil
}

func dequantizeKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.Dequantize)
	q, scale, y := in[0].Data, in[1].F32(), out[0].F32()
	c, inner := prim.QuantChannels(in[0].Shape, o.Axis)
	pool.For(len(y), quantGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] = float32(int8(q[i])) * scale[(i/inner)%c]
		}
	})
	return nil
}

// packMaskKernel sets bit k of byte b where element 8b+k is > 0 or NaN:
// the test ReLU's backward applies to its saved output.
func packMaskKernel[T Float](pool *parallel.Pool, strict bool, in, out []*tensor.Tensor) error {
	x, mask := slice[T](in[0]), out[0].Data
	cnt := len(x)
	pool.For(len(mask), dropGrain, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			var m byte
			for k := 0; k < 8; k++ {
				i := b*8 + k
				if i >= cnt {
					break
				}
				// Strict (LeakyReLU): a NaN is not positive.
				if v := x[i]; v > 0 || (!strict && v != v) {
					m |= 1 << k
				}
			}
			mask[b] = m
		}
	})
	return nil
}

func reluBackwardMaskKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	gy, mask, gx := slice[T](in[0]), in[1].Data, slice[T](out[0])
	cnt := len(gy)
	if o := n.Op.(*prim.ReLUBackwardMask); o.Leaky {
		// gy·1 and gy·slope: the products UnaryBackward{LeakyReLUKind}
		// takes, so the result is the same bit for bit.
		one, c := T(1), T(o.Slope)
		pool.For(len(mask), dropGrain, func(lo, hi int) {
			for b := lo; b < hi; b++ {
				m := mask[b]
				for k := 0; k < 8; k++ {
					i := b*8 + k
					if i >= cnt {
						break
					}
					if m&(1<<k) != 0 {
						gx[i] = gy[i] * one
					} else {
						gx[i] = gy[i] * c
					}
				}
			}
		})
		return nil
	}
	pool.For(len(mask), dropGrain, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			m := mask[b]
			for k := 0; k < 8; k++ {
				i := b*8 + k
				if i >= cnt {
					break
				}
				if m&(1<<k) != 0 {
					gx[i] = gy[i]
				} else {
					gx[i] = 0
				}
			}
		}
	})
	return nil
}

// checkRoundTo refuses a rounding target other than the two 16-bit types.
func checkRoundTo(n *trace.Node, to tensor.DType) error {
	if to != tensor.BFloat16 && to != tensor.Float16 {
		return fmt.Errorf("cpu: %s: cannot round to %v", n.Label(), to)
	}
	return nil
}

func roundF16(v float32) float32 { return tensor.Float16ToFloat32(tensor.Float32ToFloat16(v)) }

// roundInto sets dst[i] = round(src[i]), or adds it when add, rounding to
// the 16-bit type to. The type is switched on once, outside the loops (a
// closure per element kept the compiler from inlining the rounding).
func roundInto(to tensor.DType, dst, src []float32, add bool) {
	dst = dst[:len(src)]
	switch {
	case to == tensor.BFloat16 && add:
		// Rounded a block at a time by the vectorized casts (several
		// times the scalar loop), then added.
		var r [512]float32
		for len(src) > 0 {
			n := min(len(src), len(r))
			roundTile(to, r[:n], src[:n])
			for i, v := range r[:n] {
				dst[i] += v
			}
			dst, src = dst[n:], src[n:]
		}
	case to == tensor.BFloat16:
		roundTile(to, dst, src)
	case add:
		for i, v := range src {
			dst[i] += roundF16(v)
		}
	default:
		for i, v := range src {
			dst[i] = roundF16(v)
		}
	}
}

// roundTile sets y = round(x) (y may be x) as the 16-bit cast there and
// back does (castKernel's NarrowBF16 then Widen for bfloat16), bit for
// bit: the Round instruction of a fused program, which replaces such a
// pair. For bfloat16 it is one vectorized pass (blas.RoundBF16): the two
// conversions through a buffer cost twice as much, and the buffer escaped
// to the heap on every tile.
func roundTile(to tensor.DType, y, x []float32) {
	if to != tensor.BFloat16 {
		roundInto(to, y, x, false)
		return
	}
	blas.RoundBF16(y, x)
}

func roundStateKernel(pool *parallel.Pool, n *trace.Node, in, _ []*tensor.Tensor, _ []byte) error {
	to := n.Op.(*prim.RoundState).To
	if err := checkRoundTo(n, to); err != nil {
		return err
	}
	s := in[0].F32()
	pool.For(len(s), quantGrain, func(lo, hi int) {
		roundInto(to, s[lo:hi], s[lo:hi], false)
	})
	return nil
}

func roundKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	to := n.Op.(*prim.Round).To
	if err := checkRoundTo(n, to); err != nil {
		return err
	}
	x, y := in[0].F32(), out[0].F32()
	pool.For(len(x), quantGrain, func(lo, hi int) {
		roundTile(to, y[lo:hi], x[lo:hi])
	})
	return nil
}

func accumulateRoundedKernel(pool *parallel.Pool, n *trace.Node, in, _ []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.AccumulateRounded)
	if err := checkRoundTo(n, o.To); err != nil {
		return err
	}
	dst, src := in[0].F32(), in[1].F32()
	pool.For(len(dst), quantGrain, func(lo, hi int) {
		roundInto(o.To, dst[lo:hi], src[lo:hi], o.Add)
	})
	return nil
}
