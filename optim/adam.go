package optim

import (
	"errors"
	"math"

	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/internal/parallel"
)

// AdamConfig holds the hyperparameters of torch.optim.Adam and AdamW. Start
// from AdamDefaults or AdamWDefaults: zero is a meaningful value for most
// fields, so the zero AdamConfig is not PyTorch's default. Since a literal
// such as AdamConfig{LR: 1e-3, WeightDecay: 1e-2} leaves betas and eps at
// 0 by omission, NewAdam and NewAdamW refuse a configuration with a
// learning rate whose Beta1, Beta2 and Eps are all 0 (ErrUnsetBetas); set
// any of them to say the zeros are meant.
type AdamConfig struct {
	LR          float64
	Beta1       float64
	Beta2       float64
	Eps         float64
	WeightDecay float64
	AMSGrad     bool
	Maximize    bool
}

// ErrUnsetBetas is wrapped by the ConfigError NewAdam and NewAdamW return for
// a configuration with a learning rate and betas and eps all 0.
var ErrUnsetBetas = errors.New("optim: Adam betas and eps left at zero")

// AdamDefaults returns torch.optim.Adam's defaults: lr 1e-3, betas
// (0.9, 0.999), eps 1e-8, no weight decay.
func AdamDefaults() AdamConfig {
	return AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
}

// AdamWDefaults returns torch.optim.AdamW's defaults: Adam's, with weight
// decay 1e-2.
func AdamWDefaults() AdamConfig {
	c := AdamDefaults()
	c.WeightDecay = 1e-2
	return c
}

// Adam is Adam (weight decay added to the gradient) or AdamW (weight decay
// applied to the parameter, decoupled from the moments), with bias
// correction and optional AMSGrad, as in PyTorch 1.13.
type Adam struct {
	// Alloc places exp_avg, exp_avg_sq and max_exp_avg_sq; nil means make.
	Alloc AllocFunc

	cfg       AdamConfig
	decoupled bool // AdamW
	state     map[string]*adamState
	loops     func(n, grain int, fn func(lo, hi int)) // nil: the process-wide pool
}

// SetLoops sets what splits the update's element loops over threads (an
// engine's thread pool: a trainer gives its own); nil restores the
// process-wide pool.
func (o *Adam) SetLoops(f func(n, grain int, fn func(lo, hi int))) { o.loops = f }

type adamState struct {
	// step counts this parameter's updates; parameters skipped for lack of
	// a gradient fall behind, as in PyTorch. PyTorch keeps it in a float32
	// tensor, which stops counting at 2^24; an int64 does not.
	step                       int64
	expAvg, expAvgSq, maxExpSq []float32
}

// NewAdam returns Adam: weight decay is L2 regularization added to the
// gradient.
func NewAdam(cfg AdamConfig) (*Adam, error) { return newAdam("Adam", cfg, false) }

// NewAdamW returns AdamW: weight decay shrinks the parameter directly,
// param *= 1 - lr*weight_decay, before the Adam update.
func NewAdamW(cfg AdamConfig) (*Adam, error) { return newAdam("AdamW", cfg, true) }

func newAdam(kind string, cfg AdamConfig, decoupled bool) (*Adam, error) {
	bad := func(msg string) (*Adam, error) { return nil, &ConfigError{Kind: kind, Msg: msg} }
	// PyTorch's checks, in its order; written so that NaN fails them too.
	switch {
	case !(cfg.LR >= 0):
		return bad("Invalid learning rate: " + pyFloat(cfg.LR))
	case !(cfg.Eps >= 0):
		return bad("Invalid epsilon value: " + pyFloat(cfg.Eps))
	case !(cfg.Beta1 >= 0 && cfg.Beta1 < 1):
		return bad("Invalid beta parameter at index 0: " + pyFloat(cfg.Beta1))
	case !(cfg.Beta2 >= 0 && cfg.Beta2 < 1):
		return bad("Invalid beta parameter at index 1: " + pyFloat(cfg.Beta2))
	case !(cfg.WeightDecay >= 0):
		return bad("Invalid weight_decay value: " + pyFloat(cfg.WeightDecay))
	case cfg.LR != 0 && cfg.Beta1 == 0 && cfg.Beta2 == 0 && cfg.Eps == 0:
		return nil, &ConfigError{Kind: kind, Msg: "betas and eps are all 0, the zero AdamConfig's values, not PyTorch's (0.9, 0.999) and 1e-8: start from AdamDefaults()", Err: ErrUnsetBetas}
	}
	return &Adam{cfg: cfg, decoupled: decoupled, state: map[string]*adamState{}}, nil
}

// LR returns the current learning rate.
func (o *Adam) LR() float64 { return o.cfg.LR }

// SetLR sets the learning rate used by later steps (schedulers call it).
func (o *Adam) SetLR(lr float64) { o.cfg.LR = lr }

