// Package modsummary describes a model module by module, as torchinfo's
// summary does: parameters, output shape and activation bytes of every
// module, from a traced forward pass and the memory plan of a training
// step on the meta device (nothing is allocated, nothing runs).
package modsummary

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Row is one module. Counts and bytes include the module's submodules.
type Row struct {
	Module string // PyTorch's module path; "" is the model
	Depth  int    // 0 for the model
	Params int64  // parameters (a tied one counted once, under its owner)
	// Output is the shape of the module's output: the last value its
	// forward pass (or its submodules') produced. Empty for a module the
	// forward pass does not run.
	Output    string
	OutBytes  int64
	Forward   int64 // bytes of every value the module's forward ops produce
	AtPeak    int64 // arena bytes the module's values hold at the step's planned peak
	firstSeen int
}

// Summary is a model's table and totals.
type Summary struct {
	Model   string
	Input   trace.Meta
	Rows    []Row
	Params  int64
	Buffers int64 // elements of non-trainable state (running statistics)
	Plan    train.MemoryPlan
}

// Of summarizes spec at a batch of batch samples, trained by the optimizer
// newOpt makes under configuration cfg.
func Of(spec zoo.Spec, batch int, newOpt func() (optim.Optimizer, error), cfg train.Config) (*Summary, error) {
	x, y := spec.Example(batch)
	s := &Summary{Model: spec.Name, Input: x}
	// The forward pass, traced alone: the shapes and the modules in the
	// order they run.
	store := nn.NewStore()
	m := spec.New(store.Root())
	g := trace.New()
	if err := trace.Capture(func() { g.Output("out", m.Forward(g.Input("x", x.DType, x.Shape))) }); err != nil {
		return nil, err
	}
	rows := map[string]*Row{}
	order := 0
	row := func(path string) *Row {
		r, ok := rows[path]
		if !ok {
			depth := 0
			if path != "" {
				depth = strings.Count(path, ".") + 1
			}
			r = &Row{Module: path, Depth: depth, firstSeen: 1 << 60}
			rows[path] = r
		}
		return r
	}
	// each calls f for path and every module above it.
	each := func(path string, f func(r *Row)) {
		for {
			f(row(path))
			if path == "" {
				return
			}
			i := strings.LastIndex(path, ".")
			if i < 0 {
				path = ""
			} else {
				path = path[:i]
			}
		}
	}
	for _, p := range store.Params() {
		mod := ""
		if i := strings.LastIndex(p.Name, "."); i >= 0 {
			mod = p.Name[:i]
		}
		n := int64(p.Shape.NumElements())
		if !p.Trainable {
			// A buffer (batch norm's running statistics): PyTorch's
			// parameters() does not count it.
			s.Buffers += n
			continue
		}
		s.Params += n
		each(mod, func(r *Row) { r.Params += n })
	}
	for _, n := range g.Nodes {
		if n.Kind != trace.KindOp || len(n.Outputs) == 0 {
			continue // a state update (running statistics) has no output
		}
		order++
		var bytes int64
		for _, o := range n.Outputs {
			bytes += o.Meta.Bytes()
		}
		out := n.Outputs[0].Meta // later outputs are statistics (batch norm's mean and variance)
		each(n.Module, func(r *Row) {
			r.Forward += bytes
			r.Output, r.OutBytes = out.Shape.String(), out.Bytes()
			r.firstSeen = min(r.firstSeen, order)
		})
	}
	// The plan of a training step: what each module's values hold at its
	// peak.
	opt, err := newOpt()
	if err != nil {
		return nil, err
	}
	tr, err := train.SetupConfig(device.Meta(), 1, func(st *nn.Store) (train.Model, train.LossFunc) { return spec.New(st.Root()), spec.Loss }, opt, cfg)
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	mp, c, err := tr.PlanConfig(cfg, x, y)
	if err != nil {
		return nil, err
	}
	s.Plan = mp
	if p := c.Program.Plan; p != nil && len(p.Order) > 0 {
		for _, b := range p.Buffers {
			if b.Node == nil || b.Start > p.PeakStep || b.End < p.PeakStep {
				continue
			}
			size := b.Size
			each(b.Node.Module, func(r *Row) { r.AtPeak += size })
		}
	}
	for _, r := range rows {
		s.Rows = append(s.Rows, *r)
	}
	// Modules in the order the forward pass first runs them (a parent
	// before its children), modules it never runs last, by name.
	sort.SliceStable(s.Rows, func(i, j int) bool {
		a, b := s.Rows[i], s.Rows[j]
		if a.firstSeen != b.firstSeen {
			return a.firstSeen < b.firstSeen
		}
		if a.Depth != b.Depth && (strings.HasPrefix(b.Module, a.Module+".") || a.Module == "") {
			return true
		}
		if a.Depth != b.Depth && (strings.HasPrefix(a.Module, b.Module+".") || b.Module == "") {
			return false
		}
		return a.Module < b.Module
	})
	return s, nil
}

// Print writes the table, down to depth maxDepth (0: all), and the totals.
func (s *Summary) Print(w io.Writer, maxDepth int) {
	fmt.Fprintf(w, "%s, input %v\n", s.Model, s.Input)
	const head = "%-44s %14s %20s %12s %12s\n"
	fmt.Fprintf(w, head, "module", "parameters", "output", "forward", "at peak")
	fmt.Fprintln(w, strings.Repeat("-", 106))
	hidden := 0
	for _, r := range s.Rows {
		if r.Depth == 0 {
			continue
		}
		if maxDepth > 0 && r.Depth > maxDepth {
			hidden++
			continue
		}
		// Indented by depth, with the full path (torchinfo's own names
		// repeat: BasicBlock, Conv2d).
		name := strings.Repeat("  ", r.Depth-1) + r.Module
		if len(name) > 44 {
			name = "…" + name[len(name)-43:]
		}
		out := r.Output
		if out == "" {
			out = "--"
		}
		fmt.Fprintf(w, head, name, groupDigits(r.Params), out, bytesOrDash(r.Forward), bytesOrDash(r.AtPeak))
	}
	fmt.Fprintln(w, strings.Repeat("-", 106))
	if hidden > 0 {
		fmt.Fprintf(w, "(%d deeper modules not shown; --depth 0 shows all)\n", hidden)
	}
	var top Row
	for _, r := range s.Rows {
		if r.Depth == 0 {
			top = r
		}
	}
	fmt.Fprintf(w, "parameters: %s; buffers: %s elements; %s of parameters and buffers\n", groupDigits(s.Params), groupDigits(s.Buffers), device.FormatBytes(s.Plan.Parameters))
	fmt.Fprintf(w, "output: %s; forward values in all: %s\n", top.Output, device.FormatBytes(top.Forward))
	fmt.Fprintf(w, "training step (planned): gradients %s, optimizer state %s, activations at peak %s, total peak %s (at %s)\n",
		device.FormatBytes(s.Plan.Gradients), device.FormatBytes(s.Plan.OptimizerState), device.FormatBytes(s.Plan.Activations),
		device.FormatBytes(s.Plan.Total()), s.Plan.PeakStep)
}

func bytesOrDash(n int64) string {
	if n == 0 {
		return "--"
	}
	return device.FormatBytes(n)
}

// groupDigits writes n with thousands separators, as torchinfo does.
func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
