package pipeline

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
)

// StateDict gathers the whole model's parameters and buffers, under the
// names the layers give them, from every stage: in one process from each
// stage's store; on ranks (NewRank) rank 0 receives every other rank's
// (a tied parameter once, from the first stage holding it) and returns
// them, the other ranks send theirs and return nil. Every rank must call
// it. The values are host copies, outside every device's plan.
func (p *Pipeline) StateDict(ctx context.Context) (map[string]*tensor.Tensor, error) {
	sd := map[string]*tensor.Tensor{}
	if p.c == nil {
		for _, st := range p.Stages {
			for _, q := range st.Store.Params() {
				if _, ok := sd[q.Name]; !ok && q.Value.Data != nil {
					sd[q.Name] = q.Value.Clone()
				}
			}
		}
		return sd, nil
	}
	r := p.base
	if r != 0 {
		for i, q := range p.Stages[0].Store.Params() {
			if err := p.c.Send(ctx, words(q.Value.Data, q.Bytes()), 0, gatherTag(i)); err != nil {
				return nil, fmt.Errorf("pipeline: rank %d sends %s to rank 0: %w", r, q.Name, err)
			}
		}
		return nil, nil
	}
	for _, q := range p.Stages[0].Store.Params() {
		sd[q.Name] = q.Value.Clone()
	}
	for src := 1; src < p.total; src++ {
		// The parameters of rank src's stage, in its store's order.
		s := nn.NewStore()
		build(s, p.layers, p.cuts[src], p.cuts[src+1])
		for i, q := range s.Params() {
			buf := make([]float32, (q.Bytes()+3)/4)
			if err := p.c.Recv(ctx, buf, src, gatherTag(i)); err != nil {
				return nil, fmt.Errorf("pipeline: rank 0 receives %s from rank %d: %w", q.Name, src, err)
			}
			if _, ok := sd[q.Name]; ok {
				continue
			}
			t := tensor.New(q.DType, q.Shape)
			copy(t.Data, bytesOf(buf))
			sd[q.Name] = t
		}
	}
	return sd, nil
}

// gatherTag is the tag of a stage's i-th parameter sent to rank 0: no
// step's message is in flight then (a step ends with every rank's
// messages received).
func gatherTag(i int) int { return i % (maxTag + 1) }

// words are b's bytes (n of them; zeros on a meta device) as float32
// words for Send, which moves them bit for bit: a parameter of any dtype
// (an int64 counter of batch norm) goes as its bytes.
func words(b []byte, n int64) []float32 {
	w := make([]float32, (n+3)/4)
	if b != nil {
		copy(bytesOf(w), b)
	}
	return w
}

// bytesOf views w's memory as bytes.
func bytesOf(w []float32) []byte {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), 4*len(w))
}

// LoadFile reads each local stage's parameters and buffers from a
// safetensors file of the whole model (the single-process model's, as
// train --save writes it, or a pipeline's StateDict saved): every one the
// stage holds must be there; the others are the other stages'.
func (p *Pipeline) LoadFile(path string) error {
	for _, st := range p.Stages {
		// The strict check names what is missing; nothing is read then.
		err := st.Store.LoadFile(path, true)
		var le *nn.LoadError
		if err != nil && (!errors.As(err, &le) || len(le.Missing) > 0 || len(le.Mismatched) > 0) {
			return fmt.Errorf("pipeline: stage of layers %d-%d from %s: %w", st.Lo, st.Hi-1, path, err)
		}
		if err != nil {
			if err := st.Store.LoadFile(path, false); err != nil {
				return fmt.Errorf("pipeline: stage of layers %d-%d from %s: %w", st.Lo, st.Hi-1, path, err)
			}
		}
	}
	return nil
}
