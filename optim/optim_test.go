package optim

import (
	"fmt"
	"reflect"
	"testing"
)

// relTol is the agreement demanded with PyTorch. The implementation follows
// PyTorch's float32 arithmetic order, so most values match bit for bit; the
// tolerance leaves room for a fused multiply-add done differently.
const relTol = 1e-6

// optimizerCases mirrors OPTIMIZERS in scripts/reference/optim_ref.py;
// TestOptimizersMatchPyTorch checks that the two tables agree.
var optimizerCases = []struct {
	name string
	sgd  *SGDConfig
	adam *AdamConfig
	w    bool // AdamW
}{
	{name: "sgd", sgd: &SGDConfig{LR: 0.1}},
	{name: "sgd_momentum", sgd: &SGDConfig{LR: 0.05, Momentum: 0.9}},
	{name: "sgd_nesterov", sgd: &SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true}},
	{name: "sgd_dampening", sgd: &SGDConfig{LR: 0.05, Momentum: 0.8, Dampening: 0.3}},
	{name: "sgd_weight_decay", sgd: &SGDConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 0.01}},
	{name: "sgd_maximize", sgd: &SGDConfig{LR: 0.02, Momentum: 0.5, WeightDecay: 0.1, Nesterov: true, Maximize: true}},
	{name: "adam", adam: adamCfg(AdamDefaults(), nil)},
	{name: "adam_weight_decay", adam: adamCfg(AdamDefaults(), func(c *AdamConfig) { c.LR, c.WeightDecay = 3e-3, 0.1 })},
	{name: "adam_amsgrad", adam: adamCfg(AdamDefaults(), func(c *AdamConfig) {
		c.LR, c.Beta1, c.Beta2, c.Eps, c.AMSGrad = 1e-2, 0.8, 0.99, 1e-6, true
	})},
	{name: "adam_maximize", adam: adamCfg(AdamDefaults(), func(c *AdamConfig) {
		c.LR, c.WeightDecay, c.AMSGrad, c.Maximize = 2e-3, 0.05, true, true
	})},
	{name: "adamw", adam: adamCfg(AdamWDefaults(), nil), w: true},
	{name: "adamw_amsgrad", adam: adamCfg(AdamWDefaults(), func(c *AdamConfig) { c.LR, c.WeightDecay, c.AMSGrad = 5e-3, 0.1, true }), w: true},
	{name: "adamw_big_lr", adam: adamCfg(AdamWDefaults(), func(c *AdamConfig) {
		c.LR, c.Beta1, c.Beta2, c.Eps, c.WeightDecay, c.Maximize = 0.5, 0.5, 0.6, 1e-3, 0.3, true
	}), w: true},
}

func adamCfg(c AdamConfig, edit func(*AdamConfig)) *AdamConfig {
	if edit != nil {
		edit(&c)
	}
	return &c
}

// pyConfig is a configuration as the reference script records it: torch
// keyword arguments, absent where PyTorch's default applies.
type pyConfig struct {
	Optimizer   string    `json:"optimizer"`
	LR          *float64  `json:"lr"`
	Momentum    float64   `json:"momentum"`
	Dampening   float64   `json:"dampening"`
	WeightDecay *float64  `json:"weight_decay"`
	Nesterov    bool      `json:"nesterov"`
	Maximize    bool      `json:"maximize"`
	Betas       []float64 `json:"betas"`
	Eps         *float64  `json:"eps"`
	AMSGrad     bool      `json:"amsgrad"`
}

// goConfig turns a recorded PyTorch configuration into ours, filling in
// PyTorch's defaults from AdamDefaults and AdamWDefaults, which this also
// checks.
func (p pyConfig) goConfig() (sgd *SGDConfig, adam *AdamConfig, w bool) {
	switch p.Optimizer {
	case "SGD":
		return &SGDConfig{LR: *p.LR, Momentum: p.Momentum, Dampening: p.Dampening, WeightDecay: deref(p.WeightDecay, 0),
			Nesterov: p.Nesterov, Maximize: p.Maximize}, nil, false
	case "Adam", "AdamW":
		w = p.Optimizer == "AdamW"
		c := AdamDefaults()
		if w {
			c = AdamWDefaults()
		}
		c.LR = deref(p.LR, c.LR)
		if p.Betas != nil {
			c.Beta1, c.Beta2 = p.Betas[0], p.Betas[1]
		}
		c.Eps = deref(p.Eps, c.Eps)
		c.WeightDecay = deref(p.WeightDecay, c.WeightDecay)
		c.AMSGrad, c.Maximize = p.AMSGrad, p.Maximize
		return nil, &c, w
	}
	return nil, nil, false
}

