// Package budget chooses how to train within a memory budget: the
// micro-batch size and number of accumulation steps, and which activations
// to recompute, so that the step fits with the least estimated time. It
// decides from memory plans on the meta device alone: no step runs, nothing
// is allocated, nothing can run out of memory.
package budget

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	// Batch is the effective batch size (samples per optimizer step).
	Batch int
	// Budget is the memory limit in bytes.
	Budget int64
	// NewOptimizer returns the optimizer (its state counts against the budget).
	NewOptimizer func() (optim.Optimizer, error)
	// Cost ranks candidate plans; zero means DefaultCost.
	Cost CostModel
	// Policies restricts the recomputation policies tried (default: none,
	// selective, auto).
	Policies []string
}

// Choice is one way to run the step.
type Choice struct {
	MicroBatch   int // samples per forward/backward pass
	Accumulation int // passes per optimizer step
	Policy       string
	Remat        transform.Policy // nil for "none"
	Recomputed   int              // forward nodes recomputed
	Memory       train.MemoryPlan // of a full micro-batch
	Time         float64          // estimated seconds per optimizer step
	// Reserved is the device memory the run needs: the segments the
	// allocator maps for parameters, gradients, optimizer state and the
	// step's arena, simulated with the same allocator on the meta device
	// (capped at the budget when it fits there, else uncapped).
	Reserved int64
	// Fits reports whether the run fits on a device capped at the budget
	// (simulated: under a capacity the allocator maps tighter segments, so
	// a run may fit a budget below its uncapped Reserved).
	Fits bool
}

// Bytes is what the choice needs from the device (Reserved).
func (c Choice) Bytes() int64 { return c.Reserved }

// Result is the chosen plan and what it was compared with.
type Result struct {
	Best Choice
	// Baseline is the whole batch at once with nothing recomputed (which
	// may not fit): the reference for the slowdown.
	Baseline   Choice
	Candidates []Choice
}

// Slowdown is the best choice's estimated time over the baseline's.
func (r *Result) Slowdown() float64 { return r.Best.Time / r.Baseline.Time }

// ErrBudget is matched by errors.Is for every *TooSmallError.
var ErrBudget = errors.New("budget too small")

// TooSmallError says the budget cannot hold the run, and what would.
type TooSmallError struct {
	Budget  int64
	Minimum int64 // the smallest budget that works
	Reason  string
}

func (e *TooSmallError) Error() string {
	return fmt.Sprintf("budget %s is too small: %s; the smallest budget that works is %s",
		device.FormatBytes(e.Budget), e.Reason, device.FormatBytes(e.Minimum))
}

func (e *TooSmallError) Is(t error) bool { return t == ErrBudget }

// Policies is the list of recomputation policy names.
var Policies = []string{"none", "selective", "auto"}

// ParsePolicy validates a policy name.
func ParsePolicy(s string) (string, error) {
	for _, p := range Policies {
		if p == s {
			return s, nil
		}
	}
	return "", fmt.Errorf("unknown recomputation policy %q (valid: none, selective, auto)", s)
}

type fitter struct {
	p   Problem
	tr  *train.Trainer
	dev *device.Device
	// fixed is the memory reserved for parameters, gradients and
	// optimizer state, before any step.
	fixed int64
	// check holds the persistent state on a meta device capped at the
	// budget (nil if it does not fit there): candidates are tried on it.
	check *device.Device
	cost  CostModel
	// cands caches, per micro-batch size, the auto policy's candidate
	// nodes in the order they are given up.
	cands map[int][]int
}

// Fit chooses the fastest plan within the budget.
func Fit(ctx context.Context, p Problem) (*Result, error) {
	if p.Batch < 1 {
		return nil, fmt.Errorf("budget: batch size must be positive, got %d", p.Batch)
	}
	pols := p.Policies
	if len(pols) == 0 {
		pols = Policies
	}
	for _, s := range pols {
		if _, err := ParsePolicy(s); err != nil {
			return nil, err
		}
	}
	f, err := newFitter(p)
	if err != nil {
		return nil, err
	}
	defer f.tr.Close()

	res := &Result{}
	if res.Baseline, err = f.eval(p.Batch, "none", 0); err != nil {
		return nil, err
	}
	// The least any plan can need: one sample at a time, everything
	// recomputable recomputed.
	least, err := f.eval(1, "auto", -1)
	if err != nil {
		return nil, err
	}
	if !least.Fits {
		reason := "even one sample per micro-batch with every activation recomputed does not fit"
		if f.check == nil {
			reason = "parameters, gradients and optimizer state alone do not fit"
		}
		return nil, &TooSmallError{Budget: p.Budget, Minimum: f.minimum(least.Memory.ArenaBytes, least.Reserved), Reason: reason}
	}
	for _, pol := range pols {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, ok, err := f.best(pol)
		if err != nil {
			return nil, err
		}
		if ok {
			res.Candidates = append(res.Candidates, c)
		}
	}
	if len(res.Candidates) == 0 {
		return nil, &TooSmallError{Budget: p.Budget, Minimum: f.minimum(least.Memory.ArenaBytes, least.Reserved), Reason: "no policy tried fits (allow the auto policy)"}
	}
	sort.SliceStable(res.Candidates, func(i, j int) bool { return res.Candidates[i].Time < res.Candidates[j].Time })
	res.Best = res.Candidates[0]
	return res, nil
}

