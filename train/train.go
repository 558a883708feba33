package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/headroom-ml/headroom/autodiff"
	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/plan"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/transform"
)

// Model is what the trainer trains: a forward function over symbolic
// tensors, with its parameters in a store.
type Model interface {
	Forward(x *trace.Tensor) *trace.Tensor
}

// LossFunc turns the model's output and the target into a scalar loss.
type LossFunc func(out, target *trace.Tensor) *trace.Tensor

// Trainer owns the compiled steps of one model.
type Trainer struct {
	Device *device.Device
	Store  *nn.Store
	Model  Model
	Loss   LossFunc
	Opt    optim.Optimizer

	// Weigh, when set, gives a micro-batch's weight from its targets (for
	// example its number of non-ignored tokens) for StepAccumulate.
	Weigh func(y *tensor.Tensor) float64
	// Scaler, when set, scales the loss and unscales gradients before the
	// optimizer, skipping steps with inf/NaN gradients (GradScaler).
	Scaler *GradScaler
	// ClipNorm > 0 clips the global gradient norm (after unscaling).
	ClipNorm float64
	// Splits counts micro-batches split in two because their step did not
	// fit in memory.
	Splits int

	// RunOptions, when set, are passed to every step's Program.Run (for
	// per-node timings in profiles and benchmarks). They change how a
	// step runs, not what is compiled.
	RunOptions *exec.Options
	// Checkpointer, when set, writes and reads the whole model and
	// optimizer state of a trainer holding pieces of them (package dist).
	Checkpointer Checkpointer

	cfg Config
	// gradBytes is what the gradient buffers took when last allocated:
	// Plan reports it while they are released (ReleaseMemory).
	gradBytes int64

	arena    *exec.Arena
	programs map[programKey]*Compiled
	// backend runs the trainer's kernels: the device's backend, or, where
	// it splits work over host threads (backend.Threaded), one with a
	// pool of the trainer's own (Config.Threads), closed by Close.
	backend    backend.Backend
	ownBackend bool // backend was made for the trainer (WithThreads)
	optBlks    []*device.Block
	params     []optim.Param
	step       int64            // steps taken; seeds dropout masks
	share      float64          // this rank's share of the step's global batch (Config.Parallel), else 1
	outs       []*tensor.Tensor // the model's outputs of the last step's passes (Config.Outputs)
	// gradViews are the gradients the last step left in the arena
	// (not Config.GradientBuffers), by trainable parameter: the store's Grad
	// while it still points at them.
	gradViews []*tensor.Tensor
	// ownsStore: Close releases the store (trainers made by Setup).
	ownsStore bool
}

// New returns a trainer with the zero Config (fp32, nothing recomputed or
// compressed, gradient buffers). The store must be materialized on dev.
func New(dev *device.Device, store *nn.Store, model Model, loss LossFunc, opt optim.Optimizer) (*Trainer, error) {
	return NewConfig(dev, store, model, loss, opt, Config{})
}

// NewConfig returns a trainer with configuration cfg. The store must be
// materialized on dev. Optimizer state and, unless cfg runs the optimizer
// in the backward pass, the gradient buffers are allocated now, in that
// order, as the first step would: the memory plan holds from the first
// step and an out-of-memory shows at start-up.
func NewConfig(dev *device.Device, store *nn.Store, model Model, loss LossFunc, opt optim.Optimizer, cfg Config) (*Trainer, error) {
	if store.Device() != dev {
		return nil, fmt.Errorf("train: the model's parameters are not on %v (materialize the store first)", dev)
	}
	t := &Trainer{Device: dev, Store: store, Model: model, Loss: loss, Opt: opt, arena: exec.NewArena(dev), programs: map[programKey]*Compiled{}, share: 1}
	if opt != nil {
		// Every optimizer's state comes from the device, counted as
		// optimizer state.
		opt.SetAlloc(func(param, buffer string, n int) ([]float32, error) {
			module := param
			if i := strings.LastIndexByte(param, '.'); i >= 0 {
				module = param[:i]
			}
			b, err := dev.Alloc.Allocate(int64(n)*4, device.Tag{Category: device.OptimizerState, Module: module, Op: buffer})
			if err != nil {
				return nil, err
			}
			t.optBlks = append(t.optBlks, b)
			v := (&tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{n}, Data: b.Data})
			if b.Data == nil {
				return make([]float32, n), nil // meta: no data to hold
			}
			return v.F32(), nil
		})
	}
	for _, p := range store.Trainable() {
		t.params = append(t.params, optim.Param{Name: p.Name})
	}
	if err := t.prepareOptimizer(); err != nil {
		t.Close()
		return nil, err
	}
	if err := t.SetConfig(cfg); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Config is the trainer's configuration.
func (t *Trainer) Config() Config { return t.cfg }

// SetConfig changes the configuration: the one way to change it. Steps
// compiled under the old one are dropped. For fp16-mixed it installs
// NewGradScaler() unless a scaler is set. The gradient buffers are made
// what the steps will hold: freed when the optimizer runs in the backward
// pass, allocated otherwise.
func (t *Trainer) SetConfig(c Config) error {
	if c.Threads < 0 {
		return fmt.Errorf("train: Config.Threads %d: want a positive count, or 0 for the process-wide one", c.Threads)
	}
	if c != t.cfg {
		clear(t.programs)
	}
	if t.backend == nil || c.Threads != t.cfg.Threads {
		t.closeBackend()
		t.backend, t.ownBackend = t.Device.Backend, false
		if tb, ok := t.backend.(backend.Threaded); ok {
			t.backend, t.ownBackend = tb.WithThreads(c.Threads), true
		}
		// The optimizer's update loops run on the trainer's threads too.
		if o, ok := t.Opt.(interface {
			SetLoops(func(n, grain int, fn func(lo, hi int)))
		}); ok {
			var loops func(n, grain int, fn func(lo, hi int))
			if b, ok := t.backend.(interface {
				For(n, grain int, fn func(lo, hi int))
			}); ok && t.ownBackend {
				loops = b.For
			}
			o.SetLoops(loops)
		}
	}
	t.cfg = c
	if c.Precision.NeedsScaler() && t.Scaler == nil {
		t.Scaler = NewGradScaler()
	}
	if t.gradMode(c, 1) != writeGrads {
		t.Store.ReleaseGrads()
		return nil
	}
	return t.allocGrads()
}

