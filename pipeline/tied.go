package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
)

// Tier is implemented by a layer's model whose parameters other layers
// hold too (a tied weight, like the GPT's token embedding and LM head):
// Tied maps each such parameter's name to the other layers holding it.
// Stages that hold one parameter under one name keep their copies equal:
// the first holder's initial value is copied to the others, and every
// step the copies' gradients are summed (the single-device gradient of
// the tied weight) before the optimizers step.
type Tier interface{ Tied() map[string][]int }

// tiedModel is a unit's model (units.go): its tied parameters, if any,
// and the scratch store its modules read the training mode from.
type tiedModel struct {
	train.Model
	tied    map[string][]int
	scratch *nn.Store
}

func (t tiedModel) Tied() map[string][]int { return t.tied }

// SetTraining switches the unit's modules between training and
// evaluation (they ask their own, scratch, store).
func (t tiedModel) SetTraining(on bool) {
	if t.scratch != nil {
		t.scratch.SetTraining(on)
	}
}

// tie is a parameter a stage shares with the stages holding layers
// others.
type tie struct {
	p      *nn.Param
	others []int
}

// findTies are the parameters of the stage (layers [lo, lo+len(ms)) as
// models ms) that layers outside it hold too, by name.
func findTies(s *nn.Store, ms []train.Model, lo int) []tie {
	var ties []tie
	seen := map[string]bool{}
	hi := lo + len(ms)
	for _, m := range ms {
		t, ok := m.(Tier)
		if !ok {
			continue
		}
		names := make([]string, 0, len(t.Tied()))
		for name := range t.Tied() {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			var out []int
			for _, k := range t.Tied()[name] {
				if k < lo || k >= hi {
					out = append(out, k)
				}
			}
			p, ok := s.Get(name)
			if len(out) == 0 || seen[name] || !ok {
				continue
			}
			seen[name] = true
			ties = append(ties, tie{p, out})
		}
	}
	sort.Slice(ties, func(i, j int) bool { return ties[i].p.Name < ties[j].p.Name })
	return ties
}

// stageOf is the stage (index into cuts' ranges) holding layer k.
func stageOf(cuts []int, k int) int {
	for s := 0; s+1 < len(cuts); s++ {
		if k >= cuts[s] && k < cuts[s+1] {
			return s
		}
	}
	return -1
}

// tieTag is the message tag of a step's i-th tied gradient between two
// ranks: from the top of the tags MPI guarantees (32767) down, apart from
// the activations' and gradients' (2m, 2m+1: checkTags).
func tieTag(i int) int { return maxTag - i }

const maxTag = 32767

// checkTags refuses a step of M micro-batches whose tags would reach
// the tied gradients'.
func (p *Pipeline) checkTags(M int) error {
	if 2*M > maxTag-len(p.Stages[0].ties) {
		return fmt.Errorf("pipeline: %d micro-batches: their message tags pass MPI's guaranteed %d", M, maxTag)
	}
	return nil
}

// syncTiedValues copies each tied parameter's value from the first stage
// holding it to the others (in one process).
func (p *Pipeline) syncTiedValues() {
	for _, group := range p.tiedGroups() {
		for _, q := range group[1:] {
			if q.Value.Data != nil && group[0].Value.Data != nil {
				copy(q.Value.Data, group[0].Value.Data)
			}
		}
	}
}

// sumTiedGrads sums each tied parameter's gradients over the stages
// holding it, into each of them (in one process, on the host: no device
// memory).
func (p *Pipeline) sumTiedGrads() {
	for _, group := range p.tiedGroups() {
		if group[0].Grad == nil || group[0].Grad.Data == nil {
			continue
		}
		sum := group[0].Grad.F32()
		for _, q := range group[1:] {
			for i, v := range q.Grad.F32() {
				sum[i] += v
			}
		}
		for _, q := range group[1:] {
			copy(q.Grad.F32(), sum)
		}
	}
}

