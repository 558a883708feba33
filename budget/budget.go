// Package budget chooses how to train within a memory budget: the
// micro-batch size and number of accumulation steps, which activations to
// recompute, the numeric precision, how saved activations are stored and
// (when allowed) whether the optimizer runs in the backward pass, so that
// the step fits with the least estimated time. It decides from memory
// plans on the meta device alone: no step runs, nothing is allocated,
// nothing can run out of memory.
package budget

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// Problem is a training configuration to fit.
type Problem struct {
	// Build registers the model in s and returns it with its loss.
	Build func(s *nn.Store) (train.Model, train.LossFunc)
	// Example gives the input and target metadata of a batch of n samples.
	Example func(n int) (x, y trace.Meta)
	// Inputs, for a model of several inputs (train.MultiModel), gives the
	// metadata of its further inputs (x1, x2, ...) in a batch of n
	// samples; nil for a model of one input.
	Inputs func(n int) []trace.Meta
	// Batch is the effective batch size (samples per optimizer step).
	Batch int
	// Budget is the memory limit in bytes.
	Budget int64
	// NewOptimizer returns the optimizer (its state counts against the budget).
	NewOptimizer func() (optim.Optimizer, error)
	// Cost ranks candidate plans; zero means HostCost(), this CPU's row
	// of the throughput table (DefaultCost on AVX2 machines). Fit charges
	// each node the arithmetic of the kernel the planning device's
	// backend runs for it (CostModel.On).
	Cost CostModel
	// Policies restricts the recomputation policies tried (default: all,
	// Policies).
	Policies []Policy
	// Precisions lists the numeric precisions the planner may choose.
	// Default: fp32 only, so that the planner changes numerics only where
	// it is allowed to (AutoPrecisions).
	Precisions []transform.Precision
	// Compress lists the saved-activation storage policies the planner may
	// choose (transform.Compressions names). Default: none only. For bf16,
	// fp16, int8 and offload the planner also chooses which tensors: the
	// largest ones, as few as fit (Choice.Compress).
	Compress []transform.Compression
	// OptimizerInBackward lets the planner update parameters in the
	// backward pass and free each gradient as it is consumed
	// (train.Config.OptimizerInBackward): every plan with one micro-batch
	// (but in fp16-mixed, whose GradScaler must see every gradient first)
	// then runs that way, since it gives the same results and is no
	// slower, unless its gradients in the arena (where GradientBuffers
	// allows them) peak lower: those wait for the step's end, where a
	// ResNet's backward peak is past, while the update in the backward
	// pass takes each weight gradient where autograd makes it. Plans that
	// accumulate micro-batches keep gradient buffers. It needs an
	// optimizer that updates one parameter at a time (SGD, Adam, AdamW);
	// with another it changes nothing.
	OptimizerInBackward bool
	// GradientBuffers keeps every gradient in a buffer held for the whole
	// step (train.Config.GradientBuffers). By default (false) every plan
	// of one micro-batch, in any precision, that does not update in the backward
	// pass keeps its gradients in the step's arena from the backward pass
	// to the optimizer step instead, since that gives the same results,
	// takes no more time and never more memory (its peak counts only the
	// gradients produced so far), as PyTorch's
	// zero_grad(set_to_none=True); plans that accumulate micro-batches
	// keep gradient buffers, and the result
	// says so (Result.Print).
	GradientBuffers bool
	// Outputs plans steps that keep the model's outputs to their end for
	// train.Trainer.Outputs (train.Config.Outputs): they count against
	// the budget.
	Outputs bool
}

