package optim

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestConfigErrors(t *testing.T) {
	adam := func(edit func(*AdamConfig)) AdamConfig {
		c := AdamDefaults()
		edit(&c)
		return c
	}
	tests := []struct {
		name string
		make func() error
		kind string
		msg  string // PyTorch's ValueError message
	}{
		{"sgd lr", func() error { _, err := NewSGD(SGDConfig{LR: -0.1}); return err }, "SGD", "Invalid learning rate: -0.1"},
		{"sgd lr nan", func() error { _, err := NewSGD(SGDConfig{LR: math.NaN()}); return err }, "SGD", "Invalid learning rate: nan"},
		{"sgd momentum", func() error { _, err := NewSGD(SGDConfig{LR: 0.1, Momentum: -1}); return err }, "SGD", "Invalid momentum value: -1.0"},
		{"sgd weight decay", func() error { _, err := NewSGD(SGDConfig{LR: 0.1, WeightDecay: -1e-5}); return err }, "SGD",
			"Invalid weight_decay value: -1e-05"},
		{"sgd nesterov without momentum", func() error { _, err := NewSGD(SGDConfig{LR: 0.1, Nesterov: true}); return err }, "SGD",
			"Nesterov momentum requires a momentum and zero dampening"},
		{"sgd nesterov with dampening", func() error {
			_, err := NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9, Dampening: 0.1, Nesterov: true})
			return err
		}, "SGD", "Nesterov momentum requires a momentum and zero dampening"},
		{"adam lr", func() error { _, err := NewAdam(adam(func(c *AdamConfig) { c.LR = -1e-3 })); return err }, "Adam",
			"Invalid learning rate: -0.001"},
		{"adam eps", func() error { _, err := NewAdam(adam(func(c *AdamConfig) { c.Eps = -1e-8 })); return err }, "Adam",
			"Invalid epsilon value: -1e-08"},
		{"adam beta1", func() error { _, err := NewAdam(adam(func(c *AdamConfig) { c.Beta1 = 1 })); return err }, "Adam",
			"Invalid beta parameter at index 0: 1.0"},
		{"adam beta2", func() error { _, err := NewAdam(adam(func(c *AdamConfig) { c.Beta2 = -0.5 })); return err }, "Adam",
			"Invalid beta parameter at index 1: -0.5"},
		{"adamw weight decay", func() error { _, err := NewAdamW(adam(func(c *AdamConfig) { c.WeightDecay = -0.01 })); return err }, "AdamW",
			"Invalid weight_decay value: -0.01"},
		{"zero config", func() error { _, err := NewAdam(AdamConfig{}); return err }, "", ""}, // lr 0, betas 0: valid in PyTorch
		{"sgd lr 0", func() error { _, err := NewSGD(SGDConfig{}); return err }, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.make()
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *ConfigError", err)
			}
			if ce.Kind != tt.kind || ce.Msg != tt.msg {
				t.Errorf("got %s %q, want %s %q", ce.Kind, ce.Msg, tt.kind, tt.msg)
			}
			if want := "optim: " + tt.kind + ": " + tt.msg; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err, want)
			}
		})
	}
}

func allOptimizers(t *testing.T) map[string]Optimizer {
	t.Helper()
	sgd, err := NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	c := AdamDefaults()
	c.AMSGrad = true
	adam, err := NewAdam(c)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Optimizer{"SGD": sgd, "Adam": adam}
}

func TestStepRejectsBadParams(t *testing.T) {
	tests := []struct {
		name   string
		params []Param
		want   string
	}{
		{"no name", []Param{{Value: []float32{1}, Grad: []float32{1}}}, "parameter 0 has no name"},
		{"duplicate", []Param{{Name: "w", Value: []float32{1}}, {Name: "w", Value: []float32{1}}}, `parameter "w" appears twice`},
		{"grad length", []Param{{Name: "w", Value: []float32{1, 2}, Grad: []float32{1}}}, `parameter "w" has 2 values but a gradient of 1`},
		{"resized", []Param{{Name: "b", Value: []float32{1, 2, 3}, Grad: []float32{1, 2, 3}}}, `parameter "b" has 3 values but its optimizer state has 2`},
	}
	for kind, opt := range allOptimizers(t) {
		// Give "b" state of two elements.
		if err := opt.Step([]Param{{Name: "b", Value: []float32{1, 2}, Grad: []float32{1, 1}}}); err != nil {
			t.Fatal(err)
		}
		for _, tt := range tests {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				before := make([][]float32, len(tt.params))
				for i, p := range tt.params {
					before[i] = append([]float32(nil), p.Value...)
				}
				err := opt.Step(tt.params)
				if !errors.Is(err, ErrParam) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want ErrParam with %q", err, tt.want)
				}
				for i, p := range tt.params {
					for j := range p.Value {
						if p.Value[j] != before[i][j] {
							t.Errorf("failed step changed %s", p.Name)
						}
					}
				}
			})
		}
	}
}

