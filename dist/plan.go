package dist

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// Layout is how the ranks of a job divide the training. Ranks =
// data-parallel ranks × Pipeline × Tensor.
type Layout struct {
	Ranks int
	// Zero is the ZeRO stage of the data-parallel ranks (Options.Stage).
	Zero int
	// Pipeline is the number of pipeline stages (0 or 1: none); Tensor
	// the number of ranks a layer is split across (0 or 1: none).
	Pipeline, Tensor int
	// BucketBytes is Options.BucketBytes; Overlap Options.Overlap.
	BucketBytes int64
	Overlap     bool
	// Prefetch is ZeRO-3's gather prefetch depth (Zero3Options.Prefetch).
	Prefetch int
}

func (l Layout) String() string {
	s := fmt.Sprintf("%d ranks, ZeRO %d", l.Ranks, l.Zero)
	if l.Pipeline > 1 {
		s += fmt.Sprintf(", %d pipeline stages", l.Pipeline)
	}
	if l.Tensor > 1 {
		s += fmt.Sprintf(", tensor parallel %d", l.Tensor)
	}
	if l.Overlap {
		s += ", all-reduce overlapped"
	}
	if l.Prefetch > 0 {
		s += fmt.Sprintf(", gathers prefetched %d ahead", l.Prefetch)
	}
	return s
}

// Job is what every rank trains: the model, the optimizer, the global
// batch and the configuration of each rank's trainer (Accumulation splits
// each rank's share into that many micro-batches).
type Job struct {
	Build        func(s *nn.Store) (train.Model, train.LossFunc)
	Example      func(n int) (x, y trace.Meta)
	NewOptimizer func() (optim.Optimizer, error)
	Batch        int
	Config       train.Config
	// Pipeline is the job as stages of layers, for layouts with
	// Pipeline > 1 (planpipe.go).
	Pipeline *PipelineJob
}

// ErrNotAvailable is matched by errors.Is for a layout whose parallelism
// this package does not provide yet.
var ErrNotAvailable = errors.New("dist: not available yet")

// Span is ranks Lo to Hi, both included.
type Span struct{ Lo, Hi int }

func (s Span) String() string {
	if s.Lo == s.Hi {
		return strconv.Itoa(s.Lo)
	}
	return fmt.Sprintf("%d–%d", s.Lo, s.Hi)
}

// RankPlan is the plan of a group of ranks whose plans are equal by
// construction: the same share of the batch and the same shards.
type RankPlan struct {
	Ranks []Span
	// Rank is the rank that was planned (the group's first).
	Rank int
	// Batch is each rank's samples per step; MicroBatch those of one
	// forward and backward pass.
	Batch, MicroBatch int
	Memory            train.MemoryPlan
	// Reserved is the device memory the rank maps at its peak: its
	// persistent state's segments and the step's arena, reserved as a
	// real rank's first step reserves it. A device of this capacity
	// holds the rank.
	Reserved int64
	// Moved is the bytes each rank sends per step in its collectives,
	// counted as ring algorithms move them (an all-reduce of B bytes
	// over N ranks sends 2(N-1)/N·B, a reduce-scatter or all-gather of
	// B bytes (N-1)/N·B).
	Moved int64
}

// Count is the number of ranks in the group.
func (p RankPlan) Count() int {
	n := 0
	for _, s := range p.Ranks {
		n += s.Hi - s.Lo + 1
	}
	return n
}

// RanksString is the group's ranks, "0–511, 768"; more than 4 single
// ranks or equal spans at a constant stride (a pipeline stage's replicas,
// a stage's tensor groups) as "1, 5, …, 1021" or "0–3, 16–19, …,
// 1008–1011".
func (p RankPlan) RanksString() string {
	if n := len(p.Ranks); n > 4 {
		k, w := p.Ranks[1].Lo-p.Ranks[0].Lo, p.Ranks[0].Hi-p.Ranks[0].Lo
		strided := true
		for i, s := range p.Ranks {
			strided = strided && s.Hi-s.Lo == w && s.Lo == p.Ranks[0].Lo+i*k
		}
		if strided {
			return fmt.Sprintf("%v, %v, …, %v", p.Ranks[0], p.Ranks[1], p.Ranks[n-1])
		}
	}
	var b strings.Builder
	for i, s := range p.Ranks {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.String())
	}
	return b.String()
}

// Has reports whether rank is in the group.
func (p RankPlan) Has(rank int) bool {
	for _, s := range p.Ranks {
		if s.Lo <= rank && rank <= s.Hi {
			return true
		}
	}
	return false
}

