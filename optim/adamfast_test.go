package optim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The vectorized Adam and AdamW updates agree bit for bit with the scalar
// loop, which maximize (on negated gradients) forces.
func TestAdamVectorMatchesScalar(t *testing.T) {
	for _, w := range []bool{false, true} {
		cfg := AdamDefaults()
		if w {
			cfg = AdamWDefaults()
		}
		cfg.LR = 3e-3
		r := rand.New(rand.NewPCG(7, 8))
		const n = 1<<15 + 13 // several parallel ranges and a scalar tail
		v1, v2 := make([]float32, n), make([]float32, n)
		for i := range v1 {
			v1[i] = float32(r.NormFloat64())
			v2[i] = v1[i]
		}
		newOpt := func(c AdamConfig) *Adam {
			var o *Adam
			var err error
			if w {
				o, err = NewAdamW(c)
			} else {
				o, err = NewAdam(c)
			}
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
		fast := newOpt(cfg)
		cfg.Maximize = true
		slow := newOpt(cfg)
		for step := 0; step < 3; step++ {
			g1, g2 := make([]float32, n), make([]float32, n)
			for i := range g1 {
				g1[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(6)-4)))
				g2[i] = -g1[i]
			}
			if err := fast.Step([]Param{{Name: "p", Value: v1, Grad: g1}}); err != nil {
				t.Fatal(err)
			}
			if err := slow.Step([]Param{{Name: "p", Value: v2, Grad: g2}}); err != nil {
				t.Fatal(err)
			}
			for i := range v1 {
				if math.Float32bits(v1[i]) != math.Float32bits(v2[i]) {
					t.Fatalf("AdamW=%v step %d: element %d: vector %v, scalar %v", w, step, i, v1[i], v2[i])
				}
			}
		}
	}
}
