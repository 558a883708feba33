package gan

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
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// Net is one network of a GAN: its model, the store holding its
// parameters (materialized on the trainer's device) and, for the networks
// that train, its optimizer.
type Net struct {
	Model train.Model
	Store *nn.Store
	Opt   optim.Optimizer
}

// Config is how both steps are compiled: the loss weights and the step
// configuration's precision and recomputation (train.Config's other
// fields do not apply to a GAN step and must be zero).
type Config struct {
	Weights Weights
	Step    train.Config
}

// ErrConfig is matched by errors.Is for a configuration the GAN trainer
// cannot run.
var ErrConfig = errors.New("gan: unsupported configuration")

func (c Config) check() error {
	s := c.Step
	s.Precision, s.Recompute = 0, train.Recompute{}
	if s != (train.Config{}) {
		return fmt.Errorf("%w: only precision and recomputation apply to a GAN step (got %v)", ErrConfig, c.Step)
	}
	if c.Step.Precision.NeedsScaler() {
		return fmt.Errorf("%w: %v needs a loss scaler, which GAN steps do not have (use bf16-mixed)", ErrConfig, c.Step.Precision)
	}
	return nil
}

// Trainer runs a GAN's two steps. Both run in one arena, sized for the
// larger of the two: the peak of a training iteration is the persistent
// memory (both networks' parameters, gradients and optimizer state, the
// feature network's parameters) plus the larger step's arena, and the
// plan (Plan) says it before the first step.
//
// A Trainer is not safe for concurrent use.
type Trainer struct {
	Device *device.Device
	G, D   Net
	// Features is the perceptual loss's frozen network; nil Model: the
	// perceptual term is left out (Skipped says so).
	Features Net
	cfg      Config

	arena   *exec.Arena
	progs   map[progKey]*exec.Program
	optBlks []*device.Block
	gParams []optim.Param
	dParams []optim.Param
	iter    int64
}

// StepLosses are the terms of one iteration: the generator's pixel,
// perceptual and GAN losses and their total, and the discriminator's two
// halves.
type StepLosses struct {
	G, Pixel, Perceptual, GAN float64
	D, DReal, DFake           float64
}