// planner plans the ranks of one kind of parallelism. Adding one (tensor
// parallelism, ZeRO-3, pipeline stages on ranks) is one planner: key
// names what makes a rank's plan differ from another's (ranks of equal
// keys are planned once), plan sets the rank's trainer up on the meta
// device by the code that runs it and returns its plan.
type planner interface {
	key(rank int) string
	plan(ctx context.Context, rank int) (RankPlan, error)
}

// newPlanner is the planner of layout l, or why there is none.
func newPlanner(j Job, l Layout) (planner, error) {
	switch {
	case l.Ranks < 1:
		return nil, fmt.Errorf("%w: %d ranks", ErrConfig, l.Ranks)
	case l.Prefetch < 0 || l.Prefetch > 0 && (l.Zero != 3 || l.Tensor > 1 || l.Pipeline > 1):
		return nil, fmt.Errorf("%w: gather prefetch %d (ZeRO 3 only)", ErrConfig, l.Prefetch)
	}
	switch {
	case l.Tensor > 1:
		if l.Pipeline > 1 {
			return newTP3DPlanner(j, l) // plan_tp3d.go
		}
		if l.Ranks != l.Tensor {
			return newHybridTPPlanner(j, l) // plan_hybridtp.go
		}
		return newTensorPlanner(j, l)
	case l.Pipeline > 1:
		return newPipePlanner(j, l)
	case l.Zero == 3:
		return newZero3Planner(j, l)
	case l.Zero < 0 || l.Zero > 3:
		return nil, fmt.Errorf("%w: ZeRO stage %d (valid: 0, 1, 2, 3)", ErrConfig, l.Zero)
	}
	return newDataPlanner(j, l)
}

