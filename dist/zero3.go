package dist

import (
	"context"
	"fmt"
	"math/rand"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// ZeRO stage 3 (Rajbhandari et al. 2020; PyTorch's FSDP FULL_SHARD): each
// rank of data-parallel training keeps 1/N of every trainable parameter, a
// flat shard of ceil(numel/N) values (the last ranks' padded with zeros),
// its gradient and the optimizer's state for it. The step's graph gathers
// each parameter where it is used:
//
//   - the model's forward pass is traced once on its own, then replayed
//     into the step with every read of a parameter replaced by an
//     all-gather of the shard (prim.AllGather with the parameter's shape)
//     just before the node that reads it, so the whole parameter lives
//     from there to that node's end (a "layer" at a time);
//   - the recomputation policy marks those gathers (and what is computed
//     from parameters alone): the backward pass gathers again just before
//     its first reader instead of keeping the forward's copy;
//   - autodiff turns each gather's gradient into a reduce-scatter
//     (prim.ReduceScatter, flat), summing the ranks' gradients into this
//     rank's shard as soon as that use's gradient is known;
//   - the optimizer steps on the shards (elementwise, so exactly the
//     update of the whole).
//
// Every buffer of a collective is a tensor of the step's arena, planned
// with the rest, so each rank's memory plan (train.Trainer.Plan) is what
// its allocator measures; there is no communication buffer outside it.

// Zero3 is one rank's part in ZeRO-3 training: the trainer's
// Config.Parallel (each rank's loss seed is its share of the global batch;
// the gradients are already reduce-scattered by the step) and the map
// between the full model and the rank's shards.
type Zero3 struct {
	c      comm.Comm
	size   int
	rank   int
	full   *nn.Store // the model's parameters as declared (never materialized)
	shards *nn.Store // the trainer's store: this rank's shards, buffers whole
	t      *train.Trainer
	share  float64
	// prefetch is the gather prefetch depth (Zero3Options.Prefetch).
	prefetch int
}

// Zero3Options configure ZeRO-3.
type Zero3Options struct {
	// Weights are initial values of the full model by parameter name
	// (a state_dict); parameters missing from it are initialized as
	// nn.Store.Materialize(dev, Seed) initializes them, so every rank
	// starts from the same full model.
	Weights map[string]*tensor.Tensor
	Seed    int64
	// Agree is anything else every rank must have alike.
	Agree string
	// Prefetch is how many layers' parameters are gathered ahead of the
	// layer computing, in the forward and the backward pass (FSDP's
	// prefetch; 0: each just before its use). Ranks must agree on it
	// (checked: their collectives would not pair up otherwise).
	Prefetch int
}

// NewZero3Trainer makes rank c.Rank()'s trainer of ZeRO-3 training of the
// model built on store full, which must not be materialized: the rank
// materializes its shards on dev instead (Zero3.Shards). cfg's
// recomputation policy gets the gathers added; cfg.Parallel must be nil
// and the optimizer must not run in the backward pass. Every rank must
// call it with the same model, configuration and options (checked: the
// differing rank is named). Close the trainer, then the Zero3.
//
// With c nil (or of one rank on the meta device) it makes the trainer of
// rank `rank` of `size` for planning: PlanZero3Rank.
func NewZero3Trainer(ctx context.Context, c comm.Comm, dev *device.Device, full *nn.Store, model train.Model, loss train.LossFunc, opt optim.Optimizer, cfg train.Config, o Zero3Options) (*train.Trainer, *Zero3, error) {
	if c == nil {
		return nil, nil, fmt.Errorf("%w: no communicator", ErrConfig)
	}
	return newZero3(ctx, c, c.Rank(), c.Size(), dev, full, model, loss, opt, cfg, o)
}

func newZero3(ctx context.Context, c comm.Comm, rank, size int, dev *device.Device, full *nn.Store, model train.Model, loss train.LossFunc, opt optim.Optimizer, cfg train.Config, o Zero3Options) (*train.Trainer, *Zero3, error) {
	switch {
	case full.Device() != nil:
		return nil, nil, fmt.Errorf("%w: ZeRO-3: the model's store is materialized on %v; give it unmaterialized (each rank materializes its shards)", ErrConfig, full.Device())
	case cfg.Parallel != nil:
		return nil, nil, fmt.Errorf("%w: the configuration is already parallel", ErrConfig)
	case cfg.OptimizerInBackward:
		return nil, nil, fmt.Errorf("%w: ZeRO-3 with the optimizer in the backward pass is not supported", ErrConfig)
	case size < 1 || rank < 0 || rank >= size:
		return nil, nil, fmt.Errorf("%w: rank %d of %d", ErrConfig, rank, size)
	case o.Prefetch < 0:
		return nil, nil, fmt.Errorf("%w: ZeRO-3 prefetch depth %d", ErrConfig, o.Prefetch)
	}
	z := &Zero3{c: c, size: size, rank: rank, full: full, share: 1, prefetch: o.Prefetch}
	z.shards = nn.NewStore()
	z.shards.SetTraining(full.Training())
	for _, p := range full.Params() {
		q := &nn.Param{Name: p.Name, DType: p.DType, Shape: p.Shape.Clone(), Trainable: p.Trainable}
		if p.Trainable {
			if p.DType != tensor.Float32 {
				return nil, nil, fmt.Errorf("%w: ZeRO-3 shards float32 parameters; %s is %v", ErrConfig, p.Name, p.DType)
			}
			q.Shape = tensor.Shape{prim.ShardLen(int(p.Numel()), size)}
		}
		z.shards.Add(q)
	}
	if c != nil && dev.HasData() {
		d := &DataParallel{c: c}
		if err := d.agree(ctx, full, opt, cfg, Options{Stage: 3, Agree: fmt.Sprintf("%s prefetch=%d", o.Agree, o.Prefetch)}); err != nil {
			return nil, nil, err
		}
	}
	if err := z.shards.Materialize(dev, 0); err != nil {
		return nil, nil, err
	}
	if dev.HasData() {
		if err := z.load(o); err != nil {
			z.shards.Release()
			return nil, nil, err
		}
	}
	inner := cfg.Recompute.Policy()
	pol := &gatherPolicy{inner: inner, derived: map[*trace.Node]bool{}}
	r, err := train.RecomputeOf(pol)
	if err != nil {
		z.shards.Release()
		return nil, nil, err
	}
	cfg.Recompute = r
	cfg.Parallel = z
	t, err := train.NewConfig(dev, z.shards, &zero3Model{inner: model, z: z}, loss, opt, cfg)
	if err != nil {
		z.shards.Release()
		return nil, nil, err
	}
	if c != nil {
		ro := exec.Options{}
		if t.RunOptions != nil {
			ro = *t.RunOptions
		}
		ro.Comm = c
		t.RunOptions = &ro
	}
	z.t = t
	return t, z, nil
}

// load fills the rank's shards from o.Weights or the parameters' own
// initialization (nn.Store.Materialize's streams), and the buffers whole.
func (z *Zero3) load(o Zero3Options) error {
	for i, p := range z.full.Params() {
		h, ok := o.Weights[p.Name]
		if ok {
			if h.DType != p.DType || !h.Shape.Equal(p.Shape) {
				return fmt.Errorf("%w: ZeRO-3: weight %s is %v%v, the model's %v%v", ErrConfig, p.Name, h.DType, h.Shape, p.DType, p.Shape)
			}
		} else {
			h = tensor.New(p.DType, p.Shape)
			if p.Init != nil {
				p.Init(rand.New(rand.NewSource(o.Seed+int64(i)*7919)), h)
			}
		}
		q, _ := z.shards.Get(p.Name)
		if !p.Trainable {
			copy(q.Value.Data, h.Data)
			continue
		}
		n := int(p.Numel())
		c := q.Shape[0]
		lo := min(z.rank*c, n)
		v := q.Value.F32()
		clear(v[copy(v, h.F32()[lo:min(lo+c, n)]):])
	}
	return nil
}

// Shards is the rank's store: a [ceil(numel/N)] shard of every trainable
// parameter (with its gradient), buffers whole.
func (z *Zero3) Shards() *nn.Store { return z.shards }

// Close frees the shards.
func (z *Zero3) Close() { z.shards.Release() }

// Gather returns the full value of parameter name, all-gathered from the
// ranks' shards (every rank must call it; for checkpoints and tests: the
// result is a host tensor outside the device's plan).
func (z *Zero3) Gather(ctx context.Context, name string) (*tensor.Tensor, error) {
	p, ok := z.full.Get(name)
	q, _ := z.shards.Get(name)
	if !ok || q.Value == nil || q.Value.Data == nil {
		return nil, fmt.Errorf("%w: no parameter %q with data", ErrConfig, name)
	}
	if !p.Trainable {
		return q.Value.Clone(), nil
	}
	all := make([]float32, q.Shape[0]*z.size)
	if err := z.c.AllGather(ctx, q.Value.F32(), all); err != nil {
		return nil, err
	}
	out := tensor.New(tensor.Float32, p.Shape)
	copy(out.F32(), all)
	return out, nil
}

// Share implements train.Parallel: this rank's weight over the global
// batch's.
func (z *Zero3) Share(ctx context.Context, weight float64) (float64, error) {
	if z.t != nil && (z.t.ClipNorm > 0 || z.t.Scaler != nil) {
		return 0, fmt.Errorf("%w: rank %d: ZeRO-3 with gradient clipping or loss scaling (they need every gradient whole)", ErrConfig, z.rank)
	}
	w := []float64{weight}
	if err := z.c.AllReduce64(ctx, w, comm.Sum); err != nil {
		return 0, err
	}
	if w[0] == 0 {
		z.share = 1 / float64(z.size)
	} else {
		z.share = weight / w[0]
	}
	return z.share, nil
}

// Reduce implements train.Parallel: the step reduce-scattered every
// gradient into its shard already; the loss is the global batch's.
func (z *Zero3) Reduce(ctx context.Context, _ []optim.Param, loss float64) (float64, error) {
	l := []float64{loss * z.share}
	if err := z.c.AllReduce64(ctx, l, comm.Sum); err != nil {
		return 0, err
	}
	return l[0], nil
}

// zero3Model traces the model on a graph of its own, then replays it into
// the step with each parameter read replaced by a gather of its shard.
type zero3Model struct {
	inner train.Model
	z     *Zero3
}

func (m *zero3Model) Forward(x *trace.Tensor) *trace.Tensor {
	g := x.Graph()
	g0 := trace.New()
	var out0 *trace.Tensor
	if err := trace.Capture(func() { out0 = m.inner.Forward(g0.Input("x", x.DType(), x.Shape())) }); err != nil {
		panic(err)
	}
	mapped := map[*trace.Tensor]*trace.Tensor{}
	for _, n := range g0.Nodes {
		switch n.Kind {
		case trace.KindInput:
			if n.Name == "x" {
				mapped[n.Outputs[0]] = x
				continue
			}
		case trace.KindState:
			if p, ok := m.z.full.Get(n.Name); ok && p.Trainable {
				continue // gathered where read
			}
		}
		ins := make([]*trace.Tensor, len(n.Inputs))
		gathered := map[*trace.Node]*trace.Tensor{} // one gather per parameter per reader
		for i, in := range n.Inputs {
			if v, ok := mapped[in]; ok {
				ins[i] = v
				continue
			}
			r := in.Node
			p, ok := m.z.full.Get(r.Name)
			if r.Kind != trace.KindState || !ok || !p.Trainable {
				panic(&trace.ShapeError{Module: n.Module, Op: "zero3", Err: fmt.Errorf("input %d of %s has no mapping", i, n.Label())})
			}
			if v, ok := gathered[r]; ok {
				ins[i] = v
				continue
			}
			g.AtModule(n.Module, func() {
				s := g.State(p.Name, "parameter", tensor.Float32, tensor.Shape{prim.ShardLen(int(p.Numel()), m.z.size)})
				ins[i] = prim.Apply1(&prim.AllGather{Ranks: m.z.size, Shape: p.Shape.Clone()}, s)
			})
			gathered[r] = ins[i]
		}
		for i, o := range g.Clone(n, ins) {
			mapped[n.Outputs[i]] = o
		}
	}
	return mapped[out0]
}

// gatherPolicy recomputes ZeRO-3's parameter gathers (and what forward
// computes from gathered parameters alone) for the backward pass, and
// what the inner policy recomputes.
type gatherPolicy struct {
	inner   transform.Policy
	derived map[*trace.Node]bool
}

func (p *gatherPolicy) Recompute(n *trace.Node) bool {
	return p.fromParams(n) || p.inner != nil && p.inner.Recompute(n)
}

func (p *gatherPolicy) Region(n *trace.Node) int {
	if p.inner != nil {
		return p.inner.Region(n)
	}
	return 0
}

// fromParams reports whether forward node n is a ZeRO-3 gather or
// computed from gathered parameters (and constants) alone.
func (p *gatherPolicy) fromParams(n *trace.Node) bool {
	if v, ok := p.derived[n]; ok {
		return v
	}
	v := false
	if n.Kind == trace.KindOp && n.Phase == trace.Forward {
		if o, ok := n.Op.(*prim.AllGather); ok && o.Shape != nil && n.Inputs[0].Node.Kind == trace.KindState {
			v = true
		} else if _, effect := n.Op.(trace.Effecter); !effect && len(n.Inputs) > 0 {
			v = true
			any := false
			for _, in := range n.Inputs {
				switch {
				case in.Node.Kind == trace.KindConst:
				case p.fromParams(in.Node):
					any = true
				default:
					v = false
				}
			}
			v = v && any
		}
	}
	p.derived[n] = v
	return v
}

// Zero3Rank is what PlanZero3Rank plans: rank Rank of Size training the
// model Build makes, on inputs X and targets Y.
type Zero3Rank struct {
	Rank, Size int
	// Build declares the model on an empty store.
	Build func(s *nn.Store) (train.Model, train.LossFunc, error)
	X, Y  trace.Meta
	Train train.Config
	// NewOptimizer makes the optimizer (nil: none).
	NewOptimizer func() (optim.Optimizer, error)
	// Prefetch is Zero3Options.Prefetch.
	Prefetch int
}

// PlanZero3Rank is the memory plan of rank Rank of Size ranks under
// ZeRO-3, on the meta device: nothing runs and no communicator is needed,
// so it plans any number of ranks; a rank's trainer on a device with data
// plans (and measures) the same (TestZero3PlanOnMeta).
func PlanZero3Rank(p Zero3Rank) (train.MemoryPlan, error) {
	s := nn.NewStore()
	model, loss, err := p.Build(s)
	if err != nil {
		return train.MemoryPlan{}, err
	}
	var opt optim.Optimizer
	if p.NewOptimizer != nil {
		if opt, err = p.NewOptimizer(); err != nil {
			return train.MemoryPlan{}, err
		}
	}
	t, z, err := newZero3(context.Background(), nil, p.Rank, p.Size, device.Meta(), s, model, loss, opt, p.Train, Zero3Options{Prefetch: p.Prefetch})
	if err != nil {
		return train.MemoryPlan{}, err
	}
	defer z.Close()
	defer t.Close()
	return t.Plan(p.X, p.Y)
}

// trainable reports whether name is a trainable parameter (sharded; the
// rest is whole on every rank).
func (z *Zero3) trainable(name string) bool {
	p, ok := z.full.Get(name)
	return ok && p.Trainable
}