// New returns a trainer of generator g against discriminator d, with
// feature network f for the perceptual loss (a zero Net to leave it
// out). Every store must be materialized on dev; g and d need optimizers.
// Optimizer state and gradient buffers are allocated now, so that an
// out-of-memory shows at start-up and the plan holds from the first step.
func New(dev *device.Device, g, d, f Net, cfg Config) (*Trainer, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	for _, n := range []struct {
		what string
		net  Net
		opt  bool
	}{{"generator", g, true}, {"discriminator", d, true}, {"feature network", f, false}} {
		if n.net.Model == nil && n.what == "feature network" {
			continue
		}
		if n.net.Model == nil || n.net.Store == nil {
			return nil, fmt.Errorf("gan: the %s has no model or store", n.what)
		}
		if n.net.Store.Device() != dev {
			return nil, fmt.Errorf("gan: the %s's parameters are not on %v (materialize its store first)", n.what, dev)
		}
		if n.opt && n.net.Opt == nil {
			return nil, fmt.Errorf("gan: the %s has no optimizer", n.what)
		}
	}
	if f.Model != nil {
		for _, p := range f.Store.Params() {
			p.Trainable = false // frozen: no gradient, no optimizer state
		}
	}
	t := &Trainer{Device: dev, G: g, D: d, Features: f, cfg: cfg, arena: exec.NewArena(dev), progs: map[progKey]*exec.Program{}}
	var err error
	if t.gParams, err = t.prepare(g); err == nil {
		t.dParams, err = t.prepare(d)
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// prepare allocates n's optimizer state and gradient buffers.
func (t *Trainer) prepare(n Net) ([]optim.Param, error) {
	dev := t.Device
	n.Opt.SetAlloc(func(param, buffer string, k int) ([]float32, error) {
		module := param
		if i := strings.LastIndexByte(param, '.'); i >= 0 {
			module = param[:i]
		}
		b, err := dev.Alloc.Allocate(int64(k)*4, device.Tag{Category: device.OptimizerState, Module: module, Op: buffer})
		if err != nil {
			return nil, err
		}
		t.optBlks = append(t.optBlks, b)
		if b.Data == nil {
			return make([]float32, k), nil
		}
		return (&tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{k}, Data: b.Data}).F32(), nil
	})
	var ps []optim.Param
	for _, p := range n.Store.Trainable() {
		ps = append(ps, optim.Param{Name: p.Name})
	}
	if dev.HasData() {
		if prep, ok := n.Opt.(optim.Preparer); ok {
			for i, p := range n.Store.Trainable() {
				ps[i].Value = p.Value.F32()
			}
			if err := prep.Prepare(ps); err != nil {
				return nil, err
			}
		}
	} else {
		// The meta device: the state a real step allocates, one block of
		// numel float32s per buffer, as train.Trainer accounts it.
		for _, p := range n.Store.Trainable() {
			per := p.Numel() * 4
			for k := int64(0); k < n.Opt.StateBytesFor(p.Numel())/per; k++ {
				b, err := dev.Alloc.Allocate(per, device.Tag{Category: device.OptimizerState, Op: p.Name})
				if err != nil {
					return nil, err
				}
				t.optBlks = append(t.optBlks, b)
			}
		}
	}
	return ps, n.Store.AllocGrads()
}

// Close releases the arena and the optimizer state (not the stores).
func (t *Trainer) Close() {
	t.arena.Release()
	for _, b := range t.optBlks {
		t.Device.Alloc.Free(b)
	}
	t.optBlks = nil
}

// Config is the trainer's configuration.
func (t *Trainer) Config() Config { return t.cfg }

// SetConfig changes the configuration (compiled steps are cached by
// configuration and shapes).
func (t *Trainer) SetConfig(c Config) error {
	if err := c.check(); err != nil {
		return err
	}
	t.cfg = c
	return nil
}

// stores binds the state nodes of a step: each network's parameters and
// gradients by name (their names are disjoint, as BasicSR's are).
type stores []*nn.Store

func (s stores) State(name string) (*tensor.Tensor, bool) {
	for _, st := range s {
		if v, ok := st.State(name); ok {
			return v, true
		}
	}
	return nil, false
}

func (t *Trainer) states() stores {
	s := stores{t.G.Store, t.D.Store}
	if t.Features.Model != nil {
		s = append(s, t.Features.Store)
	}
	return s
}

// Names of the steps' inputs and outputs.
const (
	InputLQ   = "lq"   // the generator's input (low resolution)
	InputGT   = "gt"   // the target (high resolution)
	InputFake = "fake" // the generator's output, the discriminator step's input
)

// writeGrads appends to g the gradients of loss with respect to n's
// trainable parameters, written into their buffers.
func writeGrads(g *trace.Graph, loss *trace.Tensor, n Net) {
	params := n.Store.Trainable()
	wrt := make([]*trace.Tensor, len(params))
	for i, p := range params {
		wrt[i] = p.T(g)
	}
	grads, err := autodiff.Backward(loss, wrt)
	if err != nil {
		panic(err)
	}
	for i, p := range params {
		gi := grads[i]
		if gi == nil {
			gi = prim.FullLike(wrt[i], 0)
		}
		gs := g.State(nn.GradName(p.Name), "gradient", p.DType, p.Shape)
		g.AtModule(p.Name[:max(0, strings.LastIndexByte(p.Name, '.'))], func() { prim.AccumulateInto(gs, gi, false) })
	}
}

// TraceGenerator records the generator step: fake = G(lq); the pixel,
// perceptual and GAN losses against gt, with the discriminator run on gt
// first, then on fake (BasicSR's order, which its batch norms' running
// statistics follow); gradients of G's parameters only (D is frozen).
// Outputs: "loss", "pixel", "perceptual", "gan" and "fake".
func (t *Trainer) TraceGenerator(lq, gt trace.Meta) (*trace.Graph, error) {
	g := trace.New()
	w := t.cfg.Weights
	err := trace.Capture(func() {
		x := g.Input(InputLQ, lq.DType, lq.Shape)
		y := g.Input(InputGT, gt.DType, gt.Shape)
		fake := t.G.Model.Forward(x)
		total := PixelLoss(fake, y, w.Pixel)
		g.Output("pixel", total)
		if t.Features.Model != nil {
			p := PerceptualLoss(t.Features.Model, fake, y, w.Perceptual)
			g.Output("perceptual", p)
			total = prim.Add(total, p)
		}
		realPred := t.D.Model.Forward(y)
		fakePred := t.D.Model.Forward(fake)
		gl := GeneratorGANLoss(realPred, fakePred, w.GAN)
		g.Output("gan", gl)
		total = prim.Add(total, gl)
		g.Output("loss", total)
		g.Output(InputFake, fake)
		writeGrads(g, total, t.G)
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// TraceDiscriminator records the discriminator step on the generator's
// output fake (a constant here) and gt: D(gt), D(fake), the two halves of
// the relativistic loss, gradients of D's parameters. Outputs: "loss",
// "real" and "fake" (the halves).
func (t *Trainer) TraceDiscriminator(fake, gt trace.Meta) (*trace.Graph, error) {
	g := trace.New()
	err := trace.Capture(func() {
		f := g.Input(InputFake, fake.DType, fake.Shape)
		y := g.Input(InputGT, gt.DType, gt.Shape)
		realPred := t.D.Model.Forward(y)
		fakePred := t.D.Model.Forward(f)
		lr, lf := DiscriminatorGANLoss(realPred, fakePred)
		g.Output("real", lr)
		g.Output("fake", lf)
		total := prim.Add(lr, lf)
		g.Output("loss", total)
		writeGrads(g, total, t.D)
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// progKey is what a compiled step depends on besides the networks.
type progKey struct {
	cfg  Config
	disc bool
	a, b string
}

// program compiles (once per configuration and shapes) one of the steps.
func (t *Trainer) program(cfg Config, disc bool, a, b trace.Meta) (*exec.Program, error) {
	key := progKey{cfg, disc, a.String(), b.String()}
	if p, ok := t.progs[key]; ok {
		return p, nil
	}
	was := t.cfg
	t.cfg = cfg // the weights the trace reads
	var g *trace.Graph
	var err error
	if disc {
		g, err = t.TraceDiscriminator(a, b)
	} else {
		g, err = t.TraceGenerator(a, b)
	}
	t.cfg = was
	if err != nil {
		return nil, err
	}
	o := transform.Options{Recompute: cfg.Step.Recompute.Policy(), Precision: cfg.Step.Precision, Backward: true}
	if lr, ok := t.Device.Backend.(backend.LowRunner); ok {
		o.RunsLow = lr.RunsLow
	}
	g, _, err = transform.Run(g, o)
	if err != nil {
		return nil, err
	}
	p, err := exec.Compile(g, t.Device)
	if err != nil {
		return nil, err
	}
	t.progs[key] = p
	return p, nil
}

// fakeMeta is the generator's output for inputs lq: what the generator
// step's "fake" output is.
func (t *Trainer) fakeMeta(cfg Config, lq, gt trace.Meta) (trace.Meta, error) {
	p, err := t.program(cfg, false, lq, gt)
	if err != nil {
		return trace.Meta{}, err
	}
	for i, n := range p.Graph.OutputNames {
		if n == InputFake {
			return p.Graph.Outputs[i].Meta, nil
		}
	}
	return trace.Meta{}, errors.New("gan: the generator step has no output")
}

// StepPlan is one step's share of the plan.
type StepPlan struct {
	Activations, ArenaBytes int64
	PeakStep                string
}

// MemoryPlan is the memory of one GAN iteration, known before it runs.
type MemoryPlan struct {
	Parameters     int64 // both networks' and the feature network's values and buffers
	Gradients      int64 // both networks'
	OptimizerState int64 // both optimizers'
	Generator      StepPlan
	Discriminator  StepPlan
}

// Arena is the shared arena's size: the larger step's.
func (m MemoryPlan) Arena() int64 { return max(m.Generator.ArenaBytes, m.Discriminator.ArenaBytes) }

// Persistent is what stays allocated between steps.
func (m MemoryPlan) Persistent() int64 { return m.Parameters + m.Gradients + m.OptimizerState }

// Total is the predicted peak of allocated bytes: the persistent memory
// plus the larger of the two steps' live activations at their peaks, as
// the allocator counts a step's arena (its live buffers).
func (m MemoryPlan) Total() int64 {
	return m.Persistent() + max(m.Generator.Activations, m.Discriminator.Activations)
}

// Reserved is the predicted peak of reserved bytes: the persistent memory
// plus the shared arena, reserved once at the larger step's size.
func (m MemoryPlan) Reserved() int64 { return m.Persistent() + m.Arena() }

// Print writes the plan.
func (m MemoryPlan) Print(w io.Writer) {
	row := func(k string, v int64, note string) {
		fmt.Fprintf(w, "  %-26s %12s%s\n", k, device.FormatBytes(v), note)
	}
	fmt.Fprintln(w, "memory plan (per iteration, before the first step runs):")
	row("parameters (G, D, VGG)", m.Parameters, "")
	row("gradients (G, D)", m.Gradients, "")
	row("optimizer state (G, D)", m.OptimizerState, "")
	row("generator step arena", m.Generator.ArenaBytes, fmt.Sprintf("   (activations %s at %s)", device.FormatBytes(m.Generator.Activations), m.Generator.PeakStep))
	row("discriminator step arena", m.Discriminator.ArenaBytes, fmt.Sprintf("   (activations %s at %s)", device.FormatBytes(m.Discriminator.Activations), m.Discriminator.PeakStep))
	row("total peak", m.Total(), "   (persistent + the larger step's activations)")
	row("reserved", m.Reserved(), "   (persistent + the shared arena)")
}

// Plan predicts an iteration's memory on inputs lq and targets gt under
// the trainer's configuration.
func (t *Trainer) Plan(lq, gt trace.Meta) (MemoryPlan, error) { return t.PlanConfig(t.cfg, lq, gt) }

// PlanConfig is Plan under configuration cfg (the trainer's own is left
// as it is).
func (t *Trainer) PlanConfig(cfg Config, lq, gt trace.Meta) (MemoryPlan, error) {
	if err := cfg.check(); err != nil {
		return MemoryPlan{}, err
	}
	var m MemoryPlan
	st := t.Device.Alloc.Stats()
	m.Parameters = st.ByCategory[device.Parameter]
	m.Gradients = st.ByCategory[device.Gradient]
	m.OptimizerState = st.ByCategory[device.OptimizerState]
	fake, err := t.fakeMeta(cfg, lq, gt)
	if err != nil {
		return m, err
	}
	for i, sp := range []*StepPlan{&m.Generator, &m.Discriminator} {
		a := lq
		if i == 1 {
			a = fake
		}
		p, err := t.program(cfg, i == 1, a, gt)
		if err != nil {
			return m, err
		}
		sp.Activations, sp.ArenaBytes = p.Plan.PeakBytes, p.Plan.ArenaBytes
		if len(p.Plan.Order) > 0 {
			sp.PeakStep = p.Plan.Order[p.Plan.PeakStep].Label()
		}
	}
	return m, nil
}

// NonFiniteError is an iteration whose loss is not finite; no parameter
// was updated by the step that found it.
type NonFiniteError struct {
	Step string // "generator" or "discriminator"
	Iter int64
	Loss float64
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("gan: iteration %d: the %s loss is %v (no update made)", e.Iter, e.Step, e.Loss)
}

// Step runs one iteration on low-resolution inputs lq and targets gt: the
// generator step (D frozen; G's optimizer), then the discriminator step
// on the generator's output from before its update, as ESRGANModel does.
func (t *Trainer) Step(ctx context.Context, lq, gt *tensor.Tensor) (StepLosses, error) {
	l, fake, err := t.GeneratorStep(ctx, lq, gt)
	if err != nil {
		return l, err
	}
	d, err := t.DiscriminatorStep(ctx, fake, gt)
	l.D, l.DReal, l.DFake = d.D, d.DReal, d.DFake
	if err == nil {
		t.iter++
	}
	return l, err
}

// reserve sizes the shared arena for the larger of the two steps on these
// shapes, so that neither step regrows it.
func (t *Trainer) reserve(lq, gt trace.Meta) (gp, dp *exec.Program, err error) {
	if gp, err = t.program(t.cfg, false, lq, gt); err != nil {
		return nil, nil, err
	}
	fm, err := t.fakeMeta(t.cfg, lq, gt)
	if err != nil {
		return nil, nil, err
	}
	if dp, err = t.program(t.cfg, true, fm, gt); err != nil {
		return nil, nil, err
	}
	return gp, dp, t.arena.Ensure(max(gp.Plan.ArenaBytes, dp.Plan.ArenaBytes))
}

func scalar(res map[string]*tensor.Tensor, k string) float64 {
	if v, ok := res[k]; ok {
		return v.Float64s()[0]
	}
	return 0
}

// GeneratorStep runs the generator step and G's optimizer; it returns the
// losses (the G fields) and the generator's output, the discriminator
// step's input.
func (t *Trainer) GeneratorStep(ctx context.Context, lq, gt *tensor.Tensor) (StepLosses, *tensor.Tensor, error) {
	var l StepLosses
	gp, _, err := t.reserve(train.MetaOf(lq), train.MetaOf(gt))
	if err != nil {
		return l, nil, err
	}
	res, err := gp.Run(ctx, t.arena, t.states(), map[string]*tensor.Tensor{InputLQ: lq, InputGT: gt}, nil)
	if err != nil {
		return l, nil, fmt.Errorf("gan: generator step: %w", err)
	}
	if !t.Device.HasData() {
		n := math.NaN()
		return StepLosses{n, n, n, n, n, n, n}, res[InputFake], nil
	}
	l.G, l.Pixel, l.Perceptual, l.GAN = scalar(res, "loss"), scalar(res, "pixel"), scalar(res, "perceptual"), scalar(res, "gan")
	if math.IsNaN(l.G) || math.IsInf(l.G, 0) {
		return l, nil, &NonFiniteError{Step: "generator", Iter: t.iter, Loss: l.G}
	}
	return l, res[InputFake], t.update(t.G, t.gParams)
}

// DiscriminatorStep runs the discriminator step on the generator's output
// fake and targets gt, and D's optimizer; it returns the D fields of the
// losses.
func (t *Trainer) DiscriminatorStep(ctx context.Context, fake, gt *tensor.Tensor) (StepLosses, error) {
	var l StepLosses
	dp, err := t.program(t.cfg, true, train.MetaOf(fake), train.MetaOf(gt))
	if err != nil {
		return l, err
	}
	if err := t.arena.Ensure(dp.Plan.ArenaBytes); err != nil {
		return l, err
	}
	res, err := dp.Run(ctx, t.arena, t.states(), map[string]*tensor.Tensor{InputFake: fake, InputGT: gt}, nil)
	if err != nil {
		return l, fmt.Errorf("gan: discriminator step: %w", err)
	}
	if !t.Device.HasData() {
		l.D, l.DReal, l.DFake = math.NaN(), math.NaN(), math.NaN()
		return l, nil
	}
	l.D, l.DReal, l.DFake = scalar(res, "loss"), scalar(res, "real"), scalar(res, "fake")
	if math.IsNaN(l.D) || math.IsInf(l.D, 0) {
		return l, &NonFiniteError{Step: "discriminator", Iter: t.iter, Loss: l.D}
	}
	return l, t.update(t.D, t.dParams)
}

func (t *Trainer) update(n Net, ps []optim.Param) error {
	for i, p := range n.Store.Trainable() {
		ps[i].Value, ps[i].Grad = p.Value.F32(), p.Grad.F32()
	}
	return n.Opt.Step(ps)
}