// Choice is one way to run the step.
type Choice struct {
	MicroBatch   int // samples per forward/backward pass
	Accumulation int // passes per optimizer step
	Precision    transform.Precision
	// Compression names the saved-activation storage policy (a
	// transform.Compressions name); Compress is the policy to set on the
	// trainer (nil for "none"), with the size threshold the planner chose.
	Compression string
	Compress    transform.CompressPolicy
	Policy      Policy
	Remat       transform.Policy // nil for RecomputeNone
	Recomputed  int              // forward nodes recomputed
	// Stride (auto only) is how the chain of residual additions is
	// checkpointed: one block output in Stride is kept and the others are
	// recomputed from it in the backward pass, one segment at a time
	// (checkpoint_sequential's segments); 0 keeps every block output.
	Stride int
	// prefix is how many of the auto policy's candidates are recomputed.
	prefix int
	// InBackward runs the optimizer in the backward pass
	// (train.Config.OptimizerInBackward): no gradient buffers, each
	// gradient freed by its parameter's update. Only with one micro-batch,
	// not in fp16-mixed (its GradScaler).
	InBackward bool
	// ArenaGradients keeps the gradients in the step's arena from the
	// backward pass to the optimizer step (train.Config.GradientBuffers unset):
	// no gradient buffers. Only with one micro-batch, and not with
	// InBackward (which frees them sooner).
	ArenaGradients bool
	Memory         train.MemoryPlan // of a full micro-batch
	Time           float64          // estimated seconds per optimizer step
	// Reserved is the device memory the run needs: the segments the
	// allocator maps for parameters, gradients, optimizer state and the
	// step's arena, simulated with the same allocator on the meta device
	// (capped at the budget when it fits there, else uncapped); with the
	// optimizer in the backward pass at least what setting up reserves,
	// gradient buffers included, since they are freed only by the first
	// step.
	Reserved int64
	// Capacity is the device capacity the run is to be capped at: the
	// budget, or, where the allocator's regular segment sizes keep the
	// run from fitting a device capped at the budget itself, the smallest
	// capacity below it that holds it (allocations under a tighter cap
	// map tighter segments).
	Capacity int64
	// Fits reports whether the run fits on a device capped at the budget
	// (simulated: under a capacity the allocator maps tighter segments, so
	// a run may fit a budget below its uncapped Reserved).
	Fits bool
	// Outputs: the step keeps the model's outputs (Problem.Outputs).
	Outputs bool

	// Filled in for Result.Best only (Fit's describe): what the precision
	// and compression do to a full micro-batch.
	Rounded int                     // values rounded to the low precision
	Saved   transform.CompressStats // saved activations and how they are stored
}

// Bytes is what the choice needs from the device (Reserved).
func (c Choice) Bytes() int64 { return c.Reserved }

// Config is the trainer configuration that runs the choice: micro-batches
// by accumulation, precision, saved-activation storage, recomputation and
// where the optimizer runs.
func (c Choice) Config() train.Config {
	st, _ := train.StorageOf(c.Compress) // the planner makes only Compression values
	return train.Config{Accumulation: c.Accumulation, Precision: c.Precision, Recompute: train.MustRecompute(c.Remat), Storage: st, OptimizerInBackward: c.InBackward, GradientBuffers: !c.ArenaGradients, Outputs: c.Outputs}
}

// Apply configures tr to run the choice (tr.SetConfig(c.Config())). Step
// splits each batch into Accumulation micro-batches; a caller of
// StepAccumulate splits them itself (train.Split).
func (c Choice) Apply(tr *train.Trainer) error {
	return tr.SetConfig(c.Config())
}

// minBytes is the compression size threshold of a choice (0: none).
func (c Choice) minBytes() int64 {
	if cp, ok := c.Compress.(transform.Compression); ok && cp.To != transform.Keep {
		return cp.MinBytes
	}
	return 0
}

// Result is the chosen plan and what it was compared with.
type Result struct {
	Best Choice
	// Baseline is the whole batch at once in the first allowed precision
	// (fp32 by default) with nothing recomputed or compressed and the
	// problem's gradient mode, which may not fit: the reference for the
	// slowdown.
	Baseline   Choice
	Candidates []Choice
	// Pruned counts the (precision, compression, recomputation) settings
	// not searched because their cheapest possible step was already slower
	// than a plan that fits.
	Pruned int
	// notInBackward says why Best runs the optimizer after the backward
	// pass although Problem.OptimizerInBackward allowed otherwise ("" when
	// not asked, or when Best runs it in the backward pass).
	notInBackward string
	// notArena says why Best keeps gradient buffers although
	// Problem.GradientBuffers did not ask for them ("" when it did, or
	// when Best has none).
	notArena string
	// nativeBF16 is set when the cost model charged bf16 products at a
	// native kernel's rate (CostModel.BF16FLOPS): the plan's wording.
	nativeBF16 bool
}

