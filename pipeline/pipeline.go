// Package pipeline trains a sequential model cut into stages, each on its
// own device, in one process, with GPipe's schedule (every micro-batch of
// a step runs forward through all stages, then backward) or 1F1B's (each
// stage alternates forward and backward passes once warmed up); the
// gradients of the micro-batches add up to the batch's. Between forward
// and backward a stage keeps only its inputs (one per micro-batch in
// flight): its backward program recomputes the stage's forward pass, as
// GPipe re-materializes at stage boundaries.
//
// Each stage's memory is planned before it runs (Plan, StagePlan): its
// parameters, gradients and optimizer state, its inputs in flight, the
// gradient it receives (category communication) and the peak of its
// programs' arena; what each device's allocator measures equals it, for
// blocks of any size, because the peak is replayed on meta devices whose
// allocators follow the stages' (replay.go). Cut chooses the stages so
// that each fits its device's budget.
//
// NewRank runs one stage per rank of a comm.Comm instead (rank.go):
// activations and gradients go between stages by Send and Recv.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/headroom-ml/headroom/autodiff"
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

// Layer builds layer k of a sequential model under b (b is the root's
// Sub(k), so parameter names are those of a Sequential: "k.weight").
type Layer func(b nn.Builder) train.Model

// Sequential is the model of all layers in one store: the single-device
// model a pipeline must agree with.
func Sequential(s *nn.Store, layers []Layer) train.Model {
	ms := build(s, layers, 0, len(layers))
	return chain(ms)
}

type chain []train.Model

func (c chain) Forward(x *trace.Tensor) *trace.Tensor {
	for _, m := range c {
		x = m.Forward(x)
	}
	return x
}

func build(s *nn.Store, layers []Layer, lo, hi int) []train.Model {
	var ms []train.Model
	for k := lo; k < hi; k++ {
		ms = append(ms, layers[k](s.Root().Sub(strconv.Itoa(k))))
	}
	return ms
}

// ErrBudget is matched by errors.Is when no cut of the model fits the
// devices' budgets.
var ErrBudget = errors.New("pipeline: the model does not fit the devices")

// Stage is layers [Lo, Hi) on one device.
type Stage struct {
	Device *device.Device
	Lo, Hi int
	// first and last say where the stage is: the first has no input
	// gradient to send, the last computes the loss.
	first, last bool
	Store       *nn.Store
	model       chain
	opt         optim.Optimizer
	blks        []*device.Block // optimizer state
	arena       *exec.Arena
	progs       map[string]*exec.Program
	// ties are the stage's parameters that other stages hold too
	// (tied.go).
	ties []tie
}

// Pipeline is a model cut into stages.
type Pipeline struct {
	Stages []*Stage
	Loss   train.LossFunc
	// Micro is the number of micro-batches a step's batch is split into.
	Micro int
	// Schedule orders the micro-batches' passes (zero value: GPipe).
	Schedule Schedule

	// For Plan: the stages again, on meta devices whose allocators follow
	// the real ones step by step (replay.go), and the shapes of the steps
	// run so far, to rebuild them.
	layers  []Layer
	newOpt  func() (optim.Optimizer, error)
	shadow  []*Stage
	history []steps
	// pending is the step Plan has already replayed on the shadow stages
	// (with its plans), which Step then need not replay again.
	pending      string
	pendingPlans []StagePlan

	// A pipeline of ranks (NewRank) holds one stage, stage base of total,
	// and talks to the others through c; prefix is the layers before it
	// on a meta device, for the shapes of its inputs.
	base, total int
	c           comm.Comm
	prefix      *Stage
	// peers[i] is the other rank holding the stage's tied parameter i;
	// cuts are the ranks' layers.
	peers []int
	cuts  []int

	// TensorComm, on a pipeline of ranks, is the communicator the
	// collectives inside the stage's programs run on: the rank's tensor
	// group when the stage is a piece of a tensor-parallel model
	// (TPGPTLayers); nil for stages without collectives.
	TensorComm comm.Comm
}

// runOptions are the options of a run of the stage's programs on a
// pipeline of ranks.
func (p *Pipeline) runOptions() *exec.Options {
	if p.TensorComm == nil {
		return nil
	}
	return &exec.Options{Comm: p.TensorComm}
}