func deref(p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	return *p
}

func newOptimizer(sgd *SGDConfig, adam *AdamConfig, w bool) (Optimizer, error) {
	switch {
	case sgd != nil:
		return NewSGD(*sgd)
	case w:
		return NewAdamW(*adam)
	default:
		return NewAdam(*adam)
	}
}

// refInputs returns the initial parameters and the per-step gradients (nil
// where PyTorch's p.grad was None).
func refInputs(t *testing.T, ref *refFile) (init map[string][]float32, grads [refSteps]map[string][]float32) {
	init = map[string][]float32{}
	for _, n := range refParams {
		init[n] = ref.must(t, "init/"+n)
	}
	for s := range grads {
		grads[s] = map[string][]float32{}
		for _, n := range refParams {
			grads[s][n] = ref.f32(t, fmt.Sprintf("grad/%d/%s", s, n))
		}
	}
	return init, grads
}

func TestOptimizersMatchPyTorch(t *testing.T) {
	ref := loadRef(t, "optimizers")
	if len(ref.configs) != len(optimizerCases) {
		t.Errorf("reference has %d configurations, the test table %d", len(ref.configs), len(optimizerCases))
	}
	init, grads := refInputs(t, ref)
	var total diff
	for _, tc := range optimizerCases {
		t.Run(tc.name, func(t *testing.T) {
			var pc pyConfig
			ref.config(t, tc.name, &pc)
			sgd, adam, w := pc.goConfig()
			if !reflect.DeepEqual(sgd, tc.sgd) || !reflect.DeepEqual(adam, tc.adam) || w != tc.w {
				t.Fatalf("test table disagrees with the reference script's configuration %s", ref.configs[tc.name])
			}
			opt, err := newOptimizer(tc.sgd, tc.adam, tc.w)
			if err != nil {
				t.Fatal(err)
			}
			values := map[string][]float32{}
			for _, n := range refParams {
				values[n] = append([]float32(nil), init[n]...)
			}
			var d diff
			for s := range refSteps {
				params := make([]Param, len(refParams))
				for i, n := range refParams {
					params[i] = Param{Name: n, Value: values[n], Grad: grads[s][n]}
				}
				if err := opt.Step(params); err != nil {
					t.Fatal(err)
				}
				for _, n := range refParams {
					var ds diff
					if err := ds.add(values[n], ref.must(t, fmt.Sprintf("%s/%d/%s", tc.name, s, n))); err != nil {
						t.Fatal(err)
					}
					if ds.maxRel > relTol {
						t.Errorf("step %d, %s: %v", s, n, ds)
					}
					d.n, d.mismatch, d.maxRel = d.n+ds.n, d.mismatch+ds.mismatch, max(d.maxRel, ds.maxRel)
				}
			}
			// The final state must match PyTorch's too, buffer by buffer.
			state := opt.State()
			for _, n := range refParams {
				for k, got := range state[n] {
					want := ref.f32(t, fmt.Sprintf("%s/state/%s/%s", tc.name, n, k))
					if want == nil {
						t.Errorf("state %s/%s: PyTorch has no such state", n, k)
						continue
					}
					var ds diff
					if err := ds.add(got, want); err != nil {
						t.Fatalf("state %s/%s: %v", n, k, err)
					}
					if ds.maxRel > relTol {
						t.Errorf("state %s/%s: %v", n, k, ds)
					}
				}
				for _, k := range []string{"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"} {
					if _, ok := ref.tensors[fmt.Sprintf("%s/state/%s/%s", tc.name, n, k)]; ok && state[n][k] == nil {
						t.Errorf("state %s/%s: PyTorch has it, State() does not", n, k)
					}
				}
			}
			t.Logf("parameters: %v", d)
			total.n, total.mismatch, total.maxRel = total.n+d.n, total.mismatch+d.mismatch, max(total.maxRel, d.maxRel)
		})
	}
	t.Logf("all optimizers: %v", total)
}
