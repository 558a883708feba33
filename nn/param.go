// Package nn holds modules and their parameters: a named parameter store
// whose names are PyTorch's state_dict keys, PyTorch's default
// initializations, and the layers model code is built from.
package nn

import (
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/elide"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Param is a named persistent tensor: a trainable parameter or a buffer
// (running statistics). Value and Grad live in device memory once the store
// is materialized.
type Param struct {
	Name      string
	DType     tensor.DType
	Shape     tensor.Shape
	Trainable bool
	// Init fills a host tensor of the parameter's shape (PyTorch's default
	// initialization for the layer that owns it).
	Init func(r *rand.Rand, t *tensor.Tensor)

	Value *tensor.Tensor // view of device memory (nil data on meta)
	Grad  *tensor.Tensor // allocated for trainable parameters
	block *device.Block
	gradB *device.Block
}

// Numel is the number of elements.
func (p *Param) Numel() int64 { return int64(p.Shape.NumElements()) }

// Bytes is the size of the value.
func (p *Param) Bytes() int64 { return p.Numel() * int64(p.DType.Size()) }

// GradName is the state name a parameter's gradient is bound under.
func GradName(param string) string { return "grad:" + param }

// T returns the parameter as a symbolic tensor in graph g.
func (p *Param) T(g *trace.Graph) *trace.Tensor {
	cat := "parameter"
	if !p.Trainable {
		cat = "buffer"
	}
	return g.State(p.Name, cat, p.DType, p.Shape)
}

// Store is a model's parameters and buffers in registration order, which is
// the order of PyTorch's state_dict.
type Store struct {
	params   []*Param
	byName   map[string]*Param
	dev      *device.Device
	training bool
}

// NewStore returns an empty store in training mode.
func NewStore() *Store { return &Store{byName: map[string]*Param{}, training: true} }

// Training reports the mode modules trace in (model.train() / model.eval()).
func (s *Store) Training() bool { return s.training }

// SetTraining switches between training and evaluation behaviour.
func (s *Store) SetTraining(on bool) { s.training = on }

// Device is where the store is materialized (nil before).
func (s *Store) Device() *device.Device { return s.dev }

// Add registers a parameter; names must be unique.
func (s *Store) Add(p *Param) *Param {
	if _, dup := s.byName[p.Name]; dup {
		panic(fmt.Sprintf("nn: parameter %q registered twice", p.Name))
	}
	s.params = append(s.params, p)
	s.byName[p.Name] = p
	return p
}

// Params returns all parameters and buffers in registration order.
func (s *Store) Params() []*Param { return s.params }

// Get returns the parameter named name.
func (s *Store) Get(name string) (*Param, bool) { p, ok := s.byName[name]; return p, ok }

// Trainable returns the trainable parameters (model.parameters()).
func (s *Store) Trainable() []*Param {
	var out []*Param
	for _, p := range s.params {
		if p.Trainable {
			out = append(out, p)
		}
	}
	return out
}

// NumParams counts trainable elements, as sum(p.numel() for p in parameters()).
func (s *Store) NumParams() int64 {
	var n int64
	for _, p := range s.Trainable() {
		n += p.Numel()
	}
	return n
}

// ParamBytes is the memory of all values (parameters and buffers), and
// GradBytes that of the gradients, both as the allocator counts them.
func (s *Store) ParamBytes() (values, grads int64) {
	for _, p := range s.params {
		values += device.RoundSize(p.Bytes())
		if p.Trainable {
			grads += device.RoundSize(p.Bytes())
		}
	}
	return values, grads
}

// Materialize allocates every parameter on dev, initializes it with a
// generator seeded by seed (each parameter from its own stream, so adding a
// layer does not change the others). Gradients are allocated when first
// needed (AllocGrads: the trainer's first step or plan), as PyTorch's
// p.grad is None until the first backward pass, so a run that updates
// parameters in the backward pass never allocates them.
func (s *Store) Materialize(dev *device.Device, seed int64) error {
	if s.dev != nil {
		return errors.New("nn: store already materialized")
	}
	s.dev = dev
	for i, p := range s.params {
		module, _ := splitName(p.Name)
		b, err := dev.Alloc.Allocate(p.Bytes(), device.Tag{Category: device.Parameter, Module: module, Op: p.Name})
		if err != nil {
			s.Release()
			return fmt.Errorf("nn: allocating %s: %w", p.Name, err)
		}
		p.block = b
		p.Value = &tensor.Tensor{DType: p.DType, Shape: p.Shape, Data: b.Data}
		if dev.HasData() && p.Init != nil {
			h := tensor.New(p.DType, p.Shape)
			p.Init(rand.New(rand.NewSource(seed+int64(i)*7919)), h)
			copy(p.Value.Data, h.Data)
		}
	}
	return nil
}

// AllocGrads allocates zeroed gradients for trainable parameters that have
// none (after Materialize, or after ReleaseGrads).
func (s *Store) AllocGrads() error {
	if s.dev == nil {
		return errors.New("nn: gradients of a store that is not materialized")
	}
	for _, p := range s.params {
		if !p.Trainable || p.gradB != nil {
			continue
		}
		module, _ := splitName(p.Name)
		gb, err := s.dev.Alloc.Allocate(p.Bytes(), device.Tag{Category: device.Gradient, Module: module, Op: p.Name})
		if err != nil {
			return fmt.Errorf("nn: allocating gradient of %s: %w", p.Name, err)
		}
		p.gradB = gb
		p.Grad = &tensor.Tensor{DType: p.DType, Shape: p.Shape, Data: gb.Data}
	}
	return nil
}

// GradBlockBytes is what the allocator counts for the gradient buffer
// AllocGrads gave p: the request rounded to 512 bytes, or more for a large
// block handed out whole; 0 when it holds none.
func (p *Param) GradBlockBytes() int64 {
	if p.gradB == nil {
		return 0
	}
	return p.gradB.Size
}

// ReleaseGrads frees every gradient (optimizer.zero_grad(set_to_none=True)):
// between epochs, or whenever gradients are not needed, their memory goes
// back to the allocator. AllocGrads brings them back.
func (s *Store) ReleaseGrads() {
	for _, p := range s.params {
		if p.gradB != nil {
			s.dev.Alloc.Free(p.gradB)
			p.gradB, p.Grad = nil, nil
		}
	}
}

// Release frees all device memory of the store.
func (s *Store) Release() {
	if s.dev == nil {
		return
	}
	for _, p := range s.params {
		s.dev.Alloc.Free(p.block)
		s.dev.Alloc.Free(p.gradB)
		p.block, p.gradB, p.Value, p.Grad = nil, nil, nil, nil
	}
	s.dev = nil
}

// State implements exec.States: parameter values by name, gradients under
// GradName(name).
func (s *Store) State(name string) (*tensor.Tensor, bool) {
	if rest, ok := strings.CutPrefix(name, "grad:"); ok {
		p, ok := s.byName[rest]
		if !ok || p.Grad == nil {
			return nil, false
		}
		return p.Grad, true
	}
	p, ok := s.byName[name]
	if !ok || p.Value == nil {
		return nil, false
	}
	return p.Value, true
}

func splitName(name string) (module, leaf string) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return "", name
	}
	return name[:i], name[i+1:]
}

