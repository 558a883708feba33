package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// bf16Of is x rounded to bfloat16, as a float64.
func bf16Of(x float64) float64 {
	return float64(tensor.BFloat16ToFloat32(tensor.Float32ToBFloat16(float32(x))))
}

// attnRef is attention with bf16 products computed in float64 from the
// definition: P = softmax(scale q k^T) (causal: j <= i), rounded to
// bfloat16; y = P v; and its backward with dP = dO v^T, D = rowsum(dO y),
// dS = P (dP - D) scale rounded to bfloat16, dq = dS k, dk = dS^T q,
// dv = P^T dO (P the rounded probabilities; D from y rounded to bfloat16,
// the output autocast saves).
func attnRef(bh, t, s, d int, causal bool, scale float64, q, k, v, gy []float32) (y, dq, dk, dv []float64) {
	y, dq = make([]float64, bh*t*d), make([]float64, bh*t*d)
	dk, dv = make([]float64, bh*s*d), make([]float64, bh*s*d)
	for b := 0; b < bh; b++ {
		Q, K, V, G := q[b*t*d:], k[b*s*d:], v[b*s*d:], gy[b*t*d:]
		for i := 0; i < t; i++ {
			lim := s
			if causal {
				lim = min(s, i+1)
			}
			sc := make([]float64, lim)
			m := math.Inf(-1)
			for j := range sc {
				var x float64
				for c := 0; c < d; c++ {
					x += float64(Q[i*d+c]) * float64(K[j*d+c])
				}
				sc[j] = x * scale
				m = max(m, sc[j])
			}
			var sum float64
			for j := range sc {
				sc[j] = math.Exp(sc[j] - m)
				sum += sc[j]
			}
			p := make([]float64, lim)
			for j := range sc {
				p[j] = bf16Of(sc[j] / sum)
			}
			yi := y[b*t*d+i*d : b*t*d+(i+1)*d]
			for j := range p {
				for c := 0; c < d; c++ {
					yi[c] += p[j] * float64(V[j*d+c])
				}
			}
			var di float64
			for c := 0; c < d; c++ {
				di += float64(G[i*d+c]) * bf16Of(yi[c]) // the saved output, rounded
			}
			for j := range p {
				var dp float64
				for c := 0; c < d; c++ {
					dp += float64(G[i*d+c]) * float64(V[j*d+c])
				}
				ds := bf16Of(sc[j] / sum * (dp - di) * scale)
				for c := 0; c < d; c++ {
					dq[b*t*d+i*d+c] += ds * float64(K[j*d+c])
					dk[b*s*d+j*d+c] += ds * float64(Q[i*d+c])
					dv[b*s*d+j*d+c] += p[j] * float64(G[i*d+c])
				}
			}
		}
	}
	return y, dq, dk, dv
}