// Slowdown is the best choice's estimated time over the baseline's.
func (r *Result) Slowdown() float64 { return r.Best.Time / r.Baseline.Time }

// Fit chooses the fastest plan within the budget.
//
// The search: every allowed (precision, compression) setting is planned
// for the whole batch with nothing recomputed, which bounds from below
// every plan of that setting (micro-batches repeat per-node overheads and
// parameter reads, recomputation and compression add nodes, and the cost
// model is additive). Settings are searched in order of that bound and
// skipped once a plan that fits is as fast. Within a setting each
// recomputation policy finds the largest micro-batch that fits (the most
// memory the policy can save), then for auto the fewest recomputed nodes,
// then for bf16/fp16/int8/offload the fewest compressed tensors (largest
// first) that still fit. With Problem.OptimizerInBackward, a plan of one
// micro-batch (not fp16-mixed) runs the optimizer in the backward pass, and the
// least-memory plan may be the whole batch that way.
func Fit(ctx context.Context, p Problem) (*Result, error) {
	if err := CheckBatch(p); err != nil {
		return nil, err
	}
	pols := p.Policies
	if len(pols) == 0 {
		pols = Policies
	}
	for _, s := range pols {
		if s > RecomputeAuto {
			return nil, fmt.Errorf("budget: unknown recomputation policy %v", s)
		}
	}
	f, err := newFitter(p)
	if err != nil {
		return nil, err
	}
	defer f.close()
	res := &Result{nativeBF16: f.cost.BF16FLOPS > 0}
	// The baseline is the step as it runs without the planner: gradients
	// where the problem asks for them (in the arena by default), so a
	// plan's slowdown never counts the arena's savings as speed.
	if res.Baseline, err = f.plan(setting{prec: f.sets[0].prec, comp: "none"}, p.Batch, RecomputeNone, 0, 0, 0, f.noBufs()); err != nil {
		return nil, err
	}
	if f.check[0] == nil && (!f.noBufs() || f.check[1] == nil) {
		// Nothing is searched at the budget: nothing else fits if these
		// do not. Below it a tighter capacity may still fit.
		c, ok, err := f.belowBudget(pols)
		if err != nil {
			return nil, err
		}
		if !ok {
			reason := fmt.Sprintf("parameters, gradients and optimizer state alone (%s) do not fit", device.FormatBytes(f.persistent))
			if f.noBufs() {
				reason = fmt.Sprintf("parameters and optimizer state alone (%s) do not fit", device.FormatBytes(f.full[1].dev.Alloc.Stats().AllocatedBytes.Current))
			}
			return nil, f.tooSmall(pols, reason)
		}
		res.Candidates = []Choice{c}
		return f.finish(res)
	}

	bound := make([]float64, len(f.sets))
	for i, s := range f.sets {
		if s.refinable() {
			// Compressing fewer tensors costs less, down to nothing.
			s = setting{prec: s.prec, comp: "none"}
		}
		// The whole batch with and without gradient buffers: micro-
		// batched plans keep them.
		for _, ib := range []bool{false, true} {
			c, err := f.plan(s, p.Batch, RecomputeNone, 0, 0, 0, ib)
			if err != nil {
				return nil, err
			}
			if !ib || c.noBuffers() {
				if bound[i] == 0 || c.Time < bound[i] {
					bound[i] = c.Time
				}
			}
		}
	}
	order := make([]int, len(f.sets))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return bound[order[a]] < bound[order[b]] })
	bestTime := 0.0 // 0: nothing fits yet
	for _, i := range order {
		s := f.sets[i]
		for _, pol := range pols {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if bestTime > 0 && bound[i] >= bestTime {
				res.Pruned++
				continue
			}
			c, ok, err := f.best(s, pol, bestTime)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			if c, err = f.refine(s, c); err != nil {
				return nil, err
			}
			if c.Policy == RecomputeAuto && c.Recomputed == 0 {
				c.Policy, c.Remat = RecomputeNone, nil
			}
			if j := slices.IndexFunc(res.Candidates, c.same); j >= 0 {
				// Name it by the simpler storage (a threshold above
				// every tensor leaves only the masks).
				if slices.Index(transform.Compressions, c.Compression) < slices.Index(transform.Compressions, res.Candidates[j].Compression) {
					res.Candidates[j] = c
				}
				continue
			}
			res.Candidates = append(res.Candidates, c)
			if bestTime == 0 || c.Time < bestTime {
				bestTime = c.Time
			}
		}
	}
	if len(res.Candidates) == 0 {
		c, ok, err := f.belowBudget(pols)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, f.tooSmall(pols, "")
		}
		res.Candidates = []Choice{c}
	}
	return f.finish(res)
}

