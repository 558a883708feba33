package cpu

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// swap12 is x [A, B, C, D] as [A, C, B, D] (a copy, any dtype).
func swap12(x *tensor.Tensor) *tensor.Tensor {
	s := x.Shape
	out := tensor.New(x.DType, tensor.Shape{s[0], s[2], s[1], s[3]})
	es := x.DType.Size()
	row := s[3] * es
	for a := range s[0] {
		for b := range s[1] {
			for c := range s[2] {
				src := ((a*s[1]+b)*s[2] + c) * row
				dst := ((a*s[2]+c)*s[1] + b) * row
				copy(out.Data[dst:dst+row], x.Data[src:src+row])
			}
		}
	}
	return out
}

// Attention reading and writing [B, T, H, D] (BTHD) gives bitwise the
// same outputs and gradients as on the [B, H, T, D] transposes, in
// float32, float64 and with bf16 products (float32 and bfloat16 operands,
// the packed per-head path and SgemmMixed's, the native bf16 kernel and
// not), on one and two threads.
func TestAttentionBTHDMatchesContiguous(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type shapes struct{ b, h, t, s, d, dv int }
	for _, sh := range []shapes{{2, 3, 70, 70, 16, 16}, {1, 2, 33, 50, 8, 12}, {2, 6, 64, 64, 64, 64}, {1, 1, 5, 5, 4, 4}} {
		for _, causal := range []bool{true, false} {
			if causal && sh.t != sh.s {
				continue
			}
			for _, mode := range []string{"f32", "f64", "bf16", "bf16-low"} {
				dt, bf, low := tensor.Float32, false, false
				switch mode {
				case "f64":
					dt = tensor.Float64
				case "bf16":
					bf = true
				case "bf16-low":
					bf, low = true, true
				}
				// BTHD operands, values exact in bfloat16.
				mk := func(n, w int) *tensor.Tensor {
					x := tensor.New(dt, tensor.Shape{sh.b, n, sh.h, w})
					for i := range x.Shape.NumElements() {
						v := bf16Of(rng.NormFloat64())
						if dt == tensor.Float64 {
							x.F64()[i] = v
						} else {
							x.F32()[i] = float32(v)
						}
					}
					if low {
						return x.Convert(tensor.BFloat16)
					}
					return x
				}
				q, k, v, gy := mk(sh.t, sh.d), mk(sh.s, sh.d), mk(sh.s, sh.dv), mk(sh.t, sh.dv)
				scale := 0.25
				odt := dt
				run := func(threads int, bthd bool) []*tensor.Tensor {
					pool := parallel.NewPool(threads)
					defer pool.Close()
					lay := func(x *tensor.Tensor) *tensor.Tensor {
						if bthd {
							return x
						}
						return swap12(x)
					}
					meta := func(x *tensor.Tensor) *trace.Tensor {
						return &trace.Tensor{Meta: trace.Meta{DType: x.DType, Shape: x.Shape}}
					}
					fo := &prim.AttentionOp{Causal: causal, Scale: scale, BF16: bf, BTHD: bthd}
					ins := []*tensor.Tensor{lay(q), lay(k), lay(v)}
					fn := &trace.Node{Op: fo, Inputs: []*trace.Tensor{meta(ins[0]), meta(ins[1]), meta(ins[2])}}
					ms, err := fo.Infer([]trace.Meta{fn.Inputs[0].Meta, fn.Inputs[1].Meta, fn.Inputs[2].Meta})
					if err != nil {
						t.Fatal(err)
					}
					y, lse := tensor.New(odt, ms[0].Shape), tensor.New(odt, ms[1].Shape)
					if err := runOn(pool, fn, ins, []*tensor.Tensor{y, lse}, make([]byte, Workspace(fn))); err != nil {
						t.Fatal(err)
					}
					ysaved := y
					if low {
						ysaved = y.Convert(tensor.BFloat16)
					}
					bo := &prim.AttentionBackward{Causal: causal, Scale: scale, BF16: bf, BTHD: bthd}
					bins := []*tensor.Tensor{lay(gy), ins[0], ins[1], ins[2], ysaved, lse}
					bn := &trace.Node{Op: bo}
					var bm []trace.Meta
					for _, x := range bins {
						bn.Inputs = append(bn.Inputs, meta(x))
						bm = append(bm, trace.Meta{DType: x.DType, Shape: x.Shape})
					}
					gs, err := bo.Infer(bm)
					if err != nil {
						t.Fatal(err)
					}
					var outs []*tensor.Tensor
					for _, m := range gs {
						x := tensor.New(m.DType, m.Shape)
						// Garbage the kernel must overwrite.
						for i := range x.Data {
							x.Data[i] = 0x7f
						}
						outs = append(outs, x)
					}
					if err := runOn(pool, bn, bins, outs, make([]byte, Workspace(bn))); err != nil {
						t.Fatal(err)
					}
					if bthd && sh.t == sh.s {
						// Packed: one [B, T, H*(2D+Dv)] output, each row
						// the rows of dq, dk and dv side by side.
						po := *bo
						po.Packed = true
						pm, err := po.Infer(bm)
						if err != nil {
							t.Fatal(err)
						}
						packed := tensor.New(pm[0].DType, pm[0].Shape)
						pn := &trace.Node{Op: &po, Inputs: bn.Inputs}
						if err := runOn(pool, pn, bins, []*tensor.Tensor{packed}, make([]byte, Workspace(pn))); err != nil {
							t.Fatal(err)
						}
						var want []byte
						for r := range sh.b * sh.t {
							for _, x := range outs {
								w := len(x.Data) / (sh.b * sh.t)
								want = append(want, x.Data[r*w:(r+1)*w]...)
							}
						}
						if !bytes.Equal(want, packed.Data) {
							t.Errorf("%+v causal=%v %s threads=%d: packed gradients differ from dq, dk, dv", sh, causal, mode, threads)
						}
					}
					res := []*tensor.Tensor{y, lse}
					for _, x := range append([]*tensor.Tensor{y}, outs...) {
						if bthd {
							res = append(res, x)
						} else {
							res = append(res, swap12(x))
						}
					}
					return res[1:] // lse, then y, dq, dk, dv as BTHD
				}
				for _, packed := range []bool{true, false} {
					for _, native := range []bool{true, false} {
						if !bf && (!packed || !native) {
							continue
						}
						wasP, wasN := attnPacked, SetNativeBF16(native)
						attnPacked = packed
						for _, th := range []int{1, 2} {
							want, got := run(th, false), run(th, true)
							for i := range want {
								if !bytes.Equal(want[i].Data, got[i].Data) {
									t.Errorf("%+v causal=%v %s packed=%v native=%v threads=%d: output %d differs", sh, causal, mode, packed, native, th, i)
								}
							}
						}
						attnPacked = wasP
						SetNativeBF16(wasN)
					}
				}
			}
		}
	}
}

