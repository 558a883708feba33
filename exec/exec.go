// Package exec runs a planned graph on a device: every buffer of the step is
// a view into one arena at the offset the plan chose, and the allocator
// counts each one as it comes alive and dies, so the measured peak equals the
// planned peak.
package exec

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/plan"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/schedule"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// States gives the executor the persistent tensors (parameters, gradients,
// running statistics) that a graph's state nodes name.
type States interface {
	State(name string) (*tensor.Tensor, bool)
}

// StateMap is a States backed by a map.
type StateMap map[string]*tensor.Tensor

// State implements States.
func (m StateMap) State(name string) (*tensor.Tensor, bool) { t, ok := m[name]; return t, ok }

// Program is a compiled step: a graph, its schedule and its memory plan,
// and the kernel of each node, from the backend of its device.
type Program struct {
	Graph  *trace.Graph
	Plan   *plan.Plan
	Device *device.Device
	// Backend is the backend the kernels came from: the device's, or the
	// one given to CompileWith.
	Backend backend.Backend

	kernels []backend.Kernel // by step; nil where exec runs the node itself
	// colls are the kernels of collectives (prim.Collective), by step,
	// which get the run's communicator (Options.Comm).
	colls []backend.CollectiveKernel
}

// ErrNoBackend is returned by Compile for a device that carries no backend.
var ErrNoBackend = errors.New("exec: the device has no backend")

// runsItself reports the ops exec runs without a kernel: views (no bytes
// move), optimizer steps (bound at run time through Options.Update), and
// the transfers to and from the run's host store (Options.Host).
func runsItself(o trace.Op) bool {
	switch o.(type) {
	case trace.Aliaser, *prim.OptimizerStep, *prim.Offload, *prim.Reload:
		return true
	}
	return false
}

// Compile schedules and plans g for dev, with the kernels and workspace
// sizes of dev's backend. An op the backend cannot run is an error naming
// the node (wrapping the backend's *backend.UnsupportedError).
func Compile(g *trace.Graph, dev *device.Device) (*Program, error) {
	return CompileWith(g, dev, dev.Backend)
}

// CompileWith is Compile with the kernels of backend be instead of the
// device's: a trainer's own backend (one with threads of its own, for
// example) over a device that others share. be must run on dev's memory.
func CompileWith(g *trace.Graph, dev *device.Device, be backend.Backend) (*Program, error) {
	if be == nil {
		return nil, fmt.Errorf("%w (device %s)", ErrNoBackend, dev)
	}
	order := schedule.Order(g)
	loops, _ := be.(plan.Loops) // the backend's threads pack the arena
	// A second order, with the nodes that only make step outputs moved
	// to the end (schedule.Defer), is kept when its plan peaks lower.
	var p *plan.Plan
	if later := schedule.Defer(g, order, func(t *trace.Tensor) int64 { return plan.Round(t.Meta.Bytes()) }); later != nil {
		a, err := plan.MakeOn(g, order, be.Workspace, loops)
		if err != nil {
			return nil, err
		}
		b, err := plan.MakeOn(g, later, be.Workspace, loops)
		if err != nil {
			return nil, err
		}
		p = a
		if b.ArenaBytes < a.ArenaBytes {
			p, order = b, later
		}
	}
	kernels := make([]backend.Kernel, len(order))
	var colls []backend.CollectiveKernel
	for i, n := range order {
		if n.Kind != trace.KindOp || runsItself(n.Op) {
			continue
		}
		if _, ok := n.Op.(prim.Collective); ok {
			k, err := collectiveKernel(be, n.Op)
			if err != nil {
				return nil, &NodeError{n, err}
			}
			if colls == nil {
				colls = make([]backend.CollectiveKernel, len(order))
			}
			colls[i] = k
			continue
		}
		k, err := be.Kernel(n.Op)
		if err != nil {
			return nil, &NodeError{n, err}
		}
		kernels[i] = k
	}
	if p == nil {
		var err error
		if p, err = plan.MakeOn(g, order, be.Workspace, loops); err != nil {
			return nil, err
		}
	}
	return &Program{Graph: g, Plan: p, Device: dev, Backend: be, kernels: kernels, colls: colls}, nil
}

// collectiveKernel is be's kernel for collective o.
func collectiveKernel(be backend.Backend, o trace.Op) (backend.CollectiveKernel, error) {
	cb, ok := be.(backend.Collectives)
	if !ok {
		return nil, backend.Unsupported(be.Name(), o, "the backend runs no collectives")
	}
	return cb.CollectiveKernel(o)
}

