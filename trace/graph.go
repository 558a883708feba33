// Package trace records model code as a graph. Model code is ordinary Go over
// symbolic *Tensor values; every operation appends a Node. Later stages
// (autodiff, schedule, plan, exec) read the graph and never the model code.
package trace

import (
	"fmt"
	"strings"

	"github.com/headroom-ml/headroom/tensor"
)

// Meta is what a value is without its data: element type and shape.
type Meta struct {
	DType tensor.DType
	Shape tensor.Shape
}

// Bytes is the unpadded size of a value with this metadata; exact for every
// value of a graph (Graph checks each shape with tensor.Shape.Check).
func (m Meta) Bytes() int64 { return int64(m.Shape.NumElements()) * int64(m.DType.Size()) }

func (m Meta) String() string { return m.DType.String() + m.Shape.String() }

// Op is a primitive operation. Infer checks the inputs and returns the
// metadata of each output; a non-nil error becomes a *ShapeError naming the
// module path, the op and the input shapes.
type Op interface {
	Name() string
	Infer(in []Meta) ([]Meta, error)
}

// Aliaser is implemented by ops whose output 0 is the same bytes as input
// AliasOf() (a contiguous reshape): no copy and no new buffer.
type Aliaser interface {
	AliasOf() int
}

// Root follows aliases (reshapes) back to the value that owns the bytes.
func Root(t *Tensor) *Tensor {
	for t.Node.Kind == KindOp {
		a, ok := t.Node.Op.(Aliaser)
		if !ok {
			break
		}
		t = t.Node.Inputs[a.AliasOf()]
	}
	return t
}

// Effecter is implemented by ops that write into their input 0, which must be
// an external (state) value: gradient accumulation, running statistics,
// optimizer updates. Such nodes are never removed as dead code.
type Effecter interface {
	Effect()
}

// Updater is implemented by effects that replace their state input 0 with
// its value for the next step, computed from a gradient (input 1):
// optimizer updates inside the step. The schedule runs an update after
// every other reader of input 0, so each read in the step sees the old
// value (a layer's input gradient reads its weight after the weight's
// gradient exists; a tied weight is read in two places; recomputation
// reads weights again), and the plan counts input 1's buffer as a gradient.
type Updater interface {
	Effecter
	Update()
}

// Kind says where a node's value comes from.
type Kind uint8

const (
	KindOp    Kind = iota // computed by an Op
	KindInput             // fed per step (a batch), staged into the arena
	KindState             // external, persistent buffer bound by name (parameters, gradients, running stats)
	KindConst             // a small constant held in the graph
)

// Phase tells which part of a step a node belongs to, for reporting.
type Phase uint8

const (
	Forward Phase = iota
	Backward
	Update
)

func (p Phase) String() string { return [...]string{"forward", "backward", "update"}[p] }

// Node is one operation (or source) in the graph.
type Node struct {
	ID      int
	Kind    Kind
	Op      Op
	Name    string // inputs and state: binding name
	Inputs  []*Tensor
	Outputs []*Tensor
	Module  string // module path active when the node was recorded
	Phase   Phase
	Const   *tensor.Tensor
	// Category of a state node ("parameter", "gradient", "buffer").
	Category string
	// Recompute marks nodes that a transform duplicated for rematerialization.
	Recompute bool
	// Region is the checkpoint region the node was recorded in (0: none).
	Region int
}

// Label is a short human description: "layer1.0.conv1/conv2d".
func (n *Node) Label() string {
	what := n.Name
	if n.Kind == KindOp {
		what = n.Op.Name()
	}
	if n.Module == "" {
		return what
	}
	return n.Module + "/" + what
}

// Tensor is a symbolic tensor: output Index of node Node.
type Tensor struct {
	Node  *Node
	Index int
	Meta  Meta
	g     *Graph
}

// Shape of the tensor.
func (t *Tensor) Shape() tensor.Shape { return t.Meta.Shape }

// DType of the tensor.
func (t *Tensor) DType() tensor.DType { return t.Meta.DType }

// Graph the tensor belongs to.
func (t *Tensor) Graph() *Graph { return t.g }

// Dim returns the size of axis a (negative counts from the end).
func (t *Tensor) Dim(a int) int {
	if a < 0 {
		a += len(t.Meta.Shape)
	}
	return t.Meta.Shape[a]
}

func (t *Tensor) String() string {
	return fmt.Sprintf("%s:%d %s", t.Node.Label(), t.Index, t.Meta)
}