// BenchmarkAttentionGPTLayout is gpt's bf16-mixed attention (batch 8, 6
// heads, 256 positions, head size 64, bfloat16 operands), forward and
// backward, on [B, H, T, D] operands, on [B, T, H, D] ones (BTHD: rows
// gathered per head) and with packed gradients.
func BenchmarkAttentionGPTLayout(b *testing.B) {
	const bb, h, tt, d = 8, 6, 256, 64
	rng := rand.New(rand.NewPCG(1, 1))
	for _, lay := range []string{"heads-first", "bthd", "bthd-packed"} {
		b.Run(lay, func(b *testing.B) {
			bthd := lay != "heads-first"
			sh := tensor.Shape{bb, h, tt, d}
			if bthd {
				sh = tensor.Shape{bb, tt, h, d}
			}
			mk := func() *tensor.Tensor {
				x := tensor.New(tensor.BFloat16, sh)
				for i := range x.U16() {
					x.U16()[i] = tensor.Float32ToBFloat16(float32(rng.NormFloat64()))
				}
				return x
			}
			meta := func(x *tensor.Tensor) *trace.Tensor {
				return &trace.Tensor{Meta: trace.Meta{DType: x.DType, Shape: x.Shape}}
			}
			q, k, v, gy, y16 := mk(), mk(), mk(), mk(), mk()
			pool := parallel.NewPool(1)
			defer pool.Close()
			fo := &prim.AttentionOp{Causal: true, Scale: 0.125, BF16: true, BTHD: bthd}
			bo := &prim.AttentionBackward{Causal: true, Scale: 0.125, BF16: true, BTHD: bthd, Packed: lay == "bthd-packed"}
			fn := &trace.Node{Op: fo, Inputs: []*trace.Tensor{meta(q), meta(k), meta(v)}}
			fm, _ := fo.Infer([]trace.Meta{fn.Inputs[0].Meta, fn.Inputs[1].Meta, fn.Inputs[2].Meta})
			y, lse := tensor.New(tensor.Float32, fm[0].Shape), tensor.New(tensor.Float32, fm[1].Shape)
			bins := []*tensor.Tensor{gy, q, k, v, y16, lse}
			bn := &trace.Node{Op: bo}
			var bm []trace.Meta
			for _, x := range bins {
				bn.Inputs = append(bn.Inputs, meta(x))
				bm = append(bm, trace.Meta{DType: x.DType, Shape: x.Shape})
			}
			gm, err := bo.Infer(bm)
			if err != nil {
				b.Fatal(err)
			}
			var outs []*tensor.Tensor
			for _, m := range gm {
				outs = append(outs, tensor.New(m.DType, m.Shape))
			}
			fws, bws := make([]byte, Workspace(fn)), make([]byte, Workspace(bn))
			// CPU time too: wall time is noisy on a shared machine.
			c0, n := cpuTime(), 0
			var fwd time.Duration
			for b.Loop() {
				f0 := cpuTime()
				if err := runOn(pool, fn, []*tensor.Tensor{q, k, v}, []*tensor.Tensor{y, lse}, fws); err != nil {
					b.Fatal(err)
				}
				fwd += cpuTime() - f0
				if err := runOn(pool, bn, bins, outs, bws); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(n), "cpu-µs/op")
			b.ReportMetric(float64(fwd.Microseconds())/float64(n), "fwd-cpu-µs/op")
		})
	}
}
