package optim

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// recipeCases are the recipe_* runs of scripts/reference/optim_ref.py: the
// schedules of `headroom train --lr-schedule`, built by Schedule.Build,
// against the same schedules built with torch.optim.lr_scheduler.
var recipeCases = map[string]Schedule{
	"recipe_warmup_cosine":   {Kind: "cosine", Steps: 30, Warmup: 5, WarmupFactor: 0.01, MinLR: 1e-4},
	"recipe_cosine":          {Kind: "cosine", Steps: 30},
	"recipe_warmup_linear":   {Kind: "linear", Steps: 30, Warmup: 3, WarmupFactor: 0.01},
	"recipe_linear_min":      {Kind: "linear", Steps: 30, MinLR: 0.01},
	"recipe_warmup_step":     {Kind: "step", Steps: 30, Warmup: 4, WarmupFactor: 0.01, StepSize: 5, Gamma: 0.5},
	"recipe_warmup_constant": {Kind: "constant", Steps: 30, Warmup: 6, WarmupFactor: 0.25},
}

func TestScheduleMatchesPyTorch(t *testing.T) {
	ref := loadRef(t, "schedulers")
	for name, s := range recipeCases {
		t.Run(name, func(t *testing.T) {
			var cfg schedConfig
			ref.config(t, name, &cfg)
			want := ref.tensors[name+"/lr"].F64()
			opt, _ := NewSGD(SGDConfig{LR: cfg.LR})
			sched, err := s.Build(opt)
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range want {
				if i > 0 {
					sched.Step()
				}
				if got := opt.LR(); math.Abs(got-w) > lrTol*math.Abs(w) {
					t.Errorf("step %d: lr %v, PyTorch %v", i, got, w)
				}
			}
		})
	}
}

// A scheduler saved after k steps (through JSON, as a checkpoint stores
// it) and loaded into a freshly built one continues with the rates of one
// that never stopped, bit for bit, at every k, across warm-up milestones.
func TestSchedulerStateResumes(t *testing.T) {
	ref := loadRef(t, "schedulers")
	names := append([]string(nil), schedCases...)
	for n := range recipeCases {
		names = append(names, n)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			build := func() (*SGD, StatefulScheduler) {
				t.Helper()
				var cfg schedConfig
				ref.config(t, name, &cfg)
				opt, _ := NewSGD(SGDConfig{LR: cfg.LR})
				var s Scheduler
				var err error
				if r, ok := recipeCases[name]; ok {
					s, err = r.Build(opt)
				} else {
					s, err = cfg.build(opt)
				}
				if err != nil {
					t.Fatal(err)
				}
				return opt, s.(StatefulScheduler)
			}
			opt, sched := build()
			var straight []float64
			for range 30 {
				sched.Step()
				straight = append(straight, opt.LR())
			}
			for k := range 30 {
				opt, sched := build()
				for range k {
					sched.Step()
				}
				js, err := json.Marshal(sched.SaveState())
				if err != nil {
					t.Fatal(err)
				}
				lr := opt.LR()
				opt2, sched2 := build()
				var st SchedulerState
				if err := json.Unmarshal(js, &st); err != nil {
					t.Fatal(err)
				}
				if err := sched2.LoadState(st); err != nil {
					t.Fatal(err)
				}
				opt2.SetLR(lr) // the optimizer's state carries its rate
				if sched2.LR() != lr {
					t.Fatalf("k=%d: loaded scheduler reports %v, saved %v", k, sched2.LR(), lr)
				}
				for i := k; i < 30; i++ {
					sched2.Step()
					if opt2.LR() != straight[i] {
						t.Fatalf("saved after %d steps: step %d lr %v, straight %v", k, i+1, opt2.LR(), straight[i])
					}
				}
			}
		})
	}
}

func TestSchedulerLoadStateMismatch(t *testing.T) {
	opt, _ := NewSGD(SGDConfig{LR: 0.1})
	cos, _ := NewCosineAnnealingLR(opt, 10, 0)
	seq, _ := Schedule{Kind: "cosine", Steps: 10, Warmup: 2, WarmupFactor: 0.1}.Build(opt)
	step, _ := NewStepLR(opt, 3, 0.5)
	tests := []struct {
		name string
		s    StatefulScheduler
		st   SchedulerState
		want string
	}{
		{"kind", cos, step.SaveState(), "CosineAnnealingLR: cannot load the state of a StepLR"},
		{"sequential from single", seq, cos.SaveState(), "SequentialLR: cannot load the state of a CosineAnnealingLR"},
		{"children", seq, SchedulerState{Kind: "SequentialLR", Schedulers: []SchedulerState{{Kind: "LinearLR"}}}, "the state has 1 schedulers, this one 2"},
		{"child kind", seq, SchedulerState{Kind: "SequentialLR", Schedulers: []SchedulerState{{Kind: "LinearLR"}, {Kind: "StepLR"}}}, "scheduler 1 is a CosineAnnealingLR, the state's a StepLR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.s.SaveState()
			err := tt.s.LoadState(tt.st)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			after, _ := json.Marshal(tt.s.SaveState())
			b, _ := json.Marshal(before)
			if string(after) != string(b) {
				t.Errorf("a refused state changed the scheduler: %s -> %s", b, after)
			}
		})
	}
}

func TestScheduleBuild(t *testing.T) {
	tests := []struct {
		s       Schedule
		nilSch  bool
		wantErr string
		desc    string
	}{
		{s: Schedule{}, nilSch: true, desc: "constant"},
		{s: Schedule{Kind: "constant", Warmup: 3, WarmupFactor: 0.01}, desc: "LinearLR(start_factor=0.01, total_iters=3) then constant from step 3"},
		{s: Schedule{Kind: "cosine", Steps: 100, Warmup: 10, WarmupFactor: 0.01}, desc: "LinearLR(start_factor=0.01, total_iters=10) then CosineAnnealingLR(T_max=90, eta_min=0) from step 10"},
		{s: Schedule{Kind: "step", StepSize: 30, Gamma: 0.1}, desc: "StepLR(step_size=30, gamma=0.1)"},
		{s: Schedule{Kind: "cosine", Steps: 10, Warmup: 10, WarmupFactor: 0.01}, wantErr: "no steps left to decay over"},
		{s: Schedule{Kind: "linear", Steps: 10, MinLR: 1}, wantErr: "minimum rate 1: must be between 0 and the rate 0.1"},
		{s: Schedule{Kind: "step"}, wantErr: "step size 0: must be at least 1"},
		{s: Schedule{Kind: "exp"}, wantErr: `unknown schedule "exp"`},
		{s: Schedule{Kind: "cosine", Steps: 10, Warmup: 2}, wantErr: "warm-up factor 0: must be above 0"},
		{s: Schedule{Warmup: -1}, wantErr: "warm-up of -1 steps"},
	}
	for _, tt := range tests {
		opt, _ := NewSGD(SGDConfig{LR: 0.1})
		s, err := tt.s.Build(opt)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%+v: err %v, want %q", tt.s, err, tt.wantErr)
			}
			if opt.LR() != 0.1 {
				t.Errorf("%+v: a refused schedule changed the rate to %v", tt.s, opt.LR())
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tt.s, err)
			continue
		}
		if (s == nil) != tt.nilSch {
			t.Errorf("%+v: scheduler %v", tt.s, s)
		}
		if got := tt.s.String(); got != tt.desc {
			t.Errorf("%+v: String() = %q, want %q", tt.s, got, tt.desc)
		}
	}
}
