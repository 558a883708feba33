package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/internal/runreport"
	"github.com/headroom-ml/headroom/internal/tfevents"
)

// The --log file holds one JSON object per line, of the types
// internal/runreport declares (and headroom report reads): a run line
// (runreport.Header) opens each run (a resumed run adds another) and says
// what ran and what was planned, a step line (runreport.Step) follows each
// step, an eval line (runreport.Eval) each evaluation of a set.

// openLogs opens --log and --tensorboard.
func (r *runner) openLogs() error {
	if r.f.logPath != "" {
		lf, err := openLog(r.f.logPath, r.f.resume != "")
		if err != nil {
			return fmt.Errorf("--log: %w", err)
		}
		r.logFile = lf
	}
	if r.f.tensorboard != "" {
		tb, err := tfevents.Create(r.f.tensorboard, time.Now())
		if err != nil {
			return fmt.Errorf("--tensorboard: %w", err)
		}
		r.tb = tb
		fmt.Fprintf(r.out, "tensorboard events: %s (view with: tensorboard --logdir %s)\n", tb.Path(), r.f.tensorboard)
	}
	return nil
}

func (r *runner) closeLogs() {
	if r.logFile != nil {
		r.logFile.Close()
	}
	if r.tb != nil {
		r.tb.Close()
	}
}

// writeLine writes one JSON line to --log, in one write to the unbuffered
// file, so that each line is on disk (in the page cache) as soon as it is
// complete.
func (r *runner) writeLine(v any) error {
	if r.logFile == nil {
		return nil
	}
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := r.logFile.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("--log: %w", err)
	}
	return nil
}

// logRun writes the run's first line.
func (r *runner) logRun(stepsPerEpoch int) error {
	if r.logFile == nil {
		return nil
	}
	p := r.plan
	var text bytes.Buffer
	p.Print(&text)
	rec := runreport.Header{Kind: runreport.KindRun, Time: time.Now().UTC().Format(time.RFC3339), Model: r.f.model, Parameters: r.tr.Store.NumParams(),
		Optimizer: r.f.optimizer, LR: r.f.lr, Schedule: r.schedDesc, Batch: r.f.batch, MicroBatch: r.micro, Accumulation: r.accum,
		Precision: fmt.Sprint(r.tr.Config().Precision), Device: fmt.Sprint(r.dev), Budget: r.f.budget, Threads: parallel.Threads(),
		Samples: r.n, StepsPerEpoch: stepsPerEpoch, Epochs: r.f.epochs, ResumedAt: r.last.Step,
		Planned: map[string]int64{
			device.Parameter.String(): p.Parameters, device.Gradient.String(): p.Gradients,
			device.OptimizerState.String(): p.OptimizerState, device.Activation.String(): p.Activations,
		},
		PlannedPeak: p.Total(), PlanText: text.String()}
	return r.writeLine(rec)
}

// logStep writes a step's line and its TensorBoard scalars.
func (r *runner) logStep(rec runreport.Step, st device.Stats) error {
	rec.PlannedPeak = r.plan.Total()
	rec.PeakByCategory = map[string]int64{}
	for _, c := range device.Categories() {
		if b := st.ByCategoryAtPeak[c]; b != 0 {
			rec.PeakByCategory[c.String()] = b
		}
	}
	if err := r.writeLine(rec); err != nil {
		return err
	}
	if r.tb == nil {
		return nil
	}
	const mib = 1 << 20
	err := r.tb.Scalars(rec.Step, time.Now(),
		tfevents.Value{Tag: "train/loss", Value: float32(rec.Loss)},
		tfevents.Value{Tag: "train/lr", Value: float32(rec.LR)},
		tfevents.Value{Tag: "train/samples_per_s", Value: float32(rec.SamplesPerSec)},
		tfevents.Value{Tag: "train/data_wait_s", Value: float32(rec.DataWaitSec)},
		tfevents.Value{Tag: "memory/peak_allocated_MiB", Value: float32(float64(rec.PeakAllocated) / mib)},
		tfevents.Value{Tag: "memory/peak_reserved_MiB", Value: float32(float64(rec.PeakReserved) / mib)},
		tfevents.Value{Tag: "memory/planned_peak_MiB", Value: float32(float64(rec.PlannedPeak) / mib)})
	if err != nil {
		return fmt.Errorf("--tensorboard: %w", err)
	}
	return nil
}

// logEval writes an evaluation's line and scalars.
func (r *runner) logEval(epoch int, set string, res evalResult) error {
	rec := runreport.Eval{Kind: runreport.KindEval, Step: r.last.Step, Epoch: epoch, Set: set, Loss: res.loss, LossName: res.lossName, Samples: res.n}
	values := []tfevents.Value{{Tag: set + "/loss", Value: float32(res.loss)}}
	if res.targets > 0 {
		acc := float64(res.correct) / float64(res.targets)
		rec.Accuracy = &acc
		values = append(values, tfevents.Value{Tag: set + "/accuracy", Value: float32(acc)})
	}
	if err := r.writeLine(rec); err != nil {
		return err
	}
	if r.tb != nil {
		if err := r.tb.Scalars(r.last.Step, time.Now(), values...); err != nil {
			return fmt.Errorf("--tensorboard: %w", err)
		}
	}
	return nil
}