// StateDict returns host copies of every parameter and buffer.
func (s *Store) StateDict() map[string]*tensor.Tensor {
	out := make(map[string]*tensor.Tensor, len(s.params))
	for _, p := range s.params {
		t := tensor.New(p.DType, p.Shape)
		if p.Value != nil && p.Value.Data != nil {
			copy(t.Data, p.Value.Data)
		}
		out[p.Name] = t
	}
	return out
}

// LoadError lists what did not match in LoadStateDict. Its message names
// the first few keys of each list and counts the rest: a checkpoint with a
// million stray tensors gives an error line, not megabytes.
type LoadError struct {
	Missing    []string
	Unexpected []string
	Mismatched []string // "name: checkpoint float32[3, 4], model float32[4, 4]"
}

func (e *LoadError) Error() string {
	var parts []string
	if len(e.Missing) > 0 {
		parts = append(parts, fmt.Sprintf("missing keys: %s", elide.List(e.Missing, ", ")))
	}
	if len(e.Unexpected) > 0 {
		parts = append(parts, fmt.Sprintf("unexpected keys: %s", elide.List(e.Unexpected, ", ")))
	}
	if len(e.Mismatched) > 0 {
		parts = append(parts, fmt.Sprintf("size mismatch: %s", elide.List(e.Mismatched, "; ")))
	}
	return "nn: error loading state_dict: " + strings.Join(parts, "; ")
}

