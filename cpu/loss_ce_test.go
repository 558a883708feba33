package cpu

import (
	"math"
	"testing"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// The float32 cross entropy over contiguous rows (float32 exponentials,
// vectorized) agrees with the float64 definition to float32 accuracy,
// forward (loss, logsumexp) and backward, with rows holding -Inf logits,
// logits far apart, and ignored targets; a row with a NaN gives NaN.
func TestCrossEntropyRowsF32(t *testing.T) {
	for _, classes := range []int{5, 19, 256} {
		const n = 37
		i64 := trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}
		k := newKernelCase(t, &prim.CrossEntropyOp{IgnoreIndex: -1, Reduction: prim.ReductionNone}, f32(n, classes), i64)
		x, tg := k.in[0].F32(), k.in[1].I64()
		for p := range n {
			tg[p] = int64((p * 7) % classes)
			x[p*classes+(p%classes)] *= 30 // one logit far from the rest
		}
		tg[3] = -1
		x[5*classes+1] = float32(math.Inf(-1))
		x[6*classes] = float32(math.NaN())
		for i := range 2 * classes {
			x[9*classes+i] -= 100 // deep in the exponential's tail
		}
		k.run(t)
		loss, lse := k.out[0].F32(), k.out[1].F32()
		gy := tensor.New(tensor.Float32, tensor.Shape{n})
		for p := range gy.F32() {
			gy.F32()[p] = 1 + float32(p)/10
		}
		b := newKernelCase(t, &prim.CrossEntropyBackward{IgnoreIndex: -1, Reduction: prim.ReductionNone}, f32(n), f32(n, classes), i64, f32(n))
		b.in[0], b.in[1], b.in[2], b.in[3] = gy, k.in[0], k.in[1], k.out[1]
		b.run(t)
		gx := b.out[0].F32()
		for p := range n {
			row := x[p*classes : (p+1)*classes]
			m := math.Inf(-1)
			for _, v := range row {
				m = max(m, float64(v))
			}
			var s float64
			for _, v := range row {
				s += math.Exp(float64(v) - m)
			}
			want := m + math.Log(s)
			if p == 6 {
				if !math.IsNaN(float64(lse[p])) || !math.IsNaN(float64(loss[p])) {
					t.Fatalf("C=%d: a NaN logit gave logsumexp %v, loss %v", classes, lse[p], loss[p])
				}
				continue
			}
			if d := math.Abs(float64(lse[p]) - want); !(d <= 2e-6*math.Max(1, math.Abs(want))) {
				t.Fatalf("C=%d row %d: logsumexp %v, want %v", classes, p, lse[p], want)
			}
			wl := 0.0
			if tg[p] != -1 {
				wl = want - float64(row[tg[p]])
			}
			if d := math.Abs(float64(loss[p]) - wl); !(d <= 2e-6*math.Max(1, math.Abs(want))) {
				t.Fatalf("C=%d row %d: loss %v, want %v", classes, p, loss[p], wl)
			}
			for c, v := range row {
				g := 0.0
				if tg[p] != -1 {
					g = math.Exp(float64(v) - float64(lse[p]))
					if int64(c) == tg[p] {
						g--
					}
					g *= float64(gy.F32()[p])
				}
				if d := math.Abs(float64(gx[p*classes+c]) - g); !(d <= 2e-6*float64(gy.F32()[p])) {
					t.Fatalf("C=%d row %d class %d: gradient %v, want %v", classes, p, c, gx[p*classes+c], g)
				}
			}
		}
	}
}
