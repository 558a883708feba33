package optim

import "testing"

func benchStep(b *testing.B, opt Optimizer) {
	const n = 1 << 20
	p := Param{Name: "w", Value: make([]float32, n), Grad: make([]float32, n)}
	for i := range p.Grad {
		p.Value[i] = float32(i%7) - 3
		p.Grad[i] = float32(i%5)*1e-3 - 2e-3
	}
	b.SetBytes(4 * n)
	for b.Loop() {
		if err := opt.Step([]Param{p}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSGDMomentum(b *testing.B) {
	opt, _ := NewSGD(SGDConfig{LR: 0.01, Momentum: 0.9, WeightDecay: 1e-4})
	benchStep(b, opt)
}

func BenchmarkAdamW(b *testing.B) {
	opt, _ := NewAdamW(AdamWDefaults())
	benchStep(b, opt)
}

func BenchmarkClipGradNorm(b *testing.B) {
	p := []Param{{Name: "w", Grad: make([]float32, 1<<20)}}
	for i := range p[0].Grad {
		p[0].Grad[i] = float32(i%5) - 2
	}
	b.SetBytes(4 << 20)
	for b.Loop() {
		if _, err := ClipGradNorm(p, 1e9, 2); err != nil {
			b.Fatal(err)
		}
	}
}