// match compares what a checkpoint holds (its keys, and the dtype and shape
// of each through info) with the store's parameters, as load_state_dict
// does: with strict, missing and unexpected keys are errors; shape
// mismatches, and dtypes that no conversion reconciles, always are.
func (s *Store) match(keys []string, info func(name string) (tensor.DType, tensor.Shape, bool), strict bool) error {
	le := &LoadError{}
	for _, p := range s.params {
		dt, shape, ok := info(p.Name)
		if !ok {
			le.Missing = append(le.Missing, p.Name)
			continue
		}
		if !shape.Equal(p.Shape) || (dt != p.DType && !(dt.IsFloat() && p.DType.IsFloat())) {
			le.Mismatched = append(le.Mismatched, fmt.Sprintf("%s: checkpoint %v%v, model %v%v", p.Name, dt, elideShape(shape), p.DType, p.Shape))
		}
	}
	for _, k := range keys {
		if _, ok := s.byName[k]; !ok {
			le.Unexpected = append(le.Unexpected, k)
		}
	}
	sort.Strings(le.Unexpected)
	if len(le.Mismatched) > 0 || strict && (len(le.Missing) > 0 || len(le.Unexpected) > 0) {
		return le
	}
	return nil
}

// elideShape prints a checkpoint's shape, which may have been crafted with
// thousands of dimensions, in bounded space.
func elideShape(sh tensor.Shape) string {
	const max = 8
	if len(sh) <= max {
		return sh.String()
	}
	return fmt.Sprintf("%v... (%d dimensions)", sh[:max].String(), len(sh))
}

// LoadStateDict copies sd into the store's parameters. With strict, missing
// and unexpected keys are errors (PyTorch's default); shape mismatches always
// are. Values of another float dtype are converted. Nothing is changed
// unless the whole dict is accepted.
func (s *Store) LoadStateDict(sd map[string]*tensor.Tensor, strict bool) error {
	if s.dev == nil {
		return errors.New("nn: load_state_dict before the store is materialized")
	}
	keys := make([]string, 0, len(sd))
	for k := range sd {
		keys = append(keys, k)
	}
	err := s.match(keys, func(name string) (tensor.DType, tensor.Shape, bool) {
		t, ok := sd[name]
		if !ok {
			return 0, nil, false
		}
		return t.DType, t.Shape, true
	}, strict)
	if err != nil {
		return err
	}
	for _, p := range s.params {
		t, ok := sd[p.Name]
		if !ok || p.Value.Data == nil {
			continue
		}
		if t.DType != p.DType {
			t = t.Convert(p.DType)
		}
		copy(p.Value.Data, t.Data)
	}
	return nil
}

// ZeroGrad zeroes every gradient (optimizer.zero_grad(set_to_none=False)).
func (s *Store) ZeroGrad() {
	for _, p := range s.params {
		if p.Grad != nil {
			clear(p.Grad.Data)
		}
	}
}

// LoadFile loads a safetensors checkpoint (a PyTorch state_dict saved with
// safetensors) into the store; errors name the file. The header is compared
// with the model before any tensor is read, and only the tensors the model
// takes are read: a checkpoint whose header claims a terabyte-sized tensor,
// or a million stray ones, costs its header, not what it claims. Nothing is
// changed unless every tensor was read.
func (s *Store) LoadFile(path string, strict bool) error {
	if s.dev == nil {
		return errors.New("nn: load_state_dict before the store is materialized")
	}
	f, err := safetensors.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	err = s.match(f.Names(), func(name string) (tensor.DType, tensor.Shape, bool) {
		info, err := f.Info(name)
		if err != nil {
			return 0, nil, false
		}
		return info.DType, info.Shape, true
	}, strict)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	// match has checked every tensor read here against its parameter, so
	// what is allocated is what the model holds.
	staged := make([]*tensor.Tensor, len(s.params))
	for i, p := range s.params {
		if p.Value == nil || p.Value.Data == nil {
			continue
		}
		if _, err := f.Info(p.Name); err != nil {
			continue // missing, and not strict
		}
		t, err := f.Tensor(p.Name)
		if err != nil {
			return err
		}
		if t.DType != p.DType {
			t = t.Convert(p.DType)
		}
		staged[i] = t
	}
	for i, p := range s.params {
		if staged[i] != nil {
			copy(p.Value.Data, staged[i].Data)
		}
	}
	return nil
}

// SaveFile writes the store's parameters and buffers as a safetensors file
// that PyTorch loads with safetensors.torch.load_file + load_state_dict.
func (s *Store) SaveFile(path string, metadata map[string]string) error {
	return safetensors.WriteFile(path, s.StateDict(), metadata)
}