// runCollective runs collective node n with the run's communicator.
func runCollective(ctx context.Context, k backend.CollectiveKernel, o prim.Collective, n *trace.Node, ins, outs []*tensor.Tensor, ws []byte, opts *Options) error {
	if opts == nil || opts.Comm == nil {
		return fmt.Errorf("no communicator bound to run %s (exec.Options.Comm)", o.Name())
	}
	if got, want := opts.Comm.Size(), o.GroupSize(); got != want {
		return fmt.Errorf("%s was traced for %d ranks, the communicator has %d", o.Name(), want, got)
	}
	return k(ctx, opts.Comm, n, ins, outs, ws)
}

// Arena is the reusable memory a program's buffers live in. Programs for
// different input shapes share one arena, grown to the largest plan.
type Arena struct {
	dev   *device.Device
	block *device.Block
}

// NewArena returns an empty arena on dev.
func NewArena(dev *device.Device) *Arena { return &Arena{dev: dev} }

// Ensure makes the arena at least size bytes.
func (a *Arena) Ensure(size int64) error {
	if a.block != nil && a.block.Size >= size {
		return nil
	}
	if a.block != nil {
		a.dev.Alloc.Release(a.block)
		a.block = nil
	}
	b, err := a.dev.Alloc.Reserve(size, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		return err
	}
	a.block = b
	return nil
}

// Size is the arena's reserved size.
func (a *Arena) Size() int64 {
	if a.block == nil {
		return 0
	}
	return a.block.Size
}

// track counts buffer b as a live tensor at its offset in the arena, tagged
// with its category, module path and op; untrack ends it.
func (a *Arena) track(b *plan.Buffer) {
	tag := device.Tag{Category: category(b.Category)}
	if n := b.Node; n != nil {
		tag.Module, tag.Op = n.Module, n.Name
		if n.Kind == trace.KindOp {
			tag.Op = n.Op.Name()
		}
	}
	a.dev.Alloc.TrackIn(a.block, b.Offset, b.Size, b.Bytes, tag)
}

func (a *Arena) untrack(b *plan.Buffer) { a.dev.Alloc.UntrackIn(a.block, b.Offset) }

// Release returns the arena's memory to the device's cache.
func (a *Arena) Release() {
	if a.block != nil {
		a.dev.Alloc.Release(a.block)
		a.block = nil
	}
}

// NodeError is a failure while running one node.
type NodeError struct {
	Node *trace.Node
	Err  error
}

func (e *NodeError) Error() string { return fmt.Sprintf("exec: %s: %v", e.Node.Label(), e.Err) }
func (e *NodeError) Unwrap() error { return e.Err }

// NonFiniteError names the first node that produced a NaN or infinity.
type NonFiniteError struct {
	Node   *trace.Node
	Output int
	Index  int // flat index of the first bad element
	Value  float64
}

func (e *NonFiniteError) Error() string {
	m := e.Node.Module
	if m == "" {
		m = "(top level)"
	}
	return fmt.Sprintf("exec: first non-finite value (%v) in module %s, op %s (%s phase), output %d %v, element %d",
		e.Value, m, e.Node.Op.Name(), e.Node.Phase, e.Output, e.Node.Outputs[e.Output].Meta, e.Index)
}

// firstNonFinite scans a float32 or float64 tensor.
func firstNonFinite(t *tensor.Tensor) (int, float64, bool) {
	switch t.DType {
	case tensor.Float32:
		for i, v := range t.F32() {
			if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
				return i, f, true
			}
		}
	case tensor.Float64:
		for i, f := range t.F64() {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return i, f, true
			}
		}
	}
	return 0, 0, false
}

// Options tune one run.
type Options struct {
	// Observe, when set, is called after each node with its step index and
	// how long it took (for profiles and timelines).
	Observe func(step int, n *trace.Node, d time.Duration)
	// CheckFinite stops the run at the first node whose floating-point
	// output holds a NaN or an infinity, with a *NonFiniteError naming it.
	CheckFinite bool
	// Update runs the prim.OptimizerStep nodes of a step traced with the
	// optimizer in the backward pass: it applies the optimizer to parameter
	// param in place (value is its storage) from its gradient (grad, a
	// view of the arena, dead once Update returns). The optimizer's state
	// lives outside the graph, so it is bound here, at run time.
	Update func(param string, value, grad *tensor.Tensor) error
	// Host receives the tensors the step offloads (prim.Offload) and gives
	// them back (prim.Reload); nil means device.DefaultHost(). It is bound
	// here, at run time, so that a compiled program holds no memory of
	// its own.
	Host prim.HostStore
	// Finish, when set, is called once the last node has run, while the
	// buffers live at the end (the graph's outputs) are still counted:
	// outs holds views of the outputs in the arena, not copies. Run
	// returns copies of the outputs Finish leaves in outs; those it
	// deletes are its own, valid until the arena runs again or is
	// released. A trainer whose gradients are arena values
	// (train.Config.ArenaApplies) runs its optimizer here, so that they
	// are counted live exactly as long as they are read, and are never
	// copied to the host.
	Finish func(outs map[string]*tensor.Tensor) error
	// Comm is the communicator the step's collectives (prim.Collective:
	// all-reduce, all-gather, reduce-scatter inside the graph) run on: this
	// rank's view of the group. Bound here, at run time, like Host; a step
	// with collectives and no communicator stops at the first one.
	Comm comm.Comm
}

