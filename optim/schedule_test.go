package optim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
)

// schedCases names the runs of SCHEDULERS in scripts/reference/optim_ref.py.
// Each is built from the configuration recorded in the reference file, with
// PyTorch's defaults for arguments the script left out.
var schedCases = []string{
	"step_7_half", "step_3_tenth",
	"cosine_10", "cosine_30", "cosine_7",
	"linear_warmup", "linear_decay", "linear_default",
	"warmup_cosine", "warmup_step_cosine",
}

// lrTol is the agreement demanded for learning rates, which are float64
// throughout; only math.Cos and glibc's cos may differ, in the last bit.
const lrTol = 1e-13

type schedConfig struct {
	LR         float64              `json:"lr"`
	Schedulers [][2]json.RawMessage `json:"schedulers"`
	Milestones []int                `json:"milestones"`
}

// build creates the scheduler a reference configuration describes.
func (c schedConfig) build(opt LRSetter) (Scheduler, error) {
	var subs []Scheduler
	for _, d := range c.Schedulers {
		var kind string
		if err := json.Unmarshal(d[0], &kind); err != nil {
			return nil, err
		}
		// PyTorch's defaults; the recorded keyword arguments override them.
		args := struct {
			StepSize    int     `json:"step_size"`
			Gamma       float64 `json:"gamma"`
			TMax        int     `json:"T_max"`
			EtaMin      float64 `json:"eta_min"`
			StartFactor float64 `json:"start_factor"`
			EndFactor   float64 `json:"end_factor"`
			TotalIters  int     `json:"total_iters"`
		}{Gamma: 0.1, StartFactor: 1.0 / 3, EndFactor: 1, TotalIters: 5}
		if err := json.Unmarshal(d[1], &args); err != nil {
			return nil, err
		}
		var s Scheduler
		var err error
		switch kind {
		case "StepLR":
			s, err = NewStepLR(opt, args.StepSize, args.Gamma)
		case "LinearLR":
			s, err = NewLinearLR(opt, args.StartFactor, args.EndFactor, args.TotalIters)
		case "CosineAnnealingLR":
			s, err = NewCosineAnnealingLR(opt, args.TMax, args.EtaMin)
		default:
			return nil, fmt.Errorf("unknown scheduler %q", kind)
		}
		if err != nil {
			return nil, err
		}
		subs = append(subs, s)
	}
	if len(subs) == 1 && len(c.Milestones) == 0 {
		return subs[0], nil
	}
	return NewSequentialLR(opt, subs, c.Milestones)
}

func TestSchedulersMatchPyTorch(t *testing.T) {
	ref := loadRef(t, "schedulers")
	worst, mismatch, n := 0.0, 0, 0
	for _, name := range schedCases {
		t.Run(name, func(t *testing.T) {
			var cfg schedConfig
			ref.config(t, name, &cfg)
			want := ref.tensors[name+"/lr"].F64()
			opt, err := NewSGD(SGDConfig{LR: cfg.LR})
			if err != nil {
				t.Fatal(err)
			}
			sched, err := cfg.build(opt)
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range want {
				if i > 0 {
					sched.Step()
				}
				got := opt.LR()
				if sched.LR() != got {
					t.Fatalf("epoch %d: scheduler reports %v, optimizer has %v", i, sched.LR(), got)
				}
				n++
				if got == w {
					continue
				}
				mismatch++
				r := math.Abs(got-w) / math.Abs(w)
				worst = max(worst, r)
				if !(r <= lrTol) {
					t.Errorf("epoch %d: lr %v, PyTorch %v (rel diff %.3g)", i, got, w, r)
				}
			}
		})
	}
	t.Logf("all schedules: max rel diff %.3g, %d of %d rates not bit-identical", worst, mismatch, n)
}