// TestAlloc checks that state comes from Alloc, with the names the engine
// will report, that an allocation failure leaves everything untouched, and
// that StateBytes and StateBytesFor agree with what was allocated.
func TestAlloc(t *testing.T) {
	newOpt := map[string]func() (Optimizer, error){
		"SGD":       func() (Optimizer, error) { return NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9}) },
		"SGD plain": func() (Optimizer, error) { return NewSGD(SGDConfig{LR: 0.1}) },
		"Adam":      func() (Optimizer, error) { return NewAdam(AdamDefaults()) },
		"AdamW amsgrad": func() (Optimizer, error) {
			c := AdamWDefaults()
			c.AMSGrad = true
			return NewAdamW(c)
		},
	}
	wantBufs := map[string][]string{
		"SGD":           {"momentum_buffer"},
		"SGD plain":     nil,
		"Adam":          {"exp_avg", "exp_avg_sq"},
		"AdamW amsgrad": {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
	}
	errOOM := errors.New("out of memory")
	for kind, mk := range newOpt {
		t.Run(kind, func(t *testing.T) {
			opt, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			budget := 1 << 30
			setAlloc(opt, func(param, buffer string, n int) ([]float32, error) {
				if n > budget {
					return nil, errOOM
				}
				budget -= n
				got = append(got, param+"."+buffer)
				b := make([]float32, n)
				for i := range b {
					b[i] = float32(math.NaN()) // reused memory: the optimizer must clear it
				}
				return b, nil
			})
			params := []Param{
				{Name: "w", Value: []float32{1, 2, 3}, Grad: []float32{0.1, 0.2, 0.3}},
				{Name: "frozen", Value: []float32{4}}, // no gradient: no state
			}
			if opt.StateBytes() != 0 {
				t.Errorf("StateBytes before any step = %d", opt.StateBytes())
			}
			if err := opt.Step(params); err != nil {
				t.Fatal(err)
			}
			plain, _ := mk()
			w := []float32{1, 2, 3}
			if err := plain.Step([]Param{{Name: "w", Value: w, Grad: params[0].Grad}}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(w, params[0].Value) {
				t.Errorf("with Alloc: %v, without: %v", params[0].Value, w)
			}
			var want []string
			for _, b := range wantBufs[kind] {
				want = append(want, "w."+b)
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("allocated %v, want %v", got, want)
			}
			if sb, sf := opt.StateBytes(), opt.StateBytesFor(3); sb != sf || sb != int64(12*len(want)) {
				t.Errorf("StateBytes %d, StateBytesFor(3) %d, want %d", sb, sf, 12*len(want))
			}
			for _, b := range wantBufs[kind] {
				if len(opt.State()["w"][b]) != 3 {
					t.Errorf("State()[w][%s] = %v", b, opt.State()["w"][b])
				}
			}
			if _, ok := opt.State()["frozen"]; ok {
				t.Error("a parameter without gradient has state")
			}

			// A new parameter whose state does not fit: Step fails with the
			// allocator's error and changes nothing.
			if len(want) == 0 {
				return
			}
			budget = 4
			big := Param{Name: "big", Value: []float32{1, 2, 3, 4, 5}, Grad: []float32{1, 1, 1, 1, 1}}
			w0 := append([]float32(nil), params[0].Value...)
			err = opt.Step([]Param{params[0], big})
			if !errors.Is(err, errOOM) {
				t.Fatalf("err = %v, want the allocator's", err)
			}
			for i := range w0 {
				if params[0].Value[i] != w0[i] || big.Value[i] != float32(i+1) {
					t.Fatal("failed step changed a parameter")
				}
			}
			if _, ok := opt.State()["big"]; ok {
				t.Error("failed step left state for the new parameter")
			}
		})
	}
}

func setAlloc(opt Optimizer, f AllocFunc) {
	switch o := opt.(type) {
	case *SGD:
		o.Alloc = f
	case *Adam:
		o.Alloc = f
	}
}

func TestAllocWrongLength(t *testing.T) {
	opt, _ := NewAdam(AdamDefaults())
	opt.Alloc = func(param, buffer string, n int) ([]float32, error) { return make([]float32, n-1), nil }
	err := opt.Step([]Param{{Name: "w", Value: []float32{1, 2}, Grad: []float32{1, 2}}})
	if err == nil || !strings.Contains(err.Error(), "got 1 elements, want 2") {
		t.Fatalf("err = %v", err)
	}
}

func TestSetLR(t *testing.T) {
	for kind, opt := range allOptimizers(t) {
		opt.SetLR(0.25)
		if opt.LR() != 0.25 {
			t.Errorf("%s: LR() = %v after SetLR(0.25)", kind, opt.LR())
		}
		// lr 0 must leave parameters alone (SGD with momentum and Adam alike).
		opt.SetLR(0)
		p := Param{Name: "w", Value: []float32{1, -2}, Grad: []float32{3, 4}}
		if err := opt.Step([]Param{p}); err != nil {
			t.Fatal(err)
		}
		if p.Value[0] != 1 || p.Value[1] != -2 {
			t.Errorf("%s: lr 0 changed the parameter to %v", kind, p.Value)
		}
	}
}

func TestAdamStepCount(t *testing.T) {
	opt, _ := NewAdam(AdamDefaults())
	w := Param{Name: "w", Value: []float32{1}, Grad: []float32{1}}
	v := Param{Name: "v", Value: []float32{1}, Grad: []float32{1}}
	for i := range 3 {
		ps := []Param{w, v}
		if i == 1 {
			ps[1].Grad = nil // v skips a step and its count falls behind
		}
		if err := opt.Step(ps); err != nil {
			t.Fatal(err)
		}
	}
	st := opt.State()
	if st["w"]["step"][0] != 3 || st["v"]["step"][0] != 2 {
		t.Errorf("steps w=%v v=%v, want 3 and 2", st["w"]["step"], st["v"]["step"])
	}
}

func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{
		-0.1: "-0.1", -1: "-1.0", 1e-8: "1e-08", 1e-4: "0.0001", 9.5e-5: "9.5e-05", 1e16: "1e+16",
		123456789012345.0: "123456789012345.0", 0: "0.0", math.Inf(-1): "-inf", 2.5e-300: "2.5e-300",
	} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", f, got, want)
		}
	}
}
