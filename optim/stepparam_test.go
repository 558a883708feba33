package optim

import (
	"math"
	"math/rand"
	"testing"
)

// Stepping parameters one at a time with StepParam, in reverse order (as
// updates inside the backward pass run), gives bit for bit Step's values
// and state, for every configuration, over steps where some parameters
// have no gradient and the learning rate changes between steps.
func TestStepParamEqualsStep(t *testing.T) {
	sizes := []int{3, 70000, 17} // one large enough to be split across threads
	for _, c := range optimizerCases {
		t.Run(c.name, func(t *testing.T) {
			whole, err := newOptimizer(c.sgd, c.adam, c.w)
			if err != nil {
				t.Fatal(err)
			}
			single, _ := newOptimizer(c.sgd, c.adam, c.w)
			r := rand.New(rand.NewSource(1))
			var a, b []Param
			for i, n := range sizes {
				v := make([]float32, n)
				for j := range v {
					v[j] = float32(r.NormFloat64())
				}
				name := string(rune('a' + i))
				a = append(a, Param{Name: name, Value: v})
				b = append(b, Param{Name: name, Value: append([]float32(nil), v...)})
			}
			for step := 0; step < 4; step++ {
				for i := range a {
					a[i].Grad, b[i].Grad = nil, nil
					if step == 1 && i == 0 {
						continue // no gradient: skipped, its state left behind
					}
					g := make([]float32, sizes[i])
					for j := range g {
						g[j] = float32(r.NormFloat64())
					}
					a[i].Grad, b[i].Grad = g, append([]float32(nil), g...)
				}
				if err := whole.Step(a); err != nil {
					t.Fatal(err)
				}
				ps := single.(ParamStepper)
				for i := len(b) - 1; i >= 0; i-- {
					if b[i].Grad == nil {
						continue
					}
					if err := ps.StepParam(b[i]); err != nil {
						t.Fatal(err)
					}
				}
				whole.SetLR(whole.LR() * 0.7)
				single.SetLR(single.LR() * 0.7)
			}
			for i := range a {
				for j := range a[i].Value {
					if math.Float32bits(a[i].Value[j]) != math.Float32bits(b[i].Value[j]) {
						t.Fatalf("%s[%d]: %v by StepParam, %v by Step", a[i].Name, j, b[i].Value[j], a[i].Value[j])
					}
				}
			}
			sa, sb := whole.State(), single.State()
			if len(sa) != len(sb) {
				t.Fatalf("state of %d parameters by StepParam, %d by Step", len(sb), len(sa))
			}
			for name, bufs := range sa {
				for k, v := range bufs {
					w := sb[name][k]
					if len(w) != len(v) {
						t.Fatalf("%s %s: %d values by StepParam, %d by Step", name, k, len(w), len(v))
					}
					for j := range v {
						if math.Float32bits(v[j]) != math.Float32bits(w[j]) {
							t.Fatalf("%s %s[%d] differs", name, k, j)
						}
					}
				}
			}
		})
	}
}