// TestAdamWithSchedule runs AdamW under warm-up then cosine decay, so the
// rate changes between steps exactly as PyTorch changes it.
func TestAdamWithSchedule(t *testing.T) {
	opts := loadRef(t, "optimizers")
	ref := loadRef(t, "schedulers")
	var run struct {
		LR       float64 `json:"lr"`
		Schedule string  `json:"schedule"`
	}
	ref.config(t, "adamw_warmup_cosine", &run)
	var cfg schedConfig
	ref.config(t, run.Schedule, &cfg)
	c := AdamWDefaults()
	c.LR = run.LR
	opt, err := NewAdamW(c)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := cfg.build(opt)
	if err != nil {
		t.Fatal(err)
	}
	init, grads := refInputs(t, opts)
	var d diff
	for s := range refSteps {
		params := make([]Param, len(refParams))
		for i, n := range refParams {
			params[i] = Param{Name: n, Value: init[n], Grad: grads[s][n]}
		}
		if err := opt.Step(params); err != nil {
			t.Fatal(err)
		}
		sched.Step()
		for _, n := range refParams {
			var ds diff
			if err := ds.add(init[n], ref.must(t, fmt.Sprintf("adamw_warmup_cosine/%d/%s", s, n))); err != nil {
				t.Fatal(err)
			}
			if ds.maxRel > relTol {
				t.Errorf("step %d, %s: %v", s, n, ds)
			}
			d.n, d.mismatch, d.maxRel = d.n+ds.n, d.mismatch+ds.mismatch, max(d.maxRel, ds.maxRel)
		}
	}
	t.Logf("parameters: %v", d)
}

func TestSchedulerErrors(t *testing.T) {
	opt, _ := NewSGD(SGDConfig{LR: 0.1})
	other, _ := NewSGD(SGDConfig{LR: 0.1})
	lin, _ := NewLinearLR(opt, 0.5, 1, 3)
	cos, _ := NewCosineAnnealingLR(opt, 10, 0)
	foreign, _ := NewStepLR(other, 2, 0.5)
	tests := []struct {
		name string
		make func() error
		want string
	}{
		{"step size 0", func() error { _, err := NewStepLR(opt, 0, 0.1); return err }, "step_size must be at least 1, got 0"},
		{"start factor 0", func() error { _, err := NewLinearLR(opt, 0, 1, 5); return err },
			"Starting multiplicative factor expected to be greater than 0 and less or equal to 1."},
		{"start factor > 1", func() error { _, err := NewLinearLR(opt, 1.5, 1, 5); return err },
			"Starting multiplicative factor expected to be greater than 0 and less or equal to 1."},
		{"end factor < 0", func() error { _, err := NewLinearLR(opt, 0.5, -1, 5); return err },
			"Ending multiplicative factor expected to be between 0 and 1."},
		{"total iters 0", func() error { _, err := NewLinearLR(opt, 0.5, 1, 0); return err }, "total_iters must be at least 1, got 0"},
		{"T_max 0", func() error { _, err := NewCosineAnnealingLR(opt, 0, 0); return err }, "T_max must be at least 1, got 0"},
		{"milestone count", func() error { _, err := NewSequentialLR(opt, []Scheduler{lin, cos}, nil); return err },
			"Sequential Schedulers expects number of schedulers provided to be one more than the number of milestone points, " +
				"but got number of schedulers 2 and the number of milestones to be equal to 0"},
		{"other optimizer", func() error { _, err := NewSequentialLR(opt, []Scheduler{lin, foreign}, []int{3}); return err },
			"Sequential Schedulers expects all schedulers to belong to the same optimizer, but got schedulers at index 1 " +
				"to be different than the optimizer passed in."},
		{"milestones order", func() error { _, err := NewSequentialLR(opt, []Scheduler{lin, cos, lin}, []int{5, 5}); return err },
			"milestones must be positive and increasing, got [5 5]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.make()
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *ConfigError", err)
			}
			if ce.Msg != tt.want {
				t.Errorf("message %q, want %q", ce.Msg, tt.want)
			}
		})
	}
}