// New builds layers[cuts[s]:cuts[s+1]] on devs[s] (cuts from 0 to
// len(layers)), initialized from seed, each stage with its own optimizer
// from newOpt, its state and gradient buffers allocated now.
func New(layers []Layer, loss train.LossFunc, cuts []int, devs []*device.Device, newOpt func() (optim.Optimizer, error), micro int, seed int64) (*Pipeline, error) {
	if len(cuts) != len(devs)+1 || cuts[0] != 0 || cuts[len(cuts)-1] != len(layers) {
		return nil, fmt.Errorf("pipeline: cuts %v do not divide %d layers among %d devices", cuts, len(layers), len(devs))
	}
	if micro < 1 {
		return nil, fmt.Errorf("pipeline: %d micro-batches", micro)
	}
	p := &Pipeline{Loss: loss, Micro: micro, layers: layers, newOpt: newOpt, total: len(devs)}
	for s, dev := range devs {
		for _, other := range devs[:s] {
			if other == dev {
				return nil, fmt.Errorf("pipeline: stages %d and %d on one device: each stage's memory is planned on a device of its own", s, slices.Index(devs, dev))
			}
		}
		lo, hi := cuts[s], cuts[s+1]
		if hi <= lo {
			p.Close()
			return nil, fmt.Errorf("pipeline: stage %d has no layers (cuts %v)", s, cuts)
		}
		st, err := newStage(layers, lo, hi, dev, newOpt, seed)
		if st != nil {
			p.Stages = append(p.Stages, st)
		}
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("pipeline: stage %d on %v: %w", s, dev, err)
		}
	}
	p.syncTiedValues()
	return p, nil
}

// newStage builds layers [lo, hi) of a model of len(layers) on dev, with
// gradient buffers and optimizer state.
func newStage(layers []Layer, lo, hi int, dev *device.Device, newOpt func() (optim.Optimizer, error), seed int64) (*Stage, error) {
	st := &Stage{Device: dev, Lo: lo, Hi: hi, first: lo == 0, last: hi == len(layers), Store: nn.NewStore(), arena: exec.NewArena(dev), progs: map[string]*exec.Program{}}
	st.model = build(st.Store, layers, lo, hi)
	st.ties = findTies(st.Store, st.model, lo)
	if err := st.Store.Materialize(dev, seed); err != nil {
		return st, err
	}
	if err := st.Store.AllocGrads(); err != nil {
		return st, err
	}
	opt, err := newOpt()
	if err != nil {
		return st, err
	}
	st.opt = opt
	opt.SetAlloc(func(param, buffer string, n int) ([]float32, error) {
		b, err := dev.Alloc.Allocate(int64(n)*4, device.Tag{Category: device.OptimizerState, Module: moduleOf(param), Op: buffer})
		if err != nil {
			return nil, err
		}
		st.blks = append(st.blks, b)
		if b.Data == nil {
			return make([]float32, n), nil // meta: sizes only
		}
		return f32(b.Data, n), nil
	})
	if cb, ok := opt.(CommBuffers); ok {
		cb.SetCommAlloc(func(param, buffer string, n int) ([]float32, error) {
			b, err := dev.Alloc.Allocate(int64(n)*4, device.Tag{Category: device.Communication, Module: moduleOf(param), Op: buffer})
			if err != nil {
				return nil, err
			}
			st.blks = append(st.blks, b)
			if b.Data == nil {
				return nil, nil // meta: sizes only
			}
			return f32(b.Data, n), nil
		})
	}
	if prep, ok := opt.(optim.Preparer); ok {
		if err := prep.Prepare(st.params(false)); err != nil {
			return st, err
		}
	}
	return st, nil
}

// CommBuffers is implemented by an optimizer that holds communication
// buffers of its own (package dist's data parallelism across pipelines:
// the bucket a stage's gradients are all-reduced through). The stage
// gives it an allocation function on its device, category
// communication, before Prepare, so that the buffers are allocated on
// the stage's device and on the meta devices its plans replay on, in
// the same order: plans stay exact.
type CommBuffers interface {
	SetCommAlloc(f optim.AllocFunc)
}

func moduleOf(param string) string { return param[:max(0, strings.LastIndexByte(param, '.'))] }

func f32(b []byte, n int) []float32 {
	return (&tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{n}, Data: b}).F32()
}

func (st *Stage) params(grads bool) []optim.Param {
	var ps []optim.Param
	for _, p := range st.Store.Trainable() {
		if p.Value.Data == nil {
			// Meta: sizes only (Prepare needs each parameter's length).
			ps = append(ps, optim.Param{Name: p.Name, Value: make([]float32, p.Numel())})
			continue
		}
		q := optim.Param{Name: p.Name, Value: p.Value.F32()}
		if grads {
			q.Grad = p.Grad.F32()
		}
		ps = append(ps, q)
	}
	return ps
}

// Close releases every stage's memory.
func (p *Pipeline) Close() {
	for _, st := range p.Stages {
		st.close()
	}
	p.dropShadow()
	if p.prefix != nil {
		p.prefix.close()
		p.prefix = nil
	}
}

