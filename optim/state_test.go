package optim

import (
	"errors"
	"slices"
	"testing"
)

// TestSaveLoadState: k steps, a save, a load into a fresh optimizer and
// n-k more steps give bit for bit the values of n steps straight.
func TestSaveLoadState(t *testing.T) {
	newOpts := map[string]func() Stateful{
		"sgd":      func() Stateful { o, _ := NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9, Dampening: 0.1}); return o },
		"nesterov": func() Stateful { o, _ := NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9, Nesterov: true}); return o },
		"adam":     func() Stateful { c := AdamDefaults(); c.LR = 0.01; o, _ := NewAdam(c); return o },
		"adamw":    func() Stateful { c := AdamWDefaults(); c.LR = 0.01; o, _ := NewAdamW(c); return o },
		"amsgrad":  func() Stateful { c := AdamDefaults(); c.AMSGrad = true; o, _ := NewAdam(c); return o },
	}
	const n, k = 6, 2
	grad := func(step int, v []float32) []float32 {
		g := make([]float32, len(v))
		for i := range g {
			g[i] = v[i]*0.3 + float32(step%3) - float32(i)*0.25
		}
		return g
	}
	for name, mk := range newOpts {
		t.Run(name, func(t *testing.T) {
			run := func(o Stateful, v []float32, from, to int) {
				for s := from; s < to; s++ {
					if err := o.Step([]Param{{Name: "w", Value: v, Grad: grad(s, v)}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			straight := []float32{1, -2, 3, 0.5}
			run(mk(), straight, 0, n)

			v := []float32{1, -2, 3, 0.5}
			first := mk()
			run(first, v, 0, k)
			saved := first.SaveState()
			// The saved buffers are copied, as a checkpoint file would.
			for _, bufs := range saved.Buffers {
				for b, x := range bufs {
					bufs[b] = slices.Clone(x)
				}
			}
			first.SetLR(123) // must not leak into the loaded state
			second := mk()
			if err := second.LoadState(saved); err != nil {
				t.Fatal(err)
			}
			run(second, v, k, n)
			if !slices.Equal(v, straight) {
				t.Errorf("resumed %v, straight %v", v, straight)
			}
		})
	}
}

func TestLoadStateMismatch(t *testing.T) {
	sgd, _ := NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9})
	adam, _ := NewAdam(AdamDefaults())
	if err := adam.Step([]Param{{Name: "w", Value: []float32{1, 2}, Grad: []float32{1, 1}}}); err != nil {
		t.Fatal(err)
	}
	s := adam.SaveState()
	if err := sgd.LoadState(s); !errors.Is(err, ErrState) {
		t.Errorf("Adam state into SGD: %v, want ErrState", err)
	}
	short := adam.SaveState()
	short.Buffers["w"] = map[string][]float32{"exp_avg": {1}, "exp_avg_sq": {1}}
	if err := adam.LoadState(short); !errors.Is(err, ErrState) {
		t.Errorf("mis-sized state: %v, want ErrState", err)
	}
	aw, _ := NewAdamW(AdamWDefaults())
	if err := aw.LoadState(s); !errors.Is(err, ErrState) {
		t.Errorf("Adam state into AdamW: %v, want ErrState", err)
	}
}