func newFitter(p Problem) (*fitter, error) {
	f := &fitter{p: p, cost: p.Cost, cands: map[int][]int{}}
	if f.cost == (CostModel{}) {
		f.cost = DefaultCost
	}
	dev := device.Meta()
	opt, err := p.NewOptimizer()
	if err != nil {
		return nil, err
	}
	if f.tr, err = train.Setup(dev, 0, p.Build, opt); err != nil {
		return nil, err
	}
	f.dev = dev
	f.fixed = dev.Alloc.Stats().ReservedBytes.Current
	if p.Budget > 0 {
		f.check, _ = f.setup(p.Budget) // nil: the persistent state alone does not fit
	}
	return f, nil
}

// setup allocates the run's persistent state (parameters, gradients,
// optimizer state) on a meta device capped at capacity, in the order a real
// run allocates it; nil when it does not fit.
func (f *fitter) setup(capacity int64) (*device.Device, error) {
	dev, err := device.New(fmt.Sprintf("meta:mem=%d", capacity))
	if err != nil {
		return nil, err
	}
	opt, err := f.p.NewOptimizer()
	if err != nil {
		return nil, err
	}
	if _, err := train.Setup(dev, 0, f.p.Build, opt); err != nil {
		return nil, err
	}
	return dev, nil
}

// fits reports whether an arena of this size can be reserved next to the
// persistent state on dev, and the memory then reserved.
func fits(dev *device.Device, arena int64) (int64, bool) {
	if dev == nil {
		return 0, false
	}
	b, err := dev.Alloc.Reserve(arena, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		return 0, false
	}
	r := dev.Alloc.Stats().ReservedBytes.Current
	dev.Alloc.Release(b)
	dev.Alloc.EmptyCache()
	return r, true
}