// finish chooses the fastest candidate and says what it does.
func (f *fitter) finish(res *Result) (*Result, error) {
	p := f.p
	sort.SliceStable(res.Candidates, func(i, j int) bool { return res.Candidates[i].Time < res.Candidates[j].Time })
	res.Best = res.Candidates[0]
	if err := f.describe(&res.Best); err != nil {
		return nil, err
	}
	if b := res.Best; p.OptimizerInBackward && !b.InBackward {
		switch {
		case f.inBackErr != nil:
			res.notInBackward = f.inBackErr.Detail()
		case b.Accumulation > 1:
			res.notInBackward = fmt.Sprintf("the plan accumulates %d micro-batches", b.Accumulation)
		case b.Precision.NeedsScaler():
			res.notInBackward = fmt.Sprintf("not with %v precision (its GradScaler must check all gradients before any update)", b.Precision)
		default: // both applied: Fit kept the lower (fitter.plan)
			res.notInBackward = "with the gradients in the arena the step peaks lower"
		}
	}
	if b := res.Best; !p.GradientBuffers && !b.noBuffers() {
		// Accumulation adds micro-batches' gradients up in buffers (the
		// only plans that keep them: train.Config.ArenaApplies).
		res.notArena = fmt.Sprintf("the plan accumulates %d micro-batches", b.Accumulation)
	}
	return res, nil
}

// MaxBatch is the automatic batch size: the largest batch, up to p.Batch,
// that fits the budget in one pass under policy, in the first allowed
// precision and compression (fp32 and none by default), with the
// optimizer in the backward pass, else the gradients in the arena, when
// p allows it and that precision is fp32 (one pass is one micro-batch),
// found from plans alone (no trial
// steps): it fits and one more sample does not. It is 0 when not even one
// sample fits.
func MaxBatch(ctx context.Context, p Problem, policy Policy) (int, error) {
	if policy > RecomputeAuto {
		return 0, fmt.Errorf("budget: unknown recomputation policy %v", policy)
	}
	if p.Batch < 1 {
		return 0, fmt.Errorf("%w: batch size must be positive, got %d", ErrBatch, p.Batch)
	}
	f, err := newFitter(p)
	if err != nil {
		return 0, err
	}
	defer f.close()
	fits := func(m int) (bool, error) {
		f.p.Batch = m
		if CheckBatch(f.p) != nil {
			return false, nil // too large to size: it does not fit
		}
		c, err := f.most(f.sets[0], m, policy)
		if errors.Is(err, train.ErrSize) {
			return false, nil
		}
		return err == nil && c.Fits, err
	}
	lo, hi := 0, p.Batch
	for lo < hi {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		d := hi - lo
		mid := lo + d/2 + d%2 // the upper middle, with no overflow near MaxInt
		ok, err := fits(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}

// extra is the metadata of a MultiModel's further inputs in a batch of n
// samples (Problem.Inputs), or nil.
func (p Problem) extra(n int) []trace.Meta {
	if p.Inputs == nil {
		return nil
	}
	return p.Inputs(n)
}