// host is the store this run offloads to.
func (o *Options) host() prim.HostStore {
	if o != nil && o.Host != nil {
		return o.Host
	}
	return device.DefaultHost()
}

// NonFiniteLossError stops a run at its first optimizer step because the
// loss is NaN or infinite: every step reads the loss, so none has run and
// no parameter changed.
type NonFiniteLossError struct {
	Loss float64
}

func (e *NonFiniteLossError) Error() string {
	return fmt.Sprintf("exec: the loss is %v; the step stopped before any optimizer update", e.Loss)
}

// runStep runs a prim.OptimizerStep node: ins are the parameter, its gradient
// and the loss.
func runStep(o *prim.OptimizerStep, ins []*tensor.Tensor, opts *Options) error {
	if l := ins[2].Float64s()[0]; math.IsNaN(l) || math.IsInf(l, 0) {
		return &NonFiniteLossError{Loss: l}
	}
	if opts == nil || opts.Update == nil {
		return fmt.Errorf("no optimizer bound to run %s of %q (exec.Options.Update)", o.Name(), o.Param)
	}
	return opts.Update(o.Param, ins[0], ins[1])
}

func category(c string) device.Category {
	cat, err := device.ParseCategory(c)
	if err != nil {
		return device.Temporary
	}
	return cat
}