// Attention with BF16 (bf16-mixed's attention) agrees with the definition
// (probabilities and score gradients rounded to bfloat16, float32 sums)
// to float32 rounding, on the native bf16 kernel and with it off, and is
// bitwise the same for any thread count and with bfloat16 operands.
func TestAttentionBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		bh, t, d int
		causal   bool
	}{{3, 130, 16, true}, {2, 64, 64, false}, {5, 200, 8, true}, {1, 1, 4, true}} {
		bh, tt, d := tc.bh, tc.t, tc.d
		scale := 1 / math.Sqrt(float64(d))
		mk := func(n int, sd float64) *tensor.Tensor {
			x := tensor.New(tensor.Float32, tensor.Shape{bh, tt, d})
			for i := range x.F32() {
				x.F32()[i] = float32(bf16Of(rng.NormFloat64() * sd))
			}
			return x
		}
		q, k, v, gy := mk(0, 2), mk(0, 2), mk(0, 1), mk(0, 1)
		ry, rdq, rdk, rdv := attnRef(bh, tt, tt, d, tc.causal, scale, q.F32(), k.F32(), v.F32(), gy.F32())
		sh := tensor.Shape{bh, tt, d}
		meta := func(s tensor.Shape) *trace.Tensor {
			return &trace.Tensor{Meta: trace.Meta{DType: tensor.Float32, Shape: s}}
		}
		// lowT is x as a bfloat16 tensor (low) or x itself.
		lowT := func(x *tensor.Tensor, low bool) *tensor.Tensor {
			if !low {
				return x
			}
			l := tensor.New(tensor.BFloat16, x.Shape)
			for i, v := range x.F32() {
				l.U16()[i] = tensor.Float32ToBFloat16(v)
			}
			return l
		}
		run := func(threads int, low bool) [4][]float32 {
			pool := parallel.NewPool(threads)
			defer pool.Close()
			fo := &prim.AttentionOp{Causal: tc.causal, Scale: scale, BF16: true}
			fn := &trace.Node{Op: fo, Inputs: []*trace.Tensor{meta(sh), meta(sh), meta(sh)}}
			y, lse := tensor.New(tensor.Float32, sh), tensor.New(tensor.Float32, tensor.Shape{bh, tt})
			if err := runOn(pool, fn, []*tensor.Tensor{lowT(q, low), lowT(k, low), lowT(v, low)}, []*tensor.Tensor{y, lse}, make([]byte, Workspace(fn))); err != nil {
				t.Fatal(err)
			}
			bo := &prim.AttentionBackward{Causal: tc.causal, Scale: scale, BF16: true}
			bn := &trace.Node{Op: bo, Inputs: []*trace.Tensor{meta(sh), meta(sh), meta(sh), meta(sh), meta(sh), meta(tensor.Shape{bh, tt})}}
			// The saved output as autocast rounds it.
			yr := tensor.New(tensor.Float32, sh)
			for i, x := range y.F32() {
				yr.F32()[i] = float32(bf16Of(float64(x)))
			}
			dq, dk, dv := tensor.New(tensor.Float32, sh), tensor.New(tensor.Float32, sh), tensor.New(tensor.Float32, sh)
			if err := runOn(pool, bn, []*tensor.Tensor{lowT(gy, low), lowT(q, low), lowT(k, low), lowT(v, low), lowT(yr, low), lse}, []*tensor.Tensor{dq, dk, dv}, make([]byte, Workspace(bn))); err != nil {
				t.Fatal(err)
			}
			return [4][]float32{y.F32(), dq.F32(), dk.F32(), dv.F32()}
		}
		for _, native := range []bool{true, false} {
			was := SetNativeBF16(native)
			got := run(1, false)
			// Any thread count, and bfloat16 operands read in place,
			// give the same bits.
			for _, th := range []int{2, 3} {
				for _, low := range []bool{false, true} {
					again := run(th, low)
					for o := range got {
						for i := range got[o] {
							if math.Float32bits(got[o][i]) != math.Float32bits(again[o][i]) {
								t.Fatalf("%+v native=%v: output %d differs on %d threads (bfloat16 operands %v) at %d", tc, native, o, th, low, i)
							}
						}
					}
				}
			}
			SetNativeBF16(was)
			// Against the reference: float32 sums, and for dq and dk the
			// few dS that float32 and float64 round to neighbouring
			// bfloat16 numbers.
			for o, ref := range [][]float64{ry, rdq, rdk, rdv} {
				var num, den float64
				for i, r := range ref {
					e := float64(got[o][i]) - r
					num += e * e
					den += r * r
				}
				tol := 1e-6
				if o == 1 || o == 2 {
					tol = 1e-4
				}
				if rel := math.Sqrt(num / max(den, 1e-300)); rel > tol {
					t.Errorf("%+v native=%v: output %d relative error %.3g > %g", tc, native, o, rel, tol)
				} else {
					t.Logf("%s native=%v: output %d relative error %.3g", fmt.Sprint(tc), native, o, rel)
				}
			}
		}
	}
}