// GradientsInArena reports whether a step of microBatches micro-batches
// keeps its gradients in the step's arena under the trainer's
// configuration (Config.GradientBuffers unset, where it applies).
func (t *Trainer) GradientsInArena(microBatches int) bool {
	return t.gradMode(t.cfg, microBatches) == gradsInArena
}

// gradMode is where the gradients of a step of microBatches micro-batches
// go under cfg: to an update in the backward pass (OptimizerInBackward),
// to the arena (the default, where ArenaApplies), or to gradient buffers.
func (t *Trainer) gradMode(cfg Config, microBatches int) gradMode {
	switch {
	case cfg.OptimizerInBackward && t.checkInBackward(cfg, microBatches) == nil:
		return gradsToOptimizer
	case cfg.ArenaApplies(microBatches):
		return gradsInArena
	}
	return writeGrads
}

// allocGrads allocates missing gradient buffers and remembers their bytes.
func (t *Trainer) allocGrads() error {
	if err := t.Store.AllocGrads(); err != nil {
		return err
	}
	if b := t.Device.Alloc.Stats().ByCategory[device.Gradient]; b > 0 {
		t.gradBytes = b
	}
	return nil
}

// inBackward reports whether a step of microBatches micro-batches runs
// the optimizer in the backward pass under the trainer's configuration.
func (t *Trainer) inBackward(microBatches int) bool {
	return t.gradMode(t.cfg, microBatches) == gradsToOptimizer
}

// Close releases the trainer's arena and optimizer state (and the store,
// for trainers made by Setup). Gradients the last step left in the arena
// (Config.GradientBuffers unset) are copied into gradient buffers of a store
// that outlives the trainer, so that they stay readable as they were
// with gradient buffers; where those do not fit they are dropped.
func (t *Trainer) Close() {
	t.closeBackend()
	// The optimizer's state goes first: keepGrads allocates gradient
	// buffers while the arena holding the gradients is still reserved, and
	// without the state's bytes (Adam: twice the gradients') that stays
	// within the step's own peak instead of adding the gradients to it.
	for _, b := range t.optBlks {
		t.Device.Alloc.Free(b)
	}
	t.optBlks = nil
	if !t.ownsStore {
		t.keepGrads()
	}
	t.dropGradViews()
	t.arena.Release()
	if t.ownsStore {
		t.Store.Release()
	}
}

// closeBackend stops the threads of the trainer's own backend.
func (t *Trainer) closeBackend() {
	if c, ok := t.backend.(io.Closer); ok && t.ownBackend {
		c.Close()
	}
}

// Threads reports how many threads the trainer's kernels split their loops
// across (Config.Threads, or the process-wide count it follows); 1 for a
// backend that does not run on host threads.
func (t *Trainer) Threads() int {
	if tb, ok := t.backend.(interface{ Threads() int }); ok {
		return tb.Threads()
	}
	return 1
}

// Arena is the memory the trainer's steps run in.
func (t *Trainer) Arena() *exec.Arena { return t.arena }

func signature(kind string, training bool, metas ...trace.Meta) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%v", kind, training)
	for _, m := range metas {
		b.WriteString("/" + m.String())
	}
	return b.String()
}

// programKey is what a compiled step depends on besides the model: the
// configuration, the kind of step and the input signature.
type programKey struct {
	cfg Config
	sig string
}

// Compiled is a compiled step and what each pass of the pipeline did.
type Compiled struct {
	Program *exec.Program
	// Passes reports the passes in order: autodiff, the transform
	// pipeline (transform.Pipeline), then schedule and arena layout.
	Passes []transform.PassReport
}

// LossScaleInput names the scalar input that seeds the backward pass: the
// gradient of the loss with respect to itself. It is 1 for a plain step, the
// micro-batch's weight under gradient accumulation, and the loss scale under
// a GradScaler.
const LossScaleInput = "loss_scale"

// TrainProgram returns the compiled training step for inputs and targets
// of these shapes, tracing it on first use: the step of one micro-batch
// with its gradients in the arena (Config.ArenaApplies), else the one
// writing the gradient buffers.
func (t *Trainer) TrainProgram(x, y trace.Meta) (*exec.Program, error) {
	mode := writeGrads
	if t.gradMode(t.cfg, 1) == gradsInArena {
		mode = gradsInArena
	}
	c, err := t.compile(t.cfg, x, y, mode)
	if err != nil {
		return nil, err
	}
	return c.Program, nil
}

// InBackwardProgram returns the compiled training step with the optimizer
// in the backward pass (OptimizerInBackward): one prim.OptimizerStep per
// parameter instead of gradient buffers.
func (t *Trainer) InBackwardProgram(x, y trace.Meta) (*exec.Program, error) {
	c, err := t.compile(t.cfg, x, y, gradsToOptimizer)
	if err != nil {
		return nil, err
	}
	return c.Program, nil
}

// gradMode says where a traced step's parameter gradients go.
type gradMode uint8

