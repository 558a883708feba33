package nn

import (
	"math/rand"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Builder registers parameters under a module path, as nested nn.Module
// attributes name them in PyTorch ("layer1.0.conv1.weight").
type Builder struct {
	store *Store
	path  string
}

// Root returns a builder for the top-level module of s.
func (s *Store) Root() Builder { return Builder{store: s} }

// Store returns the store parameters are registered in.
func (b Builder) Store() *Store { return b.store }

// Path is the module path ("" for the root).
func (b Builder) Path() string { return b.path }

// Sub returns a builder for child module name.
func (b Builder) Sub(name string) Builder {
	if b.path == "" {
		return Builder{b.store, name}
	}
	return Builder{b.store, b.path + "." + name}
}

func (b Builder) full(name string) string {
	if b.path == "" {
		return name
	}
	return b.path + "." + name
}

// Param registers a trainable float32 parameter.
func (b Builder) Param(name string, shape tensor.Shape, init func(*rand.Rand, *tensor.Tensor)) *Param {
	return b.store.Add(&Param{Name: b.full(name), DType: tensor.Float32, Shape: shape.Clone(), Trainable: true, Init: init})
}

// Buffer registers a non-trainable tensor (running statistics, counters).
func (b Builder) Buffer(name string, dt tensor.DType, shape tensor.Shape, init func(*rand.Rand, *tensor.Tensor)) *Param {
	return b.store.Add(&Param{Name: b.full(name), DType: dt, Shape: shape.Clone(), Init: init})
}

// Module is what every layer embeds: its path, for scoping traced ops.
type Module struct {
	Path  string
	Store *Store
}

// NewModule returns the Module for builder b.
func NewModule(b Builder) Module { return Module{Path: b.path, Store: b.store} }

// Scope runs f with x's graph at this module's path, so that ops and shape
// errors are attributed to it.
func (m Module) Scope(x *trace.Tensor, f func() *trace.Tensor) *trace.Tensor {
	var y *trace.Tensor
	x.Graph().AtModule(m.Path, func() { y = f() })
	return y
}

// Training reports whether the owning model is in training mode.
func (m Module) Training() bool { return m.Store == nil || m.Store.Training() }