func (st *Stage) close() {
	st.arena.Release()
	for _, b := range st.blks {
		st.Device.Alloc.Free(b)
	}
	st.blks = nil
	st.Store.Release()
}

// Load copies parameter values by name from sd (a state dict of the whole
// model, as Sequential's store gives).
func (p *Pipeline) Load(sd map[string]*tensor.Tensor) error {
	for _, st := range p.Stages {
		for _, q := range st.Store.Params() {
			t, ok := sd[q.Name]
			if !ok || len(t.Data) != len(q.Value.Data) {
				return fmt.Errorf("pipeline: no value of %d bytes for %s", len(q.Value.Data), q.Name)
			}
			copy(q.Value.Data, t.Data)
		}
	}
	return nil
}

// program returns stage s's forward (backward false) or backward program
// for a micro-batch input x (and targets y on the last stage).
func (p *Pipeline) program(s int, backward, accumulate bool, x, y trace.Meta) (*exec.Program, error) {
	prog, err := p.Stages[s].program(p.Loss, backward, accumulate, x, y)
	if err != nil {
		return nil, fmt.Errorf("pipeline: stage %d: %w", s, err)
	}
	return prog, nil
}

func (st *Stage) program(loss train.LossFunc, backward, accumulate bool, x, y trace.Meta) (*exec.Program, error) {
	key := fmt.Sprintf("%v/%v/%v/%v", backward, accumulate, x, y)
	if prog, ok := st.progs[key]; ok {
		return prog, nil
	}
	g, err := stageGraph(st, loss, !st.first, st.last, backward, accumulate, x, y)
	if err != nil {
		return nil, err
	}
	prog, err := lower(g, st.Device, backward)
	if err != nil {
		return nil, err
	}
	st.progs[key] = prog
	return prog, nil
}

// stageGraph traces a stage's forward pass, or its backward pass (which
// recomputes the forward): gradients of its parameters go to (or are
// added to) their buffers, the gradient of its input is output "gx"
// (except on the first stage), and the last stage's loss is output
// "loss", seeded by input train.LossScaleInput; other stages are seeded
// by the gradient of their output, input "gout".
func stageGraph(st *Stage, loss train.LossFunc, wantGX, last, backward, accumulate bool, x, y trace.Meta) (*trace.Graph, error) {
	g := trace.New()
	err := trace.Capture(func() {
		xi := g.Input("x", x.DType, x.Shape)
		out := st.model.Forward(xi)
		if !backward {
			g.Output("out", out)
			return
		}
		root := out
		var seed *trace.Tensor
		if last {
			l := loss(out, g.Input("y", y.DType, y.Shape))
			g.Output("loss", l)
			root, seed = l, g.Input(train.LossScaleInput, l.DType(), l.Shape())
		} else {
			seed = g.Input("gout", out.DType(), out.Shape())
		}
		params := st.Store.Trainable()
		wrt := make([]*trace.Tensor, 0, len(params)+1)
		for _, q := range params {
			wrt = append(wrt, q.T(g))
		}
		if wantGX {
			wrt = append(wrt, xi)
		}
		grads, err := autodiff.BackwardFrom(root, seed, wrt)
		if err != nil {
			panic(err)
		}
		for i, q := range params {
			gs := g.State(nn.GradName(q.Name), "gradient", q.DType, q.Shape)
			gi := grads[i]
			if gi == nil {
				gi = prim.FullLike(wrt[i], 0)
			}
			g.AtModule(moduleOf(q.Name), func() { prim.AccumulateInto(gs, gi, accumulate) })
		}
		if wantGX {
			gx := grads[len(params)]
			if gx == nil {
				gx = prim.FullLike(xi, 0)
			}
			g.Output("gx", gx)
		}
	})
	return g, err
}

func lower(g *trace.Graph, dev *device.Device, backward bool) (*exec.Program, error) {
	g, _, err := transform.Run(g, transform.Options{Backward: backward})
	if err != nil {
		return nil, err
	}
	return exec.Compile(g, dev)
}

// held is a tensor in a block of a stage's device.
type held struct {
	t   *tensor.Tensor
	blk *device.Block
}

// put copies t into a new block of dev.
func put(dev *device.Device, t *tensor.Tensor, c device.Category, what string) (held, error) {
	b, err := dev.Alloc.Allocate(int64(len(t.Data)), device.Tag{Category: c, Op: what})
	if err != nil {
		return held{}, err
	}
	v := &tensor.Tensor{DType: t.DType, Shape: t.Shape, Data: b.Data}
	copy(v.Data, t.Data)
	return held{v, b}, nil
}

func (h held) free(dev *device.Device) { dev.Alloc.Free(h.blk) }