const (
	writeGrads       gradMode = iota // overwrite the gradient buffers
	accumulateGrads                  // add to them (micro-batches after the first)
	gradsToOptimizer                 // to an optimizer update inside the step
	gradsInArena                     // graph outputs in the arena, read by the optimizer at the step's end
)

func (m gradMode) kind() string {
	switch m {
	case gradsToOptimizer:
		return "train/in-backward"
	case gradsInArena:
		return "train/arena-grads"
	}
	return fmt.Sprintf("train/acc=%v", m == accumulateGrads)
}

// Trace returns the usual training step for inputs and targets of these
// shapes as autodiff leaves it, before any pass of the pipeline: the graph
// whose node IDs a RecomputeNodes policy names. extra are a MultiModel's
// further inputs (x1, x2, ...).
func (t *Trainer) Trace(x, y trace.Meta, extra ...trace.Meta) (*trace.Graph, error) {
	return t.trace(x, y, extra, writeGrads, t.cfg.Outputs)
}

// trace records the step with gradients going where mode says.
func (t *Trainer) trace(x, y trace.Meta, extra []trace.Meta, mode gradMode, outputs bool) (*trace.Graph, error) {
	g := trace.New()
	err := trace.Capture(func() {
		xi := g.Input("x", x.DType, x.Shape)
		yi := g.Input("y", y.DType, y.Shape)
		out := t.forward(g, xi, extra)
		loss := t.Loss(out, yi)
		if loss.Shape().NumElements() != 1 {
			g.Errorf("loss", []*trace.Tensor{loss}, "loss must be a scalar")
		}
		g.Output("loss", loss)
		if outputs {
			g.Output(OutputName, out)
		}
		params := t.Store.Trainable()
		wrt := make([]*trace.Tensor, len(params))
		for i, p := range params {
			wrt[i] = p.T(g)
		}
		seed := g.Input(LossScaleInput, loss.DType(), loss.Shape())
		grads, err := autodiff.BackwardFrom(loss, seed, wrt)
		if err != nil {
			panic(err)
		}
		if mode == gradsToOptimizer {
			old := g.SetPhase(trace.Update)
			defer g.SetPhase(old)
			for i, p := range params {
				gi := grads[i]
				if gi == nil {
					gi = op.FullLike(wrt[i], 0) // unused: stepped with a zero gradient, as the usual step does
				}
				g.AtModule(p.Name[:max(0, strings.LastIndexByte(p.Name, '.'))], func() { prim.StepInBackward(wrt[i], gi, loss, p.Name) })
			}
			return
		}
		if mode == gradsInArena {
			outputGrads(g, params, wrt, grads)
			return
		}
		accumulate := mode == accumulateGrads
		for i, p := range params {
			gs := g.State(nn.GradName(p.Name), "gradient", p.DType, p.Shape)
			gi := grads[i]
			if gi == nil {
				gi = op.FullLike(wrt[i], 0)
			}
			g.AtModule(p.Name[:max(0, strings.LastIndexByte(p.Name, '.'))], func() { prim.AccumulateInto(gs, gi, accumulate) })
		}
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// outputGrads makes each parameter's gradient an output of the step
// (named nn.GradName of the parameter), so that it lives in the arena from
// where the backward pass produces it to the step's end, where the
// optimizer reads it (exec.Options.Finish). Each gets bytes of its own,
// computed in the step: the optimizer, the GradScaler and ClipNorm scale
// gradients in place, and an unused parameter's is zeros, as the usual
// step writes. A gradient that another output already holds (two
// parameters given one tensor, say), or that is not computed in the step
// (a state's or an input's bytes), is copied (x·1, exact).
func outputGrads(g *trace.Graph, params []*nn.Param, wrt, grads []*trace.Tensor) {
	held := map[*trace.Tensor]bool{}
	for _, o := range g.Outputs {
		held[trace.Root(o)] = true
	}
	for i, p := range params {
		gi := grads[i]
		if gi == nil {
			gi = op.FullLike(wrt[i], 0)
		}
		if r := trace.Root(gi); r.Node.Kind != trace.KindOp || held[r] {
			g.AtModule(p.Name[:max(0, strings.LastIndexByte(p.Name, '.'))], func() { gi = op.Scale(gi, 1) })
		}
		held[trace.Root(gi)] = true
		g.Output(nn.GradName(p.Name), gi)
	}
}

// gradOutput reports whether an output of a training step is a gradient
// (outputGrads).
func gradOutput(name string) bool { return strings.HasPrefix(name, nn.GradName("")) }

// ErrSize is matched by errors.Is when a tensor of a step is too large to
// be sized (an impossible batch size): the graph checks every value's shape
// where it is recorded (tensor.Shape.Check), so no byte count derived from
// it (liveness, arena offsets, messages) can wrap.
var ErrSize = tensor.ErrSize

// compile returns the training step of kind mode compiled under cfg: a
// function of the model, cfg and the input shapes alone. It allocates
// nothing. Steps under the trainer's own configuration are cached.
func (t *Trainer) compile(cfg Config, x, y trace.Meta, mode gradMode, extra ...trace.Meta) (*Compiled, error) {
	key := programKey{cfg, signature(mode.kind(), t.Store.Training(), append([]trace.Meta{x, y}, extra...)...)}
	if c, ok := t.programs[key]; ok {
		return c, nil
	}
	g, err := t.trace(x, y, extra, mode, cfg.Outputs)
	if err != nil {
		return nil, err
	}
	c, err := t.lower(g, transform.Options{Recompute: cfg.Recompute.Policy(), Precision: cfg.Precision, Compress: cfg.compress(), Backward: true})
	if err != nil {
		return nil, err
	}
	if cfg == t.cfg {
		t.programs[key] = c
	}
	return c, nil
}

// lower runs the pipeline's passes on a traced step, then schedules it and
// lays out its arena (exec.Compile).
func (t *Trainer) lower(g *trace.Graph, o transform.Options) (*Compiled, error) {
	forward := 0
	for _, n := range g.Nodes {
		if n.Phase == trace.Forward {
			forward++
		}
	}
	reports := []transform.PassReport{{Name: "autodiff", NodesBefore: forward, NodesAfter: len(g.Nodes), Skipped: !o.Backward,
		Detail: fmt.Sprintf("%d backward and update nodes", len(g.Nodes)-forward)}}
	if lr, ok := t.backend.(backend.LowRunner); ok && o.RunsLow == nil {
		o.RunsLow = lr.RunsLow
	}
	g, passes, err := transform.Run(g, o)
	if err != nil {
		return nil, err
	}
	reports = append(reports, passes...)
	if r, ok := t.cfg.Parallel.(Reorderer); ok {
		if g, err = r.Reorder(g); err != nil {
			return nil, err
		}
	}
	p, err := exec.CompileWith(g, t.Device, t.backend)
	if err != nil {
		return nil, err
	}
	// Gradients that are outputs are the step's gradients in the arena
	// (outputGrads): counted as gradients, in the plan and the allocator.
	for k, name := range g.OutputNames {
		if b, ok := p.Plan.Of[trace.Root(g.Outputs[k])]; ok && gradOutput(name) {
			b.Category = plan.Gradient
		}
	}
	reports = append(reports,
		transform.PassReport{Name: "schedule", NodesBefore: len(g.Nodes), NodesAfter: len(p.Plan.Order),
			Detail: fmt.Sprintf("%d steps, peak %s at step %d", len(p.Plan.Order), device.FormatBytes(p.Plan.PeakBytes), p.Plan.PeakStep)},
		transform.PassReport{Name: "arena", NodesBefore: len(p.Plan.Order), NodesAfter: len(p.Plan.Order), BytesAdded: p.Plan.ArenaBytes,
			Detail: fmt.Sprintf("arena %s for a peak of %s", device.FormatBytes(p.Plan.ArenaBytes), device.FormatBytes(p.Plan.PeakBytes))})
	return &Compiled{Program: p, Passes: reports}, nil
}

// EvalProgram returns the compiled forward pass for inputs of this shape.
// extra are a MultiModel's further inputs (x1, x2, ...).
func (t *Trainer) EvalProgram(x trace.Meta, extra ...trace.Meta) (*exec.Program, error) {
	key := programKey{t.cfg, signature("eval", t.Store.Training(), append([]trace.Meta{x}, extra...)...)}
	if c, ok := t.programs[key]; ok {
		return c.Program, nil
	}
	g := trace.New()
	err := trace.Capture(func() {
		xi := g.Input("x", x.DType, x.Shape)
		g.Output("out", t.forward(g, xi, extra))
	})
	if err != nil {
		return nil, err
	}
	// Evaluation runs in the training precision, as under PyTorch's
	// autocast (nothing is saved for a backward pass, so nothing is
	// recomputed or compressed).
	c, err := t.lower(g, transform.Options{Precision: t.cfg.Precision})
	if err != nil {
		return nil, err
	}
	t.programs[key] = c
	return c.Program, nil
}

// NonFiniteError stops training when the loss is NaN or infinite. First,
// when found, names the first tensor of the step that was not finite.
type NonFiniteError struct {
	Step  int
	Loss  float64
	First *exec.NonFiniteError
}

func (e *NonFiniteError) Error() string {
	msg := fmt.Sprintf("train: loss is %v at step %d", e.Loss, e.Step)
	if e.First != nil {
		m := e.First.Node.Module
		if m == "" {
			m = "(top level)"
		}
		msg += fmt.Sprintf("; the first non-finite tensor is the output of %s in module %s (%s pass)", e.First.Node.Op.Name(), m, e.First.Node.Phase)
	}
	return msg
}

func (e *NonFiniteError) Unwrap() error {
	if e.First == nil {
		return nil
	}
	return e.First
}

// diagnose runs the micro-batches again, as the failed step ran them
// (same dropout masks and the same kind of step), checking every node's
// output, and returns the first non-finite one. The optimizer has not run,
// so the weights are the same.
func (t *Trainer) diagnose(ctx context.Context, micro []Batch, step int64, mode gradMode) *exec.NonFiniteError {
	saved, savedStep := t.RunOptions, t.step
	opts := exec.Options{}
	if saved != nil {
		opts = *saved
	}
	opts.CheckFinite = true
	t.RunOptions = &opts
	t.step = step
	defer func() { t.RunOptions, t.step = saved, savedStep }()
	for i, b := range micro {
		var err error
		switch {
		case mode == gradsToOptimizer:
			// The loss is not finite, so the check stops the run at or
			// before the loss, which every update reads; refuse updates
			// all the same.
			_, err = t.runInBackward(ctx, b, func(string, *tensor.Tensor, *tensor.Tensor) error {
				return errors.New("train: no update while diagnosing")
			})
		case mode == gradsInArena:
			_, err = t.runArena(ctx, b, 1, func(outs map[string]*tensor.Tensor) error {
				t.bindGrads(outs)
				return nil
			})
		default:
			_, err = t.run(ctx, b, i > 0, 1)
		}
		var nf *exec.NonFiniteError
		if errors.As(err, &nf) {
			return nf
		}
	}
	return nil
}

// Step runs forward, backward and the optimizer on one batch and returns the
// loss. Gradients are overwritten (not accumulated) each step. With
// Config.Accumulation > 1 the batch is split into that many micro-batches
// (fewer when it has fewer samples) whose gradients are added up.
func (t *Trainer) Step(ctx context.Context, x, y *tensor.Tensor) (float64, error) {
	b := Batch{X: x, Y: y}
	if k := t.cfg.Accumulation; k > 1 && len(x.Shape) > 0 && x.Shape[0] > 1 {
		micro, err := Split(b, min(k, x.Shape[0]))
		if err != nil {
			return 0, err
		}
		return t.StepAccumulate(ctx, micro)
	}
	return t.StepAccumulate(ctx, []Batch{b})
}

// Batch is one micro-batch of inputs and targets.
type Batch struct {
	X, Y *tensor.Tensor
	// Inputs are a MultiModel's inputs after the first (X), each with
	// X's number of samples; nil for a Model of one input.
	Inputs []*tensor.Tensor
}

// StepAccumulate runs forward and backward on each micro-batch, adding up
// their gradients, then one optimizer step: the gradient of the whole batch,
// not an approximation. Micro-batch i's loss is weighted by its share of the
// batch: len_i/N by default, or Weigh(y_i)/ΣWeigh(y) when Weigh is set (for
// losses averaged over a token count). It returns the batch's loss.
func (t *Trainer) StepAccumulate(ctx context.Context, micro []Batch) (float64, error) {
	if len(micro) == 0 {
		return 0, fmt.Errorf("train: no micro-batches")
	}
	if err := t.Scaler.check(); err != nil {
		return 0, err
	}
	// The step's bounds in the allocator's history, for per-step peaks.
	defer t.Device.Alloc.MarkStep()()
	t.outs = t.outs[:0]
	weights := make([]float64, len(micro))
	var total float64
	for i, b := range micro {
		weights[i] = t.weight(b)
		total += weights[i]
	}
	par := t.cfg.Parallel
	t.share = 1
	if par != nil {
		var err error
		if t.share, err = par.Share(ctx, total); err != nil {
			return 0, err
		}
	}
	if t.inBackward(len(micro)) {
		if l, done, err := t.stepInBackward(ctx, micro[0]); done {
			if err == nil && par != nil {
				return par.Reduce(ctx, t.params, l)
			}
			return l, err
		}
		// Out of memory before any update: the usual path, which splits.
	}
	if t.gradMode(t.cfg, len(micro)) == gradsInArena {
		// One micro-batch, so its weight is 1 (par is nil: one process).
		if l, done, err := t.stepArena(ctx, micro[0], t.share); done {
			return l, err
		}
		// Out of memory before any node ran: the usual path, which splits.
	}
	if err := t.allocGrads(); err != nil {
		return 0, err
	}
	first := t.step // the step number of this step's first pass
	scale := t.share
	if t.Scaler != nil {
		scale *= t.Scaler.Scale
	}
	var loss float64
	ran := 0
	for i, b := range micro {
		w := weights[i] / total
		if total == 0 {
			w = 1 / float64(len(micro))
		} else if weights[i] == 0 {
			continue // nothing to learn from (all targets ignored)
		}
		l, n, err := t.runResilient(ctx, b, ran > 0, w, scale)
		if err != nil {
			return l, err
		}
		ran += n
		loss += w * l
	}
	if ran == 0 {
		t.Store.ZeroGrad()
	}
	if par != nil && t.Device.HasData() {
		for i, pr := range t.Store.Trainable() {
			t.params[i].Value, t.params[i].Grad = pr.Value.F32(), pr.Grad.F32()
		}
		var err error
		if loss, err = par.Reduce(ctx, t.params, loss); err != nil {
			return loss, err
		}
	}
	if t.Device.HasData() && (math.IsNaN(loss) || math.IsInf(loss, 0)) && t.Scaler == nil {
		return loss, &NonFiniteError{Step: int(first), Loss: loss, First: t.diagnose(ctx, micro, first, writeGrads)}
	}
	return loss, t.update()
}

// update applies the optimizer to the parameters from the store's
// gradients: unscaled by the GradScaler (a step with inf/NaN gradients is
// skipped and the scale lowered), clipped to ClipNorm, then stepped.
func (t *Trainer) update() error {
	if t.Opt == nil || !t.Device.HasData() {
		return nil
	}
	for i, pr := range t.Store.Trainable() {
		t.params[i].Value = pr.Value.F32()
		t.params[i].Grad = pr.Grad.F32()
	}
	if t.Scaler != nil && !t.Scaler.unscale(t.params) {
		return nil // inf/NaN gradients: the step is skipped, the scale lowered
	}
	if t.ClipNorm > 0 {
		if _, err := optim.ClipGradNorm(t.params, t.ClipNorm, 2); err != nil {
			return fmt.Errorf("train: step %d: %w", t.step, err)
		}
	}
	return t.Opt.Step(t.params)
}

// stepArena runs one step of b with its gradients in the arena
// (Config.ArenaApplies): the optimizer runs at the step's end, while
// they are live. done is false when the step ran out of memory before any
// node ran: nothing has changed and the usual path can take the batch.
func (t *Trainer) stepArena(ctx context.Context, b Batch, scale float64) (loss float64, done bool, err error) {
	first := t.step
	// The gradients are the step's own; buffers would only hold memory
	// the arena needs (zero_grad(set_to_none=True)).
	t.Store.ReleaseGrads()
	finished, nonFinite := false, false
	if t.Scaler != nil {
		scale *= t.Scaler.Scale
	}
	loss, err = t.runArena(ctx, b, scale, func(outs map[string]*tensor.Tensor) error {
		finished = true
		t.bindGrads(outs)
		if !t.Device.HasData() {
			return nil
		}
		if l := outs["loss"].Float64s()[0]; (math.IsNaN(l) || math.IsInf(l, 0)) && t.Scaler == nil {
			nonFinite = true // no update; diagnosed below, after the run
			return nil
		}
		return t.update()
	})
	switch {
	case err != nil && !finished && errors.Is(err, device.ErrOutOfMemory):
		t.step = first
		return 0, false, nil
	case err != nil:
		return loss, true, err
	case nonFinite:
		return loss, true, &NonFiniteError{Step: int(first), Loss: loss, First: t.diagnose(ctx, []Batch{b}, first, gradsInArena)}
	}
	return loss, true, nil
}

// runArena runs b's step with its gradients in the arena; finish gets the
// step's outputs while they are live (exec.Options.Finish).
func (t *Trainer) runArena(ctx context.Context, b Batch, seed float64, finish func(map[string]*tensor.Tensor) error) (float64, error) {
	c, err := t.compile(t.cfg, MetaOf(b.X), MetaOf(b.Y), gradsInArena, metasOf(b.Inputs)...)
	if err != nil {
		return 0, err
	}
	opts := exec.Options{}
	if t.RunOptions != nil {
		opts = *t.RunOptions
	}
	opts.Finish = finish
	return t.runProgram(ctx, c.Program, b, seed, &opts)
}

// bindGrads makes the step's gradient outputs the parameters' Grad (views
// of the arena) and takes them out of outs, so that they are not copied.
func (t *Trainer) bindGrads(outs map[string]*tensor.Tensor) {
	ps := t.Store.Trainable()
	t.gradViews = make([]*tensor.Tensor, len(ps))
	for i, p := range ps {
		name := nn.GradName(p.Name)
		t.gradViews[i] = outs[name]
		p.Grad = outs[name]
		delete(outs, name)
	}
}

// isGradView reports whether trainable parameter i's Grad is a view of
// the arena left by the last step.
func (t *Trainer) isGradView(i int, p *nn.Param) bool {
	return i < len(t.gradViews) && p.Grad != nil && p.Grad == t.gradViews[i]
}

// dropGradViews sets the gradients left in the arena to none: the arena
// is about to be written or released.
func (t *Trainer) dropGradViews() {
	for i, p := range t.Store.Trainable() {
		if t.isGradView(i, p) {
			p.Grad = nil
		}
	}
	t.gradViews = nil
}

// keepGrads copies the gradients left in the arena into gradient buffers
// of the store (or drops them where those do not fit).
func (t *Trainer) keepGrads() {
	if t.gradViews == nil || t.Store.Device() == nil {
		return
	}
	ps := t.Store.Trainable()
	views := make([]*tensor.Tensor, len(ps))
	for i, p := range ps {
		if t.isGradView(i, p) {
			views[i] = p.Grad
			p.Grad = nil // AllocGrads allocates where none is held
		}
	}
	_ = t.Store.AllocGrads() // out of memory: those without a buffer are dropped
	for i, p := range ps {
		if v := views[i]; v != nil && p.Grad != nil && v.Data != nil {
			copy(p.Grad.Data, v.Data)
		}
	}
}

// CheckOptimizerInBackward returns nil when OptimizerInBackward applies to
// a step of microBatches micro-batches, or the reason it does not (an
// *InBackwardError; such steps take the usual path). It applies only where
// updating parameters one by one inside the step is exactly the usual
// step: an optimizer that can step one parameter at a time
// (optim.ParamStepper and optim.Preparer: SGD, Adam, AdamW), a single
// micro-batch (accumulation needs every micro-batch's gradient), no
// ClipNorm (it needs the global norm of all gradients), no GradScaler (it
// must see every gradient before deciding to skip the step, so not
// fp16-mixed) and no RunOptions.CheckFinite (it could stop a step after
// some updates). Under the bf16 modes the update reads each gradient
// rounded as the usual step rounds it into its buffer.
func (t *Trainer) CheckOptimizerInBackward(microBatches int) error {
	return t.checkInBackward(t.cfg, microBatches)
}

func (t *Trainer) checkInBackward(cfg Config, microBatches int) error {
	_, stepper := t.Opt.(optim.ParamStepper)
	_, preparer := t.Opt.(optim.Preparer)
	e := &InBackwardError{Optimizer: fmt.Sprintf("%T", t.Opt), MicroBatches: microBatches, Precision: cfg.Precision}
	switch {
	case t.Opt == nil:
		e.Reason = NoOptimizer
	case !stepper || !preparer:
		e.Reason = NotPerParameter
	case microBatches != 1:
		e.Reason = Accumulating
	case t.ClipNorm > 0:
		e.Reason = Clipping
	case t.Scaler != nil:
		e.Reason = Scaling
	case t.RunOptions != nil && t.RunOptions.CheckFinite:
		e.Reason = CheckingFinite
	default:
		return nil
	}
	return e
}

// InBackwardReason is why the optimizer cannot run in the backward pass.
type InBackwardReason uint8

const (
	NoOptimizer     InBackwardReason = iota + 1 // no optimizer
	NotPerParameter                             // it cannot update one parameter at a time
	Accumulating                                // several micro-batches
	Clipping                                    // ClipNorm needs every gradient first
	Scaling                                     // a GradScaler needs every gradient first
	CheckingFinite                              // RunOptions.CheckFinite could stop mid-update
)

// InBackwardError says why the optimizer cannot run in the backward pass.
type InBackwardError struct {
	Reason       InBackwardReason
	Optimizer    string // its Go type
	MicroBatches int
	Precision    transform.Precision
}

// Detail is the reason in words, without the "train: optimizer in
// backward:" prefix (for messages that say so already).
func (e *InBackwardError) Detail() string {
	switch e.Reason {
	case NoOptimizer:
		return "no optimizer"
	case NotPerParameter:
		return fmt.Sprintf("%s cannot update one parameter at a time", e.Optimizer)
	case Accumulating:
		return fmt.Sprintf("%d micro-batches (gradients must be accumulated before the update)", e.MicroBatches)
	case Clipping:
		return "gradient clipping needs the norm of all gradients before any update"
	case Scaling:
		return "a GradScaler must check all gradients before any update"
	case CheckingFinite:
		return "CheckFinite may stop a step after some updates"
	}
	return fmt.Sprintf("reason %d", e.Reason)
}

func (e *InBackwardError) Error() string { return "train: optimizer in backward: " + e.Detail() }

// stepInBackward runs one step of b with the optimizer inside it. done is
// false when the step ran out of memory before any update: nothing has
// changed and the usual path can take the batch.
func (t *Trainer) stepInBackward(ctx context.Context, b Batch) (loss float64, done bool, err error) {
	first := t.step
	// Gradients are not kept in this mode; their buffers would only hold
	// memory the step's arena needs.
	t.Store.ReleaseGrads()
	if t.Device.HasData() {
		for i, pr := range t.Store.Trainable() {
			t.params[i].Value, t.params[i].Grad = pr.Value.F32(), nil
		}
		// Missing optimizer state is allocated now, not by an update in
		// mid-step, so that running out of memory cannot leave some
		// parameters updated and others not.
		if err := t.Opt.(optim.Preparer).Prepare(t.params); err != nil {
			return 0, !errors.Is(err, device.ErrOutOfMemory), err
		}
	}
	stepper := t.Opt.(optim.ParamStepper)
	updated := 0
	loss, err = t.runInBackward(ctx, b, func(name string, value, grad *tensor.Tensor) error {
		updated++
		return stepper.StepParam(optim.Param{Name: name, Value: value.F32(), Grad: grad.F32()})
	})
	if err == nil {
		return loss, true, nil
	}
	var nl *exec.NonFiniteLossError
	switch {
	case updated > 0:
		return 0, true, fmt.Errorf("train: step %d failed after %d parameter updates: %w", first, updated, err)
	case errors.As(err, &nl):
		return nl.Loss, true, &NonFiniteError{Step: int(first), Loss: nl.Loss, First: t.diagnose(ctx, []Batch{b}, first, gradsToOptimizer)}
	case errors.Is(err, device.ErrOutOfMemory):
		// The arena is reserved before the first node runs, and no update
		// ran: the usual path gets the batch, with its step number.
		t.step = first
		return 0, false, nil
	}
	return 0, true, err
}

// runInBackward runs b's step with the optimizer in the backward pass;
// update applies the optimizer to one parameter.
func (t *Trainer) runInBackward(ctx context.Context, b Batch, update func(name string, value, grad *tensor.Tensor) error) (float64, error) {
	c, err := t.compile(t.cfg, MetaOf(b.X), MetaOf(b.Y), gradsToOptimizer, metasOf(b.Inputs)...)
	if err != nil {
		return 0, err
	}
	p := c.Program
	opts := exec.Options{}
	if t.RunOptions != nil {
		opts = *t.RunOptions
	}
	opts.Update = update
	return t.runProgram(ctx, p, b, t.share, &opts)
}

// runResilient runs micro-batch b with weight w. If its step does not fit
// in memory (a longer input than planned, say) it is split in two halves run
// one after the other with accumulation, recursively, so the gradient is the
// same and no progress is lost. It returns b's loss and how many passes ran.
func (t *Trainer) runResilient(ctx context.Context, b Batch, accumulate bool, w, scale float64) (float64, int, error) {
	l, err := t.run(ctx, b, accumulate, w*scale)
	if err == nil || !errors.Is(err, device.ErrOutOfMemory) || b.X.Shape[0] < 2 {
		return l, 1, err
	}
	halves, serr := Split(b, 2)
	if serr != nil {
		return 0, 0, err
	}
	t.Splits++
	var total float64
	for _, h := range halves {
		total += t.weight(h)
	}
	var loss float64
	ran := 0
	for _, h := range halves {
		hw := t.weight(h) / total
		if total == 0 {
			hw = 0.5
		}
		l, n, err := t.runResilient(ctx, h, accumulate || ran > 0, w*hw, scale)
		if err != nil {
			return 0, ran, err
		}
		ran += n
		loss += hw * l
	}
	return loss, ran, nil
}

func (t *Trainer) weight(b Batch) float64 {
	if t.Weigh != nil {
		return t.Weigh(b.Y)
	}
	return float64(b.X.Shape[0])
}

// ReleaseMemory gives back what training holds between steps: the step's
// arena and the gradients (set to none, as zero_grad(set_to_none=True)),
// then empties the allocator's cache so the process's resident memory falls
// to parameters and optimizer state. The next step allocates them again.
func (t *Trainer) ReleaseMemory() {
	t.dropGradViews()
	t.arena.Release()
	t.Store.ReleaseGrads()
	t.Device.Alloc.EmptyCache()
}

// run executes one forward/backward pass with the given loss seed.
func (t *Trainer) run(ctx context.Context, b Batch, accumulate bool, seed float64) (float64, error) {
	mode := writeGrads
	if accumulate {
		mode = accumulateGrads
	}
	c, err := t.compile(t.cfg, MetaOf(b.X), MetaOf(b.Y), mode, metasOf(b.Inputs)...)
	if err != nil {
		return 0, err
	}
	return t.runProgram(ctx, c.Program, b, seed, t.RunOptions)
}

// runProgram runs training step p on x and y with the given loss seed.
func (t *Trainer) runProgram(ctx context.Context, p *exec.Program, b Batch, seed float64, opts *exec.Options) (float64, error) {
	lossMeta := p.Graph.InputNode(LossScaleInput).Outputs[0].Meta
	s := tensor.FromFloat64(lossMeta.Shape, []float64{seed}).Convert(lossMeta.DType)
	feed := map[string]*tensor.Tensor{"x": b.X, "y": b.Y, LossScaleInput: s}
	for i, in := range b.Inputs {
		feed[InputName(i+1)] = in
	}
	if p.Graph.InputNode(op.StepInput) != nil {
		feed[op.StepInput] = tensor.FromInt64(tensor.Shape{1}, []int64{t.step})
	}
	t.step++
	t.dropGradViews() // the run writes the arena they are in
	res, err := p.Run(ctx, t.arena, t.Store, feed, opts)
	if err != nil {
		return 0, err
	}
	if !t.Device.HasData() {
		return math.NaN(), nil
	}
	if out, ok := res[OutputName]; ok {
		t.outs = append(t.outs, out)
	}
	return res["loss"].Float64s()[0], nil
}

// Predict runs the forward pass in evaluation mode and returns the output.
func (t *Trainer) Predict(ctx context.Context, x *tensor.Tensor) (*tensor.Tensor, error) {
	return t.PredictInputs(ctx, []*tensor.Tensor{x})
}

// PredictInputs is Predict for a MultiModel: xs are its inputs, the first
// one being what Forward would get.
func (t *Trainer) PredictInputs(ctx context.Context, xs []*tensor.Tensor) (*tensor.Tensor, error) {
	if len(xs) == 0 {
		return nil, fmt.Errorf("train: no inputs")
	}
	was := t.Store.Training()
	t.Store.SetTraining(false)
	defer t.Store.SetTraining(was)
	p, err := t.EvalProgram(MetaOf(xs[0]), metasOf(xs[1:])...)
	if err != nil {
		return nil, err
	}
	feed := map[string]*tensor.Tensor{}
	for i, x := range xs {
		feed[InputName(i)] = x
	}
	// The communicator of a model split across ranks (tensor parallelism,
	// ZeRO-3) serves its forward pass too; the rest of RunOptions
	// (profiling hooks) is the training step's.
	var opts *exec.Options
	if t.RunOptions != nil && t.RunOptions.Comm != nil {
		opts = &exec.Options{Comm: t.RunOptions.Comm}
	}
	t.dropGradViews() // the run writes the arena they are in
	res, err := p.Run(ctx, t.arena, t.Store, feed, opts)
	if err != nil {
		return nil, err
	}
	return res["out"], nil
}

func (t *Trainer) prepareOptimizer() error {
	if t.Opt == nil {
		return nil
	}
	if t.Device.HasData() {
		prep, ok := t.Opt.(optim.Preparer)
		if !ok {
			return nil // state comes lazily with the first step
		}
		for i, pr := range t.Store.Trainable() {
			t.params[i].Value = pr.Value.F32()
		}
		return prep.Prepare(t.params)
	}
	// On the meta device account for the state a real step allocates: one
	// block of numel float32s per buffer.
	for _, p := range t.Store.Trainable() {
		per := p.Numel() * 4
		for k := int64(0); k < t.Opt.StateBytesFor(p.Numel())/per; k++ {
			b, err := t.Device.Alloc.Allocate(per, device.Tag{Category: device.OptimizerState, Op: p.Name})
			if err != nil {
				return err
			}
			t.optBlks = append(t.optBlks, b)
		}
	}
	return nil
}

// Split divides a batch along its first axis into k micro-batches whose sizes
// differ by at most one (the first ones get the extra samples).
func Split(b Batch, k int) ([]Batch, error) {
	n := b.X.Shape[0]
	if k < 1 || k > n {
		return nil, fmt.Errorf("train: cannot split a batch of %d into %d micro-batches", n, k)
	}
	if b.Y.Shape[0] != n {
		return nil, fmt.Errorf("train: inputs have %d samples, targets %d", n, b.Y.Shape[0])
	}
	for i, in := range b.Inputs {
		if len(in.Shape) == 0 || in.Shape[0] != n {
			return nil, fmt.Errorf("train: input 0 has %d samples, input %d shape %v", n, i+1, in.Shape)
		}
	}
	out := make([]Batch, 0, k)
	start := 0
	for i := 0; i < k; i++ {
		size := n / k
		if i < n%k {
			size++
		}
		mb := Batch{X: rows(b.X, start, start+size), Y: rows(b.Y, start, start+size)}
		for _, in := range b.Inputs {
			mb.Inputs = append(mb.Inputs, rows(in, start, start+size))
		}
		out = append(out, mb)
		start += size
	}
	return out, nil
}

// rows copies rows [lo, hi) of t's first axis.
func rows(t *tensor.Tensor, lo, hi int) *tensor.Tensor {
	shape := t.Shape.Clone()
	shape[0] = hi - lo
	per := len(t.Data) / t.Shape[0]
	out := tensor.New(t.DType, shape)
	copy(out.Data, t.Data[lo*per:hi*per])
	return out
}

// Setup builds a model into a new store, materializes it on dev (seeded
// initialization) and returns its trainer, with the zero Config. Close then
// releases the store too.
func Setup(dev *device.Device, seed int64, build func(s *nn.Store) (Model, LossFunc), opt optim.Optimizer) (*Trainer, error) {
	return SetupConfig(dev, seed, build, opt, Config{})
}

// SetupConfig is Setup with configuration cfg.
func SetupConfig(dev *device.Device, seed int64, build func(s *nn.Store) (Model, LossFunc), opt optim.Optimizer, cfg Config) (*Trainer, error) {
	s := nn.NewStore()
	m, loss := build(s)
	if err := s.Materialize(dev, seed); err != nil {
		return nil, err
	}
	t, err := NewConfig(dev, s, m, loss, opt, cfg)
	if err != nil {
		s.Release()
		return nil, err
	}
	t.ownsStore = true
	return t, nil
}