// PlanRanks plans every rank of layout l training j, on the meta device:
// nothing runs and nothing is allocated but sizes. Ranks whose plans are
// equal by construction (the same share of the batch, the same shards)
// are planned once and returned as one group, in the order of their
// first ranks, so that a thousand ranks take a few plans.
func PlanRanks(ctx context.Context, j Job, l Layout) ([]RankPlan, error) {
	p, err := newPlanner(j, l)
	if err != nil {
		return nil, err
	}
	var groups []RankPlan
	byKey := map[string]int{}
	for r := range l.Ranks {
		k := p.key(r)
		if i, ok := byKey[k]; ok {
			g := &groups[i]
			if last := &g.Ranks[len(g.Ranks)-1]; last.Hi == r-1 {
				last.Hi = r
			} else {
				g.Ranks = append(g.Ranks, Span{r, r})
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g, err := p.plan(ctx, r)
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		g.Rank, g.Ranks = r, []Span{{r, r}}
		byKey[k] = len(groups)
		groups = append(groups, g)
	}
	return merge(groups), nil
}

// merge joins groups whose plans came out equal (shards of different
// lengths that the allocator rounds to the same bytes), keeping the
// first's place.
func merge(groups []RankPlan) []RankPlan {
	var out []RankPlan
	for _, g := range groups {
		i := slices.IndexFunc(out, func(o RankPlan) bool {
			return o.Memory == g.Memory && o.Reserved == g.Reserved && o.Batch == g.Batch && o.MicroBatch == g.MicroBatch && o.Moved == g.Moved
		})
		if i < 0 {
			out = append(out, g)
			continue
		}
		spans := append(out[i].Ranks, g.Ranks...)
		slices.SortFunc(spans, func(a, b Span) int { return a.Lo - b.Lo })
		joined := spans[:1]
		for _, s := range spans[1:] {
			if last := &joined[len(joined)-1]; last.Hi+1 == s.Lo {
				last.Hi = s.Hi
			} else {
				joined = append(joined, s)
			}
		}
		out[i].Ranks = joined
	}
	return out
}

// PlanRank plans rank alone (as PlanRanks plans its group).
func PlanRank(ctx context.Context, j Job, l Layout, rank int) (RankPlan, error) {
	p, err := newPlanner(j, l)
	if err != nil {
		return RankPlan{}, err
	}
	if rank < 0 || rank >= l.Ranks {
		return RankPlan{}, fmt.Errorf("%w: rank %d of %d", ErrConfig, rank, l.Ranks)
	}
	g, err := p.plan(ctx, rank)
	g.Rank, g.Ranks = rank, []Span{{rank, rank}}
	return g, err
}

// Peak is the largest planned peak of the groups, and a rank that has it.
func Peak(groups []RankPlan) (peak int64, rank int) {
	for _, g := range groups {
		if t := g.Memory.Total(); t > peak {
			peak, rank = t, g.Rank
		}
	}
	return peak, rank
}

// MaxReserved is the largest reservation of the groups, and a rank that
// has it: the smallest device every rank fits.
func MaxReserved(groups []RankPlan) (reserved int64, rank int) {
	for _, g := range groups {
		if g.Reserved > reserved {
			reserved, rank = g.Reserved, g.Rank
		}
	}
	return reserved, rank
}

// dataPlanner plans the ranks of data parallelism with ZeRO 0–2
// (NewTrainer).
type dataPlanner struct {
	j      Job
	l      Layout
	numels []int // trainable parameters', in order
	acc    int
}

func newDataPlanner(j Job, l Layout) (*dataPlanner, error) {
	if j.Build == nil || j.Example == nil || j.NewOptimizer == nil {
		return nil, fmt.Errorf("%w: a job needs Build, Example and NewOptimizer", ErrConfig)
	}
	if j.Batch < l.Ranks {
		return nil, fmt.Errorf("%w: a batch of %d samples cannot give each of %d ranks one", ErrConfig, j.Batch, l.Ranks)
	}
	if acc := j.Config.Accumulation; acc > 1 && (l.Zero == 2 || l.Overlap) {
		// Their steps run the optimizer in the backward pass, which a
		// step of several passes cannot: it would hold gradient buffers
		// the plan of one pass does not count.
		return nil, fmt.Errorf("%w: %v with %d passes per step: ZeRO-2 and overlap take each gradient in the backward pass, which needs one", ErrConfig, l, acc)
	}
	p := &dataPlanner{j: j, l: l, acc: max(j.Config.Accumulation, 1)}
	s := nn.NewStore()
	j.Build(s)
	if err := s.Materialize(device.Meta(), 1); err != nil {
		return nil, err
	}
	for _, q := range s.Trainable() {
		p.numels = append(p.numels, int(q.Numel()))
	}
	return p, nil
}

// key: the rank's share of the batch and, under ZeRO, the lengths of its
// shards (the optimizer state it holds); everything else a rank allocates
// is the same on every rank.
func (p *dataPlanner) key(rank int) string {
	lo, hi := shareOf(p.j.Batch, rank, p.l.Ranks)
	b := strconv.AppendInt(nil, int64(hi-lo), 10)
	if p.l.Zero > 0 {
		for _, n := range p.numels {
			lo, hi, _ := span(n, rank, p.l.Ranks)
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(hi-lo), 10)
		}
	}
	return string(b)
}

// moved is what each rank sends per step: stages 0 and 1 all-reduce the
// gradients, 1 then all-gathers the parameters' padded shards, 2
// reduce-scatters the gradients and all-gathers the parameters, shard by
// shard.
func (p *dataPlanner) moved() int64 { return dataMoved(p.numels, p.l.Ranks, p.l.Zero) }

// dataMoved is what each of ranks data-parallel ranks sends per step
// under ZeRO stage zero for trainable parameters of numels values.
func dataMoved(numels []int, ranks, zero int) int64 {
	n := int64(ranks)
	if n == 1 {
		return 0
	}
	var total, shards int64
	for _, k := range numels {
		total += int64(k)
		_, _, c := span(k, 0, ranks)
		shards += int64(c)
	}
	allReduce := 2 * (n - 1) * total * 4 / n
	gather := (n - 1) * shards * 4
	switch zero {
	case 1:
		return allReduce + gather
	case 2:
		return 2 * gather
	}
	return allReduce
}

func (p *dataPlanner) plan(ctx context.Context, rank int) (RankPlan, error) {
	lo, hi := shareOf(p.j.Batch, rank, p.l.Ranks)
	share := hi - lo
	micro := (share + p.acc - 1) / p.acc
	dev := device.Meta()
	s := nn.NewStore()
	m, loss := p.j.Build(s)
	if err := s.Materialize(dev, 1); err != nil {
		return RankPlan{}, err
	}
	defer s.Release()
	opt, err := p.j.NewOptimizer()
	if err != nil {
		return RankPlan{}, err
	}
	c, err := comm.Meta(rank, p.l.Ranks)
	if err != nil {
		return RankPlan{}, err
	}
	tr, dp, err := NewTrainer(ctx, c, dev, s, m, loss, opt, p.j.Config, Options{Stage: p.l.Zero, BucketBytes: p.l.BucketBytes, Overlap: p.l.Overlap})
	if err != nil {
		return RankPlan{}, err
	}
	defer dp.Close()
	defer tr.Close()
	x, y := p.j.Example(micro)
	mp, err := tr.Plan(x, y)
	if err != nil {
		return RankPlan{}, err
	}
	// The first step reserves the arena next to the persistent state.
	arena, err := dev.Alloc.Reserve(mp.ArenaBytes, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		return RankPlan{}, err
	}
	reserved := dev.Alloc.Stats().ReservedBytes.Peak
	dev.Alloc.Release(arena)
	return RankPlan{Batch: share, MicroBatch: micro, Memory: mp, Reserved: reserved, Moved: p.moved()}, nil
}

// Stages lists the ZeRO stages a job may choose from, cheapest first by
// bytes moved per step, then by fewer collectives: 0 (all-reduce of the
// gradients in large buckets), 2 (as many bytes as 0 up to padding, in a
// reduce-scatter and an all-gather per parameter), 1 (the all-reduce of
// 0 and an all-gather of the parameters). ZeRO-2 is left out when the
// job cannot run it: an optimizer that cannot update one parameter at a
// time, gradient clipping or loss scaling (pass clip true then).
func Stages(opt optim.Optimizer, clip bool) []int {
	_, stepper := opt.(optim.ParamStepper)
	_, preparer := opt.(optim.Preparer)
	if !stepper || !preparer || clip {
		return []int{0, 1}
	}
	return []int{0, 2, 1}
}

// Choice is a layout tried against a budget: its groups of ranks, the
// largest planned peak and reservation, and the bytes moved per step per
// rank.
type Choice struct {
	Layout Layout
	Groups []RankPlan
	Peak   int64
	// Reserved is the largest reservation, rank ReservedRank's: the
	// layout fits when it is at most the budget.
	Reserved     int64
	ReservedRank int
	Moved        int64
	Fits         bool
	Err          error // the layout could not be planned
}

// ErrBudget is matched by errors.Is when no layout fits every rank in
// the budget.
var ErrBudget = errors.New("dist: no layout fits the budget on every rank")

// BudgetError says that no layout fits, and the smallest budget that one
// would (the least of the layouts' largest reservations) and its rank.
type BudgetError struct {
	Budget, Smallest int64
	Rank             int
	Layout           Layout
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("dist: no layout fits %s on every rank: the smallest budget that does is %s (%v; rank %d has the largest reservation)", device.FormatBytes(e.Budget), device.FormatBytes(e.Smallest), e.Layout, e.Rank)
}

func (e *BudgetError) Unwrap() error { return ErrBudget }

// Fit plans every layout of ls (in order of preference: the cheapest
// first) and returns the first whose every rank's reservation (peak and
// the arena's packing, in whole segments) is at most budget,
// with all the choices tried. When none fits the error is a *BudgetError
// naming the smallest budget.
func Fit(ctx context.Context, j Job, budget int64, ls []Layout) (Choice, []Choice, error) {
	var tried []Choice
	for _, l := range ls {
		c, err := planChoice(ctx, j, budget, l)
		if err != nil {
			return Choice{}, tried, err
		}
		tried = append(tried, c)
		if c.Fits {
			return c, tried, nil
		}
	}
	return Choice{}, tried, noFit(budget, tried)
}

// planChoice plans every rank of layout l against budget; a layout that
// cannot be planned is a Choice with Err set, and only the context's
// error is returned.
func planChoice(ctx context.Context, j Job, budget int64, l Layout) (Choice, error) {
	c := Choice{Layout: l}
	c.Groups, c.Err = PlanRanks(ctx, j, l)
	if c.Err != nil {
		return c, ctx.Err()
	}
	c.Peak, _ = Peak(c.Groups)
	c.Reserved, c.ReservedRank = MaxReserved(c.Groups)
	c.Moved = slices.MaxFunc(c.Groups, func(a, b RankPlan) int { return int(a.Moved - b.Moved) }).Moved
	c.Fits = c.Reserved <= budget
	return c, nil
}

// noFit is the error when no layout tried fits: a *BudgetError naming
// the smallest reservation among those planned, else why none could be.
func noFit(budget int64, tried []Choice) error {
	best := -1
	for i, c := range tried {
		if c.Err == nil && (best < 0 || c.Reserved < tried[best].Reserved) {
			best = i
		}
	}
	if best < 0 {
		var errs []error
		for _, c := range tried {
			errs = append(errs, fmt.Errorf("%v: %w", c.Layout, c.Err))
		}
		return errors.Join(errs...)
	}
	b := tried[best]
	return &BudgetError{Budget: budget, Smallest: b.Reserved, Rank: b.ReservedRank, Layout: b.Layout}
}
