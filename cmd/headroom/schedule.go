package main

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/headroom-ml/headroom/optim"
)

// scheduleFlags are train's learning-rate schedule flags. They follow
// torchvision's reference training scripts (--lr-scheduler,
// --lr-warmup-epochs, --lr-warmup-decay, --lr-step-size, --lr-gamma,
// --lr-min), counted in optimizer steps rather than epochs.
type scheduleFlags struct {
	kind        string
	warmup      int
	warmupDecay float64
	stepSize    int
	gamma       float64
	minLR       float64
}

// define adds the flags to fs.
func (s *scheduleFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&s.kind, "lr-schedule", "constant", "learning-rate schedule over the optimizer steps of the run (PyTorch's schedulers, stepped after each step): constant, step (StepLR), cosine (CosineAnnealingLR down to --lr-min at the last step) or linear (LinearLR down to --lr-min at the last step); its position is saved in checkpoints")
	fs.IntVar(&s.warmup, "lr-warmup-steps", 0, "steps of linear warm-up before the schedule (LinearLR from --lr-warmup-decay times --lr up to --lr, then SequentialLR to the schedule)")
	fs.Float64Var(&s.warmupDecay, "lr-warmup-decay", 0.01, "the factor of --lr the warm-up starts from (above 0, at most 1)")
	fs.IntVar(&s.stepSize, "lr-step-size", 0, "with --lr-schedule step: multiply the rate by --lr-gamma every this many steps")
	fs.Float64Var(&s.gamma, "lr-gamma", 0.1, "with --lr-schedule step: the factor applied every --lr-step-size steps")
	fs.Float64Var(&s.minLR, "lr-min", 0, "with --lr-schedule cosine or linear: the rate at the last step")
}

// check validates the flags alone; the schedule's length is known only
// once the data is (see spec).
func (s *scheduleFlags) check(lr float64, given map[string]bool) error {
	s.kind = cmp.Or(s.kind, "constant")
	if !slices.Contains(optim.ScheduleKinds, s.kind) {
		msg := fmt.Sprintf("--lr-schedule %q: not a schedule (valid: %s)", s.kind, strings.Join(optim.ScheduleKinds, ", "))
		if sg := suggest(s.kind, optim.ScheduleKinds); sg != "" {
			msg += fmt.Sprintf("; did you mean %q?", sg)
		}
		return fmt.Errorf("%s", msg)
	}
	// A flag of another schedule is a mistake, not something to ignore.
	for _, fl := range []struct {
		name  string
		kinds []string
	}{{"lr-step-size", []string{"step"}}, {"lr-gamma", []string{"step"}}, {"lr-min", []string{"cosine", "linear"}}} {
		if given[fl.name] && !slices.Contains(fl.kinds, s.kind) {
			return fmt.Errorf("--%s applies only with --lr-schedule %s", fl.name, strings.Join(fl.kinds, " or "))
		}
	}
	if given["lr-warmup-decay"] && s.warmup == 0 {
		return fmt.Errorf("--lr-warmup-decay applies only with --lr-warmup-steps")
	}
	switch {
	case s.warmup < 0:
		return fmt.Errorf("--lr-warmup-steps %d: must be at least 0", s.warmup)
	case s.warmup > 0 && !(s.warmupDecay > 0 && s.warmupDecay <= 1):
		return fmt.Errorf("--lr-warmup-decay %g: must be above 0 and at most 1", s.warmupDecay)
	case s.kind == "step" && s.stepSize < 1:
		return fmt.Errorf("--lr-schedule step needs --lr-step-size N (at least 1): the rate is multiplied by --lr-gamma every N steps")
	case s.kind == "step" && (!(s.gamma > 0) || math.IsInf(s.gamma, 0)):
		return fmt.Errorf("--lr-gamma %g: must be a positive, finite number", s.gamma)
	case !(s.minLR >= 0 && s.minLR <= lr):
		return fmt.Errorf("--lr-min %g: must be between 0 and --lr %g", s.minLR, lr)
	}
	return nil
}

// spec is the schedule of a run of steps optimizer steps.
func (s *scheduleFlags) spec(steps int) optim.Schedule {
	return optim.Schedule{Kind: cmp.Or(s.kind, "constant"), Steps: steps, Warmup: s.warmup, WarmupFactor: s.warmupDecay,
		StepSize: s.stepSize, Gamma: s.gamma, MinLR: s.minLR}
}

// startSchedule builds the run's scheduler once the number of steps per
// epoch is known, and on resume puts it where the checkpoint's was. The
// optimizer's rate is the checkpoint's (it came back with the optimizer's
// state): building a scheduler sets the step-0 rate, so it is built from
// --lr and the saved rate put back after, as PyTorch's order of
// construction then load_state_dict does.
func (r *runner) startSchedule(perEpoch int) error {
	f := r.f
	total := f.epochs * perEpoch
	if f.steps > 0 {
		total = min(total, f.steps)
	}
	spec := f.sched.spec(total)
	r.schedDesc = spec.String()
	if r.resumed {
		// A checkpoint from before schedules were saved ran at a constant rate.
		if got := cmp.Or(r.resumeMeta["lr_schedule"], "constant"); got != r.schedDesc {
			return fmt.Errorf("--resume: the checkpoint was trained with the schedule %s, this run has %s (resuming exactly needs the same schedule over the same number of steps: --lr-schedule, --lr-warmup-*, --epochs, --steps)", got, r.schedDesc)
		}
	}
	opt := r.tr.Opt
	saved := opt.LR()
	opt.SetLR(f.lr)
	sched, err := spec.Build(opt)
	if err != nil {
		opt.SetLR(saved)
		return fmt.Errorf("--lr-schedule: %w", err)
	}
	r.sched = sched
	if sched == nil {
		opt.SetLR(saved)
		return nil
	}
	if r.resumed {
		if r.last.Schedule == nil {
			return fmt.Errorf("--resume: the checkpoint has no schedule position")
		}
		if err := sched.LoadState(*r.last.Schedule); err != nil {
			return fmt.Errorf("--resume: %w", err)
		}
		opt.SetLR(saved)
	} else {
		st := sched.SaveState()
		r.last.Schedule = &st
	}
	fmt.Fprintf(r.out, "lr schedule: %s over %d steps\n", r.schedDesc, total)
	return nil
}

// advanceSchedule steps the scheduler after an optimizer step and records
// its position in the state a checkpoint saves.
func (r *runner) advanceSchedule() {
	if r.sched == nil {
		return
	}
	r.sched.Step()
	st := r.sched.SaveState()
	r.last.Schedule = &st
}