// Graph is a recorded computation.
type Graph struct {
	Nodes   []*Node
	Outputs []*Tensor
	// OutputNames parallels Outputs.
	OutputNames []string
	scope       []string
	phase       Phase
	region      int
	regions     int
	states      map[string]*Node
	inputs      map[string]*Node
}

// New returns an empty graph.
func New() *Graph {
	return &Graph{states: map[string]*Node{}, inputs: map[string]*Node{}}
}

// Module is the current module path ("" at top level).
func (g *Graph) Module() string { return strings.Join(g.scope, ".") }

// WithModule records everything f does under module path name (relative to
// the current one). Module paths are PyTorch's: "layer1.0.conv1".
func (g *Graph) WithModule(name string, f func()) {
	if name != "" {
		g.scope = append(g.scope, name)
		defer func() { g.scope = g.scope[:len(g.scope)-1] }()
	}
	f()
}

// PushModule and PopModule are WithModule for code that cannot use a closure.
func (g *Graph) PushModule(name string) { g.scope = append(g.scope, name) }

// PopModule ends the innermost PushModule.
func (g *Graph) PopModule() { g.scope = g.scope[:len(g.scope)-1] }

// SetPhase sets the phase recorded on new nodes and returns the old one.
func (g *Graph) SetPhase(p Phase) Phase {
	old := g.phase
	g.phase = p
	return old
}

func (g *Graph) add(n *Node, metas []Meta) *Node {
	// Every value of every graph passes here, so this one check keeps
	// overflowing shapes and byte counts out of all later stages.
	for i, m := range metas {
		if err := m.Shape.Check(m.DType); err != nil {
			what := n.Name
			switch n.Kind {
			case KindOp:
				what = n.Op.Name()
			case KindInput:
				what = "input " + n.Name
			case KindState:
				what = "state " + n.Name
			case KindConst:
				what = "const"
			}
			in := make([]Meta, len(n.Inputs))
			for j, t := range n.Inputs {
				in[j] = t.Meta
			}
			if len(metas) > 1 {
				err = fmt.Errorf("output %d: %w", i, err)
			}
			panic(&ShapeError{Module: g.Module(), Op: what, Inputs: in, Err: err})
		}
	}
	n.ID = len(g.Nodes)
	n.Module = g.Module()
	n.Phase = g.phase
	n.Region = g.region
	for i, m := range metas {
		n.Outputs = append(n.Outputs, &Tensor{Node: n, Index: i, Meta: Meta{m.DType, m.Shape.Clone()}, g: g})
	}
	g.Nodes = append(g.Nodes, n)
	return n
}

// Input declares a per-step input (a batch). Declaring the same name twice
// returns the same tensor.
func (g *Graph) Input(name string, dt tensor.DType, shape tensor.Shape) *Tensor {
	if n, ok := g.inputs[name]; ok {
		return n.Outputs[0]
	}
	n := g.add(&Node{Kind: KindInput, Name: name}, []Meta{{dt, shape}})
	g.inputs[name] = n
	return n.Outputs[0]
}

// State declares a persistent external buffer bound by name at run time
// (parameters, gradients, running statistics). Same name, same tensor.
func (g *Graph) State(name, category string, dt tensor.DType, shape tensor.Shape) *Tensor {
	if n, ok := g.states[name]; ok {
		if !n.Outputs[0].Meta.Shape.Equal(shape) || n.Outputs[0].Meta.DType != dt {
			panic(&ShapeError{Module: g.Module(), Op: "state " + name,
				Err: fmt.Errorf("declared twice with different metadata: %v and %v", n.Outputs[0].Meta, Meta{dt, shape})})
		}
		return n.Outputs[0]
	}
	n := g.add(&Node{Kind: KindState, Name: name, Category: category}, []Meta{{dt, shape}})
	g.states[name] = n
	return n.Outputs[0]
}

// StateNode returns the state node declared under name, or nil.
func (g *Graph) StateNode(name string) *Node { return g.states[name] }

// InputNode returns the input node declared under name, or nil.
func (g *Graph) InputNode(name string) *Node { return g.inputs[name] }

// Const embeds a small host tensor in the graph.
func (g *Graph) Const(t *tensor.Tensor) *Tensor {
	n := g.add(&Node{Kind: KindConst, Const: t}, []Meta{{t.DType, t.Shape}})
	return n.Outputs[0]
}