// Step trains on one batch and returns its loss: the batch is split into
// Micro micro-batches (train.Split) that run forward and backward through
// the stages in the order of the Schedule, and every stage's optimizer
// then steps on the gradients summed over the micro-batches.
func (p *Pipeline) Step(ctx context.Context, x, y *tensor.Tensor) (float64, error) {
	step := p.step
	if p.c != nil {
		step = p.rankStep
	}
	loss, err := step(ctx, x, y)
	if err != nil {
		// The devices' caches are now in a state no replay follows.
		p.dropShadow()
		p.history = nil
		return loss, err
	}
	p.stepped(train.MetaOf(x), train.MetaOf(y))
	return loss, nil
}

func (p *Pipeline) step(ctx context.Context, x, y *tensor.Tensor) (float64, error) {
	micro, err := train.Split(train.Batch{X: x, Y: y}, min(p.Micro, x.Shape[0]))
	if err != nil {
		return 0, err
	}
	S, M := len(p.Stages), len(micro)
	// ins[s][m] is stage s's input of micro-batch m, kept on its device
	// from its arrival to its backward pass; grads[s][m] the gradient of
	// stage s's output, received from stage s+1.
	ins := make([][]held, S)
	grads := make([][]held, S)
	for s := range S {
		ins[s], grads[s] = make([]held, M), make([]held, M)
	}
	defer func() {
		for s := range S {
			for m := range M {
				for _, h := range []held{ins[s][m], grads[s][m]} {
					if h.blk != nil {
						h.free(p.Stages[s].Device)
					}
				}
			}
		}
	}()
	arrive := func(s, m int, t *tensor.Tensor) error {
		h, err := put(p.Stages[s].Device, t, device.Activation, "stage input")
		if err != nil {
			return fmt.Errorf("pipeline: stage %d, micro-batch %d: %w", s, m, err)
		}
		ins[s][m] = h
		return nil
	}
	var loss float64
	n := float64(x.Shape[0])
	first := firstBackward(M, p.Schedule)
	for _, e := range order(S, M, p.Schedule) {
		st, b := p.Stages[e.s], micro[e.m]
		if e.s == 0 && ins[0][e.m].blk == nil {
			if err := arrive(0, e.m, b.X); err != nil {
				return 0, err
			}
		}
		in := ins[e.s][e.m]
		if !e.backward {
			prog, err := p.program(e.s, false, false, train.MetaOf(in.t), trace.Meta{})
			if err != nil {
				return 0, err
			}
			res, err := prog.Run(ctx, st.arena, st.Store, map[string]*tensor.Tensor{"x": in.t}, nil)
			if err != nil {
				return 0, fmt.Errorf("pipeline: stage %d forward, micro-batch %d: %w", e.s, e.m, err)
			}
			if err := arrive(e.s+1, e.m, res["out"]); err != nil {
				return 0, err
			}
			continue
		}
		feed := map[string]*tensor.Tensor{"x": in.t}
		var ym trace.Meta
		if st.last {
			feed["y"], ym = b.Y, train.MetaOf(b.Y)
		} else {
			feed["gout"] = grads[e.s][e.m].t
		}
		prog, err := p.program(e.s, true, e.m != first, train.MetaOf(in.t), ym)
		if err != nil {
			return 0, err
		}
		w := float64(b.X.Shape[0]) / n
		if st.last {
			lm := prog.Graph.InputNode(train.LossScaleInput).Outputs[0].Meta
			feed[train.LossScaleInput] = tensor.FromFloat64(lm.Shape, []float64{w}).Convert(lm.DType)
		}
		restore := st.keepBuffers()
		res, err := prog.Run(ctx, st.arena, st.Store, feed, nil)
		restore()
		for _, h := range []*held{&ins[e.s][e.m], &grads[e.s][e.m]} {
			if h.blk != nil {
				h.free(st.Device)
				*h = held{}
			}
		}
		if err != nil {
			return 0, fmt.Errorf("pipeline: stage %d backward, micro-batch %d: %w", e.s, e.m, err)
		}
		if st.last && st.Device.HasData() {
			loss += res["loss"].Float64s()[0] * w
		}
		if e.s > 0 {
			h, err := put(p.Stages[e.s-1].Device, res["gx"], device.Communication, "stage output gradient")
			if err != nil {
				return 0, fmt.Errorf("pipeline: stage %d, micro-batch %d: %w", e.s-1, e.m, err)
			}
			grads[e.s-1][e.m] = h
		}
	}
	p.sumTiedGrads()
	for s, st := range p.Stages {
		if !st.Device.HasData() {
			continue
		}
		if err := st.opt.Step(st.params(true)); err != nil {
			return loss, fmt.Errorf("pipeline: stage %d: %w", s, err)
		}
	}
	return loss, nil
}