// Run executes one step. Inputs are matched to input nodes by name and must
// have their declared dtype and shape. It returns the graph's outputs as host
// tensors (nil data on the meta device).
func (p *Program) Run(ctx context.Context, arena *Arena, states States, inputs map[string]*tensor.Tensor, opts *Options) (map[string]*tensor.Tensor, error) {
	hasData := p.Device.HasData()
	if len(p.kernels) != len(p.Plan.Order) {
		return nil, errors.New("exec: the program was not made by Compile")
	}
	if err := arena.Ensure(p.Plan.ArenaBytes); err != nil {
		return nil, err
	}
	var mem []byte
	if hasData && arena.block != nil {
		mem = arena.block.Data
	}
	views := map[*trace.Tensor]*tensor.Tensor{}
	bufView := func(b *plan.Buffer, m trace.Meta) *tensor.Tensor {
		t := &tensor.Tensor{DType: m.DType, Shape: m.Shape}
		if hasData {
			t.Data = mem[b.Offset : b.Offset+m.Bytes() : b.Offset+b.Size]
		}
		return t
	}
	view := func(t *trace.Tensor) (*tensor.Tensor, error) {
		if v, ok := views[t]; ok {
			return v, nil
		}
		r := trace.Root(t)
		var v *tensor.Tensor
		if r.Node.Kind == trace.KindState {
			s, ok := states.State(r.Node.Name)
			if !ok {
				return nil, fmt.Errorf("exec: state %q is not bound", r.Node.Name)
			}
			if s.DType != r.Meta.DType || !s.Shape.Equal(r.Meta.Shape) {
				return nil, fmt.Errorf("exec: state %q is %v%v, the graph expects %v", r.Node.Name, s.DType, s.Shape, r.Meta)
			}
			v = &tensor.Tensor{DType: t.Meta.DType, Shape: t.Meta.Shape, Data: s.Data}
		} else {
			b, ok := p.Plan.Of[t]
			if !ok {
				return nil, fmt.Errorf("exec: no buffer planned for %v", t)
			}
			v = bufView(b, t.Meta)
		}
		views[t] = v
		return v, nil
	}
	track, untrack := arena.track, arena.untrack
	births := make([][]*plan.Buffer, len(p.Plan.Order))
	deaths := make([][]*plan.Buffer, len(p.Plan.Order))
	for _, b := range p.Plan.Buffers {
		births[b.Start] = append(births[b.Start], b)
		deaths[b.End] = append(deaths[b.End], b)
	}
	// Untrack whatever is still live at the end (the outputs) or if we
	// leave early, so statistics stay true after an error; in the plan's
	// order, so that a run's allocation history is the same every time
	// (a plan's snapshot equals the recorded step's, entry by entry).
	live := map[*plan.Buffer]bool{}
	defer func() {
		for _, b := range p.Plan.Buffers {
			if live[b] {
				untrack(b)
			}
		}
	}()

	// Once an optimizer step has run the run is committed: a cancellation
	// is no longer heeded, so that parameters are never left half updated.
	committed := false
	for i, n := range p.Plan.Order {
		if i%64 == 0 && !committed {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		for _, b := range births[i] {
			track(b)
			live[b] = true
		}
		switch n.Kind {
		case trace.KindInput:
			src, ok := inputs[n.Name]
			out := n.Outputs[0]
			if !ok {
				return nil, fmt.Errorf("exec: input %q not given", n.Name)
			}
			if src.DType != out.Meta.DType || !src.Shape.Equal(out.Meta.Shape) {
				return nil, fmt.Errorf("exec: input %q is %v%v, the graph was traced for %v", n.Name, src.DType, src.Shape, out.Meta)
			}
			if b, ok := p.Plan.Of[out]; ok && hasData {
				copy(bufView(b, out.Meta).Data, src.Data)
			}
		case trace.KindConst:
			if b, ok := p.Plan.Of[n.Outputs[0]]; ok && hasData {
				copy(bufView(b, n.Outputs[0].Meta).Data, n.Const.Data)
			}
		case trace.KindOp:
			if _, alias := n.Op.(trace.Aliaser); alias || !hasData {
				break
			}
			ins := make([]*tensor.Tensor, len(n.Inputs))
			for j, t := range n.Inputs {
				v, err := view(t)
				if err != nil {
					return nil, &NodeError{n, err}
				}
				ins[j] = v
			}
			outs := make([]*tensor.Tensor, len(n.Outputs))
			for j, t := range n.Outputs {
				v, err := view(t)
				if err != nil {
					return nil, &NodeError{n, err}
				}
				outs[j] = v
			}
			var ws []byte
			if b := p.Plan.Workspace[i]; b != nil {
				// Capped at its length: a kernel that reslices its
				// workspace past what it declared panics here instead
				// of writing over the next buffer in the arena.
				ws = mem[b.Offset : b.Offset+b.Bytes : b.Offset+b.Bytes]
			}
			start := time.Now()
			var err error
			fc, checks := p.Backend.(backend.FusedChecker)
			switch o := n.Op.(type) {
			case *prim.OptimizerStep:
				err = runStep(o, ins, opts)
				committed = true
			case *prim.Offload:
				// The key is the op, which the matching Reload names.
				outs[0].Data[0] = 1
				err = opts.host().Put(o, ins[0].Data)
			case *prim.Reload:
				err = opts.host().Take(o.From, outs[0].Data)
			case prim.Collective:
				err = runCollective(ctx, p.colls[i], o, n, ins, outs, ws, opts)
			case *prim.Fused:
				if opts != nil && opts.CheckFinite && checks {
					// A diagnosis runs fused ops one by one, to name the op
					// that made a non-finite value, not the fused node.
					var bad *trace.Node
					var j, k int
					var v float64
					if bad, j, k, v, err = fc.RunFusedChecked(n, ins, outs, ws, firstNonFinite); err == nil && bad != nil {
						return nil, &NonFiniteError{Node: bad, Output: j, Index: k, Value: v}
					}
					break
				}
				err = p.kernels[i](n, ins, outs, ws)
			default:
				err = p.kernels[i](n, ins, outs, ws)
			}
			if err != nil {
				return nil, &NodeError{n, err}
			}
			if opts != nil && opts.Observe != nil {
				opts.Observe(i, n, time.Since(start))
			}
			if opts != nil && opts.CheckFinite {
				for j, o := range outs {
					if k, v, bad := firstNonFinite(o); bad {
						return nil, &NonFiniteError{Node: n, Output: j, Index: k, Value: v}
					}
				}
			}
		}
		if i < len(p.Plan.Order)-1 {
			for _, b := range deaths[i] {
				untrack(b)
				delete(live, b)
			}
		}
	}
	outs := map[string]*tensor.Tensor{}
	for k, t := range p.Graph.Outputs {
		v := &tensor.Tensor{DType: t.Meta.DType, Shape: t.Meta.Shape}
		if hasData {
			var err error
			if v, err = view(t); err != nil {
				return nil, err
			}
		}
		outs[p.Graph.OutputNames[k]] = v
	}
	if opts != nil && opts.Finish != nil {
		if err := opts.Finish(outs); err != nil {
			return nil, err
		}
	}
	results := make(map[string]*tensor.Tensor, len(outs))
	for name, v := range outs {
		res := tensor.New(v.DType, v.Shape)
		if hasData {
			copy(res.Data, v.Data)
		} else {
			res.Data = nil
		}
		results[name] = res
	}
	return results, nil
}
