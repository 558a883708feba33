package optim

// SGDConfig holds torch.optim.SGD's hyperparameters. PyTorch has no default
// learning rate for SGD, and the zero value of the others is PyTorch's
// default.
type SGDConfig struct {
	LR          float64
	Momentum    float64
	Dampening   float64
	WeightDecay float64
	Nesterov    bool
	Maximize    bool
}

// SGD is stochastic gradient descent with optional momentum, Nesterov
// momentum, weight decay and maximization, as torch.optim.SGD in 1.13.
type SGD struct {
	// Alloc places momentum buffers; nil means make.
	Alloc AllocFunc

	cfg   SGDConfig
	state map[string]*sgdState
}

type sgdState struct {
	buf []float32
	// started is false until the first update, which copies the gradient
	// into buf rather than blending it in (PyTorch's "buf is None" case).
	started bool
}

// NewSGD checks cfg as PyTorch does and returns the optimizer.
func NewSGD(cfg SGDConfig) (*SGD, error) {
	bad := func(msg string) (*SGD, error) { return nil, &ConfigError{Kind: "SGD", Msg: msg} }
	// The negated comparisons also reject NaN, which PyTorch lets through.
	switch {
	case !(cfg.LR >= 0):
		return bad("Invalid learning rate: " + pyFloat(cfg.LR))
	case !(cfg.Momentum >= 0):
		return bad("Invalid momentum value: " + pyFloat(cfg.Momentum))
	case !(cfg.WeightDecay >= 0):
		return bad("Invalid weight_decay value: " + pyFloat(cfg.WeightDecay))
	case cfg.Nesterov && (cfg.Momentum <= 0 || cfg.Dampening != 0):
		return bad("Nesterov momentum requires a momentum and zero dampening")
	}
	return &SGD{cfg: cfg, state: map[string]*sgdState{}}, nil
}

// LR returns the current learning rate.
func (o *SGD) LR() float64 { return o.cfg.LR }

// SetLR sets the learning rate used by later steps (schedulers call it).
func (o *SGD) SetLR(lr float64) { o.cfg.LR = lr }

// Step applies one update to every parameter that has a gradient.
func (o *SGD) Step(params []Param) error {
	err := checkParams(params, func(name string) (int, bool) {
		st, ok := o.state[name]
		if !ok {
			return 0, false
		}
		return len(st.buf), true
	})
	if err != nil {
		return err
	}
	c := o.cfg
	// Allocate every missing buffer before updating anything, so an
	// allocation failure leaves the parameters untouched.
	if err := o.prepare(params, true); err != nil {
		return err
	}

	// PyTorch converts each Python-float hyperparameter to float32 when it
	// meets a float32 tensor; do the same once here.
	negLR := float32(-c.LR)
	wd := float32(c.WeightDecay)
	mom := float32(c.Momentum)
	keep := float32(1 - c.Dampening)
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		var st *sgdState
		if c.Momentum != 0 {
			st = o.state[p.Name]
		}
		v, g := p.Value, p.Grad
		for i := range v {
			d := g[i]
			if c.Maximize {
				d = -d
			}
			if c.WeightDecay != 0 {
				d = fma32(v[i], wd, d) // d_p.add(param, alpha=weight_decay)
			}
			if st != nil {
				b := st.buf
				if st.started {
					b[i] = fma32(d, keep, float32(b[i]*mom)) // buf.mul_(momentum).add_(d_p, alpha=1-dampening)
				} else {
					b[i] = d // buf = clone(d_p): no dampening on the first step
				}
				if c.Nesterov {
					d = fma32(b[i], mom, d) // d_p.add(buf, alpha=momentum)
				} else {
					d = b[i]
				}
			}
			v[i] = fma32(d, negLR, v[i]) // param.add_(d_p, alpha=-lr)
		}
		if st != nil {
			st.started = true
		}
	}
	return nil
}

// StepParam updates one parameter (ParamStepper): the same code as Step,
// whose updates are per parameter.
func (o *SGD) StepParam(p Param) error { return o.Step([]Param{p}) }

func (o *SGD) prepare(params []Param, needGrad bool) error {
	if o.cfg.Momentum == 0 {
		return nil
	}
	fresh := map[string]*sgdState{}
	for _, p := range params {
		if needGrad && p.Grad == nil || o.state[p.Name] != nil {
			continue
		}
		buf, err := alloc(o.Alloc, p.Name, "momentum_buffer", len(p.Value))
		if err != nil {
			return err
		}
		fresh[p.Name] = &sgdState{buf: buf}
	}
	for k, v := range fresh {
		o.state[k] = v
	}
	return nil
}

// Prepare allocates the momentum buffers now (Preparer); the first step
// still copies the gradient into them, as PyTorch's lazy buffer does.
func (o *SGD) Prepare(params []Param) error {
	if err := checkParams(params, func(string) (int, bool) { return 0, false }); err != nil {
		return err
	}
	return o.prepare(params, false)
}

// StateBytes is the memory held in momentum buffers.
func (o *SGD) StateBytes() int64 {
	var n int64
	for _, st := range o.state {
		n += 4 * int64(len(st.buf))
	}
	return n
}

// StateBytesFor is 4*numel with momentum (one buffer) and 0 without.
func (o *SGD) StateBytesFor(numel int64) int64 {
	if o.cfg.Momentum == 0 {
		return 0
	}
	return 4 * numel
}

// State returns each parameter's "momentum_buffer" (only once it has taken
// a momentum step).
func (o *SGD) State() map[string]map[string][]float32 {
	out := make(map[string]map[string][]float32, len(o.state))
	for name, st := range o.state {
		if st.started {
			out[name] = map[string][]float32{"momentum_buffer": st.buf}
		}
	}
	return out
}

// SetAlloc implements Optimizer: state buffers come from f (nil: make).
func (o *SGD) SetAlloc(f AllocFunc) { o.Alloc = f }
