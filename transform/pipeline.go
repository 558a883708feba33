package transform

import (
	"fmt"

	"github.com/headroom-ml/headroom/trace"
)

// Options are what the compile passes of a step read: the recomputation
// policy, the precision and the saved-activation storage. Backward is
// false for a forward-only (evaluation) step, which saves nothing, so it
// is not compressed.
type Options struct {
	Recompute Policy
	Precision Precision
	Compress  CompressPolicy
	Backward  bool
	// RunsLow is the backend's backend.LowRunner, if it has one: under
	// bf16 autocast ReadLow hands pointwise convolutions bfloat16
	// operands where it says their kernels multiply them natively.
	RunsLow func(o trace.Op, in, out []trace.Meta) bool
}

// PassReport says what one pass did to the graph.
type PassReport struct {
	Name          string
	NodesBefore   int
	NodesAfter    int
	Skipped       bool   // the configuration does not ask for this pass
	Detail        string // what it changed, in words
	BytesSaved    int64  // bytes the pass stopped holding, where it knows them
	BytesAdded    int64
	NodesAffected int // nodes recomputed, values rounded, tensors compressed, nodes fused
	// Stats is the pass's own statistics (Stats, AutocastStats,
	// CompressStats, FuseStats; nil when skipped or it has none).
	Stats any
}

// Pass is one named rewrite of the traced step. Every pass has this
// signature; state carries what an earlier pass tells a later one (the
// autocast's low-precision values, read by compression).
type Pass struct {
	Name string
	Run  func(g *trace.Graph, o Options, st *PassState, r *PassReport) (*trace.Graph, error)
}

// PassState is what passes hand on to later passes.
type PassState struct {
	low    LowValues
	hasLow bool
}

// Pipeline is the order in which a traced step (after autodiff) is
// rewritten before it is scheduled and laid out: the one place this
// order is written down. Scheduling and the arena layout follow in
// exec.Compile.
var Pipeline = []Pass{
	{"attnlayout", attnLayoutPass},
	{"recompute", recomputePass},
	{"autocast", autocastPass},
	{"compress", compressPass},
	{"readlow", readLowPass},
	{"slicecat", sliceCatPass},
	{"fuse", fusePass},
}

// Run runs the pipeline's passes in order on g and reports each.
func Run(g *trace.Graph, o Options) (*trace.Graph, []PassReport, error) {
	var st PassState
	reports := make([]PassReport, 0, len(Pipeline))
	for _, p := range Pipeline {
		r := PassReport{Name: p.Name, NodesBefore: len(g.Nodes)}
		out, err := p.Run(g, o, &st, &r)
		if err != nil {
			return nil, reports, fmt.Errorf("%s pass: %w", p.Name, err)
		}
		g = out
		r.NodesAfter = len(g.Nodes)
		reports = append(reports, r)
	}
	return g, reports, nil
}

// attnLayoutPass is FoldAttentionLayout.
func attnLayoutPass(g *trace.Graph, _ Options, _ *PassState, r *PassReport) (*trace.Graph, error) {
	if !attnLayout {
		r.Skipped = true
		return g, nil
	}
	out, n, err := FoldAttentionLayout(g)
	r.NodesAffected = n
	r.Detail = fmt.Sprintf("%d attention ops read and write [B, T, H, D] in place of transposes", n)
	return out, err
}

func recomputePass(g *trace.Graph, o Options, _ *PassState, r *PassReport) (*trace.Graph, error) {
	if o.Recompute == nil || !o.Backward {
		r.Skipped = true
		return g, nil
	}
	out, s, err := RematerializeFor(g, o.Recompute, o.Compress)
	r.NodesAffected, r.Stats = s.Recomputed, s
	r.Detail = fmt.Sprintf("%d forward nodes selected, %d copies for the backward pass", s.Marked, s.Recomputed)
	return out, err
}

// autocastPass and the two after it are transform.ApplyPrecision, pass by
// pass.
func autocastPass(g *trace.Graph, o Options, st *PassState, r *PassReport) (*trace.Graph, error) {
	if o.Precision == FP32 {
		r.Skipped = true
		return g, nil
	}
	out, low, s, err := Autocast(g, o.Precision)
	st.low, st.hasLow = low, true
	r.NodesAffected, r.Stats = s.Rounded, s
	r.Detail = fmt.Sprintf("%v: %d values rounded, %d held in low precision", o.Precision, s.Rounded, s.Low)
	return out, err
}

func compressPass(g *trace.Graph, o Options, st *PassState, r *PassReport) (*trace.Graph, error) {
	c := o.Compress
	if !o.Backward {
		c = nil // evaluation saves nothing for a backward pass
	}
	if st.hasLow {
		c = st.low.Storing(c)
	}
	if c == nil {
		r.Skipped = true
		return g, nil
	}
	out, s, err := Compress(g, c)
	r.NodesAffected, r.Stats = s.Saved-s.Tensors[Keep], s
	r.BytesSaved = s.Before - s.After
	r.Detail = fmt.Sprintf("%d of %d saved tensors stored compressed, %d ReLU backwards read bit masks", s.Saved-s.Tensors[Keep], s.Saved, s.MaskedBits)
	return out, err
}

// sliceCatPass is SliceFromCat; a forward-only step saves nothing.
func sliceCatPass(g *trace.Graph, o Options, _ *PassState, r *PassReport) (*trace.Graph, error) {
	if !o.Backward {
		r.Skipped = true
		return g, nil
	}
	out, s, err := SliceFromCat(g)
	r.NodesAffected, r.Stats, r.BytesSaved = s.Values, s, s.Bytes
	r.Detail = fmt.Sprintf("%d saved values read back from a saved concatenation", s.Values)
	return out, err
}

func readLowPass(g *trace.Graph, o Options, _ *PassState, r *PassReport) (*trace.Graph, error) {
	if o.Precision == FP32 || !readLow {
		r.Skipped = true
		return g, nil
	}
	out, n, err := readLowFor(g, o.Precision, o.RunsLow)
	r.NodesAffected = n
	r.Detail = fmt.Sprintf("%d float32 copies of 16-bit values dropped", n)
	return out, err
}

func fusePass(g *trace.Graph, _ Options, _ *PassState, r *PassReport) (*trace.Graph, error) {
	out, s, err := Fuse(g)
	r.NodesAffected, r.Stats = s.Groups, s
	r.BytesSaved = s.Elided
	r.Detail = fmt.Sprintf("%d fused nodes from %d elementwise nodes", s.Groups, s.Merged)
	return out, err
}
