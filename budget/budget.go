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
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
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
	// Batch is the effective batch size (samples per optimizer step).
	Batch int
	// Budget is the memory limit in bytes.
	Budget int64
	// NewOptimizer returns the optimizer (its state counts against the budget).
	NewOptimizer func() (optim.Optimizer, error)
	// Cost ranks candidate plans; zero means DefaultCost.
	Cost CostModel
	// Policies restricts the recomputation policies tried (default: all,
	// Policies).
	Policies []Policy
	// Precisions lists the numeric precisions the planner may choose
	// (transform.Precisions names). Default: fp32 only, so that the planner
	// changes numerics only where it is allowed to (AutoPrecisions).
	Precisions []string
	// Compress lists the saved-activation storage policies the planner may
	// choose (transform.Compressions names). Default: none only. For bf16,
	// fp16, int8 and offload the planner also chooses which tensors: the
	// largest ones, as few as fit (Choice.Compress).
	Compress []string
	// OptimizerInBackward lets the planner update parameters in the
	// backward pass and free each gradient as it is consumed
	// (train.Trainer.OptimizerInBackward): every plan with one micro-batch
	// in fp32 then runs that way, since it gives the same results, is no
	// slower and needs less memory; plans that accumulate micro-batches or
	// round to a lower precision keep gradient buffers. It needs an
	// optimizer that updates one parameter at a time (SGD, Adam, AdamW);
	// with another it changes nothing.
	OptimizerInBackward bool
}

// AutoPrecisions are the precisions `--precision auto` lets the planner
// choose from. fp16-mixed needs dynamic loss scaling and bf16-true rounds
// the weights themselves: the user asks for those by name.
var AutoPrecisions = []string{"fp32", "bf16-mixed"}

// AutoCompress are the saved-activation storage policies `--compress auto`
// lets the planner choose from: none, ReLU masks as bits (exact), and bf16
// or int8 with masks as bits. fp16 (overflow above 65504) and offload (host
// memory and copies) are asked for by name.
var AutoCompress = []string{"none", "masks", "bf16", "int8"}

// ParsePrecisions reads a --precision value: "auto" (AutoPrecisions) or
// one or more comma-separated transform.Precisions names.
func ParsePrecisions(s string) ([]string, error) {
	return parseList(s, "precision", AutoPrecisions, transform.Precisions, func(n string) error {
		_, err := transform.ParsePrecision(n)
		return err
	})
}

// ParseCompressions reads a --compress value: "auto" (AutoCompress) or one
// or more comma-separated transform.Compressions names.
func ParseCompressions(s string) ([]string, error) {
	return parseList(s, "compression policy", AutoCompress, transform.Compressions, func(n string) error {
		_, err := transform.ParseCompress(n)
		return err
	})
}

func parseList(s, what string, auto, valid []string, check func(string) error) ([]string, error) {
	if s == "auto" {
		return slices.Clone(auto), nil
	}
	var out []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if check(n) != nil || n == "" {
			return nil, fmt.Errorf("unknown %s %q (valid: auto, %s, or a comma-separated list of them)", what, n, strings.Join(valid, ", "))
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
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
	// (train.Trainer.OptimizerInBackward): no gradient buffers, each
	// gradient freed by its parameter's update. Only with one micro-batch
	// in fp32.
	InBackward bool
	Memory     train.MemoryPlan // of a full micro-batch
	Time       float64          // estimated seconds per optimizer step
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
	return train.Config{Accumulation: c.Accumulation, Precision: c.Precision, Recompute: train.MustRecompute(c.Remat), Storage: st, OptimizerInBackward: c.InBackward}
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
	// (fp32 by default) with nothing recomputed or compressed, which may
	// not fit: the reference for the slowdown.
	Baseline   Choice
	Candidates []Choice
	// Pruned counts the (precision, compression, recomputation) settings
	// not searched because their cheapest possible step was already slower
	// than a plan that fits.
	Pruned int
	// notInBackward says why Best keeps gradient buffers although
	// Problem.OptimizerInBackward allowed otherwise ("" when not asked, or
	// when Best runs the optimizer in the backward pass).
	notInBackward string
}

// Slowdown is the best choice's estimated time over the baseline's.
func (r *Result) Slowdown() float64 { return r.Best.Time / r.Baseline.Time }

// ErrBudget is matched by errors.Is for every *TooSmallError.
var ErrBudget = errors.New("budget too small")

// TooSmallError says the budget cannot hold the run, and what would.
type TooSmallError struct {
	Budget int64
	// Minimum is the smallest budget that works within the allowed
	// precisions, compressions and recomputation policies: accepted at
	// Minimum, refused at Minimum-1.
	Minimum int64
	// Persistent is what parameters, gradients and optimizer state
	// allocate: no budget below it can work, with the optimizer in the
	// backward pass too (a run allocates the gradient buffers with the
	// model, before its first step frees them).
	Persistent int64
	Reason     string
}

func (e *TooSmallError) Error() string {
	return fmt.Sprintf("budget %s is too small: %s; the smallest budget that works is %s",
		device.FormatBytes(e.Budget), e.Reason, device.FormatBytes(e.Minimum))
}

func (e *TooSmallError) Is(t error) bool { return t == ErrBudget }

// Policy is a recomputation policy the planner searches.
type Policy uint8

const (
	// RecomputeNone keeps every activation.
	RecomputeNone Policy = iota
	// RecomputeSelective recomputes cheap elementwise ops and norms
	// (transform.CheapOps).
	RecomputeSelective
	// RecomputeAuto recomputes the fewest nodes, cheapest per byte freed
	// first, and checkpoints residual chains in segments, to fit.
	RecomputeAuto
)

var policyNames = [...]string{"none", "selective", "auto"}

func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", p)
}