// Step applies one update to every parameter that has a gradient.
func (o *Adam) Step(params []Param) error {
	err := checkParams(params, func(name string) (int, bool) {
		st, ok := o.state[name]
		if !ok {
			return 0, false
		}
		return len(st.expAvg), true
	})
	if err != nil {
		return err
	}
	// Allocate all missing state before updating anything, so that an
	// allocation failure leaves parameters and state untouched.
	if err := o.prepare(params, true); err != nil {
		return err
	}

	c := o.cfg
	// Python floats meet float32 tensors here: PyTorch rounds each scalar
	// to float32 at that point, while everything computed from them in
	// Python (bias corrections, step size) stays float64 until then.
	b1, omb1 := float32(c.Beta1), float32(1-c.Beta1)
	b2, omb2 := float32(c.Beta2), float32(1-c.Beta2)
	eps := float32(c.Eps)
	wd := float32(c.WeightDecay)
	decay := float32(1 - float64(c.LR*c.WeightDecay)) // float64(): Python does not fuse
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		st := o.state[p.Name]
		st.step++
		bc1 := 1 - powInt(c.Beta1, st.step)
		bc2 := 1 - powInt(c.Beta2, st.step)
		negStep := float32(-(c.LR / bc1))
		bc2Sqrt := float32(math.Sqrt(bc2))

		v, g, m, s, mx := p.Value, p.Grad, st.expAvg, st.expAvgSq, st.maxExpSq
		// The plain update (also AdamW's) has a vectorized loop; a
		// parameter's elements are split across threads either way.
		var fast *cpu.AdamConsts
		if !c.Maximize && mx == nil && (o.decoupled || c.WeightDecay == 0) {
			fast = &cpu.AdamConsts{B1: b1, OmB1: omb1, B2: b2, OmB2: omb2, BC2Sqrt: bc2Sqrt, Eps: eps, NegStep: negStep, Decay: 1}
			if o.decoupled && c.WeightDecay != 0 {
				fast.Decay = decay
			}
		}
		loops := parallel.For
		if o.loops != nil {
			loops = o.loops
		}
		loops(len(v), 1<<14, func(lo, hi int) {
			if fast != nil {
				lo += cpu.Adam(v[lo:hi], g[lo:hi], m[lo:hi], s[lo:hi], fast)
			}
			for i := lo; i < hi; i++ {
				gi := g[i]
				if c.Maximize {
					gi = -gi
				}
				if o.decoupled {
					if c.WeightDecay != 0 {
						v[i] = float32(v[i] * decay) // param.mul_(1 - lr*weight_decay)
					}
				} else if c.WeightDecay != 0 {
					gi = fma32(v[i], wd, gi) // grad.add(param, alpha=weight_decay)
				}
				m[i] = fma32(gi, omb1, float32(m[i]*b1)) // exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
				// exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
				s[i] = fma32(float32(omb2*gi), gi, float32(s[i]*b2))
				si := s[i]
				if mx != nil {
					// torch.maximum, which propagates NaN.
					if si > mx[i] || si != si {
						mx[i] = si
					}
					si = mx[i]
				}
				// denom = (sqrt(v) / sqrt(bias_correction2)).add_(eps)
				den := float32(float32(math.Sqrt(float64(si)))/bc2Sqrt) + eps
				// param.addcdiv_(exp_avg, denom, value=-step_size)
				v[i] += float32(negStep*m[i]) / den
			}
		})
	}
	return nil
}

// StepParam updates one parameter (ParamStepper): the same code as Step,
// whose updates and step counts are per parameter.
func (o *Adam) StepParam(p Param) error { return o.Step([]Param{p}) }

// Prepare allocates the moment buffers of every parameter now (Preparer).
func (o *Adam) Prepare(params []Param) error {
	if err := checkParams(params, func(string) (int, bool) { return 0, false }); err != nil {
		return err
	}
	return o.prepare(params, false)
}

func (o *Adam) prepare(params []Param, needGrad bool) error {
	fresh := map[string]*adamState{}
	for _, p := range params {
		if needGrad && p.Grad == nil || o.state[p.Name] != nil {
			continue
		}
		st, err := o.newState(p.Name, len(p.Value))
		if err != nil {
			return err
		}
		fresh[p.Name] = st
	}
	for k, v := range fresh {
		o.state[k] = v
	}
	return nil
}

func (o *Adam) newState(name string, n int) (*adamState, error) {
	st := &adamState{}
	var err error
	if st.expAvg, err = alloc(o.Alloc, name, "exp_avg", n); err != nil {
		return nil, err
	}
	if st.expAvgSq, err = alloc(o.Alloc, name, "exp_avg_sq", n); err != nil {
		return nil, err
	}
	if o.cfg.AMSGrad {
		if st.maxExpSq, err = alloc(o.Alloc, name, "max_exp_avg_sq", n); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// StateBytes is the memory held in moment buffers. The step counters are
// host scalars and not counted.
func (o *Adam) StateBytes() int64 {
	var n int64
	for _, st := range o.state {
		n += 4 * int64(len(st.expAvg)+len(st.expAvgSq)+len(st.maxExpSq))
	}
	return n
}

// StateBytesFor is 8*numel (exp_avg, exp_avg_sq), or 12*numel with AMSGrad.
func (o *Adam) StateBytesFor(numel int64) int64 {
	if o.cfg.AMSGrad {
		return 12 * numel
	}
	return 8 * numel
}

// State returns each parameter's "step", "exp_avg", "exp_avg_sq" and, with
// AMSGrad, "max_exp_avg_sq".
func (o *Adam) State() map[string]map[string][]float32 {
	out := make(map[string]map[string][]float32, len(o.state))
	for name, st := range o.state {
		m := map[string][]float32{
			"step":       {float32(st.step)},
			"exp_avg":    st.expAvg,
			"exp_avg_sq": st.expAvgSq,
		}
		if st.maxExpSq != nil {
			m["max_exp_avg_sq"] = st.maxExpSq
		}
		out[name] = m
	}
	return out
}

// SetAlloc implements Optimizer: state buffers come from f (nil: make).
func (o *Adam) SetAlloc(f AllocFunc) { o.Alloc = f }
