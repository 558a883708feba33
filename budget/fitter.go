package budget

import (
	"errors"
	"fmt"
	"math"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

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
	// arena: not Problem.GradientBuffers (where the optimizer does not
	// run in the backward pass, gradients live in the step's arena).
	arena bool
	// full holds the persistent state of a run with gradient buffers
	// (full[0]) and of one without them, with the optimizer in the
	// backward pass or gradients in the arena (full[1], when noBufs), on
	// uncapped meta devices; persistent is what parameters, gradients and
	// optimizer state allocate.
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
	// leastPlan and leastMin cache least (leastMin 0: not yet).
	leastPlan Choice
	leastMin  int64
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
	arena      bool
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

// mode indexes fitter.full and fitter.check: 1 for a run without
// gradient buffers (Choice.noBuffers).
func mode(noBuffers bool) int {
	if noBuffers {
		return 1
	}
	return 0
}

// noBufs reports whether some plans may run without gradient buffers
// (the optimizer in the backward pass, or gradients in the arena).
func (f *fitter) noBufs() bool { return f.inBack || f.arena }

// noBuffers reports whether the choice holds no gradient buffers.
func (c Choice) noBuffers() bool { return c.InBackward || c.ArenaGradients }

func newFitter(p Problem) (*fitter, error) {
	sets, err := settings(p)
	if err != nil {
		return nil, err
	}
	f := &fitter{p: p, sets: sets, cost: p.Cost, cands: map[int][]int{}, chains: map[int][]int{}, graphs: map[int]*trace.Graph{}, memo: map[evalKey]Choice{}}
	if f.cost == (CostModel{}) {
		f.cost = HostCost() // DefaultCost on AVX2 machines
	}
	if err := f.cost.check(); err != nil {
		return nil, err
	}
	dev := device.Meta()
	// The step's nodes are charged the arithmetic of the kernels that
	// would run them: the meta device plans for the cpu backend.
	f.cost = f.cost.On(dev.Backend)
	if p.Build == nil || p.Example == nil || p.NewOptimizer == nil {
		return nil, fmt.Errorf("%w: Build, Example and NewOptimizer are required", ErrProblem)
	}
	opt, err := p.NewOptimizer()
	if err != nil {
		return nil, err
	}
	if f.tr, err = train.Setup(dev, 0, p.Build, opt); err != nil {
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
	f.arena = !p.GradientBuffers
	for _, ib := range []bool{false, true} {
		if ib && !f.noBufs() {
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

// graph is the traced step at micro-batch m as the trainer hands it to
// transform.Rematerialize: before precision, compression and fusion, so
// its node IDs are the ones a transform.Nodes policy names.
func (f *fitter) graph(m int) (*trace.Graph, error) {
	if g, ok := f.graphs[m]; ok {
		return g, nil
	}
	x, y := f.p.Example(m)
	g, err := f.tr.Trace(x, y, f.p.extra(m)...)
	if err != nil {
		return nil, err
	}
	f.graphs[m] = g
	return g, nil
}

// eval plans micro-batch m under setting s and policy pol; for "auto",
// prefix is how many candidates are recomputed (-1: all) and stride how
// the residual chain is checkpointed (Choice.Stride); minBytes > 0 is
// the compression size threshold (0: the setting's default). The
// optimizer runs in the backward pass, else the gradients stay in the
// arena, wherever that is allowed and applies.
func (f *fitter) eval(s setting, m int, pol Policy, prefix, stride int, minBytes int64) (Choice, error) {
	return f.plan(s, m, pol, prefix, stride, minBytes, f.noBufs())
}

// plan is eval, without gradient buffers (the optimizer in the backward
// pass, else gradients in the arena, as allowed) only if noBuffers
// allows it and it applies: one micro-batch (and for the optimizer in
// the backward pass no GradScaler: not fp16-mixed).
// Where both the update in the backward pass and gradients in the arena
// apply, it plans both and keeps the one that peaks lower (they take the
// same time): updating in the backward pass frees each gradient at once,
// but computes it where autograd does, while the arena's weight
// gradients can wait for the end of the step (schedule.Defer), which on a
// ResNet whose peak is early in the backward pass peaks lower.
func (f *fitter) plan(s setting, m int, pol Policy, prefix, stride int, minBytes int64, noBuffers bool) (Choice, error) {
	k := 1 + (f.p.Batch-1)/m
	one := noBuffers && k == 1 && !s.prec.NeedsScaler() // as train's CheckOptimizerInBackward
	c, err := f.planAs(s, m, pol, prefix, stride, minBytes, noBuffers, one && f.inBack)
	if err != nil || !c.InBackward || !f.arena {
		return c, err
	}
	a, err := f.planAs(s, m, pol, prefix, stride, minBytes, noBuffers, false)
	if err != nil || a.Memory.Total() >= c.Memory.Total() {
		return c, err
	}
	return a, nil
}

// planAs is plan with the update in the backward pass as inBack says.
func (f *fitter) planAs(s setting, m int, pol Policy, prefix, stride int, minBytes int64, noBuffers, inBack bool) (Choice, error) {
	// The trainer splits a batch into k near-equal micro-batches
	// (train.Split); the largest has ceil(N/k) samples, at most m.
	// (written so that no sum overflows, whatever the batch)
	k := 1 + (f.p.Batch-1)/m
	m = 1 + (f.p.Batch-1)/k
	c := Choice{MicroBatch: m, Accumulation: k, Policy: pol, Precision: s.prec, Compression: s.comp, Compress: s.withMin(minBytes),
		InBackward: inBack, Outputs: f.p.Outputs}
	c.ArenaGradients = noBuffers && !c.InBackward && train.Config{GradientBuffers: !f.arena, Precision: s.prec}.ArenaApplies(k)
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
	key := evalKey{f.p.Batch, m, s.prec, s.comp, pol, prefix, stride, minBytes, c.InBackward, c.ArenaGradients}
	if r, ok := f.memo[key]; ok {
		return r, nil
	}
	if pol == RecomputeSelective {
		g, err := f.graph(m)
		if err != nil {
			return c, err
		}
		_, st, err := transform.RematerializeFor(g, transform.CheapOps, c.Compress)
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
		mem, prog, err := f.tr.PlanConfig(cfg, x, y, f.p.extra(sz)...)
		if err != nil {
			return c, err
		}
		t := f.cost.ForPrecision(cfg.Precision).Graph(prog.Program.Plan.Order)
		if i == 0 {
			c.Memory = mem
			var ok bool
			if c.Reserved, ok = f.reserved(mem.ArenaBytes, c.noBuffers()); !ok {
				// Larger than any device's address space: fits no budget.
				c.Reserved = math.MaxInt64
				return c, nil
			}
			if r, ok := fits(f.check[mode(c.noBuffers())], mem.ArenaBytes); ok {
				c.Reserved, c.Fits, c.Capacity = r, true, f.p.Budget
			}
		}
		c.Time += t * float64(counts[i])
	}
	f.memo[key] = c
	return c, nil
}

// describe fills in what c's precision and compression do to a full
// micro-batch, from the reports of the compile passes (train.Compiled):
// the autocast's rounded values and the compression's saved tensors. The
// step is planned with gradient buffers, whose saved tensors are the
// forward pass's alone (an update in the backward pass also reads the
// loss; gradients in the arena add nothing saved).
func (f *fitter) describe(c *Choice) error {
	cfg := c.Config()
	cfg.Accumulation, cfg.OptimizerInBackward, cfg.GradientBuffers = 0, false, true
	x, y := f.p.Example(c.MicroBatch)
	_, comp, err := f.tr.PlanConfig(cfg, x, y, f.p.extra(c.MicroBatch)...)
	if err != nil {
		return err
	}
	for _, r := range comp.Passes {
		switch st := r.Stats.(type) {
		case transform.AutocastStats:
			c.Rounded = st.Rounded
		case transform.CompressStats:
			c.Saved = st
		}
	}
	return nil
}