// Apply records op applied to inputs and returns its outputs. Shape errors
// panic with a *ShapeError; Capture turns them back into errors at the
// boundary of tracing, so model code reads like PyTorch code.
func (g *Graph) Apply(op Op, inputs ...*Tensor) []*Tensor {
	metas := make([]Meta, len(inputs))
	for i, t := range inputs {
		if t == nil {
			panic(&ShapeError{Module: g.Module(), Op: op.Name(), Err: fmt.Errorf("input %d is nil", i)})
		}
		if t.g != g {
			panic(&ShapeError{Module: g.Module(), Op: op.Name(), Err: fmt.Errorf("input %d belongs to another graph", i)})
		}
		metas[i] = t.Meta
	}
	out, err := op.Infer(metas)
	if err != nil {
		panic(&ShapeError{Module: g.Module(), Op: op.Name(), Inputs: metas, Err: err})
	}
	n := g.add(&Node{Kind: KindOp, Op: op, Inputs: inputs}, out)
	return n.Outputs
}

// Apply1 is Apply for single-output ops.
func (g *Graph) Apply1(op Op, inputs ...*Tensor) *Tensor { return g.Apply(op, inputs...)[0] }

// Output marks t as a result of the step, returned to the caller by name.
func (g *Graph) Output(name string, t *Tensor) {
	g.Outputs = append(g.Outputs, t)
	g.OutputNames = append(g.OutputNames, name)
}

// Inputs returns the input nodes in declaration order.
func (g *Graph) InputNodes() []*Node {
	var out []*Node
	for _, n := range g.Nodes {
		if n.Kind == KindInput {
			out = append(out, n)
		}
	}
	return out
}

// StateNodes returns the state nodes in declaration order.
func (g *Graph) StateNodes() []*Node {
	var out []*Node
	for _, n := range g.Nodes {
		if n.Kind == KindState {
			out = append(out, n)
		}
	}
	return out
}

// Consumers maps each node ID to the nodes that read any of its outputs.
func (g *Graph) Consumers() [][]*Node {
	c := make([][]*Node, len(g.Nodes))
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			id := in.Node.ID
			if k := len(c[id]); k == 0 || c[id][k-1] != n {
				c[id] = append(c[id], n)
			}
		}
	}
	return c
}

// AtModule runs f with the module path replaced by the absolute path; the
// backward pass uses it to attribute gradient nodes to their forward module.
func (g *Graph) AtModule(path string, f func()) {
	old := g.scope
	g.scope = nil
	if path != "" {
		g.scope = strings.Split(path, ".")
	}
	defer func() { g.scope = old }()
	f()
}

// Checkpoint records f's nodes in a new checkpoint region: with
// rematerialization on, the values they produce are not kept for the
// backward pass but recomputed from the region's inputs when needed
// (torch.utils.checkpoint). Regions nest flat: an inner region is its own.
func (g *Graph) Checkpoint(f func()) {
	old := g.region
	g.regions++
	g.region = g.regions
	defer func() { g.region = old }()
	f()
}

// Regions is the number of checkpoint regions recorded.
func (g *Graph) Regions() int { return g.regions }

// Rebuild support: transforms copy nodes into a new graph.

// Clone records in g a copy of node n (from another graph) reading inputs,
// with n's module path, phase and region. It returns the copy's outputs.
func (g *Graph) Clone(n *Node, inputs []*Tensor) []*Tensor {
	var outs []*Tensor
	oldScope, oldPhase, oldRegion := g.scope, g.phase, g.region
	g.scope = nil
	if n.Module != "" {
		g.scope = strings.Split(n.Module, ".")
	}
	g.phase, g.region = n.Phase, n.Region
	defer func() { g.scope, g.phase, g.region = oldScope, oldPhase, oldRegion }()
	switch n.Kind {
	case KindInput:
		outs = []*Tensor{g.Input(n.Name, n.Outputs[0].Meta.DType, n.Outputs[0].Meta.Shape)}
	case KindState:
		outs = []*Tensor{g.State(n.Name, n.Category, n.Outputs[0].Meta.DType, n.Outputs[0].Meta.Shape)}
	case KindConst:
		outs = []*Tensor{g.Const(n.Const)}
	default:
		outs = g.Apply(n.Op, inputs...)
		if len(outs) == 0 {
			// Effects have no outputs; the node is still the last one added.
			g.Nodes[len(g.Nodes)-1].Recompute = n.Recompute
		} else {
			outs[0].Node.Recompute = n.Recompute
		}
	}
	return outs
}