// tiedGroups are, for each tied name, the stages' parameters of that
// name in stage order.
func (p *Pipeline) tiedGroups() [][]*nn.Param {
	by := map[string][]*nn.Param{}
	var names []string
	for _, st := range p.Stages {
		for _, t := range st.ties {
			if _, ok := by[t.p.Name]; !ok {
				names = append(names, t.p.Name)
			}
			by[t.p.Name] = append(by[t.p.Name], t.p)
		}
	}
	var out [][]*nn.Param
	for _, n := range names {
		if len(by[n]) > 1 {
			out = append(out, by[n])
		}
	}
	return out
}

// tiePeer is the one other rank holding tie t's parameter, given the
// cuts; a parameter held by more than two stages is not supported.
func tiePeer(t tie, cuts []int) (int, error) {
	var peers []int
	for _, k := range t.others {
		if s := stageOf(cuts, k); !slices.Contains(peers, s) {
			peers = append(peers, s)
		}
	}
	if len(peers) != 1 {
		return 0, fmt.Errorf("pipeline: %s is held by stages %v besides this one: a weight tied across more than two stages is not supported", t.p.Name, peers)
	}
	return peers[0], nil
}

// rankSyncValues sends each tied parameter's value from the lower rank
// holding it to the higher, into the parameter's memory.
func (p *Pipeline) rankSyncValues(ctx context.Context) error {
	st := p.Stages[0]
	for i, t := range st.ties {
		peer := p.peers[i]
		n := int(t.p.Numel())
		buf := make([]float32, n)
		if t.p.Value.Data != nil {
			buf = f32(t.p.Value.Data, n)
		}
		var err error
		if p.base < peer {
			err = p.c.Send(ctx, buf, peer, tieTag(i))
		} else {
			err = p.c.Recv(ctx, buf, peer, tieTag(i))
		}
		if err != nil {
			return fmt.Errorf("pipeline: rank %d: the initial value of tied %s: %w", p.base, t.p.Name, err)
		}
	}
	return nil
}

// rankSumGrads adds to each tied parameter's gradient the peer rank's,
// received into a block of the rank's device (category communication)
// while its own goes the other way; the block is freed before the next.
func (p *Pipeline) rankSumGrads(ctx context.Context) error {
	st := p.Stages[0]
	dev := st.Device
	for i, t := range st.ties {
		peer := p.peers[i]
		n := int(t.p.Numel())
		if t.p.DType != tensor.Float32 {
			return fmt.Errorf("pipeline: tied %s is %v, only float32 goes between stages", t.p.Name, t.p.DType)
		}
		b, err := dev.Alloc.Allocate(t.p.Bytes(), device.Tag{Category: device.Communication, Op: "tied gradient"})
		if err != nil {
			return fmt.Errorf("pipeline: rank %d, tied %s: %w", p.base, t.p.Name, err)
		}
		own, other := make([]float32, n), make([]float32, n)
		if b.Data != nil {
			own, other = t.p.Grad.F32(), f32(b.Data, n)
		}
		sent := make(chan error, 1)
		go func() { sent <- p.c.Send(ctx, own, peer, tieTag(i)) }()
		err = p.c.Recv(ctx, other, peer, tieTag(i))
		if serr := <-sent; err == nil {
			err = serr
		}
		if err == nil && b.Data != nil {
			for j, v := range other {
				own[j] += v
			}
		}
		dev.Alloc.Free(b)
		if err != nil {
			return fmt.Errorf("pipeline: rank %d, tied %s with rank %d: %w", p.base, t.p.Name, peer, err)
		}
	}
	return nil
}

// tieOps are the allocations of rankSumGrads, after a step's passes.
func tieOps(st *Stage) []devOp {
	var ops []devOp
	for i := range st.ties {
		ops = append(ops, devOp{opTie, i})
	}
	return ops
}
