package cpu

import (
	"fmt"
	"math"
	"sync"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/cpu/internal/vec"
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
// the test ReLU's backward applies to its saved output. Strict (for
// LeakyReLU): a NaN is not positive.
func packMaskKernel[T Float](pool *parallel.Pool, strict bool, in, out []*tensor.Tensor) error {
	x, mask := slice[T](in[0]), out[0].Data
	pool.For(len(mask), dropGrain, func(lo, hi int) {
		switch x := any(x).(type) {
		case []float32:
			x, mask := x[lo*8:min(len(x), hi*8)], mask[lo:hi]
			k := vec.PackMask(x, mask, strict)
			packMask32(mask[k/8:], x[k:], strict)
		case []float64:
			packMask64(mask[lo:hi], x[lo*8:min(len(x), hi*8)], strict)
		}
	})
	return nil
}

// packMask32 packs the signs of x into mask, 8 to a byte, without a
// branch per element (the portable loop: tails, CPUs without AVX2): a
// ReLU's inputs are positive at random, so a branch mispredicts about half
// the time (3 ns an element, measured on Zen 4). Unrolled by the byte:
// 1.4 times the single loop's speed.
func packMask32(mask []byte, x []float32, strict bool) {
	full := len(x) / 8
	for b := range full {
		v := x[b*8 : b*8+8 : b*8+8]
		mask[b] = f32Pos(v[0], strict) | f32Pos(v[1], strict)<<1 | f32Pos(v[2], strict)<<2 | f32Pos(v[3], strict)<<3 |
			f32Pos(v[4], strict)<<4 | f32Pos(v[5], strict)<<5 | f32Pos(v[6], strict)<<6 | f32Pos(v[7], strict)<<7
	}
	if full < len(mask) {
		var m byte
		for k, v := range x[full*8:] {
			m |= f32Pos(v, strict) << k
		}
		mask[full] = m
	}
}

// packMask64 is packMask32 for float64.
func packMask64(mask []byte, x []float64, strict bool) {
	for b := range mask {
		var m byte
		for k, v := range x[b*8 : min(len(x), b*8+8)] {
			m |= f64Pos(v, strict) << k
		}
		mask[b] = m
	}
}

// f32Pos is 1 where v > 0, or where v is a NaN and not strict, else 0, by
// its bits: v > 0 exactly where 1 <= bits <= the bits of +Inf.
func f32Pos(v float32, strict bool) byte {
	u := math.Float32bits(v)
	p := (uint64(u-1) - 0x7f800000) >> 63
	if !strict {
		p |= (0x7f800000 - uint64(u&0x7fffffff)) >> 63 // a NaN of either sign
	}
	return byte(p)
}

// f64Pos is f32Pos for float64.
func f64Pos(v float64, strict bool) byte {
	if v > 0 || !strict && v != v {
		return 1
	}
	return 0
}

func reluBackwardMaskKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	gy, mask, gx := slice[T](in[0]), in[1].Data, slice[T](out[0])
	cnt := len(gy)
	if o := n.Op.(*prim.ReLUBackwardMask); o.Leaky {
		// gy·1 and gy·slope: the products UnaryBackward{LeakyReLUKind}
		// takes, so the result is the same bit for bit.
		one, c := T(1), T(o.Slope)
		pool.For(len(mask), dropGrain, func(lo, hi int) {
			if gy, ok := any(gy).([]float32); ok {
				maskBackwardF32(any(gx).([]float32)[lo*8:min(cnt, hi*8)], gy[lo*8:min(cnt, hi*8)], mask[lo:hi], float32(c), true)
				return
			}
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
		if gy, ok := any(gy).([]float32); ok {
			maskBackwardF32(any(gx).([]float32)[lo*8:min(cnt, hi*8)], gy[lo*8:min(cnt, hi*8)], mask[lo:hi], 0, false)
			return
		}
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

// maskBackwardF32 is ReLU's backward from its mask (gx = gy where the bit
// is set, else +0), or with leaky LeakyReLU's (gy·1 or gy·c): vectorized
// where the CPU allows, the rest without a branch per element.
func maskBackwardF32(gx, gy []float32, mask []byte, c float32, leaky bool) {
	k := vec.MaskBackward(gy, gx, mask, c, leaky)
	if leaky {
		leakyMaskF32(gx[k:], gy[k:], mask[k/8:], c)
	} else {
		reluMaskF32(gx[k:], gy[k:], mask[k/8:])
	}
}

// reluMaskF32 sets gx[i] = gy[i] where bit i of mask is set, else +0, by
// masking the bits (no branch per element: the bits are random).
func reluMaskF32(gx, gy []float32, mask []byte) {
	gx = gx[:len(gy)]
	for i, v := range gy {
		gx[i] = math.Float32frombits(math.Float32bits(v) & -(uint32(mask[i>>3]) >> (i & 7) & 1))
	}
}

// leakyMaskF32 sets gx[i] = gy[i]·1 where bit i of mask is set, else
// gy[i]·c: the same products as the branching loop, the factor chosen by
// its bits.
func leakyMaskF32(gx, gy []float32, mask []byte, c float32) {
	gx = gx[:len(gy)]
	cb := math.Float32bits(c)
	diff := cb ^ math.Float32bits(1)
	for i, v := range gy {
		gx[i] = v * math.Float32frombits(cb^(diff&-(uint32(mask[i>>3])>>(i&7)&1)))
	}
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