// MarshalText writes the policy by name (JSON too).
func (p Policy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a policy name.
func (p *Policy) UnmarshalText(b []byte) error {
	q, err := ParsePolicy(string(b))
	if err == nil {
		*p = q
	}
	return err
}

// Policies is every recomputation policy, in the order searched.
var Policies = []Policy{RecomputeNone, RecomputeSelective, RecomputeAuto}

// ParsePolicy reads a policy name: the one place policy names are read.
func ParsePolicy(s string) (Policy, error) {
	for i, n := range policyNames {
		if n == s {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown recomputation policy %q (valid: %s)", s, strings.Join(policyNames[:], ", "))
}

// Recompute is the trainer's recomputation for a policy that names no
// nodes (none and selective; auto's nodes come from the planner).
func (p Policy) Recompute() train.Recompute {
	if p == RecomputeSelective {
		return train.Selective
	}
	return train.NoRecompute
}

// setting is a precision and a saved-activation storage policy: the
// numerics of a plan, searched together with micro-batching and
// recomputation.
type setting struct {
	prec transform.Precision
	comp string                   // transform.Compressions name
	cpol transform.CompressPolicy // at its default threshold; nil for none
}

// refinable reports whether the planner chooses which tensors s compresses
// (a size threshold): formats that cost a pass per tensor.
func (s setting) refinable() bool {
	cp, ok := s.cpol.(transform.Compression)
	return ok && cp.To != transform.Keep
}

// withMin is s's policy compressing only tensors of at least b bytes (0:
// the default threshold).
func (s setting) withMin(b int64) transform.CompressPolicy {
	if b == 0 || !s.refinable() {
		return s.cpol
	}
	cp := s.cpol.(transform.Compression)
	cp.MinBytes = b
	return cp
}

// settings is the cross product of the allowed precisions and compression
// policies, in the order given (the first is the baseline's).
func settings(p Problem) ([]setting, error) {
	precs, comps := p.Precisions, p.Compress
	if len(precs) == 0 {
		precs = []string{"fp32"}
	}
	if len(comps) == 0 {
		comps = []string{"none"}
	}
	var out []setting
	for _, pn := range precs {
		prec, err := transform.ParsePrecision(pn)
		if err != nil {
			return nil, err
		}
		for _, cn := range comps {
			cp, err := transform.ParseCompress(cn)
			if err != nil {
				return nil, err
			}
			if cn == "" {
				cn = "none"
			}
			out = append(out, setting{prec, cn, cp})
		}
	}
	return out, nil
}

type fitter struct {
	p    Problem
	sets []setting
	// tr plans every candidate configuration on the meta device
	// (train.Trainer.PlanConfig: planning is a pure function of the
	// configuration and the shapes; the trainer is never reconfigured).
	tr *train.Trainer
	// inBack: Problem.OptimizerInBackward, and the optimizer can do it;
	// else inBackErr says why not.
	inBack    bool
	inBackErr *train.InBackwardError
	// full holds the persistent state of a run with gradient buffers
	// (full[0]) and of one with the optimizer in the backward pass
	// (full[1], when inBack) on uncapped meta devices; persistent is what
	// parameters, gradients and optimizer state allocate.
	full       [2]*runState
	persistent int64
	// check is the same on meta devices capped at the budget (nil if the
	// persistent state does not fit there): candidates are tried on it.
	check [2]*runState
	cost  CostModel
	// cands caches, per micro-batch size, the auto policy's candidate
	// nodes in the order they are given up.
	cands map[int][]int
	// chains caches, per micro-batch size, the residual additions of the
	// traced step in forward order (see Choice.Stride).
	chains map[int][]int
	// graphs caches, per micro-batch size, the traced step as
	// Rematerialize receives it, whose node IDs name the auto policy's
	// nodes under any precision or compression (they come after it) and in
	// either optimizer mode (the steps differ only after the backward
	// pass).
	graphs map[int]*trace.Graph
	// memo caches evaluations: the search asks for some of them twice
	// (bounds, least-memory plans).
	memo map[evalKey]Choice
}

type evalKey struct {
	batch, m   int
	prec       transform.Precision
	comp       string
	pol        Policy
	prefix     int
	stride     int
	minBytes   int64
	inBackward bool
}

// runState is a run's persistent state, set up on a meta device in the
// order a real run sets it up: candidates' arenas are tried next to it.
type runState struct {
	dev *device.Device
	// floor is what setting up reserved. The model is materialized with
	// its gradient buffers before the optimizer state is allocated, so a
	// run with the optimizer in the backward pass needs this much too,
	// although its first step frees the gradients.
	floor int64
}

// mode indexes fitter.full and fitter.check.
func mode(inBackward bool) int {
	if inBackward {
		return 1
	}
	return 0
}

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
// micro-batch in fp32 runs the optimizer in the backward pass, and the
// least-memory plan may be the whole batch that way.
func Fit(ctx context.Context, p Problem) (*Result, error) {
	if err := checkBatch(p); err != nil {
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
	res := &Result{}
	// The baseline keeps gradient buffers: it is the step as it runs
	// without the planner.
	if res.Baseline, err = f.plan(setting{prec: f.sets[0].prec, comp: "none"}, p.Batch, RecomputeNone, 0, 0, 0, false); err != nil {
		return nil, err
	}
	if f.check[0] == nil && (!f.inBack || f.check[1] == nil) {
		// Nothing is searched at the budget: nothing else fits if these
		// do not. Below it a tighter capacity may still fit.
		c, ok, err := f.belowBudget(pols)
		if err != nil {
			return nil, err
		}
		if !ok {
			reason := fmt.Sprintf("parameters, gradients and optimizer state alone (%s) do not fit", device.FormatBytes(f.persistent))
			if f.inBack {
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
		// The whole batch in either optimizer mode: micro-batched plans
		// keep gradient buffers.
		for _, ib := range []bool{false, true} {
			c, err := f.plan(s, p.Batch, RecomputeNone, 0, 0, 0, ib)
			if err != nil {
				return nil, err
			}
			if !ib || c.InBackward {
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
		default:
			res.notInBackward = fmt.Sprintf("not with %v precision", b.Precision)
		}
	}
	return res, nil
}

// ErrBatch is matched by errors.Is for a batch size that cannot be
// planned: not positive, or so large that its tensors' sizes overflow.
var ErrBatch = errors.New("budget: impossible batch size")

// checkBatch refuses batch sizes whose inputs cannot be sized: a byte
// count past 2^63 would wrap and every size derived from it would be
// nonsense (negative shapes, divisions by zero).
func checkBatch(p Problem) error {
	if p.Batch < 1 {
		return fmt.Errorf("%w: batch size must be positive, got %d", ErrBatch, p.Batch)
	}
	x, y := p.Example(p.Batch)
	for _, m := range []trace.Meta{x, y} {
		if _, ok := bytesOf(m); !ok {
			return fmt.Errorf("%w: a batch of %d samples has inputs of shape %v (%v): more than %s", ErrBatch, p.Batch, m.Shape, m.DType, device.FormatBytes(math.MaxInt64))
		}
	}
	return nil
}

// bytesOf is m's size in bytes, false when a dimension is negative or the
// size overflows int64.
func bytesOf(m trace.Meta) (int64, bool) {
	n := int64(m.DType.Size())
	for _, d := range m.Shape {
		if d < 0 {
			return 0, false
		}
		if d != 0 && n > math.MaxInt64/int64(d) {
			return 0, false
		}
		n *= int64(d)
	}
	return n, true
}

// belowBudget is the least-memory plan when it fits a capacity at or below
// the budget although nothing fits on a device capped at the budget itself
// (see minimum): the run then caps its device at Choice.Capacity, and every
// budget from the smallest that works up is accepted.
func (f *fitter) belowBudget(pols []Policy) (Choice, bool, error) {
	c, lowest, err := f.least(pols)
	if err != nil || lowest < 0 || lowest > f.p.Budget || f.p.Budget <= 0 {
		return Choice{}, false, err
	}
	st, err := f.setup(lowest, c.InBackward)
	if err != nil {
		return Choice{}, false, nil
	}
	r, ok := fits(st, c.Memory.ArenaBytes)
	if !ok {
		return Choice{}, false, nil
	}
	c.Fits, c.Capacity, c.Reserved = true, lowest, r
	return c, true, nil
}

// tooSmall is the error for a budget nothing fits: the least-memory plan
// of the allowed search space and the smallest capacity that holds it.
// With gradient buffers that is one sample per micro-batch, the most each
// policy recomputes, each setting's full compression; with the optimizer
// in the backward pass (one micro-batch, so the whole batch) the same
// recomputation and compression in fp32. The two modes set up different
// persistent state, so each has its own smallest capacity; the smaller
// one is the minimum.
func (f *fitter) tooSmall(pols []Policy, reason string) error {
	best, lowest, err := f.least(pols)
	if err != nil {
		return err
	}
	if reason == "" {
		how := "one sample per micro-batch"
		if best.InBackward {
			how = fmt.Sprintf("%d samples in one pass with the optimizer in the backward pass", best.MicroBatch)
		}
		reason = fmt.Sprintf("even the plan that needs the least memory (%s, %s, saved activations %s, recomputation %s) allocates %s at its peak and needs %s of device memory with the allocator's segments",
			how, best.Precision, best.Compression, best.Policy, device.FormatBytes(best.Memory.Total()), device.FormatBytes(lowest))
	}
	return &TooSmallError{Budget: f.p.Budget, Minimum: lowest, Persistent: f.persistent, Reason: reason}
}

// least is the least-memory plan of the allowed search space and the
// smallest capacity that holds it (the smallest budget that works). With
// gradient buffers that is one sample per micro-batch, the most each
// policy recomputes, each setting's full compression; with the optimizer
// in the backward pass (one micro-batch, so the whole batch) the same
// recomputation and compression in fp32. The two modes set up different
// persistent state, so each has its own smallest capacity; the smaller
// one is the minimum.
func (f *fitter) least(pols []Policy) (Choice, int64, error) {
	var least [2]Choice // per mode: the smallest arena
	consider := func(s setting, m int, pol Policy) error {
		c, err := f.most(s, m, pol)
		if err != nil {
			return err
		}
		if l := &least[mode(c.InBackward)]; l.MicroBatch == 0 || c.Memory.ArenaBytes < l.Memory.ArenaBytes {
			*l = c
		}
		return nil
	}
	for _, s := range f.sets {
		for _, pol := range pols {
			if err := consider(s, 1, pol); err != nil {
				return Choice{}, 0, err
			}
			if f.inBack && s.prec == transform.FP32 && f.p.Batch > 1 {
				if err := consider(s, f.p.Batch, pol); err != nil {
					return Choice{}, 0, err
				}
			}
		}
	}
	var best Choice
	lowest := int64(-1)
	for _, c := range least {
		if c.MicroBatch == 0 {
			continue
		}
		if m := f.minimum(c.Memory.ArenaBytes, c.Reserved, c.InBackward); lowest < 0 || m < lowest {
			best, lowest = c, m
		}
	}
	return best, lowest, nil
}

// effort is the prefix of the auto candidate list that saves the most
// memory (-1: all of it); other policies have no prefix.
func effort(pol Policy) int {
	if pol == RecomputeAuto {
		return -1
	}
	return 0
}

func newFitter(p Problem) (*fitter, error) {
	sets, err := settings(p)
	if err != nil {
		return nil, err
	}
	f := &fitter{p: p, sets: sets, cost: p.Cost, cands: map[int][]int{}, chains: map[int][]int{}, graphs: map[int]*trace.Graph{}, memo: map[evalKey]Choice{}}
	if f.cost == (CostModel{}) {
		f.cost = DefaultCost
	}
	opt, err := p.NewOptimizer()
	if err != nil {
		return nil, err
	}
	if f.tr, err = train.Setup(device.Meta(), 0, p.Build, opt); err != nil {
		return nil, err
	}
	if p.OptimizerInBackward {
		// The trainer is fp32 with no scaler or clipping: only the
		// optimizer can refuse here.
		err := f.tr.CheckOptimizerInBackward(1)
		f.inBack = err == nil
		if !f.inBack && !errors.As(err, &f.inBackErr) {
			f.close()
			return nil, err
		}
	}
	for _, ib := range []bool{false, true} {
		if ib && !f.inBack {
			break
		}
		if f.full[mode(ib)], err = f.setup(0, ib); err != nil {
			f.close()
			return nil, err
		}
		if p.Budget > 0 {
			f.check[mode(ib)], _ = f.setup(p.Budget, ib) // nil: the persistent state alone does not fit
		}
	}
	f.persistent = f.full[0].dev.Alloc.Stats().AllocatedBytes.Current
	return f, nil
}

func (f *fitter) close() {
	f.tr.Close()
}

// setup allocates the run's persistent state on a meta device capped at
// capacity (0: uncapped), in the order a real run allocates it: parameters
// (nn.Store.Materialize), optimizer state (train.New), then, unless the
// run updates in the backward pass, the gradient buffers (its first step
// or plan); an error when it does not fit.
func (f *fitter) setup(capacity int64, inBackward bool) (*runState, error) {
	dev := device.Meta()
	if capacity > 0 {
		var err error
		if dev, err = device.New(fmt.Sprintf("meta:mem=%d", capacity)); err != nil {
			return nil, err
		}
	}
	opt, err := f.p.NewOptimizer()
	if err != nil {
		return nil, err
	}
	// Gradient buffers come after the optimizer state (train.NewConfig);
	// a run that updates in the backward pass never has them.
	if _, err := train.SetupConfig(dev, 0, f.p.Build, opt, train.Config{OptimizerInBackward: inBackward}); err != nil {
		return nil, err
	}
	return &runState{dev: dev, floor: dev.Alloc.Stats().ReservedBytes.Current}, nil
}

// fits reports whether an arena of this size can be reserved next to the
// persistent state st, and the memory the run then reserves (at least
// what setting up reserved).
//
// The allocator first tries cached free blocks, then maps a segment, and
// when that would exceed the capacity unmaps every wholly free segment and
// retries: whether the arena fits does not depend on free segments still
// being cached, so the state set up with gradients freed and their
// segments given back stands for the run's.
func fits(st *runState, arena int64) (int64, bool) {
	if st == nil {
		return 0, false
	}
	b, err := st.dev.Alloc.Reserve(arena, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		return 0, false
	}
	r := max(st.floor, st.dev.Alloc.Stats().ReservedBytes.Current)
	st.dev.Alloc.Release(b)
	st.dev.Alloc.EmptyCache()
	return r, true
}

// minimum is the smallest capacity on which the persistent state of the
// optimizer mode and an arena of this size fit, to 4 KiB; hi is known to
// fit.
//
// Fitting is not monotonic in the capacity: under a capacity the allocator
// maps segments as tight as a request where its regular sizes (2 and 20
// MiB) do not fit, so a run may fit a capacity just below 2 MiB and not one
// just above it (the first small request takes a 2 MiB segment there). A
// binary search can land on the far side of such a gap; this search
// walks up from what the allocations alone need, each failed capacity
// raised by at least what its out-of-memory lacked.
func (f *fitter) minimum(arena, hi int64, inBackward bool) int64 {
	const page = 4096
	up := func(n int64) int64 { return (n + page - 1) / page * page }
	c := up(f.full[mode(inBackward)].dev.Alloc.Stats().AllocatedBytes.Current + arena)
	for c < hi {
		short, ok := f.tryCapacity(c, arena, inBackward)
		if ok {
			return c
		}
		c += max(page, up(short))
	}
	return hi
}

// tryCapacity sets the run up on a meta device capped at capacity and
// reserves the arena; when that fails, short is how many bytes the failed
// request lacked (0 when unknown).
func (f *fitter) tryCapacity(capacity, arena int64, inBackward bool) (short int64, ok bool) {
	lacked := func(err error) int64 {
		var oom *device.OutOfMemoryError
		if !errors.As(err, &oom) || oom.Limit <= 0 {
			return 0
		}
		need := (oom.Size + 4095) / 4096 * 4096
		return max(0, need-(oom.Limit-oom.Reserved))
	}
	st, err := f.setup(capacity, inBackward)
	if err != nil {
		return lacked(err), false
	}
	b, err := st.dev.Alloc.Reserve(arena, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		return lacked(err), false
	}
	st.dev.Alloc.Release(b)
	return 0, true
}

// reserved simulates the arena's reservation next to the persistent state
// of the optimizer mode and returns the device memory reserved with it, as
// a real run on a device with the same allocator would reserve.
func (f *fitter) reserved(arena int64, inBackward bool) (int64, error) {
	r, ok := fits(f.full[mode(inBackward)], arena)
	if !ok {
		return 0, fmt.Errorf("budget: an arena of %s does not fit on an uncapped device", device.FormatBytes(arena))
	}
	return r, nil
}

// MaxBatch is the automatic batch size: the largest batch, up to p.Batch,
// that fits the budget in one pass under policy, in the first allowed
// precision and compression (fp32 and none by default), with the
// optimizer in the backward pass when p allows it and that precision is
// fp32 (one pass is one micro-batch), found from plans alone (no trial
// steps): it fits and one more sample does not. It is 0 when not even one
// sample fits.
func MaxBatch(ctx context.Context, p Problem, policy Policy) (int, error) {
	if policy > RecomputeAuto {
		return 0, fmt.Errorf("budget: unknown recomputation policy %v", policy)
	}
	if err := checkBatch(p); err != nil {
		return 0, err
	}
	f, err := newFitter(p)
	if err != nil {
		return 0, err
	}
	defer f.close()
	fits := func(m int) (bool, error) {
		f.p.Batch = m
		c, err := f.most(f.sets[0], m, policy)
		return err == nil && c.Fits, err
	}
	lo, hi := 0, p.Batch
	for lo < hi {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		mid := (lo + hi + 1) / 2
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

// best finds, for one setting and policy, the largest micro-batch that
// fits and the cheapest recomputation at that size. A selective plan
// slower than bound (when positive) even for the whole batch is skipped.
func (f *fitter) best(s setting, pol Policy, bound float64) (Choice, bool, error) {
	fits := func(m int) (Choice, bool, error) {
		c, err := f.most(s, m, pol)
		return c, err == nil && c.Fits, err
	}
	n := f.p.Batch
	c, ok, err := fits(n)
	if err != nil {
		return Choice{}, false, err
	}
	if pol == RecomputeSelective && bound > 0 && c.Time >= bound {
		return Choice{}, false, nil
	}
	lo, hi := 0, n // lo fits (0 is a sentinel), hi+1 does not
	switch {
	case ok && pol != RecomputeAuto:
		return c, true, nil
	case ok:
		lo = n
	case n == 1:
		return Choice{}, false, nil
	default:
		// One sample first: when it does not fit, no size does.
		if _, ok, err := fits(1); err != nil || !ok {
			return Choice{}, false, err
		}
		lo, hi = 1, n-1
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		_, ok, err := fits(mid)
		if err != nil {
			return Choice{}, false, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if pol != RecomputeAuto {
		c, err := f.eval(s, lo, pol, 0, 0, 0)
		return c, err == nil, err
	}
	c, err = f.minimalAuto(s, lo)
	return c, err == nil, err
}

// minimalAuto is the fastest auto plan that fits at micro-batch m: for
// each residual-chain stride, the shortest prefix of the candidate list
// that fits.
//
// Keeping one block output in a few and recomputing the rest a segment at
// a time frees most of the memory that block outputs hold for the cost of
// elementwise ops plus the convolutions or matmuls the candidates already
// recompute: on ResNet-152 at 40% of its activations, a stride of 3 to 6
// needs about half the recomputation that keeping every block output does.
func (f *fitter) minimalAuto(s setting, m int) (Choice, error) {
	cands, err := f.candidates(m)
	if err != nil {
		return Choice{}, err
	}
	var best Choice
	for _, stride := range f.strides(m) {
		if c, err := f.eval(s, m, RecomputeAuto, len(cands), stride, 0); err != nil {
			return Choice{}, err
		} else if !c.Fits {
			continue
		}
		lo, hi := 0, len(cands)
		for lo < hi {
			mid := (lo + hi) / 2
			c, err := f.eval(s, m, RecomputeAuto, mid, stride, 0)
			if err != nil {
				return Choice{}, err
			}
			if c.Fits {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		c, err := f.eval(s, m, RecomputeAuto, lo, stride, 0)
		if err != nil {
			return Choice{}, err
		}
		if best.MicroBatch == 0 || c.Time < best.Time {
			best = c
		}
	}
	if best.MicroBatch == 0 {
		// best() saw the most recomputation fit; it is the fallback.
		return f.most(s, m, RecomputeAuto)
	}
	return best, nil
}

// most is policy pol's plan at micro-batch m that recomputes the most
// (effort): the first of the effortStrides that fits, else the one with
// the smallest arena. Whether a micro-batch fits at all, and the smallest
// budget, are decided by it.
func (f *fitter) most(s setting, m int, pol Policy) (Choice, error) {
	var least Choice
	for _, stride := range f.effortStrides(m, pol) {
		c, err := f.eval(s, m, pol, effort(pol), stride, 0)
		if err != nil || c.Fits {
			return c, err
		}
		if least.MicroBatch == 0 || c.Memory.ArenaBytes < least.Memory.ArenaBytes {
			least = c
		}
	}
	return least, nil
}

// chainStrides are the residual-chain strides the auto policy tries (0:
// every block output kept).
var chainStrides = []int{0, 2, 3, 4, 6, 8}

// strides lists the chainStrides that apply at micro-batch m: those below
// the number of residual additions.
func (f *fitter) strides(m int) []int {
	adds, err := f.chain(m)
	if err != nil {
		return []int{0}
	}
	var ss []int
	for _, s := range chainStrides {
		if s == 0 || s < len(adds) {
			ss = append(ss, s)
		}
	}
	return ss
}

// effortStrides are the strides tried with every candidate recomputed to
// decide whether anything fits: keeping every block output, and keeping
// one in two, which needs the least memory on the residual networks
// measured (longer segments hold more at once in the backward pass).
func (f *fitter) effortStrides(m int, pol Policy) []int {
	if pol != RecomputeAuto {
		return []int{0}
	}
	ss := f.strides(m)
	return ss[:min(2, len(ss))]
}

// chain lists the residual additions of the traced step at micro-batch m
// in forward order, as node IDs of graph(m).
func (f *fitter) chain(m int) ([]int, error) {
	if c, ok := f.chains[m]; ok {
		return c, nil
	}
	g, err := f.graph(m)
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, n := range g.Nodes {
		if n.Kind == trace.KindOp && n.Phase == trace.Forward && residual(n) && transform.Recomputable(n) {
			ids = append(ids, n.ID)
		}
	}
	f.chains[m] = ids
	return ids, nil
}

// refine compresses, for a setting that compresses tensors one pass each,
// only the largest saved tensors of c that it needs to fit: the highest
// size threshold that still fits (compression costs per byte, so a pass
// over a large tensor buys the most memory per node). It keeps c's
// micro-batch and recomputation.
func (f *fitter) refine(s setting, c Choice) (Choice, error) {
	if !s.refinable() {
		return c, nil
	}
	g, err := f.graph(c.MicroBatch)
	if err != nil {
		return c, err
	}
	if c.Remat != nil {
		if g, _, err = transform.Rematerialize(g, c.Remat); err != nil {
			return c, err
		}
	}
	var sizes []int64
	for _, sv := range transform.SavedValues(g) {
		if b := sv.Bytes(); !sv.Statistic && b >= transform.DefaultMinBytes && sv.Value.DType() == tensor.Float32 {
			sizes = append(sizes, b)
		}
	}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	// sizes[0] compresses what the default threshold does, which fits.
	lo, hi := 0, len(sizes)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		r, err := f.eval(s, c.MicroBatch, c.Policy, c.prefix, c.Stride, sizes[mid])
		if err != nil {
			return c, err
		}
		if r.Fits {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0 {
		return c, nil
	}
	r, err := f.eval(s, c.MicroBatch, c.Policy, c.prefix, c.Stride, sizes[lo])
	if err != nil || r.Time >= c.Time {
		return c, err
	}
	return r, nil
}

// graph is the traced step at micro-batch m as the trainer hands it to
// transform.Rematerialize: before precision, compression and fusion, so
// its node IDs are the ones a transform.Nodes policy names.
func (f *fitter) graph(m int) (*trace.Graph, error) {
	if g, ok := f.graphs[m]; ok {
		return g, nil
	}
	x, y := f.p.Example(m)
	g, err := f.tr.Trace(x, y)
	if err != nil {
		return nil, err
	}
	f.graphs[m] = g
	return g, nil
}

// candidates lists the forward nodes whose outputs the backward pass keeps,
// cheapest recomputation per byte freed first, as node IDs of the traced
// step (graph).
func (f *fitter) candidates(m int) ([]int, error) {
	if c, ok := f.cands[m]; ok {
		return c, nil
	}
	g, err := f.graph(m)
	if err != nil {
		return nil, err
	}
	saved := make([]float64, len(g.Nodes))
	for _, n := range g.Nodes {
		if n.Phase == trace.Forward {
			continue
		}
		for _, in := range n.Inputs {
			src := in.Node
			if src.Kind == trace.KindOp && src.Phase == trace.Forward && saved[src.ID] == 0 {
				for _, o := range src.Outputs {
					saved[src.ID] += float64(device.RoundSize(o.Meta.Bytes()))
				}
			}
		}
	}
	type cand struct {
		id    int
		ratio float64
	}
	var cs []cand
	for _, n := range g.Nodes {
		if saved[n.ID] > 0 && transform.Recomputable(n) && !residual(n) {
			cs = append(cs, cand{n.ID, f.cost.Node(n) / saved[n.ID]})
		}
	}
	// Cheap elementwise and normalization ops first (they free memory for
	// almost nothing), then the rest, each group by cost per byte freed.
	// Residual additions are never candidates (see transform.CheapOps).
	cheap := func(id int) bool { return transform.CheapOps.Recompute(g.Nodes[id]) }
	sort.SliceStable(cs, func(i, j int) bool {
		if ci, cj := cheap(cs[i].id), cheap(cs[j].id); ci != cj {
			return ci
		}
		return cs[i].ratio < cs[j].ratio
	})
	ids := make([]int, len(cs))
	for i, c := range cs {
		ids[i] = c.id
	}
	f.cands[m] = ids
	return ids, nil
}

// eval plans micro-batch m under setting s and policy pol; for "auto",
// prefix is how many candidates are recomputed (-1: all) and stride how
// the residual chain is checkpointed (Choice.Stride); minBytes > 0 is
// the compression size threshold (0: the setting's default). The
// optimizer runs in the backward pass wherever it is allowed and applies.
func (f *fitter) eval(s setting, m int, pol Policy, prefix, stride int, minBytes int64) (Choice, error) {
	return f.plan(s, m, pol, prefix, stride, minBytes, f.inBack)
}

// plan is eval, with the optimizer in the backward pass only if
// inBackward allows it (and it applies: one micro-batch in fp32).
func (f *fitter) plan(s setting, m int, pol Policy, prefix, stride int, minBytes int64, inBackward bool) (Choice, error) {
	// The trainer splits a batch into k near-equal micro-batches
	// (train.Split); the largest has ceil(N/k) samples, at most m.
	// (written so that no sum overflows, whatever the batch)
	k := 1 + (f.p.Batch-1)/m
	m = 1 + (f.p.Batch-1)/k
	c := Choice{MicroBatch: m, Accumulation: k, Policy: pol, Precision: s.prec, Compression: s.comp, Compress: s.withMin(minBytes),
		InBackward: inBackward && f.inBack && k == 1 && s.prec == transform.FP32}
	switch pol {
	case RecomputeSelective:
		c.Remat = transform.CheapOps
	case RecomputeAuto:
		cands, err := f.candidates(m)
		if err != nil {
			return c, err
		}
		if prefix < 0 || prefix > len(cands) {
			prefix = len(cands)
		}
		set := transform.Nodes{}
		for _, id := range cands[:prefix] {
			set[id] = true
		}
		if stride > 0 {
			adds, err := f.chain(m)
			if err != nil {
				return c, err
			}
			for i, id := range adds {
				if i%stride != stride-1 {
					set[id] = true
				}
			}
		}
		c.Remat = set
		c.Recomputed, c.prefix, c.Stride = len(set), prefix, stride
	default:
		prefix, stride = 0, 0
	}
	key := evalKey{f.p.Batch, m, s.prec, s.comp, pol, prefix, stride, minBytes, c.InBackward}
	if r, ok := f.memo[key]; ok {
		return r, nil
	}
	if pol == RecomputeSelective {
		g, err := f.graph(m)
		if err != nil {
			return c, err
		}
		_, st, err := transform.Rematerialize(g, transform.CheapOps)
		if err != nil {
			return c, err
		}
		c.Recomputed = st.Recomputed
	}
	cfg := c.Config()
	cfg.Accumulation = 0 // planned one micro-batch at a time
	// N%k micro-batches of size m and the rest one smaller.
	sizes, counts := []int{m}, []int{k}
	if r := f.p.Batch % k; r != 0 {
		sizes, counts = []int{m, m - 1}, []int{r, k - r}
	}
	for i, sz := range sizes {
		x, y := f.p.Example(sz)
		mem, prog, err := f.tr.PlanConfig(cfg, x, y)
		if err != nil {
			return c, err
		}
		t := f.cost.Graph(prog.Program.Plan.Order)
		if i == 0 {
			c.Memory = mem
			if c.Reserved, err = f.reserved(mem.ArenaBytes, c.InBackward); err != nil {
				return c, err
			}
			if r, ok := fits(f.check[mode(c.InBackward)], mem.ArenaBytes); ok {
				c.Reserved, c.Fits, c.Capacity = r, true, f.p.Budget
			}
		}
		c.Time += t * float64(counts[i])
	}
	f.memo[key] = c
	return c, nil
}

// describe fills in what c's precision and compression do to a full
// micro-batch, going through the transforms as transform.ApplyPrecision
// does (recomputation first, then Autocast, then Compress with the saved
// low-precision values in 16 bits).
func (f *fitter) describe(c *Choice) error {
	g, err := f.graph(c.MicroBatch)
	if err != nil {
		return err
	}
	if c.Remat != nil {
		if g, _, err = transform.Rematerialize(g, c.Remat); err != nil {
			return err
		}
	}
	g, low, ast, err := transform.Autocast(g, c.Precision)
	if err != nil {
		return err
	}
	c.Rounded = ast.Rounded
	cp := c.Compress
	if c.Precision != transform.FP32 {
		cp = low.Storing(cp)
	}
	if cp != nil {
		_, c.Saved, err = transform.Compress(g, cp)
	}
	return err
}

// same reports whether c and o are the same plan as far as the planner
// can tell (same micro-batching, precision, recomputation, arena and
// estimated time): auto recomputing nothing is none, storing ReLU masks as
// bits in a model without ReLUs changes nothing, and so does a compression
// threshold above every tensor but the masks.
func (c Choice) same(o Choice) bool {
	return c.MicroBatch == o.MicroBatch && c.Precision == o.Precision && c.Policy == o.Policy && c.Recomputed == o.Recomputed &&
		c.InBackward == o.InBackward && c.Memory.ArenaBytes == o.Memory.ArenaBytes && c.Time == o.Time
}

// Describe is one line naming the choice's micro-batching, precision,
// compression, recomputation and, when it runs there, the optimizer in the
// backward pass.
func (c Choice) Describe() string {
	comp := c.Compression
	if comp == "none" && c.Precision != transform.FP32 {
		comp = "16-bit"
	}
	if b := c.minBytes(); b > transform.DefaultMinBytes {
		comp += " >= " + device.FormatBytes(b)
	}
	d := fmt.Sprintf("micro-batch %d x %d, %s, saved %s, recompute %s", c.MicroBatch, c.Accumulation, c.Precision, comp, c.Policy)
	if c.Stride > 0 {
		d += fmt.Sprintf(" (residual segments of %d)", c.Stride)
	}
	if c.InBackward {
		d += ", optimizer in backward"
	}
	return d
}

// Print writes the result as `headroom plan` shows it.
func (r *Result) Print(w io.Writer, budget int64) {
	b := r.Best
	fmt.Fprintf(w, "plan within %s:\n", device.FormatBytes(budget))
	fmt.Fprintf(w, "  micro-batch %d x %d accumulation steps (effective batch %d)\n", b.MicroBatch, b.Accumulation, r.Baseline.MicroBatch)
	prec := b.Precision.String()
	if b.Precision != transform.FP32 {
		prec += fmt.Sprintf(" (%d values rounded per micro-batch; emulated on the cpu, so rounding costs time)", b.Rounded)
	}
	fmt.Fprintf(w, "  precision %s\n", prec)
	fmt.Fprintf(w, "  saved activations: %s\n", b.storage())
	chain := ""
	if b.Stride > 0 {
		chain = fmt.Sprintf("; residual chain in segments: one block output in %d kept, the rest recomputed", b.Stride)
	}
	fmt.Fprintf(w, "  recomputation: %s (%d forward nodes recomputed%s)\n", b.Policy, b.Recomputed, chain)
	switch {
	case b.InBackward:
		fmt.Fprintf(w, "  optimizer: in the backward pass (each parameter updated once its gradient is final; gradients freed as consumed, no gradient buffers)\n")
	case r.notInBackward != "":
		fmt.Fprintf(w, "  optimizer: after the backward pass, with gradient buffers (not in the backward pass: %s)\n", r.notInBackward)
	}
	b.Memory.Print(w)
	fmt.Fprintf(w, "  %-22s %12s   (segments the allocator maps; budget %s)\n", "device memory needed", device.FormatBytes(b.Bytes()), device.FormatBytes(budget))
	if b.Capacity > 0 && b.Capacity < budget {
		fmt.Fprintf(w, "  %-22s %12s   (a device capped at the budget itself would map the allocator's regular segments, which do not fit)\n", "device capped at", device.FormatBytes(b.Capacity))
	}
	base := r.Baseline
	fmt.Fprintf(w, "  estimated slowdown     %11.2fx   (against the whole batch in %s with nothing recomputed or compressed, which needs %s)\n",
		r.Slowdown(), base.Precision, device.FormatBytes(base.Bytes()))
	if len(r.Candidates) > 1 {
		fmt.Fprintln(w, "  also considered:")
		for _, c := range r.Candidates[1:] {
			fmt.Fprintf(w, "    %s: %s, est. %.2fx\n", c.Describe(), device.FormatBytes(c.Bytes()), c.Time/base.Time)
		}
	}
	if r.Pruned > 0 {
		fmt.Fprintf(w, "  %d more settings not searched: even their whole-batch step is slower than the plan chosen\n", r.Pruned)
	}
}

// storage describes how the choice stores saved activations.
func (c Choice) storage() string {
	var how string
	switch {
	case c.Compression == "none" && c.Precision == transform.FP32:
		how = "kept as produced"
	case c.Compression == "none":
		how = "low-precision values in 16 bits"
	case c.Compression == "masks":
		how = "ReLU masks as bits"
	default:
		how = c.Compression
		if b := c.minBytes(); b > transform.DefaultMinBytes {
			how += " for tensors of at least " + device.FormatBytes(b)
		}
		how += ", ReLU masks as bits"
	}
	st := c.Saved
	if st.Saved == 0 {
		return how
	}
	var parts []string
	for f, n := range st.Tensors {
		if n > 0 && transform.Format(f) != transform.Keep {
			parts = append(parts, fmt.Sprintf("%d %s", n, transform.Format(f)))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%s (%d saved tensors)", how, st.Saved)
	}
	return fmt.Sprintf("%s (%d of %d saved tensors stored as %s; %s -> %s)", how, st.Saved-st.Tensors[transform.Keep], st.Saved,
		strings.Join(parts, ", "), device.FormatBytes(st.Before), device.FormatBytes(st.After))
}

// residual reports whether n is an addition of two activations (a residual
// connection): recomputing it would chain block outputs together.
func residual(n *trace.Node) bool {
	name := n.Op.Name()
	return (name == "add" || name == "sub") && len(n.Inputs) == 2 &&
		n.Inputs[0].Node.Kind == trace.KindOp && n.Inputs[1].Node.Kind == trace.KindOp
}
