package pipeline

import (
	"bytes"

	"github.com/headroom-ml/headroom/nn"
)

// keepBuffers snapshots the stage's buffers (batch norm's running
// statistics and counters) before a backward pass that recomputes a
// forward pass the stage already ran, and returns what puts them back:
// each micro-batch then updates them once, as on one device. The last
// stage runs no forward pass of its own (its backward pass is its only
// one) and keeps its update. The copies are host memory, outside the
// device's plan; a meta device has no values to keep.
func (st *Stage) keepBuffers() func() {
	if st.last {
		return func() {}
	}
	var ps []*nn.Param
	var saved [][]byte
	for _, q := range st.Store.Params() {
		if !q.Trainable && q.Value != nil && q.Value.Data != nil {
			ps, saved = append(ps, q), append(saved, bytes.Clone(q.Value.Data))
		}
	}
	return func() {
		for i, q := range ps {
			copy(q.Value.Data, saved[i])
		}
	}
}
