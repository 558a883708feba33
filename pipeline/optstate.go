package pipeline

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"maps"
	"math"

	"github.com/headroom-ml/headroom/optim"
)

// OptimizerState gathers every stage's optimizer state (each must be
// optim.Stateful) into the whole model's, under the parameters' names:
// in one process from each stage; on ranks (NewRank) rank 0 receives
// every other rank's and returns it, the others send theirs and return
// nil. A tied parameter's state is taken once, from the first stage
// holding it (its copies step alike, so their states are equal). Every
// rank must call it, between steps, after StateDict if both are wanted
// (the messages use StateDict's tags). The buffers are copies.
func (p *Pipeline) OptimizerState(ctx context.Context) (*optim.SavedState, error) {
	var whole *optim.SavedState
	for _, st := range p.Stages {
		s, err := st.savedState()
		if err != nil {
			return nil, err
		}
		whole = merge(whole, s)
	}
	if p.c == nil {
		return whole, nil
	}
	if r := p.base; r != 0 {
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(whole); err != nil {
			return nil, err
		}
		w := words(buf.Bytes(), int64(buf.Len()))
		if err := p.c.Send(ctx, []float32{math.Float32frombits(uint32(buf.Len()))}, 0, gatherTag(0)); err != nil {
			return nil, fmt.Errorf("pipeline: rank %d sends its optimizer state to rank 0: %w", r, err)
		}
		if err := p.c.Send(ctx, w, 0, gatherTag(1)); err != nil {
			return nil, fmt.Errorf("pipeline: rank %d sends its optimizer state to rank 0: %w", r, err)
		}
		return nil, nil
	}
	for src := 1; src < p.total; src++ {
		n := make([]float32, 1)
		if err := p.c.Recv(ctx, n, src, gatherTag(0)); err != nil {
			return nil, fmt.Errorf("pipeline: rank 0 receives the optimizer state of rank %d: %w", src, err)
		}
		size := int64(math.Float32bits(n[0]))
		w := make([]float32, (size+3)/4)
		if err := p.c.Recv(ctx, w, src, gatherTag(1)); err != nil {
			return nil, fmt.Errorf("pipeline: rank 0 receives the optimizer state of rank %d: %w", src, err)
		}
		var s optim.SavedState
		if err := gob.NewDecoder(bytes.NewReader(bytesOf(w)[:size])).Decode(&s); err != nil {
			return nil, fmt.Errorf("pipeline: the optimizer state of rank %d: %w", src, err)
		}
		whole = merge(whole, s)
	}
	return whole, nil
}

// savedState is a copy of the stage's optimizer state.
func (st *Stage) savedState() (optim.SavedState, error) {
	so, ok := st.opt.(optim.Stateful)
	if !ok {
		return optim.SavedState{}, fmt.Errorf("pipeline: stage of layers %d-%d: optimizer %T cannot save its state", st.Lo, st.Hi-1, st.opt)
	}
	s := so.SaveState()
	// SaveState's buffers are the optimizer's own memory.
	c := optim.SavedState{Kind: s.Kind, LR: s.LR, Buffers: map[string]map[string][]float32{}, Counts: map[string]map[string]int64{}}
	for name, bufs := range s.Buffers {
		c.Buffers[name] = map[string][]float32{}
		for b, v := range bufs {
			c.Buffers[name][b] = append([]float32(nil), v...)
		}
	}
	for name, cs := range s.Counts {
		c.Counts[name] = maps.Clone(cs)
	}
	return c, nil
}

// merge adds s's parameters to whole (those whole has stay: a tied
// parameter's first copy).
func merge(whole *optim.SavedState, s optim.SavedState) *optim.SavedState {
	if whole == nil {
		whole = &optim.SavedState{Kind: s.Kind, LR: s.LR, Buffers: map[string]map[string][]float32{}, Counts: map[string]map[string]int64{}}
	}
	for name, bufs := range s.Buffers {
		if _, ok := whole.Buffers[name]; !ok {
			whole.Buffers[name] = bufs
		}
	}
	for name, cs := range s.Counts {
		if _, ok := whole.Counts[name]; !ok {
			whole.Counts[name] = cs
		}
	}
	return whole
}

// LoadOptimizerState gives each local stage's optimizer its parameters'
// part of s, the whole model's state (OptimizerState's, or a checkpoint
// of it). A parameter s has no state for keeps its own (SGD without
// momentum saves none); that s is this model's is the caller's check
// (the checkpoint's weights, loaded strictly).
func (p *Pipeline) LoadOptimizerState(s optim.SavedState) error {
	for _, st := range p.Stages {
		so, ok := st.opt.(optim.Stateful)
		if !ok {
			return fmt.Errorf("pipeline: stage of layers %d-%d: optimizer %T cannot load a state", st.Lo, st.Hi-1, st.opt)
		}
		part := optim.SavedState{Kind: s.Kind, LR: s.LR, Buffers: map[string]map[string][]float32{}, Counts: map[string]map[string]int64{}}
		for _, q := range st.Store.Trainable() {
			b, okb := s.Buffers[q.Name]
			c, okc := s.Counts[q.Name]
			if !okb && !okc {
				continue // no state yet (SGD without momentum keeps none)
			}
			if okb {
				part.Buffers[q.Name] = b
			}
			if okc {
				part.Counts[q.Name] = c
			}
		}
		if err := so.LoadState(part); err != nil {
			return fmt.Errorf("pipeline: stage of layers %d-%d: %w", st.Lo, st.Hi-1, err)
		}
	}
	return nil
}