// minimum is the smallest capacity on which the persistent state and an
// arena of this size fit: a binary search over capacities, each one
// simulated; hi is known to fit.
func (f *fitter) minimum(arena, hi int64) int64 {
	lo := int64(0) // does not fit
	for hi-lo > 4096 {
		mid := (lo + hi) / 2 / 4096 * 4096
		if mid <= lo {
			break
		}
		dev, err := f.setup(mid)
		if _, ok := fits(dev, arena); err == nil && ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// reserved simulates the arena's reservation next to the persistent state
// and returns the device memory reserved with it, as a real run on a device
// with the same allocator would reserve.
func (f *fitter) reserved(arena int64) (int64, error) {
	b, err := f.dev.Alloc.Reserve(arena, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		return 0, err
	}
	r := f.dev.Alloc.Stats().ReservedBytes.Current
	f.dev.Alloc.Release(b)
	f.dev.Alloc.EmptyCache()
	return r, nil
}

// MaxBatch is the automatic batch size: the largest batch, up to p.Batch,
// that fits the budget in one pass under policy, found from plans alone (no
// trial steps): it fits and one more sample does not. It is 0 when not even
// one sample fits.
func MaxBatch(ctx context.Context, p Problem, policy string) (int, error) {
	if _, err := ParsePolicy(policy); err != nil {
		return 0, err
	}
	f, err := newFitter(p)
	if err != nil {
		return 0, err
	}
	defer f.tr.Close()
	fits := func(m int) (bool, error) {
		f.p.Batch = m
		prefix := 0
		if policy == "auto" {
			prefix = -1
		}
		c, err := f.eval(m, policy, prefix)
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

// best finds, for one policy, the largest micro-batch that fits and the
// cheapest recomputation at that size.
func (f *fitter) best(pol string) (Choice, bool, error) {
	fits := func(m int) (Choice, bool, error) {
		prefix := 0
		if pol == "auto" {
			prefix = -1 // everything recomputable: the most memory auto can save
		}
		c, err := f.eval(m, pol, prefix)
		return c, err == nil && c.Fits, err
	}
	lo, hi := 0, f.p.Batch // lo fits (0 is a sentinel), hi+1 does not
	if c, ok, err := fits(hi); err != nil {
		return Choice{}, false, err
	} else if ok {
		lo = hi
		if pol != "auto" {
			return c, true, nil
		}
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
	if lo == 0 {
		return Choice{}, false, nil
	}
	if pol != "auto" {
		c, err := f.eval(lo, pol, 0)
		return c, err == nil, err
	}
	c, err := f.minimalAuto(lo)
	return c, err == nil, err
}

// minimalAuto recomputes the shortest prefix of the candidate list that
// fits at micro-batch m.
func (f *fitter) minimalAuto(m int) (Choice, error) {
	cands, err := f.candidates(m)
	if err != nil {
		return Choice{}, err
	}
	lo, hi := 0, len(cands)
	var best Choice
	for lo < hi {
		mid := (lo + hi) / 2
		c, err := f.eval(m, "auto", mid)
		if err != nil {
			return Choice{}, err
		}
		if c.Fits {
			hi, best = mid, c
		} else {
			lo = mid + 1
		}
	}
	if best.MicroBatch == 0 || best.Recomputed != lo {
		return f.eval(m, "auto", lo)
	}
	return best, nil
}

// candidates lists the forward nodes whose outputs the backward pass keeps,
// cheapest recomputation per byte freed first.
func (f *fitter) candidates(m int) ([]int, error) {
	if c, ok := f.cands[m]; ok {
		return c, nil
	}
	x, y := f.p.Example(m)
	f.tr.SetRemat(nil)
	prog, err := f.tr.TrainProgram(x, y)
	if err != nil {
		return nil, err
	}
	g := prog.Graph
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

// eval plans micro-batch m under policy pol; for "auto", prefix is how many
// candidates are recomputed (-1: all).
func (f *fitter) eval(m int, pol string, prefix int) (Choice, error) {
	// The trainer splits a batch into k near-equal micro-batches
	// (train.Split); the largest has ceil(N/k) samples, at most m.
	k := (f.p.Batch + m - 1) / m
	m = (f.p.Batch + k - 1) / k
	c := Choice{MicroBatch: m, Accumulation: k, Policy: pol}
	switch pol {
	case "selective":
		c.Remat = transform.CheapOps
	case "auto":
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
		c.Remat = set
		c.Recomputed = prefix
	}
	f.tr.SetRemat(c.Remat)
	// N%k micro-batches of size m and the rest one smaller.
	sizes, counts := []int{m}, []int{k}
	if r := f.p.Batch % k; r != 0 {
		sizes, counts = []int{m, m - 1}, []int{r, k - r}
	}
	for i, s := range sizes {
		x, y := f.p.Example(s)
		mem, err := f.tr.Plan(x, y)
		if err != nil {
			return c, err
		}
		prog, err := f.tr.TrainProgram(x, y)
		if err != nil {
			return c, err
		}
		t := f.cost.Graph(prog.Plan.Order)
		if i == 0 {
			c.Memory = mem
			if c.Reserved, err = f.reserved(mem.ArenaBytes); err != nil {
				return c, err
			}
			if r, ok := fits(f.check, mem.ArenaBytes); ok {
				c.Reserved, c.Fits = r, true
			}
		}
		c.Time += t * float64(counts[i])
	}
	if pol == "selective" {
		prog, _ := f.tr.TrainProgram(f.p.Example(m))
		for _, n := range prog.Graph.Nodes {
			if n.Recompute {
				c.Recomputed++
			}
		}
	}
	return c, nil
}

// Print writes the result as `headroom plan` shows it.
func (r *Result) Print(w io.Writer, budget int64) {
	b := r.Best
	fmt.Fprintf(w, "plan within %s:\n", device.FormatBytes(budget))
	fmt.Fprintf(w, "  micro-batch %d x %d accumulation steps (effective batch %d)\n", b.MicroBatch, b.Accumulation, r.Baseline.MicroBatch)
	fmt.Fprintf(w, "  precision fp32; recomputation: %s (%d forward nodes recomputed)\n", b.Policy, b.Recomputed)
	b.Memory.Print(w)
	fmt.Fprintf(w, "  %-22s %12s   (segments the allocator maps; budget %s)\n", "device memory needed", device.FormatBytes(b.Bytes()), device.FormatBytes(budget))
	fmt.Fprintf(w, "  estimated slowdown     %11.2fx   (against the whole batch with nothing recomputed, which needs %s)\n",
		r.Slowdown(), device.FormatBytes(r.Baseline.Bytes()))
	if len(r.Candidates) > 1 {
		fmt.Fprintln(w, "  also considered:")
		for _, c := range r.Candidates[1:] {
			fmt.Fprintf(w, "    %-9s micro-batch %d x %d, %s, est. %.2fx\n", c.Policy, c.MicroBatch, c.Accumulation, device.FormatBytes(c.Bytes()), c.Time/r.Baseline.Time)
		}
	}
}

// residual reports whether n is an addition of two activations (a residual
// connection): recomputing it would chain block outputs together.
func residual(n *trace.Node) bool {
	name := n.Op.Name()
	return (name == "add" || name == "sub") && len(n.Inputs) == 2 &&
		n.Inputs[0].Node.Kind == trace.KindOp && n.Inputs[1].Node.Kind == trace.KindOp
}
