package budget

import (
	"slices"
	"sort"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/transform"
)

// effort is the prefix of the auto candidate list that saves the most
// memory (-1: all of it); other policies have no prefix.
func effort(pol Policy) int {
	if pol == RecomputeAuto {
		return -1
	}
	return 0
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
		mid := lo + (hi-lo)/2 + (hi-lo)%2 // no overflow near MaxInt
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
		if n.Kind == trace.KindOp && n.Phase == trace.Forward && transform.Residual(n) && transform.Recomputable(n) {
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
		if saved[n.ID] > 0 && transform.Recomputable(n) && !transform.Residual(n) {
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