// GPT-sized attention (gpt-bytes: batch 8, 6 heads, 256 positions, head
// size 64, causal), forward and backward, float32 and bf16 products.
func BenchmarkAttentionGPT(b *testing.B) {
	const bh, tt, d = 48, 256, 64
	sh := tensor.Shape{bh, tt, d}
	rng := rand.New(rand.NewPCG(1, 1))
	mk := func() *tensor.Tensor {
		x := tensor.New(tensor.Float32, sh)
		for i := range x.F32() {
			x.F32()[i] = float32(bf16Of(rng.NormFloat64()))
		}
		return x
	}
	q, k, v, gy := mk(), mk(), mk(), mk()
	meta := func(s tensor.Shape) *trace.Tensor {
		return &trace.Tensor{Meta: trace.Meta{DType: tensor.Float32, Shape: s}}
	}
	for _, bf := range []bool{false, true} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("bf16=%v/t%d", bf, threads), func(b *testing.B) {
				pool := parallel.NewPool(threads)
				defer pool.Close()
				fn := &trace.Node{Op: &prim.AttentionOp{Causal: true, Scale: 0.125, BF16: bf}, Inputs: []*trace.Tensor{meta(sh), meta(sh), meta(sh)}}
				bn := &trace.Node{Op: &prim.AttentionBackward{Causal: true, Scale: 0.125, BF16: bf}, Inputs: []*trace.Tensor{meta(sh), meta(sh), meta(sh), meta(sh), meta(sh), meta(tensor.Shape{bh, tt})}}
				y, lse := tensor.New(tensor.Float32, sh), tensor.New(tensor.Float32, tensor.Shape{bh, tt})
				dq, dk, dv := tensor.New(tensor.Float32, sh), tensor.New(tensor.Float32, sh), tensor.New(tensor.Float32, sh)
				fws, bws := make([]byte, Workspace(fn)), make([]byte, Workspace(bn))
				for b.Loop() {
					if err := runOn(pool, fn, []*tensor.Tensor{q, k, v}, []*tensor.Tensor{y, lse}, fws); err != nil {
						b.Fatal(err)
					}
					if err := runOn(pool, bn, []*tensor.Tensor{gy, q, k, v, y, lse}, []*tensor.Tensor{dq, dk, dv}, bws); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkAttentionGPTBF16 is BenchmarkAttentionGPT's bf16 path as
// gpt's bf16-mixed graph runs it: q, k, v, dO and O in bfloat16; one head
// (heads1) and all 48, with the CPU time of the forward and the backward.
func BenchmarkAttentionGPTBF16(b *testing.B) {
	const bh, tt, d = 48, 256, 64
	meta := func(dt tensor.DType, s tensor.Shape) *trace.Tensor {
		return &trace.Tensor{Meta: trace.Meta{DType: dt, Shape: s}}
	}
	for _, c := range []struct{ bh, threads int }{{1, 1}, {bh, 1}, {bh, 2}} {
		bh, threads := c.bh, c.threads
		sh := tensor.Shape{bh, tt, d}
		m16, ml := meta(tensor.BFloat16, sh), meta(tensor.Float32, tensor.Shape{bh, tt})
		rng := rand.New(rand.NewPCG(1, 1))
		mk := func() *tensor.Tensor {
			x := tensor.New(tensor.BFloat16, sh)
			for i := range x.U16() {
				x.U16()[i] = uint16(math.Float32bits(float32(rng.NormFloat64())) >> 16)
			}
			return x
		}
		q, k, v, gy := mk(), mk(), mk(), mk()
		b.Run(fmt.Sprintf("heads%d/t%d", bh, threads), func(b *testing.B) {
			pool := parallel.NewPool(threads)
			defer pool.Close()
			fn := &trace.Node{Op: &prim.AttentionOp{Causal: true, Scale: 0.125, BF16: true}, Inputs: []*trace.Tensor{m16, m16, m16}}
			bn := &trace.Node{Op: &prim.AttentionBackward{Causal: true, Scale: 0.125, BF16: true}, Inputs: []*trace.Tensor{m16, m16, m16, m16, m16, ml}}
			y, lse := tensor.New(tensor.Float32, sh), tensor.New(tensor.Float32, tensor.Shape{bh, tt})
			y16 := mk()
			dq, dk, dv := tensor.New(tensor.Float32, sh), tensor.New(tensor.Float32, sh), tensor.New(tensor.Float32, sh)
			fws, bws := make([]byte, Workspace(fn)), make([]byte, Workspace(bn))
			var fwd, bwd time.Duration
			for b.Loop() {
				c0 := cpuTime()
				if err := runOn(pool, fn, []*tensor.Tensor{q, k, v}, []*tensor.Tensor{y, lse}, fws); err != nil {
					b.Fatal(err)
				}
				c1 := cpuTime()
				if err := runOn(pool, bn, []*tensor.Tensor{gy, q, k, v, y16, lse}, []*tensor.Tensor{dq, dk, dv}, bws); err != nil {
					b.Fatal(err)
				}
				fwd, bwd = fwd+c1-c0, bwd+cpuTime()-c1
			}
			b.ReportMetric(float64(fwd.Microseconds())/1e3/float64(b.N), "fwd-cpu-ms/op")
			b.ReportMetric(float64(bwd.Microseconds())/1e3/float64(b.N), "bwd-cpu-ms/op")
		})
	}
}

// The bf16 attention's products on operands packed once per head
// (MulPacked) give the bits of its SgemmMixed path, forward and backward:
// causal or not, T not a multiple of the row block, S longer than an odd
// T (an odd causal block inside K and V), head sizes 64 and odd 41, dv
// != d, float32 and bfloat16 operands, one and two threads.
func TestAttentionBF16Packed(t *testing.T) {
	if _, ok := blas.NativeBF16Tile(); !ok {
		t.Skip("no native bf16 kernel")
	}
	for _, tc := range []struct {
		bh, t, s, d, dv int
		causal          bool
	}{
		{3, 256, 256, 64, 64, true},
		{2, 100, 100, 64, 64, true},
		{2, 100, 130, 40, 24, false},
		{3, 101, 130, 40, 72, true},
		{2, 75, 75, 41, 33, true},
		{1, 30, 50, 64, 64, false},
		{2, 49, 20, 16, 16, true},
	} {
		for _, low := range []bool{false, true} {
			rng := rand.New(rand.NewPCG(uint64(tc.t), uint64(tc.d)))
			scale := 1 / math.Sqrt(float64(tc.d))
			dt := tensor.Float32
			if low {
				dt = tensor.BFloat16
			}
			mk := func(sh tensor.Shape, sd float64) *tensor.Tensor {
				x := tensor.New(dt, sh)
				n := sh.NumElements()
				for i := range n {
					v := float32(bf16Of(rng.NormFloat64() * sd))
					if low {
						x.U16()[i] = tensor.Float32ToBFloat16(v)
					} else {
						x.F32()[i] = v
					}
				}
				return x
			}
			qs, ks, vs, ys := tensor.Shape{tc.bh, tc.t, tc.d}, tensor.Shape{tc.bh, tc.s, tc.d}, tensor.Shape{tc.bh, tc.s, tc.dv}, tensor.Shape{tc.bh, tc.t, tc.dv}
			q, k, v, gy, yr := mk(qs, 2), mk(ks, 2), mk(vs, 1), mk(ys, 1), mk(ys, 0.3)
			meta := func(x *tensor.Tensor) *trace.Tensor {
				return &trace.Tensor{Meta: trace.Meta{DType: x.DType, Shape: x.Shape}}
			}
			run := func(threads int, packed bool) [5][]float32 {
				was := attnPacked
				attnPacked = packed
				defer func() { attnPacked = was }()
				pool := parallel.NewPool(threads)
				defer pool.Close()
				y, lse := tensor.New(tensor.Float32, ys), tensor.New(tensor.Float32, tensor.Shape{tc.bh, tc.t})
				fn := &trace.Node{Op: &prim.AttentionOp{Causal: tc.causal, Scale: scale, BF16: true}, Inputs: []*trace.Tensor{meta(q), meta(k), meta(v)}}
				if err := runOn(pool, fn, []*tensor.Tensor{q, k, v}, []*tensor.Tensor{y, lse}, make([]byte, Workspace(fn))); err != nil {
					t.Fatal(err)
				}
				dq, dk, dv := tensor.New(tensor.Float32, qs), tensor.New(tensor.Float32, ks), tensor.New(tensor.Float32, vs)
				bn := &trace.Node{Op: &prim.AttentionBackward{Causal: tc.causal, Scale: scale, BF16: true}, Inputs: []*trace.Tensor{meta(gy), meta(q), meta(k), meta(v), meta(yr), meta(lse)}}
				if err := runOn(pool, bn, []*tensor.Tensor{gy, q, k, v, yr, lse}, []*tensor.Tensor{dq, dk, dv}, make([]byte, Workspace(bn))); err != nil {
					t.Fatal(err)
				}
				return [5][]float32{y.F32(), lse.F32(), dq.F32(), dk.F32(), dv.F32()}
			}
			want := run(1, false)
			for _, threads := range []int{1, 2} {
				got := run(threads, true)
				for o := range want {
					for i := range want[o] {
						if math.Float32bits(got[o][i]) != math.Float32bits(want[o][i]) {
							t.Fatalf("%+v bfloat16=%v threads=%d: output %d element %d = %g, SgemmMixed path %g", tc, low, threads, o, i, got[o][i], want[o][i])
						}
					}
				}
			}
		}
	}
}
